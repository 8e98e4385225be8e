"""Public tests for ex03_gqa."""
import numpy as np
import pytest

from grader.feedback import LONG_CHAIN, Feedback, accuracy, check_close, check_equal
from grader.reference.ex03_checks import (MISTAKES, NO_BYTES, NO_LAYERS, ONLY_K,
                                          exceeds_mistakes)
from grader.reference.secret import attention_np as ref

pytestmark = [pytest.mark.exercise("ex03_gqa")]
# The precision rule (grader.feedback.accuracy): a float64 input is held to
# what float32 arithmetic reaches, ten times that for this long chain of products.
ATOL_LONG, RTOL_LONG = accuracy("float64", LONG_CHAIN)


@pytest.mark.points(1)
def test_repeat_kv_order(student):
    """repeat_kv keeps each KV head's copies together (0,0,1,1)"""
    x = np.arange(2.0).reshape(1, 2, 1, 1) * np.ones((1, 2, 3, 2))
    check_close(student.repeat_kv(x, 2), ref.repeat_kv(x, 2), what="repeat_kv(x, 2)",
                atol=0, rtol=0, mistakes=ref.mistakes_of(ref.repeat_kv,
                                                         ["kv_tile", "kv_repeat_seq_axis"], x, 2))


GQA_MISTAKES = ["kv_tile", "no_mask", "no_scale", "softmax_over_queries", "diagonal_masked",
                "rope_on_values", "no_rope", "rope_interleaved", "rope_positions_ignored",
                "split_without_transpose", "no_output_projection", "scale_by_d_model",
                "rope_only_q"]


@pytest.mark.points(1)
def test_gqa_small(student):
    """grouped_query_attention with 4 query heads and 2 KV heads, and at given positions"""
    rng = np.random.default_rng(1)
    x = rng.standard_normal((1, 6, 8))
    w_q, w_o = rng.standard_normal((16, 8)) / 3, rng.standard_normal((8, 16)) / 4
    w_k, w_v = rng.standard_normal((8, 8)) / 3, rng.standard_normal((8, 8)) / 3
    args = (x, w_q, w_k, w_v, w_o, 4, 2)
    check_close(student.grouped_query_attention(*args), ref.gqa(*args),
                what="grouped_query_attention(x, ..., 4, 2)", atol=ATOL_LONG, rtol=RTOL_LONG,
                mistakes=ref.mistakes_of(ref.gqa, GQA_MISTAKES, *args))
    # positions with gaps (a chunk of a longer sequence): not 0..S-1
    positions = np.array([3, 4, 6, 7, 9, 12])
    check_close(student.grouped_query_attention(*args, positions=positions),
                ref.gqa(*args, positions=positions),
                what="grouped_query_attention(x, ..., 4, 2, positions=[3, 4, 6, 7, 9, 12])",
                atol=ATOL_LONG, rtol=RTOL_LONG,
                mistakes=ref.mistakes_of(ref.gqa, GQA_MISTAKES, *args, positions=positions))


@pytest.mark.points(1)
def test_kv_cache_bytes_small(student):
    """kv_cache_bytes counts K and V (in every layer, in bytes); kv_cache_saving is h / h_kv"""
    # First 2 layers, batch 3, 4 bytes: each slip gives its own number (with 1
    # layer, batch 1 and 2 bytes, leaving out bytes_per_elem looks like counting
    # only K, and the layers are not seen)
    n_layers, h_kv, d_head, s, b, bpe = 2, 1, 64, 7, 3, 4
    want = 2 * n_layers * h_kv * d_head * s * b * bpe
    check_equal(student.kv_cache_bytes(n_layers, h_kv, d_head, s, b, bpe), want,
                what=f"kv_cache_bytes({n_layers}, {h_kv}, {d_head}, {s}, {b}, {bpe})",
                mistakes={ONLY_K: want // 2, MISTAKES["no_batch"]: want // b,
                          NO_BYTES: want // bpe, NO_LAYERS: want // n_layers})
    check_equal(student.kv_cache_bytes(1, 1, 4, 10), 2 * 4 * 10 * 2,
                what="kv_cache_bytes(n_layers=1, n_kv_heads=1, d_head=4, seq_len=10)",
                mistakes={ONLY_K: 4 * 10 * 2})
    check_equal(float(student.kv_cache_saving(64, 8)), 8.0, what="kv_cache_saving(64, 8)",
                mistakes={MISTAKES["ratio_upside_down"]: 0.125})
    value = student.LLAMA3_70B_KV_SAVING
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        raise Feedback(f"LLAMA3_70B_KV_SAVING must be a number, got {value!r}")
    check_equal(float(value), 8.0, what="LLAMA3_70B_KV_SAVING",
                mistakes={MISTAKES["constant_upside_down"]: 0.125})


@pytest.mark.points(1)
def test_kv_exceeds_weights_chapter_case(student):
    """Llama-3-8B: the KV cache passes 16 GB of weights at 122071 tokens (and other cases)"""
    # 1 and 4 bytes first: with 2 bytes, a slip in the element size looks like
    # counting only K; the last case's weights are a whole number of tokens' cache.
    cases = [(16, 8, 64, 1e9, 1), (24, 8, 128, 30e9, 4), (32, 8, 128, 16e9, 2),
             (16, 8, 64, 2 * 16 * 8 * 64 * 2 * 1000, 2)]
    for n_layers, h_kv, d_head, weights, bpe in cases:
        per_token = 2 * n_layers * h_kv * d_head * bpe
        want = int(weights // per_token) + 1
        got = student.kv_exceeds_weights_at(n_layers, h_kv, d_head, weights, bpe)
        if isinstance(got, float) and got.is_integer():
            got = int(got)
        check_equal(got, want, what=f"kv_exceeds_weights_at({n_layers}, {h_kv}, {d_head}, "
                                    f"{weights:g}, {bpe})",
                    mistakes=exceeds_mistakes(want, weights, per_token, n_layers, bpe))
