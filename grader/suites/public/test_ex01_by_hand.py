"""Public tests for ex01_by_hand: form and sanity, never the answers.

These are worth no points (the hidden step-by-step tests carry the grade);
they tell a student early that an answer has the wrong form.
"""
import numpy as np
import pytest

from grader import variants
from grader.feedback import Feedback
from grader.reference.mistakes import looks_like
from grader.reference.secret import by_hand
from grader.sandbox.client import StudentError

pytestmark = [pytest.mark.exercise("ex01_by_hand")]


def _matrix(student, name):
    value = getattr(student, name)
    if value is None:
        raise Feedback(f"{name} is still None: fill it in")
    try:
        arr = np.asarray(value, dtype=np.float64)
    except (TypeError, ValueError):
        raise Feedback(f"{name} must be a nested list of numbers, got {type(value).__name__}")
    if arr.shape != by_hand.SHAPES[name]:
        raise Feedback(f"{name} must have {by_hand.SHAPES[name][0]} rows of "
                       f"{by_hand.SHAPES[name][1]} numbers; got shape {arr.shape}")
    return arr


@pytest.mark.points(0)
@pytest.mark.parametrize("name", list(by_hand.SHAPES))
def test_filled_in_with_the_right_shape(student, name):
    """constant is filled in with the right shape"""
    _matrix(student, name)


def _looks_like(text: str) -> str:
    return "\n" + looks_like(text)


@pytest.mark.points(0)
@pytest.mark.parametrize("name", ["WEIGHTS_FULL", "WEIGHTS_CAUSAL"])
def test_weights_rows_sum_to_one(student, name):
    """each row of attention weights sums to 1"""
    w = _matrix(student, name)
    sums = w.sum(axis=1)
    if not np.allclose(sums, 1.0, atol=0.01):
        named = ""
        if np.allclose(w.sum(axis=0), 1.0, atol=0.01):
            named = _looks_like(by_hand.COLUMN_SOFTMAX)
        elif name == "WEIGHTS_CAUSAL" and np.all(np.abs(w[~by_hand.CAUSAL]) <= 1e-9) \
                and np.all(sums < 1.0):
            named = _looks_like(by_hand.MASK_AFTER_SOFTMAX)
        raise Feedback(f"the rows of {name} sum to {np.round(sums, 3).tolist()}; "
                       f"a softmax over keys makes each row (one query) sum to 1{named}")


@pytest.mark.points(0)
def test_causal_weights_hide_the_future(student):
    """causal weights are 0 for later keys"""
    w = _matrix(student, "WEIGHTS_CAUSAL")
    future = ~by_hand.CAUSAL
    past = np.tril(np.ones((3, 3), dtype=bool), -1)
    if np.any(np.abs(w[future]) > 1e-9):
        named = _looks_like(by_hand.WRONG_TRIANGLE) if np.all(np.abs(w[past]) <= 1e-9) else ""
        raise Feedback("WEIGHTS_CAUSAL gives weight to later keys: query i may only see "
                       f"keys 0..i, so everything above the diagonal must be 0{named}")


@pytest.mark.points(0)
def test_rows_unchanged_are_row_indices(student):
    """ROWS_UNCHANGED_BY_MASK holds row indices 0..2"""
    value = student.ROWS_UNCHANGED_BY_MASK
    if value is None:
        raise Feedback("ROWS_UNCHANGED_BY_MASK is still None: fill it in")
    if not isinstance(value, (list, tuple)) or not all(
            isinstance(i, int) and not isinstance(i, bool) for i in value):
        comma = " (a tuple of one needs a comma: (2,) not (2))" if isinstance(value, int) else ""
        raise Feedback(f"ROWS_UNCHANGED_BY_MASK must be a tuple of row indices (ints), got "
                       f"{value!r}{comma}")
    bad = [i for i in value if not 0 <= i <= 2]
    if bad:
        named = _looks_like(by_hand.ROWS_FROM_ONE) if bad == [3] else ""
        raise Feedback(f"ROWS_UNCHANGED_BY_MASK holds {bad}: the rows are 0, 1 and 2{named}")


def _inputs(student, roster_student_id):
    """The Q, K, V of this submission's variant (printed by `attn-grade variant`)."""
    try:
        declared = roster_student_id or student.STUDENT_ID
    except StudentError:   # no STUDENT_ID at all: the common exercise
        declared = None
    try:
        return (variants.inputs_for(declared) if declared is not None
                else variants.COMMON).arrays()
    except variants.BadStudentId:
        pytest.skip("STUDENT_ID cannot be used (see its own check)")


@pytest.mark.points(0)
def test_steps_follow_from_each_other(student, roster_student_id):
    """each step follows from your previous one (the chapter's formulas; no answer is shown)"""
    # Checked against your own earlier answers, never against the answers: a
    # step done right on a wrong earlier step passes here.
    _, _, v = _inputs(student, roster_student_id)
    scores, scaled = _matrix(student, "SCORES"), _matrix(student, "SCALED")
    if not np.allclose(scores, np.round(scores)):
        raise Feedback("SCORES holds fractions, but Q and K hold whole numbers, so Q @ K.T "
                       f"does too{_looks_like(by_hand.SCALED_ALREADY)}")
    if np.allclose(scaled, scores, atol=0.01) and np.any(np.abs(scores) > 0.01):
        raise Feedback("SCALED equals SCORES: SCALED is SCORES / sqrt(d_head)"
                       f"{_looks_like(by_hand.SCALE_FORGOTTEN)}")
    w_causal, out_causal = _matrix(student, "WEIGHTS_CAUSAL"), _matrix(student, "OUT_CAUSAL")
    if not np.allclose(out_causal, w_causal @ v, atol=0.02) and \
            np.allclose(out_causal, w_causal @ by_hand.V_SEED, atol=0.02):
        raise Feedback("OUT_CAUSAL is not WEIGHTS_CAUSAL @ V for your V"
                       f"{_looks_like(by_hand.CHAPTER_V)}")


@pytest.mark.points(0)
def test_student_id_is_usable(student, request):
    """STUDENT_ID names your variant (or is None: the common exercise)"""
    try:
        declared = student.STUDENT_ID
    except StudentError as exc:
        if "does not define STUDENT_ID" not in str(exc):
            raise
        declared = None
    if declared is None:
        request.node.feedback_on_pass = (
            "STUDENT_ID is not set: the common exercise (the Q, K, V of the docstring) is "
            "graded, unless your course grades from a roster. Set it and get your own "
            "matrices with `attn-grade variant YOUR_ID`.")
        return
    try:
        variants.normalize(declared)
    except variants.BadStudentId as exc:
        raise Feedback(f"STUDENT_ID = {declared!r} cannot be used: {exc}") from None
    request.node.feedback_on_pass = (f"your variant is the one of {declared!r}: check its Q, K, "
                                     f"V with `attn-grade variant {declared}`")
