"""Public tests for ex02_mha: small cases a student can reason about."""
import numpy as np
import pytest

from grader.feedback import TOLERANCES, check_close, expect_raises
from grader.reference.secret import attention as ref

pytestmark = [pytest.mark.exercise("ex02_mha")]
ATOL, RTOL = TOLERANCES["float64"]


@pytest.mark.points(1)
def test_softmax_small(student):
    """softmax of a small matrix, over the last axis"""
    x = np.array([[1.0, 2.0, 3.0], [0.0, 0.0, 5.0]])
    check_close(student.softmax(x), ref.softmax(x), what="softmax(x)", atol=ATOL, rtol=RTOL,
                mistakes=ref.mistakes_of(ref.softmax, ["softmax_over_queries",
                                                       "softmax_base_2"], x))


@pytest.mark.points(1)
def test_causal_mask_square(student):
    """causal_mask(4) is the lower triangle"""
    check_close(student.causal_mask(4), ref.causal_mask(4), what="causal_mask(4)",
                atol=0, rtol=0,
                mistakes=ref.mistakes_of(ref.causal_mask, ["diagonal_masked",
                                                           "mask_wrong_triangle"], 4, 4))


@pytest.mark.points(1)
def test_rope_position_zero_is_identity(student):
    """rope at position 0 leaves the vector unchanged"""
    x = np.arange(8.0).reshape(1, 8)
    check_close(student.rope(x, np.array([0])), x, what="rope(x, [0])", atol=ATOL, rtol=RTOL)


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


@pytest.mark.points(1)
def test_attention_chapter_example(student):
    """attention on the chapter's worked example (causal)"""
    q = np.array([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]])[None, None]
    v = np.array([[10.0, 0.0], [0.0, 10.0], [5.0, 5.0]])[None, None]
    mask = np.asarray(ref.causal_mask(3))   # a tensor, or an array when replayed
    got = student.attention(q, q, v, mask)
    check_close(got, ref.attention(q, q, v, causal=True), what="attention(Q, K, V, mask)",
                atol=ATOL, rtol=RTOL,
                mistakes=ref.mistakes_of(ref.attention, ["no_scale", "scale_by_d",
                                                         "softmax_over_queries"],
                                         q, q, v, causal=True))


@pytest.mark.points(1)
def test_multi_head_attention_small(student):
    """multi_head_attention on a small causal case"""
    rng = np.random.default_rng(0)
    x = rng.standard_normal((1, 5, 8))
    w_q, w_k, w_v = (rng.standard_normal((8, 8)) / 3 for _ in range(3))
    w_o = rng.standard_normal((8, 8)) / 3
    want = ref.gqa(x, w_q, w_k, w_v, w_o, 2)
    got = student.multi_head_attention(x, w_q, w_k, w_v, w_o, 2)
    check_close(got, want, what="multi_head_attention(x, ..., n_heads=2)", atol=ATOL,
                rtol=RTOL, mistakes=ref.mistakes_of(
                    ref.gqa, ["no_scale", "no_mask", "diagonal_masked", "rope_on_values",
                              "no_rope", "rope_interleaved", "split_without_transpose",
                              "softmax_over_queries"], x, w_q, w_k, w_v, w_o, 2))
