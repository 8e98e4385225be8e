"""Exercise H (ex08_mla): the reference gets full marks within the time budget,
the stub gets zero, an independent solution gets full marks, and the judge of
the traced decode tells an absorbed decode from ones that rebuild or copy."""
from __future__ import annotations

import importlib.util
import re
import sys
import textwrap
import types

import pytest
import torch

from grader.feedback import Feedback
from grader.reference.secret import mla as ref
from grader.reference import mla_trace
from grader.sandbox.runtime.probes import ex08_mla as probe
from tests.conftest import (EXERCISES_DIR, SOLUTIONS, copy_solutions, failures, grade_dir,
                            graded_stubs)

EX = "ex08_mla"
# Grading the reference's ex08 hidden suite (public + hidden tests, worker
# start and the machine's peaks included) on the 2-core machine took 4.2 s
# quiet, 11.6 s at a load average of 13 and 14.1 s at 41: a benchmark figure,
# printed with -s, never asserted.

def _load(name, path):
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="module")
def solution():
    return _load("_sol_ex08_mla", SOLUTIONS / f"{EX}.py")


# -- the reference agrees with the solution, and its mistakes differ -------------

def _inputs(seed=0, b=2, s=9, d=16, h=3, d_c=10, d_rope=6, d_nope=5, d_v=7):
    g = torch.Generator().manual_seed(seed)
    w = lambda r, c: torch.randn(r, c, generator=g, dtype=torch.float64) / c ** 0.5  # noqa
    return (torch.randn(b, s, d, generator=g, dtype=torch.float64), w(h * (d_nope + d_rope), d),
            w(d_c, d), w(h * d_nope, d_c), w(h * d_v, d_c), w(d_rope, d), w(d, h * d_v)), h


def test_reference_matches_the_solution_and_each_mistake_differs(solution):
    args, h = _inputs()
    want = solution.mla_attention(*args, h)
    torch.testing.assert_close(ref.attention(*args, h), want, atol=1e-12, rtol=1e-10)
    x, w_q, w_dkv, w_uk, w_uv, w_kr, w_o = args
    c, kr = ref.cache(x, w_dkv, w_kr)
    torch.testing.assert_close(ref.decode(x[:, -1:], c, kr, w_q, w_uk, w_uv, w_o, h),
                               want[:, -1:], atol=1e-12, rtol=1e-10)
    for name in ("rope_on_latent", "scale_d_c", "scale_d_nope", "no_scale", "absorb_transposed",
                 "rope_positions_unused"):
        wrong = ref.attention(*args, h, mistake=name)
        assert not torch.allclose(wrong, want, atol=1e-6), name
    for name in ("scale_d_c", "absorb_transposed", "top_left_mask"):
        wrong = ref.decode(x[:, -1:], c, kr, w_q, w_uk, w_uv, w_o, h, mistake=name)
        assert not torch.allclose(wrong, want[:, -1:], atol=1e-6), name


def test_formulas_and_deepseek_numbers(solution):
    assert solution.DEEPSEEK_V3_MLA_BYTES_PER_TOKEN == ref.cache_bytes(61, 512, 64, 1) == 70272
    assert round(solution.DEEPSEEK_V3_MHA_OVER_MLA, 1) == 71.1
    for args in [(128, 4096, 512, 64), (8, 1, 64, 16, 2, 4)]:
        assert solution.mla_decode_intensity(*args) == pytest.approx(
            ref.decode_intensity(*args), rel=1e-12)
    # GQA decode stays near the group size; MLA's grows with the heads.
    assert ref.kv_decode_intensity(128, 8, 32768, 192, 128) < 17
    assert ref.decode_intensity(128, 32768, 512, 64) > 200


# -- the judge of a traced decode -------------------------------------------------

SHAPE = dict(batch=2, n_heads=8, d=48, d_c=64, d_rope=8, d_nope=24, d_v=40)
NAMES = {k: ref.MISTAKES[k] for k in ("cache_rebuilt_kv", "latent_per_head")}


def _judge(module, shape=SHAPE, lens=(64, 128)):
    t = shape
    traces = probe.trace_decode(module, t["batch"], t["n_heads"], list(lens), t["d"], t["d_c"],
                                t["d_rope"], t["d_nope"], t["d_v"])
    return mla_trace.judge_decode(
        traces, ideal=ref.decode_core_per_token(t["n_heads"], t["d_c"], t["d_rope"], t["batch"], 4),
        rebuilt=ref.rebuilt_kv_per_token(t["n_heads"], t["d_c"], t["d_nope"], t["d_v"],
                                         t["batch"], 4), names=NAMES, **t)


def _variant(solution, body):
    """The solution with ``mla_decode`` replaced by ``body`` (same helpers)."""
    mod = types.ModuleType("_variant")
    mod.__dict__.update(vars(solution))
    exec(textwrap.dedent(body), mod.__dict__)
    return mod


def test_judge_passes_the_absorbed_decode(solution):
    result = _judge(solution)
    assert result["flops"] == ref.decode_core_per_token(8, 64, 8, 2, 4)["flops"]
    text = mla_trace.gap_text(result, ref.decode_core_per_token(8, 64, 8, 2, 4),
                              bytes_per_elem=4)
    assert "second time" in text and "fused" in text


REBUILT_PER_HEAD_LOOP = '''
def mla_decode(x_t, c_kv, k_rope, w_q, w_uk, w_uv, w_o, n_heads, *, position=None,
               rope_base=10000.0):
    # No (B, h, S, .) tensor: one head at a time, but K/V rebuilt for every head.
    b, s, d_c = c_kv.shape
    d_rope = k_rope.shape[-1]
    d_nope, d_v = _widths(n_heads, w_q, w_uk, w_uv, w_o, d_c, d_rope)
    pos = torch.tensor([s - 1])
    q_nope, q_rope = _queries(x_t, w_q, n_heads, d_nope, d_rope, pos, rope_base)
    outs = []
    for i in range(n_heads):
        k = torch.cat([c_kv @ w_uk[i * d_nope:(i + 1) * d_nope].T, k_rope], -1)  # (B, S, .)
        v = c_kv @ w_uv[i * d_v:(i + 1) * d_v].T
        q = torch.cat([q_nope[:, i], q_rope[:, i]], -1)                         # (B, 1, .)
        w = torch.softmax(q @ k.transpose(1, 2) / math.sqrt(d_nope + d_rope), -1)
        outs.append(w @ v)
    return torch.cat(outs, -1) @ w_o.T
'''

LATENT_COPIED_PER_HEAD = '''
def mla_decode(x_t, c_kv, k_rope, w_q, w_uk, w_uv, w_o, n_heads, *, position=None,
               rope_base=10000.0):
    b, s, d_c = c_kv.shape
    d_rope = k_rope.shape[-1]
    d_nope, d_v = _widths(n_heads, w_q, w_uk, w_uv, w_o, d_c, d_rope)
    pos = torch.tensor([s - 1])
    q_nope, q_rope = _queries(x_t, w_q, n_heads, d_nope, d_rope, pos, rope_base)
    q_lat = q_nope @ w_uk.view(n_heads, d_nope, d_c)                 # (B, h, 1, d_c)
    c = c_kv[:, None].expand(b, n_heads, s, d_c).contiguous()       # a copy per head
    kr = k_rope[:, None]
    scores = (q_lat @ c.transpose(-1, -2) + q_rope @ kr.transpose(-1, -2)) \\
        / math.sqrt(d_nope + d_rope)
    o = torch.softmax(scores, -1) @ c                                # (B, h, 1, d_c)
    out = o @ w_uv.view(n_heads, d_v, d_c).transpose(1, 2)          # (B, h, 1, d_v)
    return out.transpose(1, 2).reshape(b, 1, n_heads * d_v) @ w_o.T
'''


def test_judge_names_k_and_v_rebuilt_one_head_at_a_time(solution):
    mod = _variant(solution, REBUILT_PER_HEAD_LOOP)
    args, h = _inputs()
    x, w_q, w_dkv, w_uk, w_uv, w_kr, w_o = args
    c, kr = solution.mla_cache(x, w_dkv, w_kr)
    torch.testing.assert_close(mod.mla_decode(x[:, -1:], c, kr, w_q, w_uk, w_uv, w_o, h),
                               solution.mla_attention(*args, h)[:, -1:])  # right answer...
    with pytest.raises(Feedback, match="instead of attending to the latent"):
        _judge(mod)                                                          # ...wrong work


def test_judge_names_a_latent_copied_per_head(solution):
    mod = _variant(solution, LATENT_COPIED_PER_HEAD)
    with pytest.raises(Feedback, match="latent copied for every head") as caught:
        _judge(mod)
    assert "per-head K" not in str(caught.value)


# -- what the trace knows: which input each tensor comes from ------------------------
# The solution's scores and weighted sum, and the same two steps written otherwise
# (replacing them in the solution's source, as a student's file would read).
CORE = """    scores = (q_lat @ c_kv.transpose(1, 2) + q_rope @ k_rope.transpose(1, 2)) \\
        / math.sqrt(d_nope + d_rope)                                      # (B, h, S)
    o_lat = torch.softmax(scores, dim=-1) @ c_kv                         # (B, h, d_c)
"""
# One latent for every head, broadcast by matmul over a (B, 1, d_c, S) operand: PyTorch
# copies it inside the matmul to run one bmm (the outside review's decode, verbatim).
BROADCAST = """    lat = c_kv.transpose(1, 2)[:, None]                                  # (B, 1, d_c, S)
    scores = ((q_lat[:, :, None, :] @ lat).squeeze(2) + (q_rope[:, :, None, :] @ k_rope.transpose(1, 2)[:, None]).squeeze(2)) / math.sqrt(d_nope + d_rope)
    o_lat = (torch.softmax(scores, dim=-1)[:, :, None, :] @ c_kv[:, None]).squeeze(2)
"""
EINSUM_BCS = """    scores = (torch.einsum("bhc,bcs->bhs", q_lat, c_kv.transpose(1, 2))
              + torch.einsum("bhr,brs->bhs", q_rope, k_rope.transpose(1, 2))) \\
        / math.sqrt(d_nope + d_rope)                                      # (B, h, S)
    o_lat = torch.einsum("bhs,bcs->bhc", torch.softmax(scores, dim=-1), c_kv.transpose(1, 2))
"""
EINSUM_BSC = """    scores = (torch.einsum("bhc,bsc->bhs", q_lat, c_kv)
              + torch.einsum("bhr,bsr->bhs", q_rope, k_rope)) / math.sqrt(d_nope + d_rope)
    o_lat = torch.einsum("bhs,bsc->bhc", torch.softmax(scores, dim=-1), c_kv)
"""
# An expand is a view (stride 0 over the heads); einsum copies it itself.
EINSUM_EXPANDED = """    lat = c_kv[:, None].expand(-1, n_heads, -1, -1)                     # a view
    scores = (torch.einsum("bhc,bhsc->bhs", q_lat, lat)
              + torch.einsum("bhr,bsr->bhs", q_rope, k_rope)) / math.sqrt(d_nope + d_rope)
    o_lat = torch.einsum("bhs,bhsc->bhc", torch.softmax(scores, dim=-1), lat)
"""
SHARED_LATENT = {"broadcast": BROADCAST, "einsum_bcs": EINSUM_BCS, "einsum_bsc": EINSUM_BSC,
                 "einsum_expanded": EINSUM_EXPANDED}

_PER_HEAD_SCORES = """    scores = ((q_lat[:, :, None, :] @ lat.transpose(-1, -2)).squeeze(2)
              + q_rope @ k_rope.transpose(1, 2)) / math.sqrt(d_nope + d_rope)
    o_lat = (torch.softmax(scores, dim=-1)[:, :, None, :] @ lat).squeeze(2)
"""
COPIED_PER_HEAD = {
    "expand_contiguous": "    lat = c_kv[:, None].expand(-1, n_heads, -1, -1).contiguous()\n"
                         + _PER_HEAD_SCORES,
    "repeat": "    lat = c_kv[:, None].repeat(1, n_heads, 1, 1)\n" + _PER_HEAD_SCORES,
    "repeat_interleave": "    lat = c_kv.repeat_interleave(n_heads, 0).view(b, n_heads, s, d_c)\n"
                         + _PER_HEAD_SCORES,
}
# No copy at all, but every head reads the whole latent again.
HEAD_LOOP = """    o_lat = torch.cat([torch.softmax((q_lat[:, i:i + 1] @ c_kv.transpose(1, 2)
                                      + q_rope[:, i:i + 1] @ k_rope.transpose(1, 2))
                                     / math.sqrt(d_nope + d_rope), dim=-1) @ c_kv
                       for i in range(n_heads)], 1)                      # (B, h, d_c)
"""
# The hidden suite's shapes, and the public one at the cache length whose
# (B, h, d_c, S) copy ends in S = 256 = h * (d_nope + d_rope).
SHAPES = {"public-S256": (SHAPE, (256, 512)),
          "h16": (dict(batch=1, n_heads=16, d=32, d_c=48, d_rope=4, d_nope=20, d_v=12), (200, 456)),
          "h4-b3": (dict(batch=3, n_heads=4, d=40, d_c=32, d_rope=16, d_nope=28, d_v=36),
                    (200, 456))}


def _source(core: str) -> str:
    text = (SOLUTIONS / f"{EX}.py").read_text()
    assert text.count(CORE) == 1
    return text.replace(CORE, core)


def _module(core: str, name: str):
    mod = types.ModuleType(f"_ex08_{name}")
    exec(compile(_source(core), f"<ex08 {name}>", "exec"), mod.__dict__)
    return mod


def test_trace_knows_where_each_tensor_comes_from(solution):
    """The broadcast decode's copy is PyTorch's, inside one matmul, of c_kv alone, and
    the bmm reading it counts the latent once; a rebuilt K derives from c_kv and w_uk."""
    b, h, s = SHAPE["batch"], SHAPE["n_heads"], 64
    latent = b * s * SHAPE["d_c"] * 4
    args = [SHAPE[k] for k in ("d", "d_c", "d_rope", "d_nope", "d_v")]
    ops = probe.trace_decode(_module(BROADCAST, "broadcast"), b, h, [s], *args)[str(s)]["ops"]
    copies = [o for o in ops if o["library_copy"] and not o["aliases"]]
    assert copies and all(o["inside"] == "matmul" for o in copies)
    big = [o for o in copies if o["out_numel"][0] == h * latent // 4]
    assert len(big) == 2 and all(o["src"] == ["c_kv"] for o in big)     # scores, weighted sum
    reads = [n for o in ops if o["op"] == "bmm.default" for src, n in o["reads"]
             if src == ["c_kv"]]
    assert reads == [latent, latent]
    ops = probe.trace_decode(_variant(solution, REBUILT_PER_HEAD_LOOP), b, h, [s],
                             *args)[str(s)]["ops"]
    assert ["c_kv", "w_uk"] in [o["src"] for o in ops if o["op"] == "mm.default"]
    assert not any(o["library_copy"] for o in ops)


@pytest.mark.parametrize("where", SHAPES)
@pytest.mark.parametrize("style", SHARED_LATENT)
def test_judge_passes_one_latent_shared_by_every_head(style, where):
    """However the shared latent is written (broadcast matmul, einsum), the trace
    finds no per-head K/V and reads the latent as often as the solution does."""
    shape, lens = SHAPES[where]
    mod = _module(SHARED_LATENT[style], style)
    result = _judge(mod, shape, lens)
    assert result["flops"] == ref.decode_core_per_token(shape["n_heads"], shape["d_c"],
                                                        shape["d_rope"], shape["batch"], 4)["flops"]


@pytest.mark.parametrize("style", COPIED_PER_HEAD)
def test_judge_names_a_copy_per_head_the_student_made(style):
    for shape, lens in (SHAPES["public-S256"], SHAPES["h4-b3"]):
        with pytest.raises(Feedback, match="the latent copied for every head") as caught:
            _judge(_module(COPIED_PER_HEAD[style], style), shape, lens)
        assert "per-head K" not in str(caught.value)
        assert ref.MISTAKES["latent_per_head"] in str(caught.value)


def test_judge_names_a_loop_over_heads_that_reads_the_latent_each_time():
    for shape, lens in SHAPES.values():
        with pytest.raises(Feedback, match="read from the cache") as caught:
            _judge(_module(HEAD_LOOP, "head_loop"), shape, lens)
        assert ref.MISTAKES["latent_per_head"] in str(caught.value)


def test_judge_names_a_rebuilt_v_from_its_weight():
    core = """    scores = (q_lat @ c_kv.transpose(1, 2) + q_rope @ k_rope.transpose(1, 2)) \\
        / math.sqrt(d_nope + d_rope)                                      # (B, h, S)
    v = (c_kv @ w_uv.T).view(b, s, n_heads, d_v).transpose(1, 2)         # (B, h, S, dv)
    return ((torch.softmax(scores, dim=-1)[:, :, None] @ v)[:, :, 0]
            .reshape(b, 1, n_heads * d_v) @ w_o.T)
"""
    with pytest.raises(Feedback, match="c_kv through w_uv.*per-head V") as caught:
        _judge(_module(core, "rebuilt_v"))
    assert ref.MISTAKES["cache_rebuilt_kv"] in str(caught.value)


# -- grading -------------------------------------------------------------------------

def test_stub_grades_to_zero_without_grader_problems(tmp_path_factory):
    # H's part of the one grading of every stub (tests/conftest.py).
    report = graded_stubs(tmp_path_factory)
    assert not report.errors, report.errors
    got, total = report.exercise_scores()[EX]
    assert got == 0 and total > 0
    assert failures(report, EX) and all(
        "NotImplementedError" in t.output or "not implemented" in t.output.lower()
        for t in failures(report, EX)), [t.output for t in failures(report, EX)][:3]


@pytest.mark.slow
def test_reference_full_marks(tmp_path):
    sub = copy_solutions(tmp_path / "ref", [EX])
    report = grade_dir(sub, [EX])
    assert not report.errors, report.errors
    bad = [(t.full_name, t.status, t.output) for t in report.tests if t.status != "passed"]
    assert not bad, bad
    assert report.score == report.max_score > 0
    # Its time is a benchmark (about 16 s quiet on 2 cores), never a test:
    # a busy machine takes longer and the grade is the same.
    print(f"\nex08 hidden suite on the reference: {report.seconds:.1f} s")


# Written against the contract in another style (one matmul over [c_kv, k_rope],
# einsum everywhere, positions as lists): full marks too.
ALT = '''
import math
import torch


def _rot(x, pos, base):
    h = x.shape[-1] // 2
    inv = base ** (-torch.arange(0, h, dtype=torch.float64) * 2 / x.shape[-1])
    a = torch.as_tensor(pos, dtype=torch.float64)[:, None] * inv
    c, s = torch.cos(a).to(x.dtype), torch.sin(a).to(x.dtype)
    return torch.cat([x[..., :h] * c - x[..., h:] * s, x[..., h:] * c + x[..., :h] * s], -1)


def _check(n_heads, w_q, w_uk, w_uv, w_o, d_c, d_r):
    if d_r % 2 or w_uk.shape[0] % n_heads or w_uv.shape[0] % n_heads:
        raise ValueError("bad shapes")
    dn, dv = w_uk.shape[0] // n_heads, w_uv.shape[0] // n_heads
    if w_uk.shape[1] != d_c or w_uv.shape[1] != d_c or w_q.shape[0] != n_heads * (dn + d_r) \\
            or w_o.shape[1] != n_heads * dv:
        raise ValueError("bad shapes")
    return dn, dv


def mla_cache(x, w_dkv, w_kr, *, positions=None, rope_base=10000.0):
    if w_kr.shape[0] % 2:
        raise ValueError("odd d_rope")
    pos = list(range(x.shape[1])) if positions is None else positions
    return torch.einsum("bsd,cd->bsc", x, w_dkv), _rot(torch.einsum("bsd,rd->bsr", x, w_kr),
                                                       pos, rope_base)


def mla_attention(x, w_q, w_dkv, w_uk, w_uv, w_kr, w_o, n_heads, *, causal=True,
                  positions=None, rope_base=10000.0):
    B, S, _ = x.shape
    d_c, d_r = w_dkv.shape[0], w_kr.shape[0]
    dn, dv = _check(n_heads, w_q, w_uk, w_uv, w_o, d_c, d_r)
    pos = list(range(S)) if positions is None else positions
    c, kr = mla_cache(x, w_dkv, w_kr, positions=pos, rope_base=rope_base)
    q = torch.einsum("bsd,qd->bsq", x, w_q).reshape(B, S, n_heads, dn + d_r)
    qn, qr = q[..., :dn], _rot(q[..., dn:].transpose(1, 2), pos, rope_base)   # (B, h, S, dr)
    kn = torch.einsum("bsc,hnc->bhsn", c, w_uk.reshape(n_heads, dn, d_c))
    v = torch.einsum("bsc,hvc->bhsv", c, w_uv.reshape(n_heads, dv, d_c))
    s = (torch.einsum("bqhn,bhkn->bhqk", qn, kn) + torch.einsum("bhqr,bkr->bhqk", qr, kr))
    s = s / math.sqrt(dn + d_r)
    if causal:
        s = s.masked_fill(torch.triu(torch.ones(S, S, dtype=torch.bool), 1), float("-inf"))
    o = torch.einsum("bhqk,bhkv->bqhv", s.softmax(-1), v).reshape(B, S, n_heads * dv)
    return o @ w_o.T


def mla_decode(x_t, c_kv, k_rope, w_q, w_uk, w_uv, w_o, n_heads, *, position=None,
               rope_base=10000.0):
    B, S, d_c = c_kv.shape
    d_r = k_rope.shape[-1]
    dn, dv = _check(n_heads, w_q, w_uk, w_uv, w_o, d_c, d_r)
    p = [S - 1 if position is None else position]
    q = (x_t[:, 0] @ w_q.T).reshape(B, n_heads, dn + d_r)
    qr = _rot(q[..., dn:].unsqueeze(-2), p, rope_base).squeeze(-2)             # (B, h, dr)
    ql = torch.einsum("bhn,hnc->bhc", q[..., :dn], w_uk.reshape(n_heads, dn, d_c))
    cache = torch.cat([c_kv, k_rope], -1)                                      # (B, S, dc+dr)
    s = torch.bmm(torch.cat([ql, qr], -1), cache.transpose(1, 2)) / math.sqrt(dn + d_r)
    ol = torch.bmm(s.softmax(-1), c_kv)                                        # (B, h, dc)
    o = torch.einsum("bhc,hvc->bhv", ol, w_uv.reshape(n_heads, dv, d_c))
    return (o.reshape(B, n_heads * dv) @ w_o.T)[:, None]


def mla_cache_bytes(n_layers, d_c, d_rope, seq_len, batch=1, bytes_per_elem=2):
    return int(bytes_per_elem * batch * seq_len * n_layers * (d_c + d_rope))


def mla_cache_saving(n_kv_heads, d_nope, d_rope, d_v, d_c):
    return float(n_kv_heads * (d_nope + d_rope + d_v)) / (d_c + d_rope)


DEEPSEEK_V3_MLA_BYTES_PER_TOKEN = mla_cache_bytes(61, 512, 64, 1)
DEEPSEEK_V3_MHA_OVER_MLA = mla_cache_saving(128, 128, 64, 128, 512)


def mla_decode_intensity(n_heads, seq_len, d_c, d_rope, batch=1, bytes_per_elem=2):
    scores = 2 * (d_c + d_rope) * n_heads * seq_len
    weighted = 2 * d_c * n_heads * seq_len
    moved = seq_len * (d_c + d_rope) + n_heads * (d_c + d_rope) + n_heads * d_c
    return (scores + weighted) / (moved * bytes_per_elem)


def plot_mla_heads(x, w_q, w_dkv, w_uk, w_kr, n_heads, path, *, positions=None,
                   rope_base=10000.0):
    import matplotlib
    matplotlib.use("Agg")
    from matplotlib.figure import Figure
    S = x.shape[0]
    d_c, d_r = w_dkv.shape[0], w_kr.shape[0]
    dn = w_uk.shape[0] // n_heads
    pos = list(range(S)) if positions is None else positions
    c, kr = mla_cache(x[None], w_dkv, w_kr, positions=pos, rope_base=rope_base)
    q = torch.einsum("sd,qd->sq", x, w_q).reshape(S, n_heads, dn + d_r)
    qr = _rot(q[..., dn:].transpose(0, 1), pos, rope_base)                     # (h, S, dr)
    kn = torch.einsum("sc,hnc->hsn", c[0], w_uk.reshape(n_heads, dn, d_c))
    s = torch.einsum("qhn,hkn->hqk", q[..., :dn], kn) + torch.einsum("hqr,kr->hqk", qr, kr[0])
    s = (s / math.sqrt(dn + d_r)).masked_fill(
        torch.triu(torch.ones(S, S, dtype=torch.bool), 1), float("-inf"))
    weights = s.softmax(-1)
    fig = Figure(figsize=(3 * n_heads, 3))
    for i, ax in enumerate(fig.subplots(1, n_heads, squeeze=False)[0]):
        ax.pcolormesh(weights[i].detach().double().numpy())
        ax.invert_yaxis()
        ax.set_title(f"head {i}")
        ax.set_xlabel("key")
        ax.set_ylabel("query")
    fig.savefig(path)
'''


TRACED_TESTS = ("test_mla_decode_traced", "test_mla_decode_traced_hidden")


@pytest.mark.slow
@pytest.mark.parametrize("style, seed", [
    ("broadcast", 11),     # the default run's; the others are the corpus tier
    pytest.param("broadcast", 12, marks=pytest.mark.corpus),
    pytest.param("einsum_bcs", 13, marks=pytest.mark.corpus),
    pytest.param("einsum_bsc", 14, marks=pytest.mark.corpus)])
def test_one_latent_shared_by_every_head_gets_full_marks(tmp_path, style, seed):
    sub = tmp_path / style
    sub.mkdir()
    (sub / f"{EX}.py").write_text(_source(SHARED_LATENT[style]))
    report = grade_dir(sub, [EX], seed=seed)
    assert not report.errors, report.errors
    bad = [(t.full_name, t.output) for t in report.tests if t.status != "passed"]
    assert not bad, bad
    assert report.score == report.max_score > 0


@pytest.mark.slow
def test_a_latent_copied_per_head_loses_the_trace_points_only(tmp_path):
    sub = tmp_path / "copied"
    sub.mkdir()
    (sub / f"{EX}.py").write_text(_source(COPIED_PER_HEAD["expand_contiguous"]))
    report = grade_dir(sub, [EX], seed=15)
    assert not report.errors, report.errors
    failed = failures(report)
    assert failed and all(t.name.split("[")[0] in TRACED_TESTS for t in failed), \
        [t.name for t in failed]
    assert len(failed) == 3                                  # public + the two hidden shapes
    for t in failed:
        assert "the latent copied for every head" in t.output and "per-head K" not in t.output
    assert report.score == report.max_score - sum(t.max_score for t in failed)


@pytest.mark.slow
def test_independent_solution_gets_full_marks(tmp_path):
    sub = tmp_path / "alt"
    sub.mkdir()
    (sub / f"{EX}.py").write_text(ALT)
    report = grade_dir(sub, [EX])
    assert not report.errors, report.errors
    bad = [(t.full_name, t.output) for t in report.tests if t.status == "failed"]
    assert not bad, bad
    assert report.score == report.max_score > 0



@pytest.mark.slow
def test_notebook_self_check_with_the_reference(tmp_path):
    """The ex08 notebook, its tagged cell holding the solution, runs end to end."""
    import json
    import subprocess

    import nbformat

    from grader.notebooks import TAG_PREFIX, WRITEFILE, build_notebook
    from tests.conftest import REPO

    nb = build_notebook(EX, (EXERCISES_DIR / f"{EX}.py").read_text())
    assert "Absorbing the up-projections" in nb.cells[0].source and "H: multi-head latent attention" in \
        nb.cells[0].source
    for cell in nb.cells:
        if f"{TAG_PREFIX}{EX}" in cell.metadata.get("tags", []):
            cell.source = f"{WRITEFILE} {EX}.py\n" + (SOLUTIONS / f"{EX}.py").read_text()
    path = tmp_path / f"{EX}.ipynb"
    nbformat.write(nb, str(path))
    code = ("import json, sys; from pathlib import Path; from grader.notebooks import "
            "run_notebook; print(json.dumps(run_notebook(Path(sys.argv[1]), Path(sys.argv[2]))))")
    proc = subprocess.run([sys.executable, "-c", code, str(path), str(tmp_path)],
                          capture_output=True, text=True, cwd=REPO, timeout=600)
    assert proc.returncode == 0, proc.stderr
    table = json.loads(proc.stdout.strip().splitlines()[-1])[-1]
    assert re.search(rf"{EX}  (\d+)/\1\b", table) and "ridge point" in table
    assert all(row in table for row in ("MHA", "GQA-8", "MQA", "MLA", "S=32768"))
