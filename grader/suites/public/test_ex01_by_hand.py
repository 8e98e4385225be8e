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


def _variant(student, roster_student_id) -> variants.Inputs:
    """This submission's variant (its Q, K, V are printed by `attn-grade variant`)."""
    try:
        declared = roster_student_id or student.STUDENT_ID
    except StudentError:   # no STUDENT_ID at all: the common exercise
        declared = None
    try:
        return variants.inputs_for(declared) if declared is not None else variants.COMMON
    except variants.BadStudentId:
        pytest.skip("STUDENT_ID cannot be used (see its own check)")


def _whose(inputs: variants.Inputs) -> str:
    """Where the student finds the Q, K, V a step is checked with."""
    if inputs.student_id is None:
        return "the common exercise's (the docstring's)"
    return f"your variant's (`attn-grade variant {inputs.student_id}` prints them)"


# A step is checked the way it is graded: to 0.01 per entry (three decimals
# carried), with a little room for the rounding of the step before it.
STEP_ATOL = 0.012


def _near(got, want, atol=STEP_ATOL) -> bool:
    want = np.asarray(want, dtype=np.float64)
    return got.shape == want.shape and bool(np.all(np.abs(got - want) <= atol))


def _first_slip(got, slips: dict) -> str:
    """The words of the first slip whose answer ``got`` matches, as a
    diagnosis line ("" when none does)."""
    return next((_looks_like(words) for words, answer in slips.items()
                 if answer is not None and _near(got, answer)), "")


@pytest.mark.points(0)
def test_scores_are_your_q_times_k_transposed(student, roster_student_id):
    """SCORES is Q @ K.T of your own Q and K (no answer is shown)"""
    inputs = _variant(student, roster_student_id)
    q, k, _ = inputs.arrays()
    scores = _matrix(student, "SCORES")
    if _near(scores, q @ k.T, atol=by_hand.TOLERANCE):
        return
    if _near(scores, k @ q.T, atol=by_hand.TOLERANCE):
        raise Feedback(f"SCORES is not Q @ K.T for {_whose(inputs)} Q and K."
                       + _looks_like(by_hand.MISTAKES["scores_transposed"]))
    common_q, common_k, _ = variants.COMMON.arrays()
    slips = {by_hand.SCALED_ALREADY: q @ k.T / np.sqrt(by_hand.D_HEAD)}
    if inputs != variants.COMMON:
        slips = {by_hand.MISTAKES["common_answers"]: common_q @ common_k.T, **slips}
    named = _first_slip(scores, slips)
    if not named and not np.allclose(scores, np.round(scores)):
        named = _looks_like(by_hand.SCALED_ALREADY)
    raise Feedback(f"SCORES is not Q @ K.T for {_whose(inputs)} Q and K{named}")


def _softmax_rows(x: np.ndarray, keep: np.ndarray | None = None) -> np.ndarray:
    """Each row's softmax over the entries ``keep`` allows (the others 0; a
    row that keeps nothing is all 0)."""
    keep = np.ones(x.shape, dtype=bool) if keep is None else keep
    top = np.max(np.where(keep, x, -np.inf), axis=1, keepdims=True)
    top = np.where(np.isfinite(top), top, 0.0)
    e = np.where(keep, np.exp(np.where(keep, x - top, 0.0)), 0.0)
    total = e.sum(axis=1, keepdims=True)
    return np.divide(e, total, out=np.zeros_like(e), where=total > 0)


def _two_decimals(w: np.ndarray, want: np.ndarray) -> bool:
    """A row of weights that is the right row rounded to two decimals where the
    third matters (the contract asks for three: two move an output by about
    0.01).  Any other row of two-decimal numbers (a row of zeros, a one-hot
    row) is another slip, told by its own words."""
    short = np.all(np.abs(w - np.round(want, 2)) <= 1e-9, axis=1)
    return bool(np.any(short & (np.max(np.abs(w - want), axis=1) > 0.002)))


def _worked(inputs: variants.Inputs) -> dict:
    """Each step worked from the variant's own Q, K, V with the chapter's
    formulas: a step right from the inputs passes too, as it earns its point
    when graded, whatever the step before it holds."""
    q, k, v = inputs.arrays()
    scaled = q @ k.T / np.sqrt(by_hand.D_HEAD)
    full, causal = _softmax_rows(scaled), _softmax_rows(scaled, by_hand.CAUSAL)
    return {"SCORES": q @ k.T, "SCALED": scaled, "WEIGHTS_FULL": full, "OUT_FULL": full @ v,
            "WEIGHTS_CAUSAL": causal, "OUT_CAUSAL": causal @ v}


def _follows(step: str, got, answers: dict, inputs: variants.Inputs) -> tuple:
    """(what ``step`` is computed from the student's own earlier answers,
    {slip words: the answer the slip gives}) for the 3 x 3 and 3 x 2 steps."""
    mistakes = by_hand.MISTAKES
    q, k, v = inputs.arrays()
    others_v = {mistakes["chapter_v"]: by_hand.V_SEED}
    if inputs != variants.COMMON:
        others_v = {mistakes["common_answers"]: variants.COMMON.arrays()[2], **others_v}
    root = np.sqrt(by_hand.D_HEAD)
    if step == "SCALED":
        scores = answers["SCORES"]
        return scores / root, {by_hand.SCALE_FORGOTTEN: scores,
                               mistakes["scale_by_d"]: scores / by_hand.D_HEAD,
                               mistakes["scale_multiplied"]: scores * root}
    if step in ("WEIGHTS_FULL", "WEIGHTS_CAUSAL"):
        scaled, keep = answers["SCALED"], (by_hand.CAUSAL if step == "WEIGHTS_CAUSAL" else None)
        want = _softmax_rows(scaled, keep)
        slips = {by_hand.COLUMN_SOFTMAX: _softmax_rows(scaled.T, keep).T,
                 mistakes["softmax_unscaled"]: _softmax_rows(scaled * root, keep)}
        if keep is not None:
            slips.update({by_hand.WRONG_TRIANGLE: _softmax_rows(scaled, keep.T),
                          mistakes["diagonal_masked"]: _softmax_rows(scaled, keep & ~np.eye(
                              3, dtype=bool)),
                          by_hand.MASK_AFTER_SOFTMAX: _softmax_rows(scaled) * keep,
                          mistakes["mask_zero"]: _softmax_rows(np.where(keep, scaled, 0.0)),
                          mistakes["no_mask"]: _softmax_rows(scaled)})
        if _two_decimals(got, want):
            slips = {mistakes["rounded_weights"]: got, **slips}
        return want, slips
    weights = answers["WEIGHTS_FULL" if step == "OUT_FULL" else "WEIGHTS_CAUSAL"]
    other = answers.get("WEIGHTS_CAUSAL" if step == "OUT_FULL" else "WEIGHTS_FULL")
    slips = {words: weights @ wrong_v for words, wrong_v in others_v.items()}
    slips[mistakes["weights_transposed"]] = weights.T @ v
    if other is not None:
        slips[mistakes["causal_weights_unmasked_step" if step == "OUT_FULL"
                       else "unmasked_weights"]] = other @ v
    return weights @ v, slips


# What each step is computed from (the exercise's steps 2 to 6; step 7 below).
EARLIER = {"SCALED": ["SCORES"], "WEIGHTS_FULL": ["SCALED"], "OUT_FULL": ["WEIGHTS_FULL"],
           "WEIGHTS_CAUSAL": ["SCALED"], "OUT_CAUSAL": ["WEIGHTS_CAUSAL"]}


@pytest.mark.points(0)
@pytest.mark.parametrize("step", list(EARLIER))
def test_step_follows_from_your_previous_one(student, roster_student_id, step):
    """the step follows from your own previous answer (no answer is shown)"""
    # Checked against your own earlier answers, never against the answers: a
    # step done right on a wrong earlier step passes here (as it earns its
    # point when graded); SCALED may also be right from your Q and K alone.
    inputs = _variant(student, roster_student_id)
    got = _matrix(student, step)
    answers = {name: _matrix(student, name) for name in EARLIER[step]}
    other = {"OUT_FULL": "WEIGHTS_CAUSAL", "OUT_CAUSAL": "WEIGHTS_FULL"}.get(step)
    if other:   # only to name a slip: unfilled, it is its own check's failure
        try:
            answers[other] = _matrix(student, other)
        except Feedback:
            pass
    want, slips = _follows(step, got, answers, inputs)
    rounded = by_hand.MISTAKES["rounded_weights"] in slips
    if (_near(got, want) or _near(got, _worked(inputs)[step])) and not rounded:
        return
    named = _first_slip(got, slips)
    earlier = " and ".join(EARLIER[step])
    uses_v = f", with {_whose(inputs)} V" if step.startswith("OUT") else ""
    raise Feedback(f"{step} does not follow from your {earlier}{uses_v}{named or ''}")


@pytest.mark.points(0)
def test_rows_unchanged_follow_from_your_outputs(student, roster_student_id):
    """ROWS_UNCHANGED_BY_MASK lists the rows where your OUT_FULL and OUT_CAUSAL agree"""
    rows = student.ROWS_UNCHANGED_BY_MASK
    if not isinstance(rows, (list, tuple)) or not all(isinstance(i, int) for i in rows):
        pytest.skip("ROWS_UNCHANGED_BY_MASK is not a tuple of ints (see its own check)")
    full, causal = _matrix(student, "OUT_FULL"), _matrix(student, "OUT_CAUSAL")
    same = np.all(np.abs(full - causal) <= by_hand.TOLERANCE, axis=1)
    agree = tuple(int(i) for i in np.flatnonzero(same))
    worked = _worked(_variant(student, roster_student_id))
    right = tuple(int(i) for i in np.flatnonzero(np.all(
        np.abs(worked["OUT_FULL"] - worked["OUT_CAUSAL"]) <= by_hand.TOLERANCE, axis=1)))
    if tuple(sorted(rows)) in (agree, right):
        return
    named = ""
    if tuple(sorted(rows)) == tuple(int(i) for i in np.flatnonzero(~same)):
        named = _looks_like(by_hand.MISTAKES["changed_rows_listed"])
    elif tuple(sorted(rows)) == tuple(i + 1 for i in agree):
        named = _looks_like(by_hand.ROWS_FROM_ONE)
    raise Feedback("ROWS_UNCHANGED_BY_MASK does not list the rows where your OUT_FULL and "
                   f"OUT_CAUSAL agree (to {by_hand.TOLERANCE}){named}")


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
