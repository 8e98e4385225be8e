"""Hidden tests for ex01_by_hand: each step on its own, with carry-forward.

A step earns its point when it matches the exact value, or when it is the
right computation on the student's own previous (wrong) answer: an early
slip costs only the step where it happened (never from a degenerate one).

The exact values are those of the student's own variant (``STUDENT_ID`` in
the module, or the roster's identifier given as ``--student-id``); without
either, of the common exercise.  A STUDENT_ID that differs from the roster's
earns nothing for the exercise.
"""
import numpy as np
import pytest

from grader import variants
from grader.feedback import Feedback, matching_mistake, with_values
from grader.reference.mistakes import looks_like
from grader.reference.secret import by_hand
from grader.sandbox.client import StudentError

pytestmark = [pytest.mark.exercise("ex01_by_hand"), pytest.mark.hidden]
TOL = by_hand.TOLERANCE


def _read(student) -> dict:
    """The student's answers as arrays (or None when unusable)."""
    out = {}
    for name in by_hand.STEPS:
        value = getattr(student, name)
        if name == "ROWS_UNCHANGED_BY_MASK":
            ok = isinstance(value, (list, tuple)) and all(
                isinstance(i, int) and not isinstance(i, bool) for i in value)
            out[name] = tuple(sorted(value)) if ok else None
            continue
        try:
            arr = np.asarray(value, dtype=np.float64)
            out[name] = arr if arr.shape == by_hand.SHAPES[name] else None
        except (TypeError, ValueError):
            out[name] = None
    return out


_matches = by_hand.within


class _Graded:
    """Whose exercise A this is: ``inputs`` to grade against, or ``refused``
    (a sentence) when the submission may not be graded for anyone."""

    def __init__(self, inputs=None, refused="", how=""):
        self.inputs, self.refused, self.how = inputs, refused, how


def _declared(student):
    try:
        return student.STUDENT_ID
    except StudentError as exc:
        if "does not define STUDENT_ID" in str(exc):
            return None   # a submission written against the contract alone
        raise


def _graded(student, roster: str | None) -> _Graded:
    declared = _declared(student)
    try:
        mine = None if declared is None else variants.normalize(declared)
    except variants.BadStudentId as exc:
        return _Graded(refused=f"STUDENT_ID = {declared!r} cannot be used: {exc}. Set it "
                               "to your identifier as text, e.g. STUDENT_ID = \"s1234567\".")
    if isinstance(roster, variants.AssignedId):   # Gradescope's account of the submitter
        return _graded_as_assigned(declared, mine, roster)
    if roster is not None:
        theirs = variants.normalize(roster)
        if mine is not None and mine != theirs:
            return _Graded(refused=(
                f"STUDENT_ID = {declared!r} in ex01_by_hand.py does not match the course "
                f"roster, which lists this submission as {roster!r}. Exercise A is graded "
                "only for the roster's identifier, so it earns no points; if the roster is "
                "wrong, ask your instructor to regrade."))
        return _Graded(variants.inputs_for(theirs),
                       how=f"graded for {roster!r} (the course roster)")
    if mine is not None:
        return _Graded(variants.inputs_for(mine), how=f"graded for STUDENT_ID = {declared!r}")
    # The public test beside this one has told the student how to set
    # STUDENT_ID; said once, so this line only adds that no roster was given.
    return _Graded(variants.COMMON, how=(
        "graded on the common exercise: no STUDENT_ID, and no roster for this grading."))


def _graded_as_assigned(declared, mine, assigned: variants.AssignedId) -> _Graded:
    """Graded for the identifier the platform gives (``assigned``), and told
    exactly which identifier to print and set when the module has another."""
    todo = (f"Print your own numbers with `attn-grade variant {assigned}`, set "
            f"STUDENT_ID = {str(assigned)!r} in ex01_by_hand.py, work the steps on them and "
            "submit again.")
    if mine is not None and mine != variants.normalize(assigned):
        return _Graded(refused=(
            f"STUDENT_ID = {declared!r} in ex01_by_hand.py is not {assigned.accepted}, so "
            f"exercise A is graded for {assigned.named}, {str(assigned)!r}, and answers "
            f"worked for {declared!r} earn no points. {todo}"))
    if mine is None:
        return _Graded(variants.inputs_for(assigned), how=(
            f"no STUDENT_ID in ex01_by_hand.py: graded for {assigned.named}, "
            f"{str(assigned)!r}. {todo}"))
    return _Graded(variants.inputs_for(assigned),
                   how=f"graded for STUDENT_ID = {declared!r} ({assigned.named})")


@pytest.fixture
def graded(student, roster_student_id) -> _Graded:
    return _graded(student, roster_student_id)


def _step_ok(step, answers, exact, inputs) -> bool:
    return _matches(answers[step], exact[step]) or \
        _matches(answers[step], by_hand.carry(step, answers, inputs))


def _explain(step, answers, exact, raw, inputs) -> str:
    got = answers[step]
    if raw is None:
        return f"{step} is still None: fill it in"
    if got is None:
        if step == "ROWS_UNCHANGED_BY_MASK":
            comma = (" (a tuple of one needs a comma: (2,) not (2))"
                     if isinstance(raw, int) else "")
            return f"{step} must be a tuple of row indices (ints), got {raw!r}{comma}"
        return (f"{step} must be a nested list of numbers of shape {by_hand.SHAPES[step]}; "
                f"got {np.asarray(raw, dtype=object).shape}")
    lines = [f"{step} is wrong."]
    if isinstance(got, tuple):
        lines.append(f"  got rows {got}")
        for description, wrong in by_hand.slips(step, inputs).items():
            if tuple(got) == tuple(wrong):
                lines.append(looks_like(description))
        return "\n".join(lines)
    want = exact[step]
    diff = np.abs(got - want)
    idx = tuple(int(i) for i in np.argwhere(diff > TOL)[0])
    lines.append(f"  first wrong entry [{idx[0]}][{idx[1]}]: got {got[idx]:.4g}, "
                 f"expected about {want[idx]:.3f} (each entry is graded to +-{TOL})")
    mistake = matching_mistake(got, by_hand.slips(step, inputs), atol=TOL, rtol=0)
    if mistake:
        lines.append(looks_like(mistake))
    first = next((s for s in by_hand.STEPS if not _step_ok(s, answers, exact, inputs)), None)
    if first and first != step:
        lines.append(f"(The first step that went wrong is {first}.)")
    return "\n".join(lines)


@pytest.mark.points(0)
def test_whose_exercise(graded, request):
    """the exercise is graded for your identifier"""
    if graded.refused:
        raise Feedback(graded.refused)
    request.node.feedback_on_pass = graded.how


@pytest.mark.points(1)
@pytest.mark.parametrize("step", by_hand.STEPS)
def test_step(student, step, request, graded):
    """step's values are right (exact, or right from your own previous step)"""
    if graded.refused:
        raise Feedback("no points for exercise A: see \"the exercise is graded for your "
                       "identifier\" above.")
    inputs = graded.inputs
    answers = _read(student)
    exact = by_hand.exact(inputs)
    if _matches(answers[step], exact[step]):
        return
    if _matches(answers[step], by_hand.carry(step, answers, inputs)):
        request.node.feedback_on_pass = (
            f"{step} follows correctly from your own earlier answer, so it earns its "
            "point, but that earlier answer was wrong.")
        return
    feedback = Feedback(_explain(step, answers, exact, getattr(student, step), inputs))
    if not isinstance(exact[step], np.ndarray) or answers[step] is None:
        raise feedback
    # The line pointer: the steps this one is computed from, then itself, are
    # the reference's steps; the constants' lines of the file are the student's.
    raise with_values(feedback, answers[step], exact[step], atol=TOL, rtol=0, module=True,
                      steps=[(s, exact[s]) for s in _ancestry(step)])


def _ancestry(step: str) -> list[str]:
    """``step`` and the steps it is computed from, in the exercise's order."""
    needed, todo = {step}, [step]
    while todo:
        for earlier in by_hand.INPUTS.get(todo.pop(), []):
            needed.add(earlier)
            todo.append(earlier)
    return [s for s in by_hand.STEPS if s in needed]
