"""Public tests for ex03_gqa."""
import numpy as np
import pytest

from grader.feedback import check_close, check_equal
from grader.reference.secret import attention as ref

pytestmark = [pytest.mark.exercise("ex03_gqa")]


@pytest.mark.points(1)
def test_repeat_kv_order(student):
    """repeat_kv keeps each KV head's copies together (0,0,1,1)"""
    x = np.arange(2.0).reshape(1, 2, 1, 1) * np.ones((1, 2, 3, 2))
    check_close(student.repeat_kv(x, 2), ref.repeat_kv(x, 2), what="repeat_kv(x, 2)",
                atol=0, rtol=0, mistakes=ref.mistakes_of(ref.repeat_kv, ["kv_tile"], x, 2))


@pytest.mark.points(1)
def test_gqa_small(student):
    """grouped_query_attention with 4 query heads and 2 KV heads"""
    rng = np.random.default_rng(1)
    x = rng.standard_normal((1, 6, 8))
    w_q, w_o = rng.standard_normal((16, 8)) / 3, rng.standard_normal((8, 16)) / 4
    w_k, w_v = rng.standard_normal((8, 8)) / 3, rng.standard_normal((8, 8)) / 3
    args = (x, w_q, w_k, w_v, w_o, 4, 2)
    check_close(student.grouped_query_attention(*args), ref.gqa(*args),
                what="grouped_query_attention(x, ..., 4, 2)", atol=1e-9, rtol=1e-7,
                mistakes=ref.mistakes_of(ref.gqa, ["kv_tile", "no_mask", "no_scale"], *args))


@pytest.mark.points(1)
def test_kv_cache_bytes_small(student):
    """kv_cache_bytes counts K and V"""
    check_equal(student.kv_cache_bytes(1, 1, 4, 10), 2 * 4 * 10 * 2,
                what="kv_cache_bytes(n_layers=1, n_kv_heads=1, d_head=4, seq_len=10)",
                mistakes={"only K (or only V) was counted: the cache holds both K and V":
                          4 * 10 * 2})


@pytest.mark.points(1)
def test_kv_exceeds_weights_chapter_case(student):
    """Llama-3-8B: the KV cache passes 16 GB of weights at 122071 tokens"""
    check_equal(student.kv_exceeds_weights_at(32, 8, 128, 16e9), 122071,
                what="kv_exceeds_weights_at(32, 8, 128, 16e9)")
