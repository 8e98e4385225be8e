"""Hidden tests for ex05_decode_prefill: exact counts on hidden parameters,
kernels against the reference, the KV cache and RoPE.

The kernels' tests run a fixed case first (the same in every grading; a
known mistake fails on it under every seed), then random shapes
(``grader/reference/cases.py``)."""
import pytest
import torch

from grader.feedback import TOLERANCES, Feedback, check_close, check_equal, every_case
from grader.reference.secret import roofline as rl
from grader.reference.cases import case_seed, fixed_seed, on_case, rng_for
from grader.reference.ex05_checks import check_decode_with_cache
from grader.reference.mistakes import looks_like

pytestmark = [pytest.mark.exercise("ex05_decode_prefill"), pytest.mark.hidden]

ATOL, RTOL = TOLERANCES["float32"]


FLOP_MISTAKES = ["flops_half", "flops_double", "causal_top_left", "causal_half",
                 "causal_ignored", "causal_no_diagonal", "causal_not_clamped"]


@pytest.mark.points(2)
def test_attention_flops_hidden(student):
    """attention_flops on hidden shapes: full, causal square, causal with a cache"""
    cases = [
        ((4, 32, 2048, 2048, 128), False),
        ((4, 32, 2048, 2048, 128), True),
        ((2, 8, 1, 4097, 64), True),        # decode: one query sees the whole cache
        ((3, 16, 100, 900, 64), True),      # a chunk of 100 new tokens after 800 cached
        ((1, 64, 37, 37, 96), True),
        ((8, 40, 1, 131072, 128), False),
    ]
    with every_case() as case:
        for args, causal in cases:
            with case:
                check_equal(student.attention_flops(*args, causal=causal),
                            rl.attention_flops(*args, causal=causal),
                            what=f"attention_flops{args[:5]}, causal={causal})".replace("),", ","),
                            mistakes=lambda: rl.mistakes_of(rl.attention_flops, FLOP_MISTAKES,
                                                            *args, causal=causal))


@pytest.mark.points(1)
def test_attention_flops_more_queries_than_keys(student):
    """attention_flops with causal and s_q > s_k (early queries see no key)"""
    args = (2, 4, 12, 5, 16)
    check_equal(student.attention_flops(*args, causal=True),
                rl.attention_flops(*args, causal=True),
                what="attention_flops(2, 4, 12, 5, 16, causal=True)",
                hint="With 12 queries and 5 keys, end-aligned, query i sits at position "
                     "i - 7: queries 0..6 see no key at all, query 7 sees one.",
                mistakes=lambda: rl.mistakes_of(rl.attention_flops, FLOP_MISTAKES, *args,
                                                causal=True))


# A count that always uses 2 bytes per element is also "doubled" where
# bytes_per_elem is 1: named first, it is named for what it is (check_equal
# names the first mistake that matches).
BYTE_MISTAKES = ["bytes_kv_all_heads", "bytes_no_output", "bytes_per_elem_fixed_2",
                 "bytes_double", "bytes_half", "bytes_per_elem_ignored"]


@pytest.mark.points(2)
def test_attention_bytes_hidden(student):
    """attention_bytes on hidden shapes, GQA heads and element widths"""
    cases = [
        (4, 32, 8, 2048, 2048, 128, 2),
        (16, 32, 8, 1, 8192, 128, 2),     # GQA decode
        (1, 64, 1, 1, 131072, 128, 1),    # MQA, one byte per element
        (2, 12, 12, 512, 512, 64, 4),
        (3, 16, 4, 100, 900, 64, 2),
    ]
    with every_case() as case:
        for args in cases:
            with case:
                check_equal(student.attention_bytes(*args), rl.attention_bytes(*args),
                            what=f"attention_bytes{args}",
                            mistakes=lambda: rl.mistakes_of(rl.attention_bytes, BYTE_MISTAKES,
                                                            *args))


@pytest.mark.points(1)
def test_bound_at_the_ridge(student):
    """bound() at, above and below the ridge point, with hidden peaks"""
    cases = [(8.0, 8e12, 1e12),            # exactly at the ridge: compute
             (7.999, 8e12, 1e12),
             (290.0, 989e12, 3.35e12),     # an H100's ridge is ~295
             (0.5, 2e9, 1e10),             # ridge 0.2
             (1.0, 1e11, 2.5e10),
             (20.0, 1e11, 1e10)]
    # The cases are chosen so that each mistake gives its own pattern of answers.
    got = [student.bound(*args) for args in cases]
    want = [rl.bound(*args) for args in cases]
    if got == want:
        return
    lines = [f"bound{args}: expected {w!r}, got {g!r}" for args, g, w in zip(cases, got, want)
             if g != w]
    for name in ("bound_strict", "bound_swapped", "bound_inverted_ridge"):
        if got == [rl.bound(*args, mistake=name) for args in cases]:
            lines.append(looks_like(rl.MISTAKES[name]))
            break
    else:
        lines.append("The ridge point is peak_flops / peak_bytes_per_s; at or above it, "
                     "compute-bound.")
    raise Feedback("\n".join(lines))


ATT_MISTAKES = ["no_scale", "scale_by_d", "softmax_over_queries", "no_mask", "diagonal_masked",
                "mask_wrong_triangle"]


@pytest.mark.points(2)
@pytest.mark.parametrize("seed,shape,dtype", [
    (51, (2, 4, 33, 16), torch.float32),
    (52, (1, 3, 64, 32), torch.float64),
], ids=["fp32", "fp64"])
def test_prefill_attention_hidden(student, seed, shape, dtype):
    """prefill_attention against the reference"""
    def check(g, shape, drawn):
        q, k, v = (torch.randn(*shape, generator=g, dtype=dtype) * 2 for _ in range(3))
        on_case(f"q, k, v of shape {tuple(shape)}", lambda: check_close(
            student.prefill_attention(q, k, v), rl.grouped(q, k, v, causal=True),
            what=f"prefill_attention on {tuple(shape)}", atol=ATOL, rtol=RTOL,
            mistakes=lambda: rl.attention_mistakes(ATT_MISTAKES, q, k, v, causal=True)),
            drawn=drawn)

    check(torch.Generator().manual_seed(fixed_seed("ex05-prefill", seed)), shape, False)
    rng = rng_for("ex05-prefill", seed)
    shape = (int(rng.integers(1, 4)), int(rng.integers(1, 5)), int(rng.integers(1, 65)),
             int(rng.choice([4, 8, 16, 32])))
    check(torch.Generator().manual_seed(case_seed("ex05-prefill", seed)), shape, True)


DECODE_MISTAKES = ["no_scale", "softmax_over_queries", "top_left_mask", "mask_wrong_triangle"]


@pytest.mark.points(2)
@pytest.mark.parametrize("seed,b,h,s,d", [(61, 2, 4, 50, 16), (62, 1, 8, 257, 64)],
                         ids=["S50", "S257"])
def test_decode_attention_hidden(student, seed, b, h, s, d):
    """decode_attention against the reference (one query sees the whole cache)"""
    def check(g, b, h, s, d, drawn):
        q = torch.randn(b, h, 1, d, generator=g) * 2
        k, v = (torch.randn(b, h, s, d, generator=g) * 2 for _ in range(2))
        on_case(f"q {tuple(q.shape)}, cache {tuple(k.shape)}", lambda: check_close(
            student.decode_attention(q, k, v), rl.grouped(q, k, v, causal=True),
            what=f"decode_attention(q {tuple(q.shape)}, cache {tuple(k.shape)})",
            atol=ATOL, rtol=RTOL,
            mistakes=lambda: rl.attention_mistakes(DECODE_MISTAKES, q, k, v, causal=True)),
            drawn=drawn)

    check(torch.Generator().manual_seed(fixed_seed("ex05-decode", seed)), b, h, s, d, False)
    rng = rng_for("ex05-decode", seed)
    check(torch.Generator().manual_seed(case_seed("ex05-decode", seed)), int(rng.integers(1, 4)),
          int(rng.integers(1, 9)), int(rng.integers(1, 300)), int(rng.choice([8, 16, 64])), True)


@pytest.mark.points(3)
@pytest.mark.parametrize("seed,b,s,d,h,h_kv,d_head,base", [
    (71, 2, 9, 16, 4, 4, 4, 10000.0),     # MHA
    (72, 1, 12, 24, 6, 2, 8, 10000.0),    # GQA, 3 query heads per KV head
    (73, 2, 7, 12, 4, 1, 6, 500.0),       # MQA, another RoPE base
], ids=["mha", "gqa", "mqa-base500"])
def test_decode_with_cache_hidden(student, seed, b, s, d, h, h_kv, d_head, base):
    """decode_with_cache's output and caches (rotated keys, values) against the reference"""
    on_case(f"B={b}, S={s}, d={d}, h={h}, h_kv={h_kv}, d_head={d_head}, base={base}",
            lambda: check_decode_with_cache(student, seed=fixed_seed("ex05-cache", seed), b=b,
                                            s=s, d=d, h=h, h_kv=h_kv, d_head=d_head,
                                            rope_base=base))
    rng = rng_for("ex05-cache", seed)
    b, s, h_kv = int(rng.integers(1, 3)), int(rng.integers(1, 13)), h_kv
    d_head, d = int(rng.choice([2, 4, 6, 8])), int(rng.choice([8, 12, 16]))
    on_case(f"B={b}, S={s}, d={d}, h={h}, h_kv={h_kv}, d_head={d_head}, base={base}",
            lambda: check_decode_with_cache(student, seed=case_seed("ex05-cache", seed), b=b,
                                            s=s, d=d, h=h, h_kv=h_kv, d_head=d_head,
                                            rope_base=base), drawn=True)
