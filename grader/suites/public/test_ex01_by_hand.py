"""Public tests for ex01_by_hand: form and sanity, never the answers.

These are worth no points (the hidden step-by-step tests carry the grade);
they tell a student early that an answer has the wrong form.
"""
import numpy as np
import pytest

from grader import variants
from grader.feedback import Feedback
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


@pytest.mark.points(0)
@pytest.mark.parametrize("name", ["WEIGHTS_FULL", "WEIGHTS_CAUSAL"])
def test_weights_rows_sum_to_one(student, name):
    """each row of attention weights sums to 1"""
    sums = _matrix(student, name).sum(axis=1)
    if not np.allclose(sums, 1.0, atol=0.01):
        raise Feedback(f"the rows of {name} sum to {np.round(sums, 3).tolist()}; "
                       "a softmax over keys makes each row (one query) sum to 1")


@pytest.mark.points(0)
def test_causal_weights_hide_the_future(student):
    """causal weights are 0 for later keys"""
    w = _matrix(student, "WEIGHTS_CAUSAL")
    future = ~by_hand.CAUSAL
    if np.any(np.abs(w[future]) > 1e-9):
        raise Feedback("WEIGHTS_CAUSAL gives weight to later keys: query i may only see "
                       "keys 0..i, so everything above the diagonal must be 0")


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
