"""ex07's references: exact attention with known mistakes, and a fast kernel.

Two things live here, written apart from ``solutions/``:

* ``reference(q, k, v, causal, sm_scale, mistake=...)``: exact attention in
  float64 (PyTorch einsum, end-aligned causal mask, GQA by
  ``repeat_interleave``), plus the wrong answers of the known mistakes for
  ``grader.feedback.check_close(mistakes=...)``; ``step_reference`` does the
  same for one online-softmax step.  These never need Triton.
* ``flash_attention``: the reference Triton kernel that a student's kernel
  is timed against on a GPU, autotuned, in two variants of one algorithm:
  tiles read through tensor descriptors (TMA on Hopper, chosen on CUDA
  capability 9+) or through pointers (other GPUs, the interpreter, and the
  fallback if descriptors fail).  Both run under the interpreter in the
  package's tests.  It is trusted code: the speed grade copies this
  file into a trusted worker of its own, never into a student's, and times
  it there beside the student's worker (``grader/reference/flash_speed.py``).
  So this module must import without the ``grader`` package (only lazily,
  inside the mistake helpers) and without Triton (``HAS_TRITON`` is False on
  macOS and Windows, where Triton publishes no wheels).

``TRITON_INTERPRET`` is read when this module is imported: under the
interpreter the kernel uses one small tile and no autotuning.
"""
from __future__ import annotations

import math
import os

import numpy as np
import torch

try:  # Triton publishes Linux wheels only.
    import triton
    import triton.language as tl
    HAS_TRITON = True
except ImportError:  # pragma: no cover - macOS / Windows
    triton = tl = None
    HAS_TRITON = False

NEEDS_TRITON = ("needs Triton, which is available on Linux only "
                "(pip install triton); ex07 is graded on Linux")
SUPPORTED_D_HEAD = (16, 32, 64, 128)
# 1/ln(2): exp(x) == exp2(x * LOG2E).  Host side only: folded into the
# kernels' qk_scale argument (a kernel may not read a plain Python global).
LOG2E = 1.4426950408889634

# Mistakes of ex07 beyond those of grader.reference.secret.attention.MISTAKES.
FLASH_MISTAKES = {
    "no_rescale": "the online softmax does not rescale the accumulator: when a tile raises "
                  "the row maximum from m to m_new, acc (and l) must be multiplied by "
                  "exp(m - m_new)",
    "nan_masked_tile": "a fully masked tile (or a row that may see no key) produced NaN "
                       "(-inf - -inf); shift by 0 while the row maximum is still -inf, and "
                       "give rows that see no key a zero output",
    "sm_scale_ignored": "the sm_scale argument was ignored (1/sqrt(d_head) was used instead)",
    "kv_tile": None,  # the same words as grader.reference.secret.attention's
    "no_rescale_l": "the online softmax rescales acc but not l: when a tile raises the row "
                    "maximum from m to m_new, the running sum l must be multiplied by "
                    "exp(m - m_new) too",
    "exp2_no_log2e": "the online softmax used exp2 (2**x) without multiplying by log2(e): "
                     "exp(x) == exp2(x * 1.4427)",
    "tile_local_cols": "the causal mask compared the queries' positions with tile-local key "
                       "indices (0..block_size-1) instead of the keys' absolute indices "
                       "(the tile's start + j)",
    "ragged_tail_dropped": "the last, shorter tile of keys was skipped: when S_k is not a "
                           "multiple of block_size, the last tile holds the S_k % block_size "
                           "keys that remain",
    "no_final_divide": "the output was never normalized: after the last tile, divide acc by "
                       "l (acc / l is the attention output; acc alone is a sum of "
                       "exp(score - m) * v)",
}
# Key-tile widths tried when naming the no-rescale mistake of a kernel whose
# tile size is unknown.
CANDIDATE_TILES = (16, 32, 64, 128)


def describe(name: str) -> str:
    """The feedback words for mistake ``name``."""
    from grader.reference.secret.attention import MISTAKES  # lazily: see the docstring
    return FLASH_MISTAKES.get(name) or MISTAKES[name]


def _t64(x) -> torch.Tensor:
    if isinstance(x, torch.Tensor):
        return x.detach().to(torch.float64)
    return torch.as_tensor(np.asarray(x), dtype=torch.float64)


# -- exact attention ---------------------------------------------------------
def allowed(s_q: int, s_k: int, causal: bool, mistake=None, device="cpu") -> torch.Tensor:
    """Boolean ``(s_q, s_k)``: may query ``i`` see key ``j``? (end-aligned)."""
    i = torch.arange(s_q, device=device)[:, None]
    j = torch.arange(s_k, device=device)[None, :]
    if not causal or mistake == "no_mask":
        return torch.ones(s_q, s_k, dtype=torch.bool, device=device)
    offset = 0 if mistake == "top_left_mask" else s_k - s_q
    if mistake == "diagonal_masked":
        return j < i + offset
    if mistake == "mask_wrong_triangle":
        return j >= i + offset
    return j <= i + offset


def _kv_heads(x: torch.Tensor, n_heads: int, mistake=None) -> torch.Tensor:
    """``(B, h_kv, S, d)`` -> ``(B, h, S, d)``: query head i reads KV head i // (h/h_kv)."""
    rep = n_heads // x.shape[1]
    if rep == 1:
        return x
    if mistake == "kv_tile":
        return x.repeat(1, rep, 1, 1)
    return torch.repeat_interleave(x, rep, dim=1)


def reference(q, k, v, causal: bool = True, sm_scale=None, mistake=None,
              device=None, chunk: int = 2048) -> torch.Tensor:
    """Exact attention in float64: ``q`` ``(B, h, S_q, d)``, ``k``/``v`` ``(B, h_kv, S_k, d)``.

    ``mistake`` reproduces one wrong answer (see ``FLASH_MISTAKES`` and
    ``grader.reference.secret.attention.MISTAKES``); ``no_rescale`` takes the tile
    width as ``mistake=("no_rescale", block_n)``.  ``device`` (default: the
    input's) and ``chunk`` (query rows at a time) keep long sequences within
    memory.  Returns a float64 tensor on the CPU.
    """
    if isinstance(mistake, tuple) and mistake[0] == "no_rescale":
        return _no_rescale(q, k, v, causal, sm_scale, mistake[1])
    dev = device or (q.device if isinstance(q, torch.Tensor) else "cpu")
    q, k, v = (_t64(x).to(dev) for x in (q, k, v))
    d_head, s_q, s_k = q.shape[-1], q.shape[-2], k.shape[-2]
    scale = 1.0 / math.sqrt(d_head) if sm_scale is None or mistake == "sm_scale_ignored" \
        else float(sm_scale)
    if mistake == "no_scale":
        scale = 1.0
    elif mistake == "scale_by_d":
        scale = 1.0 / d_head
    k, v = _kv_heads(k, q.shape[1], mistake), _kv_heads(v, q.shape[1], mistake)
    ok = allowed(s_q, s_k, causal, mistake, dev)                     # (S_q, S_k)
    out = torch.empty_like(q)                                        # (B, h, S_q, d)
    for r0 in range(0, s_q, chunk):
        r1 = min(r0 + chunk, s_q)
        s = torch.einsum("bhqd,bhkd->bhqk", q[:, :, r0:r1], k) * scale
        s = s.masked_fill(~ok[r0:r1], -math.inf)
        m = torch.amax(s, dim=-1, keepdim=True)
        m = torch.where(torch.isfinite(m), m, torch.zeros_like(m))
        e = torch.exp(s - m)
        den = e.sum(-1, keepdim=True)
        w = e / torch.where(den > 0, den, torch.ones_like(den))      # no key: weights 0
        if mistake == "nan_masked_tile":
            w = torch.where(den > 0, w, torch.full_like(w, math.nan))
        out[:, :, r0:r1] = torch.einsum("bhqk,bhkd->bhqd", w, v)
    return out.cpu()


def _no_rescale(q, k, v, causal, sm_scale, block_n: int) -> torch.Tensor:
    """The online softmax with key tiles of ``block_n`` that never rescales acc."""
    q, k, v = _t64(q).cpu(), _t64(k).cpu(), _t64(v).cpu()
    d_head, s_q, s_k = q.shape[-1], q.shape[-2], k.shape[-2]
    scale = 1.0 / math.sqrt(d_head) if sm_scale is None else float(sm_scale)
    k, v = _kv_heads(k, q.shape[1]), _kv_heads(v, q.shape[1])
    ok = allowed(s_q, s_k, causal)
    m = torch.full(q.shape[:-1], -math.inf, dtype=torch.float64)
    l = torch.zeros(q.shape[:-1], dtype=torch.float64)
    acc = torch.zeros_like(q)
    for j0 in range(0, s_k, block_n):
        j1 = min(j0 + block_n, s_k)
        s = torch.einsum("...qd,...kd->...qk", q, k[..., j0:j1, :]) * scale
        s = s.masked_fill(~ok[:, j0:j1], -math.inf)
        m_new = torch.maximum(m, s.amax(-1))
        shift = torch.where(torch.isinf(m_new), torch.zeros_like(m_new), m_new)
        p = torch.exp(s - shift[..., None])
        l = l * torch.exp(m - shift) + p.sum(-1)
        acc = acc + p @ v[..., j0:j1, :]               # the mistake: no exp(m - m_new)
        m = m_new
    return torch.where(l[..., None] > 0, acc / torch.where(l > 0, l, 1.0)[..., None], 0.0)


def flash_mistakes(q, k, v, causal: bool, sm_scale=None, names=None) -> dict:
    """``{description: wrong answer}`` for ``check_close(mistakes=...)``."""
    names = names or ["no_scale", "scale_by_d", "top_left_mask", "diagonal_masked",
                      "mask_wrong_triangle", "no_mask", "kv_tile", "nan_masked_tile",
                      "no_rescale"]
    out = {}
    for name in names:
        if name in ("top_left_mask", "diagonal_masked", "mask_wrong_triangle",
                    "no_mask") and not causal:
            continue
        if name == "kv_tile" and (q.shape[1] == k.shape[1] or k.shape[1] == 1):
            continue                           # tile == repeat_interleave here
        if name == "sm_scale_ignored" and sm_scale is None:
            continue
        if name == "no_rescale":
            for bn in CANDIDATE_TILES:
                if k.shape[-2] > bn:
                    out[f"{describe(name)} (seen with tiles of {bn} keys)"] = \
                        reference(q, k, v, causal, sm_scale, ("no_rescale", bn))
            continue
        out[describe(name)] = reference(q, k, v, causal, sm_scale, name)
    return out


# -- one online-softmax step ---------------------------------------------------
def step_reference(m, l, acc, scores, v, mistake=None):
    """The exact update of ``(m, l, acc)`` by one tile, in float64 NumPy."""
    m, l, acc = (np.asarray(x, dtype=np.float64) for x in (m, l, acc))
    scores, v = np.asarray(scores, dtype=np.float64), np.asarray(v, dtype=np.float64)
    m_new = np.maximum(m, scores.max(axis=-1))
    shift = m_new if mistake == "nan_masked_tile" else np.where(np.isinf(m_new), 0.0, m_new)
    exp = np.exp2 if mistake == "exp2_no_log2e" else np.exp
    with np.errstate(invalid="ignore"):
        alpha = exp(m - shift)
        p = exp(scores - shift[..., None])
    l_new = (l if mistake == "no_rescale_l" else alpha * l) + p.sum(-1)
    if mistake == "no_rescale":
        acc_new = acc + p @ v
    else:
        acc_new = alpha[..., None] * acc + p @ v
    return m_new, l_new, acc_new


def blockwise_reference(q, k, v, block_size: int, causal: bool = True, mistake=None):
    """``blockwise_attention`` done right (or with one mistake), in float64 NumPy:
    ``q`` ``(..., S_q, d)``, ``k``/``v`` ``(..., S_k, d)``.  Step mistakes
    (``no_rescale``, ``no_rescale_l``, ``exp2_no_log2e``) go to
    ``step_reference``; ``tile_local_cols``, ``ragged_tail_dropped`` and
    ``no_final_divide`` are mistakes of the walk over the tiles."""
    q, k, v = (np.asarray(x, dtype=np.float64) for x in (q, k, v))
    s_q, s_k, d_head = q.shape[-2], k.shape[-2], q.shape[-1]
    m = np.full(q.shape[:-1], -np.inf)                               # (..., S_q)
    l = np.zeros(q.shape[:-1])
    acc = np.zeros(q.shape[:-1] + (v.shape[-1],))                    # (..., S_q, d_v)
    rows = (s_k - s_q + np.arange(s_q))[:, None]                     # absolute positions
    stop_at = s_k - s_k % block_size if mistake == "ragged_tail_dropped" else s_k
    for start in range(0, stop_at, block_size):
        stop = min(start + block_size, s_k)
        scores = q @ np.swapaxes(k[..., start:stop, :], -1, -2) / math.sqrt(d_head)
        if causal:
            cols = np.arange(stop - start) if mistake == "tile_local_cols" else \
                np.arange(start, stop)
            scores = np.where(cols[None, :] <= rows, scores, -np.inf)
        m, l, acc = step_reference(m, l, acc, scores, v[..., start:stop, :], mistake)
    if mistake == "no_final_divide":
        return acc
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(l[..., None] > 0, acc / np.where(l > 0, l, 1.0)[..., None], 0.0)


def blockwise_mistakes(q, k, v, block_size: int, causal: bool = True) -> dict:
    """``{description: wrong answer}`` of ``blockwise_attention`` for the mistakes
    of the walk over tiles and of the online-softmax step (NumPy, float64)."""
    names = ["no_rescale", "no_rescale_l", "exp2_no_log2e", "ragged_tail_dropped",
             "no_final_divide"]
    if causal:
        names.append("tile_local_cols")
    return {describe(n): blockwise_reference(q, k, v, block_size, causal, n) for n in names}


# -- FLOPs -----------------------------------------------------------------------
def attention_flops(batch: int, n_heads: int, s_q: int, s_k: int, d_head: int,
                    causal: bool) -> float:
    """Forward FLOPs: two matmuls (q k^T and p v) of 2 * S_q * S_k * d_head each.

    4 * B * h * S_q * S_k * d_head; a causal mask skips about half of the
    (query, key) pairs, so causal counts half of that (the usual convention
    of FlashAttention benchmarks, whatever the tiles really compute).
    """
    flops = 4.0 * batch * n_heads * s_q * s_k * d_head
    return flops * 0.5 if causal else flops


# Timed shapes of the GPU suite and of `attn-grade calibrate`: the
# long-context prefill a fused kernel is for (bf16, d_head 128, 32 heads).
SPEED_CASES = [dict(batch=4, heads=32, kv_heads=32, s_q=s, s_k=s, d_head=128, causal=c,
                    dtype="bfloat16") for s, c in ((2048, False), (2048, True), (8192, True))]


# -- the reference Triton kernel ------------------------------------------------
if HAS_TRITON:
    _INTERPRET = os.environ.get("TRITON_INTERPRET") == "1"
    if _INTERPRET:
        # Every program runs in Python: one small tile, no autotuning.
        _CONFIGS = [triton.Config({"BLOCK_M": 16, "BLOCK_N": 16}, num_warps=1)]
    else:
        # Every config here compiles for sm_80 and sm_90a without spilling
        # registers at d_head 128 (tests/test_gpu_compile.py): a 128-row tile
        # needs 8 warps (with 4, its float32 accumulator alone is 128
        # registers a thread, and ptxas spills), and 128x128 tiles spill on
        # sm_80 through pointers.  The autotuner picks among them per shape.
        _CONFIGS = [triton.Config({"BLOCK_M": bm, "BLOCK_N": 64}, num_warps=w, num_stages=s)
                    for bm, w in ((128, 8), (64, 4)) for s in (2, 3)]

    @triton.jit
    def _tiles(acc, l_i, m_i, q, k_base, v_base, stride_ks, stride_vs,
               offs_m, pos_m, lo, hi, S_K, qk_scale,
               D_HEAD: tl.constexpr, BLOCK_N: tl.constexpr,
               MASK_CAUSAL: tl.constexpr, MASK_KEYS: tl.constexpr):
        """Fold key tiles [lo, hi) into (acc, l_i, m_i); masks only where asked."""
        offs_n = tl.arange(0, BLOCK_N)
        offs_d = tl.arange(0, D_HEAD)
        for start_n in tl.range(lo, hi, BLOCK_N):
            start_n = tl.multiple_of(start_n, BLOCK_N)
            cols = start_n + offs_n
            kv_off_k = cols[:, None] * stride_ks + offs_d[None, :]
            kv_off_v = cols[:, None] * stride_vs + offs_d[None, :]
            if MASK_KEYS:
                k = tl.load(k_base + kv_off_k, mask=cols[:, None] < S_K, other=0.0)
                v = tl.load(v_base + kv_off_v, mask=cols[:, None] < S_K, other=0.0)
            else:
                k = tl.load(k_base + kv_off_k)
                v = tl.load(v_base + kv_off_v)
            s = tl.dot(q, tl.trans(k)) * qk_scale                     # (BLOCK_M, BLOCK_N)
            if MASK_CAUSAL or MASK_KEYS:
                ok = cols[None, :] < S_K
                if MASK_CAUSAL:
                    ok = ok & (cols[None, :] <= pos_m[:, None])
                s = tl.where(ok, s, float("-inf"))
                m_new = tl.maximum(m_i, tl.max(s, 1))
                shift = tl.where(m_new == float("-inf"), 0.0, m_new)   # rows with no key yet
            else:
                m_new = tl.maximum(m_i, tl.max(s, 1))                  # finite: nothing masked
                shift = m_new
            p = tl.exp2(s - shift[:, None])
            alpha = tl.exp2(m_i - shift)                                # rescales the past
            l_i = l_i * alpha + tl.sum(p, 1)
            acc = tl.dot(p.to(v.dtype), v, acc * alpha[:, None])   # MMA accumulates in place
            m_i = m_new
        return acc, l_i, m_i

    @triton.autotune(configs=_CONFIGS, key=["S_Q", "S_K", "D_HEAD", "CAUSAL"])
    @triton.heuristics({"EVEN_M": lambda a: a["S_Q"] % a["BLOCK_M"] == 0,
                        "EVEN_N": lambda a: a["S_K"] % a["BLOCK_N"] == 0})
    @triton.jit
    def _ref_fwd(Q, K, V, O,
                 stride_qb, stride_qh, stride_qs,
                 stride_kb, stride_kh, stride_ks,
                 stride_vb, stride_vh, stride_vs,
                 stride_ob, stride_oh, stride_os,
                 H, GROUP, S_Q, S_K, qk_scale,
                 D_HEAD: tl.constexpr, CAUSAL: tl.constexpr,
                 BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                 EVEN_M: tl.constexpr, EVEN_N: tl.constexpr):
        """BLOCK_M query rows of one (batch, head) against all the keys they see.

        The last dimension of every tensor is contiguous (the host checks).
        ``qk_scale`` is sm_scale / ln(2), computed on the host: scores in log2
        units for exp2 (a kernel cannot read a plain Python global).
        """
        tl.static_assert(BLOCK_M >= 16)                      # tl.dot's minimum tile
        tl.static_assert(BLOCK_N >= 16)
        tl.static_assert(D_HEAD <= 128)                      # one tile of q in registers
        # Under a causal mask the last query tiles do the most work: start them first.
        pid_m = tl.program_id(0)
        if CAUSAL:
            pid_m = tl.num_programs(0) - 1 - pid_m
        pid_bh = tl.program_id(1)
        b = pid_bh // H
        head = pid_bh % H
        kv_head = head // GROUP                              # GQA: index, never copy

        offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
        offs_d = tl.arange(0, D_HEAD)
        q_ptrs = Q + b * stride_qb + head * stride_qh + offs_m[:, None] * stride_qs \
            + offs_d[None, :]
        if EVEN_M:
            q = tl.load(q_ptrs)
        else:
            q = tl.load(q_ptrs, mask=offs_m[:, None] < S_Q, other=0.0)
        k_base = K + b * stride_kb + kv_head * stride_kh
        v_base = V + b * stride_vb + kv_head * stride_vh

        m_i = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)
        l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
        acc = tl.zeros([BLOCK_M, D_HEAD], dtype=tl.float32)
        pos_m = S_K - S_Q + offs_m                           # end-aligned positions

        if CAUSAL:
            # Keys every row of this tile sees: 0 .. first row's position.
            first = S_K - S_Q + pid_m * BLOCK_M
            full_hi = tl.minimum(tl.maximum(first + 1, 0) // BLOCK_N * BLOCK_N,
                                 S_K // BLOCK_N * BLOCK_N)
            # Keys some row sees: up to the last row's position.
            hi = tl.minimum(tl.maximum(first + BLOCK_M, 0), S_K)
        else:
            full_hi = S_K // BLOCK_N * BLOCK_N
            hi = S_K
        acc, l_i, m_i = _tiles(acc, l_i, m_i, q, k_base, v_base, stride_ks, stride_vs,
                               offs_m, pos_m, 0, full_hi, S_K, qk_scale,
                               D_HEAD, BLOCK_N, False, False)
        if CAUSAL or not EVEN_N:
            acc, l_i, m_i = _tiles(acc, l_i, m_i, q, k_base, v_base, stride_ks, stride_vs,
                                   offs_m, pos_m, full_hi, hi, S_K, qk_scale,
                                   D_HEAD, BLOCK_N, CAUSAL, not EVEN_N)
        out = acc / tl.where(l_i > 0.0, l_i, 1.0)[:, None]   # rows with no key: zeros
        o_ptrs = O + b * stride_ob + head * stride_oh + offs_m[:, None] * stride_os \
            + offs_d[None, :]
        if EVEN_M:
            tl.store(o_ptrs, out.to(O.dtype.element_ty))
        else:
            tl.store(o_ptrs, out.to(O.dtype.element_ty), mask=offs_m[:, None] < S_Q)


    # -- the same kernel reading tiles through tensor descriptors (TMA on Hopper) --
    def _set_blocks(nargs):
        # Host-side descriptors are made before the autotuner picks tile
        # sizes: each config sets the block shapes it needs.
        m, n, d = nargs["BLOCK_M"], nargs["BLOCK_N"], nargs["D_HEAD"]
        nargs["desc_q"].block_shape = [1, m, d]
        nargs["desc_o"].block_shape = [1, m, d]
        nargs["desc_k"].block_shape = [1, n, d]
        nargs["desc_v"].block_shape = [1, n, d]

    # Hopper only (TMA): 128-row query tiles over 8 warps (two warpgroups).
    _DESC_CONFIGS = [triton.Config({"BLOCK_M": 128, "BLOCK_N": bn}, num_warps=8,
                                   num_stages=s, pre_hook=_set_blocks)
                     for bn in (64, 128) for s in (2, 3)] if not _INTERPRET else \
        [triton.Config(c.kwargs, num_warps=c.num_warps, num_stages=c.num_stages,
                       pre_hook=_set_blocks) for c in _CONFIGS]

    @triton.jit
    def _tiles_desc(acc, l_i, m_i, q, desc_k, desc_v, kv_row, pos_m, lo, hi, S_K, qk_scale,
                    D_HEAD: tl.constexpr, BLOCK_N: tl.constexpr, MASKED: tl.constexpr,
                    CAUSAL: tl.constexpr):
        """Key tiles [lo, hi) from descriptors (rows past S_K read as zeros)."""
        offs_n = tl.arange(0, BLOCK_N)
        for start_n in tl.range(lo, hi, BLOCK_N):
            start_n = tl.multiple_of(start_n, BLOCK_N)
            k = desc_k.load([kv_row, start_n, 0]).reshape(BLOCK_N, D_HEAD)
            v = desc_v.load([kv_row, start_n, 0]).reshape(BLOCK_N, D_HEAD)
            s = tl.dot(q, tl.trans(k)) * qk_scale                     # (BLOCK_M, BLOCK_N)
            if MASKED:
                cols = start_n + offs_n
                ok = cols[None, :] < S_K
                if CAUSAL:
                    ok = ok & (cols[None, :] <= pos_m[:, None])
                s = tl.where(ok, s, float("-inf"))
                m_new = tl.maximum(m_i, tl.max(s, 1))
                shift = tl.where(m_new == float("-inf"), 0.0, m_new)   # rows with no key yet
            else:
                m_new = tl.maximum(m_i, tl.max(s, 1))
                shift = m_new
            p = tl.exp2(s - shift[:, None])
            alpha = tl.exp2(m_i - shift)
            l_i = l_i * alpha + tl.sum(p, 1)
            acc = tl.dot(p.to(v.dtype), v, acc * alpha[:, None])   # MMA accumulates in place
            m_i = m_new
        return acc, l_i, m_i

    @triton.autotune(configs=_DESC_CONFIGS, key=["S_Q", "S_K", "D_HEAD", "CAUSAL"])
    @triton.jit
    def _ref_fwd_desc(desc_q, desc_k, desc_v, desc_o, H, GROUP, S_Q, S_K, qk_scale,
                      D_HEAD: tl.constexpr, CAUSAL: tl.constexpr,
                      BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
        """``_ref_fwd`` over 3-d descriptors: q/o ``(B*h, S_q, d)``, k/v ``(B*h_kv, S_k, d)``.

        A tile never crosses into the next head: rows past the end of a
        head read as zeros and are not written."""
        tl.static_assert(BLOCK_M >= 16)                      # tl.dot's minimum tile
        tl.static_assert(BLOCK_N >= 16)
        pid_m = tl.program_id(0)
        if CAUSAL:
            pid_m = tl.num_programs(0) - 1 - pid_m           # the longest rows first
        pid_bh = tl.program_id(1)
        kv_row = (pid_bh // H) * (H // GROUP) + (pid_bh % H) // GROUP   # GQA by index
        q = desc_q.load([pid_bh, pid_m * BLOCK_M, 0]).reshape(BLOCK_M, D_HEAD)
        m_i = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)
        l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
        acc = tl.zeros([BLOCK_M, D_HEAD], dtype=tl.float32)
        pos_m = S_K - S_Q + pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
        if CAUSAL:
            first = S_K - S_Q + pid_m * BLOCK_M
            full_hi = tl.minimum(tl.maximum(first + 1, 0) // BLOCK_N * BLOCK_N,
                                 S_K // BLOCK_N * BLOCK_N)
            hi = tl.minimum(tl.maximum(first + BLOCK_M, 0), S_K)
        else:
            full_hi = S_K // BLOCK_N * BLOCK_N
            hi = S_K
        acc, l_i, m_i = _tiles_desc(acc, l_i, m_i, q, desc_k, desc_v, kv_row, pos_m,
                                    0, full_hi, S_K, qk_scale, D_HEAD, BLOCK_N, False, CAUSAL)
        acc, l_i, m_i = _tiles_desc(acc, l_i, m_i, q, desc_k, desc_v, kv_row, pos_m,
                                    full_hi, hi, S_K, qk_scale, D_HEAD, BLOCK_N, True, CAUSAL)
        out = acc / tl.where(l_i > 0.0, l_i, 1.0)[:, None]
        desc_o.store([pid_bh, pid_m * BLOCK_M, 0],
                     out.to(desc_o.dtype).reshape(1, BLOCK_M, D_HEAD))


# Set when the descriptor kernel failed on this machine: the pointer kernel serves.
DESCRIPTOR_FAILURE: list = []


def _use_descriptors(q) -> bool:
    """Descriptors where TMA exists (CUDA capability 9+), unless they failed here."""
    return (q.is_cuda and not DESCRIPTOR_FAILURE
            and torch.cuda.get_device_capability(q.device)[0] >= 9)


def variant_in_use(q) -> str:
    """The variant ``flash_attention(variant="auto")`` runs on ``q``: "descriptors",
    "pointers", or "pointers (descriptors failed: ...)" after a fallback."""
    if _use_descriptors(q):
        return "descriptors"
    if DESCRIPTOR_FAILURE:
        return f"pointers (descriptors failed: {DESCRIPTOR_FAILURE[0][:200]})"
    return "pointers"


def flash_attention(q, k, v, *, causal=True, sm_scale=None, config=None, variant="auto"):
    """The reference kernel: ``q`` ``(B, h, S_q, d)``, ``k``/``v`` ``(B, h_kv, S_k, d)``.

    Same contract as the exercise (end-aligned causal mask, GQA by index,
    zeros for rows that see no key).  d_head in {16, 32, 64, 128}.
    ``variant``: ``"pointers"`` (any GPU, the interpreter), ``"descriptors"``
    (tiles through tensor descriptors, TMA on Hopper) or ``"auto"``
    (descriptors on CUDA capability 9+; if they fail there, pointers from
    then on, the failure kept in ``DESCRIPTOR_FAILURE``).  ``config`` (e.g.
    ``{"BLOCK_M": 64, "BLOCK_N": 64, "num_warps": 4, "num_stages": 2}``) skips
    autotuning and runs the pointer kernel with that one configuration.
    """
    if not HAS_TRITON:
        raise RuntimeError(f"the reference kernel {NEEDS_TRITON}")
    batch, n_heads, s_q, d_head = q.shape
    n_kv, s_k = k.shape[1], k.shape[2]
    if d_head not in SUPPORTED_D_HEAD:
        raise ValueError(f"d_head={d_head} is not supported; use one of {SUPPORTED_D_HEAD}")
    if n_heads % n_kv or k.shape != v.shape:
        raise ValueError("k and v must be (B, h_kv, S_k, d_head) with h % h_kv == 0")
    sm_scale = 1.0 / math.sqrt(d_head) if sm_scale is None else float(sm_scale)
    if variant == "descriptors" or (variant == "auto" and config is None
                                    and _use_descriptors(q)):
        try:
            return _launch_descriptors(q, k, v, causal, sm_scale)
        except Exception as exc:          # noqa: BLE001 - any failure: fall back, once
            if variant == "descriptors":
                raise
            DESCRIPTOR_FAILURE.append(f"{type(exc).__name__}: {exc}"[:500])
    return _launch_pointers(q, k, v, causal, sm_scale, config)


def _launch_pointers(q, k, v, causal, sm_scale, config):
    batch, n_heads, s_q, d_head = q.shape
    n_kv, s_k = k.shape[1], k.shape[2]
    q, k, v = (x if x.stride(-1) == 1 else x.contiguous() for x in (q, k, v))
    out = torch.empty_like(q, memory_format=torch.contiguous_format)

    def grid(meta):
        return (triton.cdiv(s_q, meta["BLOCK_M"]), batch * n_heads)

    kernel = _ref_fwd if config is None else _ref_fwd.fn   # .fn: below the autotuner
    kernel[grid](q, k, v, out,
                 q.stride(0), q.stride(1), q.stride(2),
                 k.stride(0), k.stride(1), k.stride(2),
                 v.stride(0), v.stride(1), v.stride(2),
                 out.stride(0), out.stride(1), out.stride(2),
                 n_heads, n_heads // n_kv, s_q, s_k, sm_scale * LOG2E,
                 D_HEAD=d_head, CAUSAL=bool(causal), **(config or {}))
    return out


def _launch_descriptors(q, k, v, causal, sm_scale):
    from triton.tools.tensor_descriptor import TensorDescriptor
    batch, n_heads, s_q, d_head = q.shape
    n_kv, s_k = k.shape[1], k.shape[2]
    q3 = q.contiguous().view(batch * n_heads, s_q, d_head)      # (B*h, S_q, d)
    k3 = k.contiguous().view(batch * n_kv, s_k, d_head)         # (B*h_kv, S_k, d)
    v3 = v.contiguous().view(batch * n_kv, s_k, d_head)
    out = torch.empty_like(q3)
    dummy = [1, 16, d_head]       # replaced by each config's pre_hook (_set_blocks)
    descs = [TensorDescriptor(x, list(x.shape), list(x.stride()), list(dummy))
             for x in (q3, k3, v3, out)]

    def grid(meta):
        return (triton.cdiv(s_q, meta["BLOCK_M"]), batch * n_heads)

    _ref_fwd_desc[grid](*descs, n_heads, n_heads // n_kv, s_q, s_k, sm_scale * LOG2E,
                        D_HEAD=d_head, CAUSAL=bool(causal))
    return out.view(batch, n_heads, s_q, d_head)

# -- judging a traced call (grading process only) ------------------------------------
# The checks of a traced call ship with the student edition (they judge the
# student's own call, not an answer): grader/reference/flash_judge.py.  This
# module's source is also loaded alone in a worker to time the reference
# kernel (probes/ex07_flash_attention.py), where the judging code is neither present nor needed.
try:
    from grader.reference.flash_judge import (GPU_TOLERANCES,  # noqa: E402,F401
                                              MAX_COMPUTE_OPS, check_authentic,
                                              check_inputs_unchanged, check_no_kv_copy,
                                              check_output, tolerance)
except ImportError:  # inside a worker
    pass


def judge_speed(result: dict) -> dict:
    """Ratios of TFLOP/s (student / reference) from ``ex07_flash_attention.benchmark``'s answer.

    Raises ``Feedback`` if any timed call came back wrong (each is checked
    against the reference's output on the same inputs).  Returns the
    geometric-mean ratio, a noise margin (the reference's own relative
    spread, at most 10%) and a table for the feedback."""
    import statistics

    from grader.feedback import Feedback
    rows, ratios, spreads = [], [], []
    for r in result["cases"]:
        c = r["case"]
        if r["problems"]:
            raise Feedback(f"while timing B={c['batch']}, h={c['heads']}, S={c['s_q']}, "
                           f"causal={c['causal']}: flash_attention {', '.join(r['problems'])}; "
                           "no speed credit without a correct answer to every timed call")
        atol, _ = tolerance(c["dtype"], "cuda")
        worst = max(r["max_err"])
        if not math.isfinite(worst) or worst > 2 * atol:
            i = int(np.argmax([e if math.isfinite(e) else np.inf for e in r["max_err"]]))
            raise Feedback(f"timed call {i + 1} (S={c['s_q']}, causal={c['causal']}, "
                           f"{c['dtype']}) differs from the reference kernel's output on the "
                           f"same fresh inputs by {worst:.3g} (allowed {2 * atol:g}): every "
                           "timed output is checked, so replayed or cached outputs fail")
        flops = attention_flops(c["batch"], c["heads"], c["s_q"], c["s_k"], c["d_head"],
                                c["causal"])
        t_s, t_r = statistics.median(r["student_s"]), statistics.median(r["reference_s"])
        ratios.append(t_r / t_s)
        mad = statistics.median(abs(t - t_r) for t in r["reference_s"])
        spreads.append(mad / t_r)
        rows.append(f"  S={c['s_q']:5d} causal={str(c['causal']):5s}: yours "
                    f"{flops / t_s / 1e12:7.1f} TFLOP/s, reference {flops / t_r / 1e12:7.1f} "
                    f"TFLOP/s, ratio {t_r / t_s:.2f}")
    ratio = math.exp(sum(math.log(x) for x in ratios) / len(ratios))   # geometric mean
    return {"ratio": ratio, "margin": min(0.1, max(spreads)), "table": "\n".join(rows)}
