"""Public tests for ex02_mha: small cases a student can reason about."""
import numpy as np
import pytest

from grader.feedback import LONG_CHAIN, Feedback, accuracy, check_close, expect_raises
from grader.reference.mistakes import looks_like
from grader.reference.secret import attention_np as ref

pytestmark = [pytest.mark.exercise("ex02_mha")]
ATOL, RTOL = accuracy("float64")   # the precision rule


SOFTMAX_MISTAKES = ["softmax_over_queries", "softmax_base_2", "softmax_unstable",
                    "softmax_global_max", "empty_row_nan"]


@pytest.mark.points(1)
def test_softmax_small(student):
    """softmax over the last axis (small logits, logits near 1e4, a row of only -inf), and axis=0"""
    inf = np.inf
    cases = [
        ("softmax(x)", np.array([[1.0, 2.0, 3.0], [0.0, 0.0, 5.0]]), None),
        # the last row sits 1e4 below the others: exp without the max subtracted
        # overflows, a shift by the whole array's max underflows it to 0/0
        ("softmax of logits near 1e4",
         np.array([[1e4, 0.0, -1e4], [1e4, 1e4 - 1.0, 5.0], [0.0, -1.0, -2.0]]), None),
        ("softmax with -inf entries (row 1 is all -inf)",
         np.array([[0.0, -inf, 1.0], [-inf, -inf, -inf]]),
         "A row that may see nothing must give zeros: guard the max and the sum."),
    ]
    for what, x, hint in cases:
        check_close(student.softmax(x), ref.softmax(x), what=what, atol=ATOL, rtol=RTOL,
                    mistakes=ref.mistakes_of(ref.softmax, SOFTMAX_MISTAKES, x), hint=hint)
    x = cases[0][1]
    check_close(student.softmax(x, axis=0), ref.softmax(x, 0), what="softmax(x, axis=0)",
                atol=ATOL, rtol=RTOL, mistakes=ref.mistakes_of(
                    ref.softmax, SOFTMAX_MISTAKES + ["softmax_ignores_axis"], x, 0))


MASK_MISTAKES = ["top_left_mask", "diagonal_masked", "mask_wrong_triangle", "no_mask",
                 "mask_neg_1e4", "mask_ignores_s_k"]


@pytest.mark.points(1)
def test_causal_mask_square(student):
    """causal_mask(4) is the lower triangle; causal_mask(2, 4) is aligned to the end"""
    # With as many queries as keys every alignment is the same: (2, 4) tells the
    # end-aligned mask (query i at position S_k - S_q + i) from the top-left one.
    for args in ((4,), (2, 4)):
        check_close(student.causal_mask(*args), ref.causal_mask(*args),
                    what=f"causal_mask{args if len(args) > 1 else '(4)'}", atol=0, rtol=0,
                    mistakes=ref.mistakes_of(ref.causal_mask, MASK_MISTAKES, *args))


@pytest.mark.points(1)
def test_rope_position_zero_is_identity(student):
    """rope at position 0 leaves the vector unchanged; at given positions it turns each pair"""
    # d_head 8 (at 2, every frequency and pairing look alike), positions with
    # gaps (not 0..S-1), a base other than 10000; first, so that it names a slip
    x = np.random.default_rng(2).standard_normal((1, 2, 5, 8))
    positions, base = np.array([0, 2, 3, 7, 11]), 100.0
    check_close(student.rope(x, positions, base), ref.rope(x, positions, base),
                what="rope(x (1, 2, 5, 8), positions=[0, 2, 3, 7, 11], base=100.0)",
                atol=ATOL * LONG_CHAIN, rtol=RTOL * LONG_CHAIN,
                mistakes=ref.mistakes_of(ref.rope, ROPE_MISTAKES, x, positions, base))
    x = np.arange(8.0).reshape(1, 8)
    check_close(student.rope(x, np.array([0])), x, what="rope(x, [0])", atol=ATOL * LONG_CHAIN,
                rtol=RTOL * LONG_CHAIN,
                mistakes=ref.mistakes_of(ref.rope, ROPE_MISTAKES, x, np.array([0])))


ROPE_MISTAKES = ["rope_interleaved", "rope_positions_ignored", "rope_wrong_frequency",
                 "rope_wrong_direction", "rope_positions_off_by_one", "rope_inverse_frequency",
                 "rope_base_ignored"]


@pytest.mark.points(1)
def test_rope_odd_d_head_raises(student):
    """rope raises ValueError for an odd d_head (a 2-d input, d_head 3)"""
    expect_raises(lambda: student.rope(np.ones((2, 3)), np.arange(2)), "ValueError",
                  what="rope with d_head=3")


@pytest.mark.points(1)
def test_split_heads_shape(student):
    """split_heads puts the head axis second"""
    x = np.arange(2 * 3 * 8.0).reshape(2, 3, 8)
    check_close(student.split_heads(x, 4), ref.split_heads(x, 4), what="split_heads(x, 4)",
                atol=0, rtol=0,
                mistakes=ref.mistakes_of(ref.split_heads, ["split_without_transpose"], x, 4))


@pytest.mark.points(1)
def test_merge_heads_undoes_split(student):
    """merge_heads undoes split_heads"""
    x = np.arange(2 * 3 * 8.0).reshape(2, 3, 8)
    check_close(student.merge_heads(np.asarray(ref.split_heads(x, 4))), x,
                what="merge_heads(split_heads(x, 4))", atol=0, rtol=0)


ATTENTION_MISTAKES = ["no_scale", "scale_by_d", "scale_multiplied", "softmax_over_queries",
                      "mask_after_softmax"]


@pytest.mark.points(1)
def test_attention_chapter_example(student):
    """attention on the chapter's worked example (causal), and in float32 it stays float32"""
    q = np.array([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]])[None, None]
    v = np.array([[10.0, 0.0], [0.0, 10.0], [5.0, 5.0]])[None, None]
    mask = np.asarray(ref.causal_mask(3))   # a tensor, or an array when replayed
    got = student.attention(q, q, v, mask)
    check_close(got, ref.attention(q, q, v, causal=True), what="attention(Q, K, V, mask)",
                atol=ATOL, rtol=RTOL,
                mistakes=ref.mistakes_of(ref.attention, ATTENTION_MISTAKES, q, q, v,
                                         causal=True))
    q32, v32, mask32 = (a.astype(np.float32) for a in (q, v, mask))
    dtype = getattr(student.attention(q32, q32, v32, mask32), "dtype", None)
    if dtype is not None and np.dtype(dtype) != np.float32:
        raise Feedback(f"attention(Q, K, V, mask) with float32 inputs returned "
                       f"{np.dtype(dtype).name}; every function keeps its input's dtype"
                       "\n" + looks_like(ref.MISTAKES['float64_for_float32']))


@pytest.mark.points(1)
def test_multi_head_attention_small(student):
    """multi_head_attention on a small causal case, and at given positions"""
    rng = np.random.default_rng(0)
    x = rng.standard_normal((1, 5, 8))
    w_q, w_k, w_v = (rng.standard_normal((8, 8)) / 3 for _ in range(3))
    w_o = rng.standard_normal((8, 8)) / 3
    # positions with gaps (a chunk of a longer sequence): not 0..S-1
    for positions in (None, np.array([2, 3, 5, 8, 9])):
        kwargs = {} if positions is None else {"positions": positions}
        what = "multi_head_attention(x, ..., n_heads=2" + (
            ")" if positions is None else ", positions=[2, 3, 5, 8, 9])")
        check_mha(student, (x, w_q, w_k, w_v, w_o, 2), kwargs, what)


def check_mha(student, args, kwargs, what):
    got = student.multi_head_attention(*args, **kwargs)
    check_close(got, ref.gqa(*args, **kwargs), what=what, atol=ATOL * LONG_CHAIN,
                rtol=RTOL * LONG_CHAIN, mistakes=ref.mistakes_of(
                    ref.gqa, ATTENTION_MISTAKES + [
                        "no_mask", "diagonal_masked", "rope_on_values", "no_rope",
                        "rope_interleaved", "split_without_transpose", "rope_only_q",
                        "scale_by_d_model", "merge_without_transpose", "no_output_projection",
                        "split_strided", "top_left_mask", "rope_positions_ignored"],
                    *args, **kwargs))
