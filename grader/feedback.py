"""Comparisons that explain themselves.

Every check raises ``Feedback`` (an ``AssertionError``) whose text is what
the student reads: what was expected, what came back (shape, first
mismatching index, max abs error) and, when the answer matches one of the
known wrong answers passed in ``mistakes`` at the check's own tolerance (and
that wrong answer is itself wrong on this case), which mistake it looks like;
when none matches, it says so.
``mistakes`` maps a description ("the softmax ran over queries instead of
keys") to what a submission with that mistake would return; the suites get
those from ``grader.reference`` with a ``mistake=`` switch.  ``mistakes`` may
also be a function returning that mapping (``lambda: ref.mistakes_of(...)``):
it is called only for a wrong answer, so a right one costs no run of each
mistake.  The hidden suites pass functions; the public suites pass the
mapping itself, because the student edition replays the reference answers
recorded on the solutions, and an answer never asked for there is not
recorded.
"""
from __future__ import annotations

import math
import types
from dataclasses import dataclass
from typing import Callable, Mapping, Union

import numpy as np

from grader.sandbox.client import StudentRaised

# Named tolerances (atol, rtol) by the precision the answer was computed in.
TOLERANCES = {
    "float64": (1e-9, 1e-7),
    "float32": (2e-5, 2e-4),
    "float16": (2e-3, 2e-3),
    "bfloat16": (2e-2, 2e-2),
}

# The precision rule (docs/CURRICULUM_NOTES.md, "How close is right"): an
# answer is compared with a float64 reference, and a float64 input need reach
# only what float32 arithmetic reaches, because correct code may compute in
# float32 inside (Meta's Llama rotates in float32, Hugging Face and DeepSeek-V3
# take the softmax in float32).  Every known mistake is off by fifty times
# more on the suites' fixed cases (tests/test_mistakes_of.py measures the margin).
ACCURACY = {"float64": TOLERANCES["float32"], "float32": TOLERANCES["float32"]}
# Grouped-query attention and MLA chain four to six products around the
# softmax: their answers are held to ten times the rule's tolerance.
LONG_CHAIN = 10


def accuracy(dtype, factor: float = 1) -> tuple[float, float]:
    """(atol, rtol) an answer for an input of ``dtype`` (a name, a NumPy or a
    torch dtype) must reach under the precision rule, ``factor`` times the
    rule's own (``LONG_CHAIN`` for a long chain of products)."""
    name = str(getattr(dtype, "name", dtype)).replace("torch.", "")
    atol, rtol = ACCURACY[name]
    return atol * factor, rtol * factor


# Known mistakes: description -> wrong answer, or a function returning that.
Mistakes = Union[Mapping[str, object], Callable[[], Mapping[str, object]], None]


def known_mistakes(mistakes: Mistakes) -> Mapping[str, object]:
    """The mapping ``mistakes`` is or, when it is a function, returns.  A
    function that fails names no mistake: the wrong answer is still
    explained, never turned into an error of the grader."""
    if callable(mistakes):
        try:
            mistakes = mistakes()
        except Exception:
            return {}
    return mistakes or {}


# The line that names a known mistake; ``grader.rootcause`` reads it back.
LOOKS_LIKE = "This looks like: "
# Two known mistakes that fit one answer: "A (or: B)" (``grader.insight`` reads it).
OR = " (or: "
# A known mistake reproduced at one tile size: "A (seen with tiles of 32 keys)"
# (``grader.reference.secret.flash``); ``one_or_two`` names A once.
SEEN_WITH = " (seen with "
def one_or_two(names: list[str]) -> str:
    """"A", or "A (or: B)" where two known mistakes give the answer (the first
    of ``names`` and the first after it that is another mistake: the same one
    seen with other tile sizes, "... (seen with ...)", is not named twice)."""
    first = names[0]
    other = next((n for n in names[1:] if _mistake_only(n) != _mistake_only(first)), None)
    return first if other is None else f"{first}{OR}{other})"


def _mistake_only(name: str) -> str:
    """A known mistake's words without the tile sizes it was seen with."""
    return name.split(SEEN_WITH, 1)[0]


# The line for a wrong answer that none of the known mistakes explains.
NO_KNOWN_MISTAKE = "No known mistake gives this answer: look where the values first differ."


# -- what a submission's checks rule out -------------------------------------------
# A known mistake whose own answer fails a check the submission passed, or
# does not give the answer it returned on another case of the same function,
# is not the submission's mistake: a diagnosis naming it would contradict
# another test of the same report.  Every check is kept here as evidence (a
# passed check's mistakes unevaluated: a function is called only if some
# failure names a mistake), and ``grader.rootcause.uncontradicted`` takes
# back what the evidence rules out.
_SEEN: list[tuple] = []      # (kind, mistakes, expected, atol, rtol, got or None if passed)


def _as_now(mistakes: Mistakes) -> Mistakes:
    """``mistakes`` as it stands now: a function's closure is copied cell by
    cell, so that one made in a loop (``lambda: ref.mistakes_of(..., case)``)
    still works out this check's case when it is called after the loop has
    moved on (Python's closures see a variable's latest value)."""
    if not isinstance(mistakes, types.FunctionType) or not mistakes.__closure__:
        return mistakes
    cells = []
    for cell in mistakes.__closure__:
        try:
            cells.append(types.CellType(cell.cell_contents))
        except ValueError:          # not bound yet: nothing to keep
            cells.append(cell)
    return types.FunctionType(mistakes.__code__, mistakes.__globals__, mistakes.__name__,
                              mistakes.__defaults__, tuple(cells))


def _seen(kind: str, mistakes: Mistakes, expected, atol: float, rtol: float, got=None) -> None:
    if mistakes is not None:
        _SEEN.append((kind, _as_now(mistakes), expected, atol, rtol, got))


def take_passed() -> list[tuple]:
    """The checks made since the last call (the test just run), passed or
    failed, in order: the evidence ``ruled_out`` reads."""
    out = list(_SEEN)
    _SEEN.clear()
    return out


def _reproduces(kind: str, candidate, target, atol: float, rtol: float) -> bool:
    """Does a known mistake's answer equal ``target`` at the check's tolerance?"""
    if kind == "equal":
        return _same(target, candidate)
    return fits(np.asarray(target, dtype=np.float64), candidate, None, atol, rtol)


def _fits_equal(got, candidate, expected) -> bool:
    """``check_equal``'s ``fits``: the mistake gives ``got`` and is wrong here."""
    return _same(got, candidate) and not _same(candidate, expected)


def ruled_out(checks: list[tuple]) -> set[str]:
    """The known mistakes that ``checks`` (``take_passed``'s) rule out: those
    whose own answer would have failed a check the submission passed, or
    differs from what the submission returned where it failed.  A check that
    could not be judged (an answer of another type) rules nothing out."""
    out: set[str] = set()
    for kind, mistakes, expected, atol, rtol, got in checks:
        target = expected if got is None else got
        if kind == "close" and got is not None and \
                np.shape(got) != np.shape(expected):
            continue                   # a wrong shape: no case to compare on
        for description, candidate in known_mistakes(mistakes).items():
            if candidate is None:       # no answer for this case: rules nothing out
                continue
            if not _reproduces(kind, candidate, target, atol, rtol):
                out.add(description)
    return out


def still_possible(checks: list[tuple], ruled: set[str]) -> list[str]:
    """The known mistakes that give the answer of the last failed check in
    ``checks`` (wrong there, as ``fits`` asks) and that ``ruled`` leaves."""
    failed = [c for c in checks if c[5] is not None]
    if not failed:
        return []
    kind, mistakes, expected, atol, rtol, got = failed[-1]
    out = []
    for description, candidate in known_mistakes(mistakes).items():
        if description in ruled or candidate is None:
            continue
        if kind == "equal":
            if _fits_equal(got, candidate, expected):
                out.append(description)
        elif fits(np.asarray(got, dtype=np.float64), candidate, expected, atol, rtol):
            out.append(description)
    return out


class Feedback(AssertionError):
    """A wrong answer, explained.  ``str()`` is shown to the student."""

    checked = None   # a value check's ``Checked``, for the line pointer


def _fmt(x) -> str:
    if isinstance(x, (float, np.floating)):
        return f"{float(x):.6g}"
    return repr(x)


def _fmt_pair(expected, got) -> tuple[str, str]:
    """Both numbers with the digits that show where they differ: 6 significant
    digits, more while two different floats would print alike
    (``expected -0.06371782, got -0.06371779``, never the same text twice)."""
    exp_text, got_text = _fmt(expected), _fmt(got)
    if isinstance(expected, (float, np.floating)) and isinstance(got, (float, np.floating)):
        digits = 6
        while exp_text == got_text and float(expected) != float(got) and digits < 17:
            digits += 1
            exp_text, got_text = f"{float(expected):.{digits}g}", f"{float(got):.{digits}g}"
    return exp_text, got_text


def _type_name(value) -> str:
    if value is None:
        return "None (did the function forget to return?)"
    return type(value).__name__


def to_numpy(value, what: str) -> np.ndarray:
    """A student's answer as a NumPy array, or ``Feedback`` saying why not."""
    if isinstance(value, np.ndarray):
        return value
    if hasattr(value, "detach") and hasattr(value, "cpu"):  # a decoded torch tensor
        t = value.detach().cpu()
        if str(t.dtype) == "torch.bfloat16":
            t = t.float()
        return t.numpy()
    if isinstance(value, (list, tuple, int, float)) and not isinstance(value, bool):
        try:
            arr = np.asarray(value, dtype=np.float64)
        except (ValueError, TypeError):
            raise Feedback(f"{what}: expected numbers, got a ragged or non-numeric "
                           f"{type(value).__name__}") from None
        return arr
    raise Feedback(f"{what}: expected an array, got {_type_name(value)}")


def _excess(got: np.ndarray, other: np.ndarray, atol: float, rtol: float) -> float:
    """How many tolerances ``got`` lies from ``other`` at worst (``isclose``'s
    test: above 1 is outside); NaN against NaN is equal, NaN against a number
    infinitely far."""
    both_nan = np.isnan(got) & np.isnan(other)
    same = (got == other) | both_nan
    with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
        gap = np.where(same, 0.0, np.abs(got - other))
        gap = np.where(np.isnan(gap), np.inf, gap)
        allowed = atol + rtol * np.abs(np.where(np.isfinite(other), other, 0.0))
        ratio = np.where(gap == 0, 0.0, gap / allowed)
    return float(ratio.max()) if ratio.size else 0.0


def fits(got: np.ndarray, candidate, expected, atol: float, rtol: float) -> bool:
    """Does a known mistake's answer ``candidate`` explain ``got``: equal to it
    at the check's own tolerance, and itself wrong (off ``expected`` there)?
    A mistake that gives the right answer on this case explains nothing."""
    try:
        cand = to_numpy(candidate, "mistake").astype(np.float64)
    except (Feedback, TypeError, ValueError):
        return False
    if cand.shape != got.shape or _excess(got, cand, atol, rtol) > 1:
        return False
    if expected is None:
        return True
    exp = np.asarray(expected, dtype=np.float64)
    return exp.shape != cand.shape or _excess(cand, exp, atol, rtol) > 1


def matching_mistake(got: np.ndarray, mistakes: Mistakes, atol: float, rtol: float,
                     expected=None) -> str | None:
    """The known mistake whose answer ``got`` matches at the check's tolerance
    and that is wrong where the check failed (``fits``), if any.  When two
    fit (a tile of one key hides the difference between no mask and
    tile-local indices), both are named, the nearer to ``got`` first."""
    found = []
    for order, (description, candidate) in enumerate(known_mistakes(mistakes).items()):
        if fits(got, candidate, expected, atol, rtol):
            cand = to_numpy(candidate, description).astype(np.float64)
            found.append((_excess(got, cand, atol, rtol), order, description))
    if not found:
        return None
    found.sort()
    names = [description for _, _, description in found]
    return one_or_two(names)


@dataclass
class Checked:
    """What a failed value check compared, kept on its ``Feedback`` for the
    line pointer (``grader.linepointer``): the answer as it came back, what
    was expected, the tolerance; ``steps``, where the suite names the
    reference's steps itself (``(name, value)`` pairs in order), and
    ``module``, where the answer is the module's own constants (exercise A)."""
    got: object
    expected: object
    atol: float
    rtol: float
    steps: list | None = None
    module: bool = False


def with_values(feedback: Feedback, got, expected, *, atol: float, rtol: float,
                steps: list | None = None, module: bool = False) -> Feedback:
    """``feedback``, saying what it compared (``Checked``): a suite's own
    value check raises this to get the line pointer ``check_close`` gets."""
    feedback.checked = Checked(got, expected, atol, rtol, steps, module)
    return feedback


def check_close(got, expected, *, what: str, atol: float, rtol: float,
                mistakes: Mistakes = None, hint: str | None = None, hint_where=None,
                check_dtype: bool = False) -> None:
    """Raise ``Feedback`` unless ``got`` is close to ``expected`` elementwise.

    ``hint`` is shown only when no known mistake matches and, when
    ``hint_where`` (a boolean array broadcastable to the answer) is given,
    only when the first mismatch lies where it is True: a hint about rows
    that see no key must not appear on a failure elsewhere.  The feedback
    keeps what was compared (``Checked``) for the line pointer."""
    try:
        _check_close(got, expected, what=what, atol=atol, rtol=rtol, mistakes=mistakes,
                     hint=hint, hint_where=hint_where, check_dtype=check_dtype)
    except Feedback as exc:
        raise with_values(exc, got, expected, atol=atol, rtol=rtol) from None


def _check_close(got, expected, *, what: str, atol: float, rtol: float,
                 mistakes: Mistakes, hint: str | None, hint_where,
                 check_dtype: bool) -> None:
    exp = to_numpy(expected, "reference").astype(np.float64)
    got_raw = got
    got = to_numpy(got, what)
    lines: list[str] = []
    if check_dtype:
        want = str(getattr(expected, "dtype", "")).replace("torch.", "")
        have = str(getattr(got_raw, "dtype", "")).replace("torch.", "")
        if want and have and want != have:
            raise Feedback(f"{what}: expected dtype {want}, got {have} "
                           "(keep the dtype of the inputs)")
    try:
        got = got.astype(np.float64)
    except (TypeError, ValueError):
        raise Feedback(f"{what}: expected numbers, got an array of {got.dtype}") from None
    if got.shape != exp.shape:
        lines.append(f"{what}: expected shape {tuple(exp.shape)}, got shape {tuple(got.shape)}")
        raise _explained(lines, got, mistakes, atol, rtol, hint, exp)
    close = np.isclose(got, exp, atol=atol, rtol=rtol, equal_nan=True)
    if close.all():
        _seen("close", mistakes, exp, atol, rtol)
        return
    first = tuple(int(i) for i in np.argwhere(~close)[0])
    lines.append(f"{what} is wrong: {int((~close).sum())} of {close.size} values differ.")
    exp_text, got_text = _fmt_pair(exp[first], got[first])
    lines.append(f"  first mismatch at index {first}: expected {exp_text}, got {got_text}")
    lines.extend(_non_finite_lines(got, exp))
    # The error is measured where both are finite and they differ; a NaN or
    # inf answer is named above, never summarized as "max abs error 0".
    finite_miss = ~close & np.isfinite(exp) & np.isfinite(got)
    if finite_miss.any():
        err = np.where(finite_miss, np.abs(got - exp), 0.0)
        lines.append(f"  max abs error {float(err.max()):.3g} "
                     f"(allowed: atol={atol:g}, rtol={rtol:g})")
    if hint is not None and hint_where is not None:
        where = np.broadcast_to(np.asarray(hint_where, dtype=bool), got.shape)
        hint = hint if where[first] else None
    raise _explained(lines, got, mistakes, atol, rtol, hint, exp)


class every_case:
    """Judge every case of a loop, then fail with the first failure: a count
    that fails at its first case is still tried on the rest, whose answers are
    the evidence that tells two slips apart (``ruled_out``: a missing element
    size and a missing V give the same answer in 2-byte elements, not in 4).
    ::

        with every_case() as case:
            for args in cases:
                with case:
                    check_equal(...)
    """

    def __init__(self):
        self.first: Feedback | None = None

    def __enter__(self):
        return _Case(self)

    def __exit__(self, kind, exc, tb):
        if exc is None and self.first is not None:
            raise self.first
        return False


class _Case:
    def __init__(self, cases: every_case):
        self.cases = cases

    def __enter__(self):
        return self

    def __exit__(self, kind, exc, tb):
        if isinstance(exc, Feedback):
            if self.cases.first is None:
                self.cases.first = exc
            return True          # the next case is judged too
        return False


def check_responds(before, after, *, what: str, changed: str) -> None:
    """Raise ``Feedback`` unless ``after`` differs from ``before``: a property
    (causality, shift invariance) says what must stay the same, and an answer
    that ignores its inputs (all zeros, a constant) keeps it for nothing.
    ``changed``: what was changed between the two calls."""
    a = to_numpy(before, what).astype(np.float64)
    b = to_numpy(after, what).astype(np.float64)
    if a.shape == b.shape and not np.allclose(a, b, atol=1e-12, rtol=1e-9, equal_nan=True):
        return
    flat = "all zeros" if not np.any(a) else "the same"
    raise Feedback(f"{what} did not change when {changed} ({flat} both times): the "
                   "output does not depend on its inputs, so this property holds for "
                   "nothing; it is graded once the function computes attention.")


def _non_finite_lines(got: np.ndarray, exp: np.ndarray) -> list[str]:
    """"k values are NaN" / "k values are infinite" where finite ones were expected."""
    out = []
    for kind, bad in (("NaN", np.isnan(got)), ("infinite", np.isinf(got))):
        bad = bad & np.isfinite(exp)
        if bad.any():
            n = int(bad.sum())
            idx = tuple(int(i) for i in np.argwhere(bad)[0])
            verb = "value is" if n == 1 else "values are"
            out.append(f"  {n} {verb} {kind} where finite values were expected "
                       f"(the first at index {idx})")
    return out


def _is_diagnosis(line: str) -> bool:
    return line.startswith(LOOKS_LIKE)


def named_mistake(text: str) -> str | None:
    """The mistake a feedback text names ("This looks like: X." gives X; a
    check's own line may leave out the period)."""
    for line in text.splitlines():
        if _is_diagnosis(line):
            return line[len(LOOKS_LIKE):].removesuffix(".") or None
    return None


def diagnosis_first(text: str) -> str:
    """The feedback with its "This looks like: ..." line first, before what was
    expected and what came back (and before a suite's "on a case with ..."):
    what a student reads first is what to fix.  ``grader.rootcause`` applies it
    to every failure of a report."""
    lines = text.splitlines()
    first = [x for x in lines if _is_diagnosis(x)]
    return "\n".join(first + [x for x in lines if not _is_diagnosis(x)]) if first else text


def _explained(lines, got, mistakes, atol, rtol, hint, expected) -> Feedback:
    """The feedback, ending with the known mistake it looks like or, when
    known mistakes were offered and none fits, a line saying so (then the
    hint)."""
    known = known_mistakes(mistakes)
    _seen("close", known if mistakes is not None else None, expected, atol, rtol, got)
    mistake = matching_mistake(got, known, atol, rtol, expected)
    if mistake:
        lines.append(f"{LOOKS_LIKE}{mistake}.")
    else:
        if known:
            lines.append(NO_KNOWN_MISTAKE)
        if hint:
            lines.append(hint)
    return Feedback("\n".join(lines))


def _same(got, expected) -> bool:
    """``check_equal``'s test: exact, but a float within 1e-12 relative."""
    if type(got) is bool or type(expected) is bool:
        return got is expected or got == expected and type(got) is type(expected)
    if isinstance(expected, (int, float)) and isinstance(got, (int, float)):
        return got == expected or (isinstance(expected, float) and
                                   math.isclose(got, expected, rel_tol=1e-12))
    return _holds(lambda: got == expected)


def check_equal(got, expected, *, what: str, mistakes: Mistakes = None,
                hint: str | None = None) -> None:
    """Exact comparison for counts and formulas (ints, strings, tuples).  A
    known mistake is named when its answer passes the same test against
    ``got`` and fails it against ``expected``."""
    if _same(got, expected):
        _seen("equal", mistakes, expected, 0, 0)
        return
    exp_text, got_text = _fmt_pair(expected, got)
    lines = [f"{what}: expected {exp_text}, got {got_text}"]
    if isinstance(got, float) and not math.isfinite(got):
        lines.append(f"  the answer is {'NaN' if math.isnan(got) else 'infinite'}")
    known = known_mistakes(mistakes)
    _seen("equal", known if mistakes is not None else None, expected, 0, 0, got)
    found = [description for description, candidate in known.items()
             if _fits_equal(got, candidate, expected)]
    if found:
        named = one_or_two(found)
        lines.append(f"{LOOKS_LIKE}{named}.")
    else:
        if known:
            lines.append(NO_KNOWN_MISTAKE)
        if hint:
            lines.append(hint)
    feedback = Feedback("\n".join(lines))
    if _number(got) and _number(expected):   # a number's line pointer (exercises E, F)
        raise with_values(feedback, got, expected, atol=0.0, rtol=1e-12)
    raise feedback


def _number(x) -> bool:
    return type(x) in (int, float)


def _holds(compare) -> bool:
    """``compare()`` as one truth value; False where the answer's type makes
    the comparison raise or give none (an array compared with a number): a
    malformed answer is a wrong answer, explained, never the grader's error."""
    try:
        return bool(compare())
    except Exception:  # noqa: BLE001 - whatever the answer's type does
        return False


def expect_raises(call: Callable[[], object], exc_name: str, *, what: str,
                  unchecked: str | None = None) -> None:
    """``call()`` must raise ``exc_name`` (or a subclass) in the submission.
    ``unchecked`` names the mistake of not checking (returning normally, or
    failing later with another exception): "the shapes were not checked"."""
    named = f"\n{LOOKS_LIKE}{unchecked}." if unchecked else ""
    try:
        call()
    except StudentRaised as exc:
        if exc.raised.is_a(exc_name):
            return
        raise Feedback(f"{what}: expected {exc_name}, but it raised "
                       f"{exc.raised.type_name}: {exc.raised.message}{named}") from None
    raise Feedback(f"{what}: expected {exc_name}, but it returned normally{named}")
