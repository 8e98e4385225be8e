"""Hidden tests for ex03_gqa: fixed cases that expose every known mistake,
then random shapes and groupings; GQA == MHA, sizes, errors.

Fixed cases come first in each test (the same in every grading), random ones
after (``grader/reference/cases.py``): with one KV head, or one query head per
KV head, ``tile`` and ``repeat_interleave`` agree, so only the fixed cases,
which group several query heads on each of several KV heads, decide that
mistake under every seed.
"""
import numpy as np
import pytest

from grader.feedback import LONG_CHAIN, Feedback, accuracy, check_close, check_equal, expect_raises
from grader.reference.ex03_checks import MISTAKES as SIZING
from grader.reference.ex03_checks import NO_BYTES, NO_LAYERS, ONLY_K, exceeds_mistakes
from grader.reference.secret import attention_np as ref
from grader.reference.cases import fixed_rng, mha_case, mha_data, on_case, rng_for

pytestmark = [pytest.mark.exercise("ex03_gqa"), pytest.mark.hidden]
N_CASES = 8
# The precision rule (grader.feedback.accuracy): a float64 input is held to
# what float32 arithmetic reaches, ten times that for this long chain of products.
ATOL_LONG, RTOL_LONG = accuracy("float64", LONG_CHAIN)
GQA_MISTAKES = ["kv_tile", "no_scale", "softmax_over_queries", "no_mask", "diagonal_masked",
                "rope_on_values", "no_rope", "rope_interleaved", "rope_positions_ignored",
                "split_without_transpose", "no_output_projection", "scale_by_d_model",
                "softmax_base_2", "rope_only_q"]
# The sizing slip only this suite names (grader.insight keys it; the others
# are grader/reference/ex03_checks.py's).
MISTAKES = {"weights_gib": "the weights were taken in GiB (2**30) instead of decimal GB"}


def _case_args(c):
    return (c.x, c.w_q, c.w_k, c.w_v, c.w_o, c.n_heads, c.n_kv_heads)


# (B, h_kv, S, d_head, n_rep): several KV heads, each repeated several times
REPEAT_FIXED = [(1, 2, 3, 2, 3), (2, 3, 4, 5, 2)]


@pytest.mark.points(2)
def test_repeat_kv_random(student):
    """repeat_kv: KV head j serves query heads j*n_rep .. (j+1)*n_rep - 1, on hidden shapes"""
    def cases():
        fixed = fixed_rng("repeat_kv")
        for b, h_kv, s, d, n_rep in REPEAT_FIXED:
            yield fixed.standard_normal((b, h_kv, s, d)), n_rep, False
        rng = rng_for("repeat_kv")
        for _ in range(N_CASES):
            b, h_kv, s, d = (int(n) for n in rng.integers(1, 6, size=4))
            n_rep = int(rng.integers(1, 5))
            yield rng.standard_normal((b, h_kv, s, d)), n_rep, True

    for x, n_rep, drawn in cases():
        on_case(f"x of shape {x.shape}, n_rep={n_rep}", lambda: check_close(
            student.repeat_kv(x, n_rep), ref.repeat_kv(x, n_rep),
            what=f"repeat_kv(x of shape {x.shape}, {n_rep})", atol=0, rtol=0,
            mistakes=lambda: ref.mistakes_of(ref.repeat_kv, ["kv_tile", "kv_repeat_seq_axis"],
                                             x, n_rep)),
            drawn=drawn)


# Groupings where tile and repeat_interleave differ (h_kv > 1 and h > h_kv),
# d_head of 8 (interleaved RoPE pairs), d != d_head (the model-width scale).
GQA_FIXED = [dict(b=2, s=6, d=16, h=4, h_kv=2, d_head=8),
             dict(b=1, s=7, d=24, h=6, h_kv=3, d_head=4),
             dict(b=1, s=5, d=8, h=8, h_kv=2, d_head=8)]


@pytest.mark.points(3)
@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_gqa_random(student, dtype):
    """grouped_query_attention on hidden shapes and groupings"""
    atol, rtol = accuracy(dtype)

    def cases():
        fixed = fixed_rng("gqa", dtype)
        for i, shape in enumerate(GQA_FIXED):
            yield i, mha_data(fixed, dtype=dtype, positions=i == 1, **shape), False
        rng = rng_for("gqa", dtype)
        for i in range(N_CASES):
            yield i, mha_case(rng, dtype, gqa=True, positions=i % 2 == 1), True

    for i, c, drawn in cases():
        causal = i % 4 != 3 if drawn else i != 2
        kwargs = dict(causal=causal)
        if c.positions is not None:
            kwargs["positions"] = c.positions
        on_case(c.shape_text + (", causal" if causal else ", not causal"), lambda: check_close(
            student.grouped_query_attention(*_case_args(c), **kwargs),
            ref.gqa(*_case_args(c), **kwargs), what="grouped_query_attention",
            atol=atol * 10, rtol=rtol * 10,
            mistakes=lambda: ref.mistakes_of(ref.gqa, GQA_MISTAKES, *_case_args(c), **kwargs)),
            drawn=drawn)


@pytest.mark.points(2)
def test_gqa_equals_mha_when_every_head_has_its_kv(student):
    """grouped_query_attention with h_kv == h equals multi-head attention"""
    def cases():
        fixed = fixed_rng("gqa-mha")
        yield mha_data(fixed, b=2, s=6, d=16, h=4, h_kv=4, d_head=8), False
        rng = rng_for("gqa-mha")
        for _ in range(4):
            yield mha_case(rng), True

    for c, drawn in cases():
        args = (c.x, c.w_q, c.w_k, c.w_v, c.w_o, c.n_heads)
        on_case(c.shape_text, lambda: check_close(
            student.grouped_query_attention(*args, c.n_heads), ref.gqa(*args),
            what="grouped_query_attention with h_kv == h", atol=ATOL_LONG, rtol=RTOL_LONG),
            drawn=drawn)


@pytest.mark.points(1)
def test_gqa_uses_the_shared_head_mapping(student):
    """grouped_query_attention: query head i reads KV head i // (h / h_kv)"""
    # With identity-like projections the grouping shows up directly.
    rng = fixed_rng("gqa-mapping")
    h, h_kv, d_head, s = 4, 2, 4, 5
    d = h * d_head
    x = rng.standard_normal((1, s, d))
    w_q = np.eye(d)
    w_k = rng.standard_normal((h_kv * d_head, d))
    w_v = rng.standard_normal((h_kv * d_head, d))
    w_o = np.eye(d)
    args = (x, w_q, w_k, w_v, w_o, h, h_kv)
    check_close(student.grouped_query_attention(*args), ref.gqa(*args),
                what="grouped_query_attention (h=4, h_kv=2)", atol=ATOL_LONG, rtol=RTOL_LONG,
                mistakes=lambda: ref.mistakes_of(ref.gqa, ["kv_tile"], *args))


@pytest.mark.points(1)
@pytest.mark.parametrize("problem", ["h_not_multiple", "w_k_rows", "w_v_rows", "w_o_shape",
                                     "w_q_width"])
def test_gqa_value_errors(student, problem):
    """grouped_query_attention rejects shapes that do not fit"""
    rng = np.random.default_rng(5)
    d, d_head, h, h_kv = 8, 2, 4, 2
    x = rng.standard_normal((1, 3, d))
    w = dict(w_q=rng.standard_normal((h * d_head, d)), w_k=rng.standard_normal((h_kv * d_head, d)),
             w_v=rng.standard_normal((h_kv * d_head, d)), w_o=rng.standard_normal((d, h * d_head)))
    n_heads, n_kv = h, h_kv
    if problem == "h_not_multiple":
        n_kv = 3
        w["w_k"] = rng.standard_normal((3 * d_head, d))
        w["w_v"] = rng.standard_normal((3 * d_head, d))
        what = "n_heads=4, n_kv_heads=3"
    elif problem == "w_k_rows":
        w["w_k"] = rng.standard_normal((h * d_head, d))
        what = "w_k with h*d_head rows instead of h_kv*d_head"
    elif problem == "w_v_rows":
        w["w_v"] = rng.standard_normal((3 * d_head, d))
        what = "w_v with 3*d_head rows"
    elif problem == "w_o_shape":
        w["w_o"] = rng.standard_normal((d, h_kv * d_head))
        what = "w_o of shape (d, h_kv*d_head)"
    else:
        w["w_q"] = rng.standard_normal((h * d_head, d + 1))
        what = "w_q with d+1 columns"
    expect_raises(lambda: student.grouped_query_attention(
        x, w["w_q"], w["w_k"], w["w_v"], w["w_o"], n_heads, n_kv), "ValueError",
        what=f"grouped_query_attention with {what}")


@pytest.mark.points(2)
def test_kv_cache_bytes_hidden(student):
    """kv_cache_bytes on other models, batches and precisions"""
    # The first case tells the slips apart (with 2 bytes and batch 1, leaving out
    # bytes_per_elem looks like counting only K).
    for n_layers, h_kv, d_head, s, b, bpe in [(2, 1, 64, 7, 3, 4), (80, 8, 128, 8192, 1, 2),
                                              (32, 8, 128, 131072, 1, 2),
                                              (40, 40, 128, 4096, 8, 2),
                                              (61, 1, 576, 1000, 2, 1)]:
        want = 2 * n_layers * h_kv * d_head * s * b * bpe
        check_equal(student.kv_cache_bytes(n_layers, h_kv, d_head, s, b, bpe), want,
                    what=f"kv_cache_bytes({n_layers}, {h_kv}, {d_head}, {s}, {b}, {bpe})",
                    mistakes={ONLY_K: want // 2, SIZING["no_batch"]: want // b,
                              NO_BYTES: want // bpe, NO_LAYERS: want // n_layers})
    check_equal(student.kv_cache_bytes(80, 8, 128, 8192), 2 * 80 * 8 * 128 * 8192 * 2,
                what="kv_cache_bytes(80, 8, 128, 8192) with default batch and bytes")


@pytest.mark.points(1)
def test_kv_cache_saving(student):
    """kv_cache_saving is the MHA cache over this cache"""
    for h, h_kv in [(64, 8), (32, 32), (32, 1), (48, 6)]:
        check_equal(float(student.kv_cache_saving(h, h_kv)), h / h_kv,
                    what=f"kv_cache_saving({h}, {h_kv})",
                    mistakes={SIZING["ratio_upside_down"]: h_kv / h})


@pytest.mark.points(1)
def test_llama3_70b_saving(student):
    """LLAMA3_70B_KV_SAVING is 8"""
    value = student.LLAMA3_70B_KV_SAVING
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        raise Feedback(f"LLAMA3_70B_KV_SAVING must be a number, got {value!r}")
    check_equal(float(value), 8.0, what="LLAMA3_70B_KV_SAVING",
                mistakes={SIZING["constant_upside_down"]: 0.125})


@pytest.mark.points(2)
def test_kv_exceeds_weights_at_hidden(student):
    """kv_exceeds_weights_at on other models (strictly larger)"""
    # 1 and 4 bytes first: with 2 bytes, a slip in the element size looks like
    # counting only K.
    cases = [(16, 8, 64, 1e9, 1), (24, 8, 128, 30e9, 4),
             (32, 8, 128, 16e9, 2), (80, 8, 128, 140e9, 2), (32, 32, 128, 14e9, 2),
             (28, 4, 128, 14e9, 2), (16, 8, 64, 2 * 16 * 8 * 64 * 2 * 1000, 2)]
    for n_layers, h_kv, d_head, weights, bpe in cases:
        per_token = 2 * n_layers * h_kv * d_head * bpe
        want = int(weights // per_token) + 1
        got = student.kv_exceeds_weights_at(n_layers, h_kv, d_head, weights, bpe)
        # A whole number is a context length, whether int or 122071.0.
        if isinstance(got, float) and got.is_integer():
            got = int(got)
        if not isinstance(got, int) or isinstance(got, bool):
            raise Feedback(f"kv_exceeds_weights_at must return a whole number of tokens, "
                           f"got {got!r}")
        check_equal(got, want, what=f"kv_exceeds_weights_at({n_layers}, {h_kv}, {d_head}, "
                                    f"{weights:g}, {bpe})",
                    mistakes={**exceeds_mistakes(want, weights, per_token, n_layers, bpe),
                              MISTAKES["weights_gib"]:
                              int(weights / 1e9 * 2**30 // per_token) + 1})
