"""Hidden tests for ex01_by_hand: each step on its own, with carry-forward.

A step earns its point when it matches the exact value, or when it is the
right computation on the student's own previous (wrong) answer: an early
slip costs only the step where it happened.
"""
import numpy as np
import pytest

from grader.feedback import Feedback, matching_mistake
from grader.reference import by_hand

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


def _step_ok(step, answers, exact) -> bool:
    return _matches(answers[step], exact[step]) or \
        _matches(answers[step], by_hand.carry(step, answers))


def _explain(step, answers, exact, raw) -> str:
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
        for description, wrong in by_hand.slips(step).items():
            if tuple(got) == tuple(wrong):
                lines.append(f"This looks like: {description}.")
        return "\n".join(lines)
    want = exact[step]
    diff = np.abs(got - want)
    idx = tuple(int(i) for i in np.argwhere(diff > TOL)[0])
    lines.append(f"  first wrong entry [{idx[0]}][{idx[1]}]: got {got[idx]:.4g}, "
                 f"expected about {want[idx]:.3f} (each entry is graded to +-{TOL})")
    mistake = matching_mistake(got, by_hand.slips(step), atol=TOL, rtol=0)
    if mistake:
        lines.append(f"This looks like: {mistake}.")
    first = next((s for s in by_hand.STEPS if not _step_ok(s, answers, exact)), None)
    if first and first != step:
        lines.append(f"(The first step that went wrong is {first}.)")
    return "\n".join(lines)


@pytest.mark.points(1)
@pytest.mark.parametrize("step", by_hand.STEPS)
def test_step(student, step, request):
    """step is right"""
    answers = _read(student)
    exact = by_hand.exact()
    if _matches(answers[step], exact[step]):
        return
    if _matches(answers[step], by_hand.carry(step, answers)):
        request.node.feedback_on_pass = (
            f"{step} follows correctly from your own earlier answer, so it earns its "
            "point, but that earlier answer was wrong.")
        return
    raise Feedback(_explain(step, answers, exact, getattr(student, step)))
