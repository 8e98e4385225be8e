"""Exercise A's numbers, and the slips a student makes working them by hand.

Everything is computed here, in float64, from the inputs of the exercise;
nothing is copied from the solution.  The inputs are one student's variant
(``grader.variants``; default: the common exercise of the contract), passed
as ``inputs=`` to each function.  ``carry(step, answers)`` recomputes a step
from the student's own previous answers, so a step done right on a wrong
input still earns its point, unless that input is degenerate (all zeros, or
every row constant: ``degenerate``), which earns later steps nothing.
"""
from __future__ import annotations

import math

import numpy as np

from grader.variants import COMMON, Inputs

Q, K, V = COMMON.arrays()   # the common exercise (the contract's)
V_SEED = np.array([[10.0, 0.0], [0.0, 10.0], [5.0, 5.0]])   # the chapter's worked example
D_HEAD = 2
CAUSAL = np.tril(np.ones((3, 3), dtype=bool))

STEPS = ["SCORES", "SCALED", "WEIGHTS_FULL", "OUT_FULL", "WEIGHTS_CAUSAL", "OUT_CAUSAL",
         "ROWS_UNCHANGED_BY_MASK"]
SHAPES = {"SCORES": (3, 3), "SCALED": (3, 3), "WEIGHTS_FULL": (3, 3), "OUT_FULL": (3, 2),
          "WEIGHTS_CAUSAL": (3, 3), "OUT_CAUSAL": (3, 2)}
TOLERANCE = 0.01   # the contract's: answers carried to three decimals, graded to 0.01


def softmax_rows(x: np.ndarray, allowed: np.ndarray | None = None) -> np.ndarray:
    x = np.where(allowed, x, -np.inf) if allowed is not None else x
    out = np.zeros_like(x, dtype=np.float64)
    for i, row in enumerate(x):
        finite = np.isfinite(row)
        if finite.any():
            e = np.where(finite, np.exp(row - row[finite].max()), 0.0)
            out[i] = e / e.sum()
    return out


def unchanged_rows(full_out: np.ndarray, causal_out: np.ndarray) -> tuple:
    same = np.all(np.abs(full_out - causal_out) <= TOLERANCE, axis=1)
    return tuple(int(i) for i in np.flatnonzero(same))


def exact(inputs: Inputs = COMMON) -> dict:
    q, k, v = inputs.arrays()
    scores = q @ k.T
    scaled = scores / math.sqrt(D_HEAD)
    w_full = softmax_rows(scaled)
    w_causal = softmax_rows(scaled, CAUSAL)
    out_full, out_causal = w_full @ v, w_causal @ v
    return {"SCORES": scores, "SCALED": scaled, "WEIGHTS_FULL": w_full, "OUT_FULL": out_full,
            "WEIGHTS_CAUSAL": w_causal, "OUT_CAUSAL": out_causal,
            "ROWS_UNCHANGED_BY_MASK": unchanged_rows(out_full, out_causal)}


# The earlier steps each step is computed from.
INPUTS = {"SCALED": ["SCORES"], "WEIGHTS_FULL": ["SCALED"], "OUT_FULL": ["WEIGHTS_FULL"],
          "WEIGHTS_CAUSAL": ["SCALED"], "OUT_CAUSAL": ["WEIGHTS_CAUSAL"],
          "ROWS_UNCHANGED_BY_MASK": ["OUT_FULL", "OUT_CAUSAL"]}


def within(got, want) -> bool:
    """Is an answer right to the graded tolerance (tuples: exactly)?"""
    if got is None or want is None:
        return False
    if isinstance(want, tuple):
        return tuple(got) == tuple(want)
    want = np.asarray(want)
    return got.shape == want.shape and bool(np.all(np.abs(got - want) <= TOLERANCE))


def degenerate(answer) -> bool:
    """An answer that carries no work: all zeros, or every row one number
    repeated (a constant row of scores is a uniform softmax, whatever the
    inputs).  Later steps get no carry-forward from it: filling zeros in, then
    "correctly" working on from them, must not earn points."""
    if answer is None or isinstance(answer, tuple):
        return False
    answer = np.asarray(answer, dtype=np.float64)
    if answer.ndim != 2 or not np.all(np.isfinite(answer)):
        return True
    return bool(np.all(answer == 0) or np.all(np.ptp(answer, axis=1) <= TOLERANCE))


def _rooted_in_degenerate(step: str, answers: dict, exact_values: dict) -> bool:
    """Is this wrong answer degenerate, or wrong on top of one?  Zeros for
    SCORES, then each later step worked on from them, earns nothing."""
    answer = answers.get(step)
    if within(answer, exact_values[step]):
        return False
    return degenerate(answer) or any(_rooted_in_degenerate(s, answers, exact_values)
                                     for s in INPUTS.get(step, []))


def carry(step: str, answers: dict, inputs: Inputs = COMMON):
    """``step`` computed correctly from the student's own previous answers,
    when one of those was wrong; ``None`` when they were all right (then the
    step must match the exact value: an accepted input that was rounded too
    far does not excuse a wrong result), are unusable, or one of the wrong
    ones is ``degenerate`` (or wrong on top of a degenerate one) or the common
    exercise's answer (for a variant)."""
    exact_values = exact(inputs)
    needed = INPUTS.get(step, [])
    if all(within(answers.get(s), exact_values[s]) for s in needed):
        return None
    if any(_rooted_in_degenerate(s, answers, exact_values) for s in needed):
        return None
    # The common exercise's own answers are not work on this variant: worked on
    # consistently they would otherwise carry most steps of a copied solution.
    common = exact(COMMON)
    if inputs != COMMON and any(within(answers.get(s), common[s]) for s in needed):
        return None
    V = inputs.arrays()[2]  # noqa: N806 - the exercise's name for it
    try:
        if step == "SCALED":
            return answers["SCORES"] / math.sqrt(D_HEAD)
        if step == "WEIGHTS_FULL":
            return softmax_rows(answers["SCALED"])
        if step == "OUT_FULL":
            return answers["WEIGHTS_FULL"] @ V
        if step == "WEIGHTS_CAUSAL":
            return softmax_rows(answers["SCALED"], CAUSAL)
        if step == "OUT_CAUSAL":
            return answers["WEIGHTS_CAUSAL"] @ V
        if step == "ROWS_UNCHANGED_BY_MASK":
            return unchanged_rows(answers["OUT_FULL"], answers["OUT_CAUSAL"])
    except (KeyError, TypeError, ValueError):
        return None
    return None


# Rows are queries and columns keys (the exercise's layout): a softmax down the
# columns normalizes over the queries.
COLUMN_SOFTMAX = ("the softmax ran down each column (over the queries) instead of along each "
                  "row (over the keys): rows are queries, and each row of weights sums to 1")
# Slips the public suite names from the form of an answer alone (no answer needed).
WRONG_TRIANGLE = "the mask is on the wrong triangle (query i may see keys 0..i, not i..2)"
MASK_AFTER_SOFTMAX = ("the mask zeroed the full weights after the softmax without "
                      "renormalizing (mask the scores with -inf before the softmax)")
ROWS_FROM_ONE = "the rows were counted from 1 (indices start at 0)"
SCALE_FORGOTTEN = "the 1/sqrt(d_head) scale was forgotten"
SCALED_ALREADY = ("the scores were scaled already (SCORES is Q @ K.T, before the "
                  "1/sqrt(d_head))")
CHAPTER_V = ("the output used the chapter's V ([[10, 0], [0, 10], [5, 5]]) instead of "
             "this exercise's V")


# Each slip's key (its id in the class's mistakes table: grader.insight) and words.
MISTAKES = {
    "column_softmax": COLUMN_SOFTMAX,
    "common_answers": ("these are the answers of the common exercise (the Q, K, V printed in "
                       "the docstring), not of your own variant: print yours with `attn-grade "
                       "variant YOUR_ID`"),
    "scores_scaled_early": SCALED_ALREADY,
    "scores_transposed": ("the scores are K @ Q.T, the transposed product: rows are queries "
                          "and columns keys, SCORES[i][j] = q_i . k_j (Q @ K.T)"),
    "no_scale": SCALE_FORGOTTEN,
    "scale_by_d": "the scores were divided by d_head instead of sqrt(d_head)",
    "scale_multiplied": "the scores were multiplied by sqrt(d_head) instead of divided",
    "softmax_unscaled": "the softmax used the unscaled scores (1/sqrt(d_head) forgotten)",
    "no_exp": "the scores were normalized without exp (x / sum x instead of softmax)",
    "mask_where_none": "the causal mask was applied here too (this step has no mask)",
    "weights_transposed": "the output used the transposed weights (weights.T @ V)",
    "chapter_v": CHAPTER_V,
    "causal_weights_unmasked_step": "the causal weights were used (this step has no mask)",
    "rounded_weights": ("the weights were rounded to two decimals before multiplying by V "
                        "(carry three)"),
    "wrong_triangle": WRONG_TRIANGLE,
    "diagonal_masked": "the mask also hides the diagonal (a query must see its own key)",
    "mask_zero": ("the hidden scores were set to 0 instead of -inf: exp(0) = 1 still gives "
                  "them weight (a masked score must be -inf, so that its weight is 0)"),
    "mask_after_softmax": MASK_AFTER_SOFTMAX,
    "no_mask": "no causal mask was applied",
    "chapter_v_causal": "the output used the chapter's V instead of this exercise's V",
    "unmasked_weights": "the full (unmasked) weights were used",
    "rows_from_one": ROWS_FROM_ONE,
    "changed_rows_listed": ("rows whose output changes were listed, not the ones that stay the "
                            "same"),
}


def slips(step: str, inputs: Inputs = COMMON) -> dict:
    """{description: the wrong answer it gives} for a step's common slips."""
    out = _own_slips(step, inputs)
    if inputs != COMMON and step != "ROWS_UNCHANGED_BY_MASK":
        # Named first: the answer of the published exercise, handed in for a variant.
        out = {MISTAKES["common_answers"]: exact(COMMON)[step], **out}
    return out


def _own_slips(step: str, inputs: Inputs) -> dict:
    e = exact(inputs)
    V = inputs.arrays()[2]  # noqa: N806 - the exercise's name for it
    scores, scaled = e["SCORES"], e["SCALED"]
    tril_only = e["WEIGHTS_FULL"] * CAUSAL
    if step == "SCORES":
        return {MISTAKES["scores_scaled_early"]: scaled,
                MISTAKES["scores_transposed"]: scores.T}
    if step == "SCALED":
        return {MISTAKES["no_scale"]: scores,
                MISTAKES["scale_by_d"]: scores / D_HEAD,
                MISTAKES["scale_multiplied"]:
                    scores * math.sqrt(D_HEAD)}
    if step == "WEIGHTS_FULL":
        return {COLUMN_SOFTMAX: softmax_rows(scaled.T).T,
                MISTAKES["softmax_unscaled"]:
                    softmax_rows(scores),
                MISTAKES["no_exp"]:
                    scaled / scaled.sum(axis=1, keepdims=True),
                MISTAKES["mask_where_none"]:
                    e["WEIGHTS_CAUSAL"]}
    if step == "OUT_FULL":
        return {MISTAKES["weights_transposed"]:
                    e["WEIGHTS_FULL"].T @ V,
                MISTAKES["chapter_v"]: e["WEIGHTS_FULL"] @ V_SEED,
                MISTAKES["causal_weights_unmasked_step"]: e["WEIGHTS_CAUSAL"] @ V,
                MISTAKES["rounded_weights"]: np.round(e["WEIGHTS_FULL"], 2) @ V}
    if step == "WEIGHTS_CAUSAL":
        upper = np.triu(np.ones((3, 3), dtype=bool))
        return {MISTAKES["wrong_triangle"]:
                    softmax_rows(scaled, upper),
                MISTAKES["diagonal_masked"]:
                    softmax_rows(scaled, np.tril(np.ones((3, 3), dtype=bool), -1)),
                MISTAKES["mask_after_softmax"]: tril_only,
                MISTAKES["mask_zero"]: softmax_rows(np.where(CAUSAL, scaled, 0.0)),
                MISTAKES["no_mask"]: e["WEIGHTS_FULL"],
                COLUMN_SOFTMAX: softmax_rows(scaled.T, CAUSAL.T).T}
    if step == "OUT_CAUSAL":
        return {MISTAKES["weights_transposed"]:
                    e["WEIGHTS_CAUSAL"].T @ V,
                MISTAKES["chapter_v_causal"]:
                    e["WEIGHTS_CAUSAL"] @ V_SEED,
                MISTAKES["unmasked_weights"]: e["OUT_FULL"],
                MISTAKES["rounded_weights"]: np.round(e["WEIGHTS_CAUSAL"], 2) @ V}
    if step == "ROWS_UNCHANGED_BY_MASK":
        return {MISTAKES["rows_from_one"]: (3,),
                MISTAKES["changed_rows_listed"]:
                    (0, 1)}
    return {}
