"""Hidden tests for ex08_mla: random shapes in float32 and float64, decode equal
to the explicit form at every length and token by token with a growing cache,
causality, relative positions, the formulas, and traced decodes.

Each test with random shapes runs fixed cases first (the same in every
grading; a known mistake fails on one of them under every seed), then its
random ones (``grader/reference/cases.py``); the others are fixed."""
import functools

import numpy as np
import pytest
import torch

from grader.feedback import LONG_CHAIN, Feedback, accuracy, check_close, check_equal, \
    every_case, check_responds, expect_raises, fits
from grader.reference.mistakes import looks_like
from grader.reference.secret import mla as ref
from grader.reference import mla_trace
from grader.reference.cases import fixed_seed, on_case, rng_for
from grader.reference.ex08_checks import ATTENTION_MISTAKES, CACHE_BYTES_MISTAKES, \
    DECODE_MISTAKES, INTENSITY_MISTAKES, SAVING_MISTAKES, check_attention, check_decode, \
    check_dtype, mla_inputs

pytestmark = [pytest.mark.exercise("ex08_mla"), pytest.mark.hidden]
N_CASES = 6
# The precision rule (grader.feedback.accuracy): a float64 input is held to
# what float32 arithmetic reaches; ten times that for MLA's long chain of products.
ATOL_LONG, RTOL_LONG = accuracy("float64", LONG_CHAIN)


def random_case(rng, dtype, *, max_s=64, positions=False):
    """Shapes in the contract's ranges: batch 1-3, S 1-64, heads 1-8, d_c 4-64,
    d_rope 2-16 even, d_nope and d_v 2-32."""
    b, s, h = int(rng.integers(1, 4)), int(rng.integers(1, max_s + 1)), int(rng.integers(1, 9))
    d_c, d_rope = int(rng.integers(4, 65)), int(2 * rng.integers(1, 9))
    d_nope, d_v = int(rng.integers(2, 33)), int(rng.integers(2, 33))
    d = int(rng.choice([8, 16, 24, 32, 48]))
    seed = int(rng.integers(2 ** 31))
    torch_dtype = getattr(torch, dtype)
    args = mla_inputs(seed, b, s, d, h, d_c, d_rope, d_nope, d_v, torch_dtype)
    pos = None
    if positions:   # absolute positions with gaps and an offset, as in a packed batch
        pos = torch.as_tensor(np.sort(rng.choice(np.arange(4 * s + 10), size=s, replace=False)))
    text = (f"B={b}, S={s}, d={d}, h={h}, d_c={d_c}, d_rope={d_rope}, d_nope={d_nope}, "
            f"d_v={d_v}, {dtype}")
    return args, h, pos, text


# (B, S, d, h, d_c, d_rope, d_nope, d_v): d_c unlike d_nope + d_rope and unlike
# d_nope (the scales), several heads and positions (RoPE, the mask); in the
# second d_c == d_nope, where a transposed absorption still runs.
FIXED_SHAPES = [(2, 7, 16, 3, 12, 4, 6, 5), (1, 10, 24, 2, 8, 6, 8, 8)]


def fixed_case(key, i, dtype, *, positions=False):
    """The ``i``-th fixed case, as ``random_case`` gives a random one."""
    b, s, d, h, d_c, d_rope, d_nope, d_v = FIXED_SHAPES[i]
    args = mla_inputs(fixed_seed(key, i, dtype), b, s, d, h, d_c, d_rope, d_nope, d_v,
                      getattr(torch, dtype))
    pos = torch.as_tensor([2 + 3 * j + j * j % 5 for j in range(s)]) if positions else None
    text = (f"B={b}, S={s}, d={d}, h={h}, d_c={d_c}, d_rope={d_rope}, d_nope={d_nope}, "
            f"d_v={d_v}, {dtype}")
    return args, h, pos, text


def cases(key, dtype, n, **kwargs):
    """(i, case, drawn): the fixed cases, then ``n`` random ones."""
    positions = kwargs.pop("positions", lambda i: False)
    for i in range(len(FIXED_SHAPES)):
        yield i, fixed_case(key, i, dtype, positions=positions(i)), False
    rng = rng_for(key, dtype)
    for i in range(n):
        yield i, random_case(rng, dtype, positions=positions(i), **kwargs), True


def _tol(dtype):
    return accuracy(dtype, LONG_CHAIN)


@pytest.mark.points(2)
@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_mla_cache_random(student, dtype):
    """mla_cache's (c_kv, k_rope), values and dtype, at given positions"""
    atol, rtol = _tol(dtype)
    for i, ((x, _, w_dkv, _, _, w_kr, _), _, pos, text), drawn in cases(
            "mla-cache", dtype, N_CASES, positions=lambda i: i % 2 == 1):
        kwargs = {} if pos is None else {"positions": pos}
        got = student.mla_cache(x, w_dkv, w_kr, **kwargs)
        if not isinstance(got, (tuple, list)) or len(got) != 2:
            raise Feedback(f"mla_cache must return (c_kv, k_rope); got {type(got).__name__}")
        want = ref.cache(x, w_dkv, w_kr, **kwargs)
        wrong = functools.cache(lambda: ref.mistakes_of(
            ref.cache, ["rope_on_latent", "k_rope_unrotated", "rope_positions_unused"], x,
            w_dkv, w_kr, **kwargs))
        for j, part in enumerate(("c_kv", "k_rope")):
            on_case(text, lambda: (check_dtype(got[j], x.dtype, f"mla_cache ({part})"),
                                   check_close(got[j], want[j], what=f"mla_cache(...)[{j}], "
                                               f"{part}", atol=atol, rtol=rtol,
                                               mistakes=lambda: {k: v[j] for k, v in
                                                                 wrong().items()})),
                    drawn=drawn)


@pytest.mark.points(3)
@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_mla_attention_random(student, dtype):
    """mla_attention's values and dtype, with and without positions and the mask"""
    atol, rtol = _tol(dtype)
    for i, (args, h, pos, text), drawn in cases("mla-attention", dtype, N_CASES,
                                                positions=lambda i: i % 2 == 1):
        kwargs = {"causal": i % 3 != 2 if drawn else True}
        if pos is not None:
            kwargs["positions"] = pos
        on_case(f"{text}, causal={kwargs['causal']}", lambda: check_attention(
            student, args, h, what="mla_attention", atol=atol, rtol=rtol, lazy=True,
            **kwargs), drawn=drawn)


@pytest.mark.points(3)
@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_mla_decode_every_length(student, dtype):
    """mla_decode equals the explicit form's last row (values, dtype) for every cache length"""
    atol, rtol = _tol(dtype)
    for _, case, drawn in cases("mla-decode", dtype, 2, max_s=24):
        (x, w_q, w_dkv, w_uk, w_uv, w_kr, w_o), h, _, text = case
        text = text.replace(f"S={x.shape[1]}, ", f"{x.shape[1]} tokens in all, ")
        full = ref.attention(x, w_q, w_dkv, w_uk, w_uv, w_kr, w_o, h)       # (B, S, d)
        c_kv, k_rope = ref.cache(x, w_dkv, w_kr)
        c_kv, k_rope = c_kv.to(x.dtype), k_rope.to(x.dtype)
        for s in range(1, x.shape[1] + 1):
            args = (x[:, s - 1:s], c_kv[:, :s].contiguous(), k_rope[:, :s].contiguous(), w_q,
                    w_uk, w_uv, w_o, h)
            got = student.mla_decode(*args)
            on_case(text, lambda: (check_dtype(got, x.dtype, "mla_decode"), check_close(
                got, full[:, s - 1:s], what=f"mla_decode with a cache of S={s} against row "
                f"{s - 1} of the explicit form", atol=atol, rtol=rtol,
                mistakes=lambda: ref.mistakes_of(ref.decode, DECODE_MISTAKES, *args))),
                drawn=drawn)


@pytest.mark.points(3)
@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_token_by_token_reproduces_attention(student, dtype):
    """decoding token by token with a growing cache (your mla_cache, your mla_decode) reproduces mla_attention"""
    atol, rtol = _tol(dtype)
    for _, (args, h, pos, text), drawn in cases("mla-loop", dtype, 2, max_s=20,
                                                positions=lambda i: i == 1):
        x, w_q, w_dkv, w_uk, w_uv, w_kr, w_o = args
        got = student.probe("ex08_mla.decode_loop", x, w_q, w_dkv, w_uk, w_uv, w_kr, w_o, h, pos)
        if isinstance(got, dict):
            raise Feedback(f"decoding token by token ({text}): {got.get('bad_result')}")
        kwargs = {} if pos is None else {"positions": pos}
        on_case(text + (", positions with gaps" if pos is not None else ""), lambda: check_close(
            got, ref.attention(*args, h, **kwargs),
            what="token-by-token decode (mla_cache of each new token appended to the cache, "
                 "then mla_decode at its position)",
            atol=atol, rtol=rtol, mistakes=lambda: ref.mistakes_of(
                ref.attention, ATTENTION_MISTAKES, *args, h, **kwargs)), drawn=drawn)


@pytest.mark.points(1)
def test_mla_decode_explicit_position(student):
    """mla_decode at a given position rotates the query there (the cache is as given)"""
    x, w_q, w_dkv, w_uk, w_uv, w_kr, w_o = mla_inputs(
        fixed_seed("mla-explicit"), 2, 9, 16, 4, 12, 6, 8, 10)
    pos = torch.tensor([3, 5, 6, 10, 11, 15, 20, 21, 30])
    c_kv, k_rope = ref.cache(x, w_dkv, w_kr, positions=pos)
    args = (x[:, -1:], c_kv, k_rope, w_q, w_uk, w_uv, w_o, 4)
    check_decode(student, *args, position=30, lazy=True,
                 what="mla_decode(x_t, c_kv, k_rope, ..., position=30)", atol=ATOL_LONG,
                 rtol=RTOL_LONG)
    check_close(student.mla_decode(*args, position=30),
                ref.attention(x, w_q, w_dkv, w_uk, w_uv, w_kr, w_o, 4, positions=pos)[:, -1:],
                what="mla_decode at position 30 against the explicit form's last row",
                atol=ATOL_LONG, rtol=RTOL_LONG)


@pytest.mark.points(1)
def test_causality(student):
    """mla_attention: changing later tokens never changes earlier outputs"""
    x, *w = mla_inputs(fixed_seed("mla-causal"), 1, 12, 16, 2, 10, 4, 6, 6)
    y = x.clone()
    y[:, 7:] = torch.randn(1, 5, 16, dtype=torch.float64, generator=torch.Generator()
                           .manual_seed(fixed_seed("mla-causal-later")))
    a = student.mla_attention(x, *w, 2)
    b = student.mla_attention(y, *w, 2)
    check_close(b[:, :7], a[:, :7], what="mla_attention's first 7 outputs after changing "
                "tokens 7..11", atol=ATOL_LONG, rtol=RTOL_LONG,
                hint="a query must not see later keys: apply the causal mask")
    check_responds(a, student.mla_attention(-x, *w, 2), what="mla_attention's output",
                   changed="x became -x")


@pytest.mark.points(2)
def test_relative_positions(student):
    """mla_attention: shifting every position changes nothing"""
    args = mla_inputs(fixed_seed("mla-shift"), 2, 10, 16, 3, 8, 6, 6, 4)
    pos = torch.tensor([0, 1, 2, 4, 7, 8, 9, 13, 14, 20])
    base = student.mla_attention(*args, 3, positions=pos)
    check_responds(base, student.mla_attention(-args[0], *args[1:], 3, positions=pos),
                   what="mla_attention's output", changed="x became -x")
    for shift in (5, 1000):
        shifted = student.mla_attention(*args, 3, positions=pos + shift)
        wrong = ref.attention(*args, 3, positions=pos + shift, mistake="rope_on_latent")
        try:
            check_close(shifted, base, what=f"mla_attention with every position shifted by "
                        f"{shift}, against itself unshifted", atol=ATOL_LONG, rtol=RTOL_LONG)
        except Feedback as exc:
            named = ""
            right = ref.attention(*args, 3, positions=pos + shift)
            if fits(np.asarray(shifted, dtype=np.float64), wrong, right, ATOL_LONG, RTOL_LONG):
                named = "\n" + looks_like(ref.MISTAKES['rope_on_latent'])
            raise Feedback(f"{exc}\nRoPE makes q . k depend on positions only through "
                           f"their difference, and the latent carries no position.{named}") \
                from None


# Advice, worth nothing: the curriculum asks ex08 for no ValueError (unlike
# ex03), so a submission written against the contract alone must not lose
# points here; the docstring's request still gets its feedback.
@pytest.mark.points(0)
@pytest.mark.parametrize("problem", ["w_q_rows", "w_o_cols", "odd_d_rope", "w_uk_cols"])
def test_value_errors(student, problem):
    """mla_attention rejects weights whose shapes do not fit (advice: 0 points)"""
    x, w_q, w_dkv, w_uk, w_uv, w_kr, w_o = mla_inputs(
        fixed_seed("mla-errors"), 1, 4, 12, 2, 8, 4, 6, 6)
    g = torch.Generator().manual_seed(fixed_seed("mla-errors-w"))
    if problem == "w_q_rows":
        w_q, what = torch.randn(2 * 6, 12, generator=g, dtype=torch.float64), \
            "w_q with h*d_nope rows (no RoPE part)"
    elif problem == "w_o_cols":
        w_o, what = torch.randn(12, 2 * 5, generator=g, dtype=torch.float64), \
            "w_o with 10 columns where h*d_v = 12"
    elif problem == "odd_d_rope":
        w_kr, what = torch.randn(3, 12, generator=g, dtype=torch.float64), "d_rope = 3"
        w_q = torch.randn(2 * 9, 12, generator=g, dtype=torch.float64)
    else:
        w_uk, what = torch.randn(12, 7, generator=g, dtype=torch.float64), \
            "w_uk with 7 columns where d_c = 8"
    expect_raises(lambda: student.mla_attention(x, w_q, w_dkv, w_uk, w_uv, w_kr, w_o, 2),
                  "ValueError", what=f"mla_attention with {what}")


@pytest.mark.points(1)
def test_mla_cache_bytes_hidden(student):
    """mla_cache_bytes on other models, batches and precisions"""
    with every_case() as case:
        for args in [(61, 512, 64, 4096, 1, 2), (27, 512, 64, 32768, 4, 2), (2, 8, 2, 7, 3, 4),
                     (60, 512, 64, 1, 1, 1)]:
            with case:
                check_equal(student.mla_cache_bytes(*args), ref.cache_bytes(*args),
                            what=f"mla_cache_bytes{args}",
                            mistakes=lambda: ref.mistakes_of(ref.cache_bytes, CACHE_BYTES_MISTAKES,
                                                             *args))
    check_equal(student.mla_cache_bytes(61, 512, 64, 4096), ref.cache_bytes(61, 512, 64, 4096),
                what="mla_cache_bytes(61, 512, 64, 4096) with default batch and bytes")


@pytest.mark.points(1)
def test_mla_cache_saving_hidden(student):
    """mla_cache_saving for MHA, GQA and MQA caches of the same model"""
    with every_case() as case:
        for args in [(128, 128, 64, 128, 512), (8, 128, 64, 128, 512), (1, 128, 64, 128, 512),
                     (16, 64, 32, 64, 256)]:
            with case:
                check_close(float(student.mla_cache_saving(*args)), ref.cache_saving(*args),
                            what=f"mla_cache_saving{args}", atol=0, rtol=1e-9,
                            mistakes=lambda: ref.mistakes_of(ref.cache_saving,
                                                             SAVING_MISTAKES, *args))


@pytest.mark.points(2)
def test_mla_decode_intensity_hidden(student):
    """mla_decode_intensity on hidden heads, lengths, batches and widths"""
    with every_case() as case:
        for args in [(128, 4096, 512, 64, 1, 2), (16, 100, 512, 64, 4, 2), (8, 1, 64, 16, 1, 4),
                     (128, 131072, 512, 64, 2, 1), (32, 2048, 256, 32, 1, 2)]:
            with case:
                check_close(student.mla_decode_intensity(*args), ref.decode_intensity(*args),
                            what=f"mla_decode_intensity{args}", atol=0, rtol=1e-9,
                            mistakes=lambda: ref.mistakes_of(
                                ref.decode_intensity,
                                INTENSITY_MISTAKES + ["bytes_per_elem_ignored"], *args))


TRACED = [dict(batch=1, n_heads=16, d=32, d_c=48, d_rope=4, d_nope=20, d_v=12),
          dict(batch=3, n_heads=4, d=40, d_c=32, d_rope=16, d_nope=28, d_v=36)]


@pytest.mark.points(2)
@pytest.mark.parametrize("shape", TRACED, ids=["h16", "h4-b3"])
@pytest.mark.timeout_s(120)
def test_mla_decode_traced_hidden(student, shape):
    """mla_decode on hidden shapes: no per-head K/V of the cached tokens, counted work per token"""
    traces = student.probe("ex08_mla.trace_decode", shape["batch"], shape["n_heads"], [200, 456],
                           shape["d"], shape["d_c"], shape["d_rope"], shape["d_nope"],
                           shape["d_v"], "float32", 3)
    ideal = ref.decode_core_per_token(shape["n_heads"], shape["d_c"], shape["d_rope"],
                                      shape["batch"], 4)
    rebuilt = ref.rebuilt_kv_per_token(shape["n_heads"], shape["d_c"], shape["d_nope"],
                                       shape["d_v"], shape["batch"], 4)
    mla_trace.judge_decode(traces, ideal=ideal, rebuilt=rebuilt,
                           names={k: ref.MISTAKES[k] for k in ("cache_rebuilt_kv",
                                                                "latent_per_head")}, **shape)
