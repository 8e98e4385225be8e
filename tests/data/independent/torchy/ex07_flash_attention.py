"""Exercise G: the fused attention kernel (NumPy, then Triton).

Attention never needs the whole ``(S_q, S_k)`` score matrix at once.  Walk
over the keys one tile at a time and keep, for every query row, three running
quantities: the largest score seen so far ``m``, the softmax denominator
``l`` measured against that maximum, and the unnormalized output ``acc``.
When a new tile raises the maximum from ``m`` to ``m_new``, everything summed
so far was measured against the old maximum and is rescaled by
``exp(m - m_new)``.  At the end, ``acc / l`` is the attention output.  This
is the online softmax; FlashAttention is this loop written as one GPU kernel
that keeps a tile of queries in fast memory and streams the keys past it.

1. ``online_softmax_step``: one tile of the online softmax (NumPy).
2. ``blockwise_attention``: attention tile by tile with that step (NumPy).
3. ``flash_attention``: the same loop as a Triton kernel.

Conventions (the course's contract):

* Shapes: ``q`` ``(B, h, S_q, d_head)``, ``k`` and ``v`` ``(B, h_kv, S_k,
  d_head)``; the output has ``q``'s shape.
* Scores are ``q @ k^T * sm_scale`` with ``sm_scale = 1/sqrt(d_head)`` unless
  given; the softmax runs over keys.
* Causal masks are aligned to the end: query ``i`` sits at absolute position
  ``S_k - S_q + i`` and may see keys ``0 .. S_k - S_q + i``.  For decode
  (``S_q == 1``) the one query sees every key.  When ``S_q > S_k`` the first
  query rows may see no key at all: their output is zeros, never NaN.
* GQA: query head ``i`` uses key/value head ``i // (h // h_kv)`` (the
  ``repeat_interleave`` grouping).

Triton kernels run on a GPU, or on the CPU through Triton's interpreter:
set ``TRITON_INTERPRET=1`` in the environment *before* this module is
imported and pass CPU tensors (the grader does this where there is no GPU).
The interpreter is slow and has no bfloat16 ``tl.dot``: test with small
float32 shapes.  It has no GPU to time on either, so the grader lets an
autotuned kernel run its first configuration there.  Address tiles with
pointer arithmetic and masks (``tl.make_block_ptr`` is gone from recent
Triton releases).

Run the public tests with ``attn-grade check ex07``.
"""
from __future__ import annotations

import math
import os
from dataclasses import dataclass

import numpy as np
import torch
import triton
import triton.language as tl


# ---------------------------------------------------------------------------
# NumPy API, computed with torch ops on CPU tensors that share the arrays' memory
# ---------------------------------------------------------------------------
def _np_float_dtype(*arrays) -> np.dtype:
    dt = np.result_type(*[np.asarray(a).dtype for a in arrays])
    return dt if np.issubdtype(dt, np.floating) else np.dtype(np.float64)


def _t(a, dtype) -> torch.Tensor:
    arr = np.asarray(a, dtype=dtype)
    if not arr.flags.writeable or any(s < 0 for s in arr.strides):
        arr = np.array(arr, copy=True)
    return torch.from_numpy(arr)


def _online_step_t(m, l, acc, scores, v):
    """The torch body of ``online_softmax_step`` (same shapes and rules)."""
    m_new = torch.maximum(m, torch.amax(scores, dim=-1))
    # Where nothing finite has been seen yet, shift by 0: -inf - -inf is NaN.
    shift = torch.where(torch.isneginf(m_new), torch.zeros_like(m_new), m_new)
    alpha = torch.exp(m - shift)                    # rescales what was summed so far
    p = torch.exp(scores - shift.unsqueeze(-1))     # masked entries give exactly 0
    l_new = alpha * l + p.sum(dim=-1)
    acc_new = alpha.unsqueeze(-1) * acc + torch.matmul(p, v)
    return m_new, l_new, acc_new


def online_softmax_step(m, l, acc, scores, v):
    """One tile of the online softmax; returns the updated ``(m, l, acc)``.

    * ``m``: ``(..., rows)`` running maximum of the scores seen so far
      (starts at ``-inf``);
    * ``l``: ``(..., rows)`` running sum of ``exp(score - m)`` (starts at 0);
    * ``acc``: ``(..., rows, d_head)`` running sum of ``exp(score - m) * v``
      (starts at 0);
    * ``scores``: ``(..., rows, n)`` this tile's scores, already scaled and
      masked (masked entries are ``-inf``);
    * ``v``: ``(..., n, d_head)`` this tile's values.

    When the maximum grows, the old ``l`` and ``acc`` must be rescaled by
    ``exp(m_old - m_new)``.  A tile whose scores are all ``-inf`` for a row
    (and a row that has seen nothing but ``-inf`` so far) must leave that
    row's ``l`` and ``acc`` unchanged and must not produce NaN
    (``-inf - -inf`` is NaN: shift by 0 where the maximum is still ``-inf``).

    Returns NumPy arrays in the promoted floating dtype of the inputs.
    """
    dt = _np_float_dtype(m, l, acc, scores, v)
    outs = _online_step_t(*(_t(a, dt) for a in (m, l, acc, scores, v)))
    return tuple(o.numpy().astype(dt, copy=False) for o in outs)


def blockwise_attention(q, k, v, block_size, causal=True):
    """Scaled dot-product attention computed ``block_size`` keys at a time.

    ``q``: ``(..., S_q, d_head)``, ``k`` and ``v``: ``(..., S_k, d_head)``
    (NumPy).  Walk over the keys in tiles of ``block_size`` (the last tile
    may be shorter), compute that tile's scaled, masked scores and fold them
    in with ``online_softmax_step``; never hold scores for more than
    ``block_size`` keys at once.  ``causal`` uses the end-aligned mask; rows
    that may see no key return zeros.  Returns ``(..., S_q, d_head)``.
    """
    block_size = int(block_size)
    if block_size < 1:
        raise ValueError(f"block_size must be >= 1, got {block_size}")
    dt = _np_float_dtype(q, k, v)
    qt, kt, vt = (_t(a, dt) for a in (q, k, v))
    s_q, d_head = qt.shape[-2], qt.shape[-1]
    s_k = kt.shape[-2]
    scale = 1.0 / math.sqrt(d_head)
    batch = torch.broadcast_shapes(qt.shape[:-2], kt.shape[:-2], vt.shape[:-2])

    m = torch.full((*batch, s_q), float("-inf"), dtype=qt.dtype)
    l = torch.zeros((*batch, s_q), dtype=qt.dtype)
    acc = torch.zeros((*batch, s_q, vt.shape[-1]), dtype=qt.dtype)
    rows = torch.arange(s_q).unsqueeze(-1) + (s_k - s_q)   # last key each query may see

    m_np, l_np, acc_np = m.numpy(), l.numpy(), acc.numpy()
    for start in range(0, s_k, block_size):
        stop = min(start + block_size, s_k)
        scores = torch.matmul(qt, kt[..., start:stop, :].transpose(-2, -1)) * scale
        if causal:
            cols = torch.arange(start, stop).unsqueeze(0)
            scores = scores.masked_fill(cols > rows, float("-inf"))
        m_np, l_np, acc_np = online_softmax_step(
            m_np, l_np, acc_np, scores.numpy(), vt[..., start:stop, :].numpy())

    l_t, acc_t = torch.from_numpy(np.asarray(l_np)), torch.from_numpy(np.asarray(acc_np))
    out = acc_t / torch.where(l_t > 0, l_t, torch.ones_like(l_t)).unsqueeze(-1)
    return out.numpy().astype(dt, copy=False)


# ---------------------------------------------------------------------------
# The Triton kernel
# ---------------------------------------------------------------------------
# Tiles are addressed with pointer arithmetic and masks in the manner of block
# pointers: a (BLOCK_N, HEAD_DIM) tile of pointers is built once per program
# and advanced by BLOCK_N rows per step (Triton 3.9 has removed
# tl.make_block_ptr / tl.advance, see the module docstring).
#
# One 1-D grid: program ``pid`` handles query block ``pid % n_m_blocks`` of
# the (batch, head) pair ``pid // n_m_blocks``.  Scores live in the log2
# domain (scale * log2(e), then exp2).  Key tiles come in two phases: tiles
# that every row of the query block may see in full (no masks at all), then
# the tiles on the causal diagonal and the ragged end of the keys (masked).


@triton.jit
def _fold_tile(acc, l_i, m_i, q, k_ptrs, v_ptrs, start_n, offs_m, offs_n, S_k,
               causal_offset, qk_scale,
               MASKED: tl.constexpr, CAUSAL: tl.constexpr, PRECISION: tl.constexpr):
    """Fold one key tile into the running (acc, l, m) of a query block."""
    cols = start_n + offs_n
    if MASKED:
        key_ok = cols < S_k
        k = tl.load(k_ptrs, mask=key_ok[:, None], other=0.0)
        v = tl.load(v_ptrs, mask=key_ok[:, None], other=0.0)
    else:
        k = tl.load(k_ptrs)
        v = tl.load(v_ptrs)
    qk = tl.dot(q, tl.trans(k), input_precision=PRECISION) * qk_scale
    if MASKED:
        allowed = key_ok[None, :]
        if CAUSAL:
            allowed = allowed & (cols[None, :] <= offs_m[:, None] + causal_offset)
        qk = tl.where(allowed, qk, float("-inf"))
    m_new = tl.maximum(m_i, tl.max(qk, 1))
    # A row that has seen only -inf so far shifts by 0 (no -inf - -inf = NaN).
    m_shift = tl.where(m_new == float("-inf"), 0.0, m_new)
    alpha = tl.exp2(m_i - m_shift)
    p = tl.exp2(qk - m_shift[:, None])
    l_i = l_i * alpha + tl.sum(p, 1)
    acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v, input_precision=PRECISION)
    return acc, l_i, m_new


@triton.jit
def _flash_fwd_kernel(
    Q, K, V, O, qk_scale,
    stride_qb, stride_qh, stride_qm, stride_qd,
    stride_kb, stride_kh, stride_kn, stride_kd,
    stride_vb, stride_vh, stride_vn, stride_vd,
    stride_ob, stride_oh, stride_om, stride_od,
    H, S_q, S_k, causal_offset, n_m_blocks,
    GROUP: tl.constexpr, HEAD_DIM: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
    CAUSAL: tl.constexpr, PRECISION: tl.constexpr,
):
    pid = tl.program_id(0)
    bh = pid // n_m_blocks
    start_m = pid % n_m_blocks
    b = (bh // H).to(tl.int64)
    h_q = bh % H
    h_kv = (h_q // GROUP).to(tl.int64)        # GQA: the shared K/V head, read in place
    h_q = h_q.to(tl.int64)

    offs_m = start_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, HEAD_DIM)

    q_ptrs = Q + b * stride_qb + h_q * stride_qh \
        + offs_m[:, None] * stride_qm + offs_d[None, :] * stride_qd
    q = tl.load(q_ptrs, mask=offs_m[:, None] < S_q, other=0.0)

    k_ptrs = K + b * stride_kb + h_kv * stride_kh \
        + offs_n[:, None] * stride_kn + offs_d[None, :] * stride_kd
    v_ptrs = V + b * stride_vb + h_kv * stride_vh \
        + offs_n[:, None] * stride_vn + offs_d[None, :] * stride_vd

    m_i = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
    acc = tl.zeros([BLOCK_M, HEAD_DIM], dtype=tl.float32)

    if CAUSAL:
        # Row i sees keys 0 .. i + causal_offset.  The block's first row bounds
        # the unmasked phase, its last row the whole walk.
        hi = tl.minimum(S_k, start_m * BLOCK_M + BLOCK_M + causal_offset)
        full_end = tl.minimum(S_k, start_m * BLOCK_M + causal_offset + 1)
    else:
        hi = S_k
        full_end = S_k
    hi = tl.maximum(hi, 0)
    full_end = (tl.maximum(full_end, 0) // BLOCK_N) * BLOCK_N

    # Phase 1: whole tiles that every row may see; no masks.
    for start_n in range(0, full_end, BLOCK_N):
        acc, l_i, m_i = _fold_tile(acc, l_i, m_i, q, k_ptrs, v_ptrs, start_n, offs_m, offs_n,
                                   S_k, causal_offset, qk_scale,
                                   MASKED=False, CAUSAL=CAUSAL, PRECISION=PRECISION)
        k_ptrs += BLOCK_N * stride_kn
        v_ptrs += BLOCK_N * stride_vn
    # Phase 2: the causal diagonal and the ragged last tile; masked.
    for start_n in range(full_end, hi, BLOCK_N):
        acc, l_i, m_i = _fold_tile(acc, l_i, m_i, q, k_ptrs, v_ptrs, start_n, offs_m, offs_n,
                                   S_k, causal_offset, qk_scale,
                                   MASKED=True, CAUSAL=CAUSAL, PRECISION=PRECISION)
        k_ptrs += BLOCK_N * stride_kn
        v_ptrs += BLOCK_N * stride_vn

    # Rows that saw no key (l == 0, acc == 0) come out as zeros.
    l_safe = tl.where(l_i == 0.0, 1.0, l_i)
    out = acc / l_safe[:, None]
    o_ptrs = O + b * stride_ob + h_q * stride_oh \
        + offs_m[:, None] * stride_om + offs_d[None, :] * stride_od
    tl.store(o_ptrs, out.to(O.dtype.element_ty), mask=offs_m[:, None] < S_q)


SUPPORTED_D_HEAD = (16, 32, 64, 128)
_SUPPORTED_DTYPES = (torch.float16, torch.bfloat16, torch.float32)
_LOG2E = 1.4426950408889634



@dataclass(frozen=True)
class _LaunchConfig:
    """Fixed tile sizes (no autotuning): 128 queries x 32 keys, 4 warps."""

    BLOCK_M: int = 128
    BLOCK_N: int = 32
    num_warps: int = 4

    def num_stages(self, dtype: torch.dtype, d_head: int) -> int:
        # fp32 tiles at d_head 128 are large: two stages keep the K/V ring
        # buffer inside shared memory on sm_80.
        return 2 if (dtype == torch.float32 and d_head >= 128) else 3


_CONFIG = _LaunchConfig()


@dataclass(frozen=True)
class _FlashShapes:
    batch: int
    n_heads: int
    n_kv_heads: int
    s_q: int
    s_k: int
    d_head: int

    @classmethod
    def check(cls, q, k, v) -> "_FlashShapes":
        for name, t in (("q", q), ("k", k), ("v", v)):
            if not isinstance(t, torch.Tensor):
                raise TypeError(f"{name} must be a torch.Tensor")
            if t.dim() != 4:
                raise ValueError(f"{name} must be (B, heads, S, d_head), got {tuple(t.shape)}")
        if q.dtype not in _SUPPORTED_DTYPES or k.dtype != q.dtype or v.dtype != q.dtype:
            raise ValueError(f"q, k, v must share one dtype of {_SUPPORTED_DTYPES}, "
                             f"got {q.dtype}, {k.dtype}, {v.dtype}")
        if not (q.device == k.device == v.device):
            raise ValueError("q, k and v must be on the same device")
        b, h, s_q, d = q.shape
        bk, h_kv, s_k, dk = k.shape
        if tuple(v.shape) != tuple(k.shape):
            raise ValueError(f"k {tuple(k.shape)} and v {tuple(v.shape)} differ")
        if bk != b or dk != d:
            raise ValueError(f"k {tuple(k.shape)} does not fit q {tuple(q.shape)}")
        if d not in SUPPORTED_D_HEAD:
            raise ValueError(f"d_head {d} not supported (one of {SUPPORTED_D_HEAD})")
        if h_kv == 0 or h % h_kv:
            raise ValueError(f"{h} query heads do not group onto {h_kv} K/V heads")
        return cls(b, h, h_kv, s_q, s_k, d)


def flash_attention(q, k, v, *, causal=True, sm_scale=None):
    """Attention by one fused Triton kernel (FlashAttention's forward pass).

    ``q``: ``(B, h, S_q, d_head)``, ``k`` and ``v``: ``(B, h_kv, S_k,
    d_head)`` torch tensors on the same device (CUDA, or the CPU under
    ``TRITON_INTERPRET=1``), of one dtype: float16, bfloat16 or float32.
    ``h`` must be a multiple of ``h_kv``; query head ``i`` reads K/V head
    ``i // (h // h_kv)`` in place (no copies of K/V).  ``d_head`` in
    {16, 32, 64, 128}; any ``S_q`` and ``S_k``.  ``sm_scale`` defaults to
    ``1/sqrt(d_head)``.  ``causal`` uses the end-aligned mask; rows that may
    see no key give zeros.

    Returns a new tensor shaped and typed like ``q``; the inputs are left
    unchanged.  The work happens in your Triton kernel: an online softmax
    over tiles of keys, never the whole ``(S_q, S_k)`` score matrix, and no
    PyTorch matmul, softmax or ``scaled_dot_product_attention``.  Raises
    ``ValueError`` for shapes it does not support.

    Choices: any strides are accepted (nothing is copied; Triton specializes
    unit strides itself); float32 products use IEEE fp32 in ``tl.dot`` (not
    TF32), so fp32 results match an fp32 reference closely; accumulation is
    always fp32.
    """
    shp = _FlashShapes.check(q, k, v)
    scale = (1.0 / math.sqrt(shp.d_head)) if sm_scale is None else float(sm_scale)
    out = torch.empty(q.shape, dtype=q.dtype, device=q.device)
    if out.numel() == 0:
        return out

    cfg = _CONFIG
    n_m_blocks = triton.cdiv(shp.s_q, cfg.BLOCK_M)
    grid = (shp.batch * shp.n_heads * n_m_blocks,)
    _flash_fwd_kernel[grid](
        q, k, v, out, scale * _LOG2E,
        *q.stride(), *k.stride(), *v.stride(), *out.stride(),
        shp.n_heads, shp.s_q, shp.s_k, shp.s_k - shp.s_q, n_m_blocks,
        GROUP=shp.n_heads // shp.n_kv_heads, HEAD_DIM=shp.d_head,
        BLOCK_M=cfg.BLOCK_M, BLOCK_N=cfg.BLOCK_N,
        CAUSAL=bool(causal), PRECISION="ieee" if q.dtype == torch.float32 else "tf32",
        num_warps=cfg.num_warps, num_stages=cfg.num_stages(q.dtype, shp.d_head),
    )
    return out


# -- 3. a step before the kernel: the online softmax inside a given kernel ----------
def _jit(fn):
    """``triton.jit(fn)`` where Triton is installed; ``fn`` itself elsewhere
    (macOS, Windows), so that this file imports without Triton."""
    return triton.jit(fn) if triton is not None else fn


@_jit
def tile_update(m_i, l_i, acc, s, v):
    """The online softmax's update by one tile, in Triton (called by
    ``_query_block_kernel`` below, once per tile of keys).

    * ``m_i``: ``(BLOCK_M,)`` float32, each query row's running maximum
      score (starts at ``-inf``);
    * ``l_i``: ``(BLOCK_M,)`` float32, running sum of ``exp(score - m_i)``
      (starts at 0);
    * ``acc``: ``(BLOCK_M, D_HEAD)`` float32, running sum of
      ``exp(score - m_i) * v`` (starts at 0);
    * ``s``: ``(BLOCK_M, BLOCK_N)`` float32, this tile's scores, already
      scaled by ``sm_scale`` (natural-log units: use ``tl.exp``) and masked
      (``-inf`` where a key may not be seen);
    * ``v``: ``(BLOCK_N, D_HEAD)``, this tile's values.

    Returns the updated ``(m_i, l_i, acc)``, the same as
    ``online_softmax_step`` for one tile: the new maximum is the larger of
    the running one and this tile's, the old ``l_i`` and ``acc`` are
    rescaled by ``exp(m_old - m_new)``, and a row that has seen only
    ``-inf`` so far must not become NaN.  Triton ops only (``tl.maximum``,
    ``tl.max(x, 1)``, ``tl.exp``, ``tl.where``, ``tl.sum(x, 1)``,
    ``tl.dot``; ``x[:, None]`` broadcasts a row vector).
    """
    running = tl.maximum(m_i, tl.max(s, 1))
    pivot = tl.where(running > -3.0e38, running, 0.0)          # still -inf: no pivot yet
    decay = tl.exp(m_i - pivot)
    weights = tl.exp(s - pivot[:, None])
    return (running, decay * l_i + tl.sum(weights, 1),
            decay[:, None] * acc + tl.dot(weights.to(v.dtype), v))


@_jit
def tile_finish(acc, l_i):
    """The output of a query block after its last tile, in Triton:
    ``acc / l_i`` row by row, ``(BLOCK_M, D_HEAD)`` float32.  A row whose
    ``l_i`` is 0 saw no key at all (causal, ``S_q > S_k``): its output is
    zeros, never NaN."""
    return acc / (l_i + (l_i == 0.0).to(tl.float32))[:, None]


QUERY_BLOCK = 16   # BLOCK_M = BLOCK_N = 16: tl.dot needs at least 16 in every dimension

if triton is not None:  # given: you write tile_update and tile_finish above
    @triton.jit
    def _query_block_kernel(
        Q, K, V, O,                                    # (S_q, d), (S_k, d), (S_k, d), (S_q, d)
        stride_qs, stride_ks, stride_vs, stride_os,    # row strides (each row is contiguous)
        S_Q, S_K, sm_scale,
        D_HEAD: tl.constexpr, CAUSAL: tl.constexpr,
        BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
    ):
        """One program: BLOCK_M query rows of one head against all keys, tile by tile."""
        pid = tl.program_id(0)                               # which block of query rows
        offs_m = pid * BLOCK_M + tl.arange(0, BLOCK_M)       # this block's query rows
        offs_n = tl.arange(0, BLOCK_N)
        offs_d = tl.arange(0, D_HEAD)
        q = tl.load(Q + offs_m[:, None] * stride_qs + offs_d[None, :],
                    mask=offs_m[:, None] < S_Q, other=0.0)               # (BLOCK_M, D_HEAD)
        m_i = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)
        l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
        acc = tl.zeros([BLOCK_M, D_HEAD], dtype=tl.float32)
        row_pos = S_K - S_Q + offs_m                         # end-aligned absolute positions
        for start_n in range(0, S_K, BLOCK_N):
            cols = start_n + offs_n                          # this tile's keys
            k = tl.load(K + cols[None, :] * stride_ks + offs_d[:, None],
                        mask=cols[None, :] < S_K, other=0.0)             # (D_HEAD, BLOCK_N)
            v = tl.load(V + cols[:, None] * stride_vs + offs_d[None, :],
                        mask=cols[:, None] < S_K, other=0.0)             # (BLOCK_N, D_HEAD)
            s = tl.dot(q, k) * sm_scale                                  # (BLOCK_M, BLOCK_N)
            visible = cols[None, :] < S_K
            if CAUSAL:
                visible = visible & (cols[None, :] <= row_pos[:, None])
            s = tl.where(visible, s, float("-inf"))
            m_i, l_i, acc = tile_update(m_i, l_i, acc, s, v)             # yours
        out = tile_finish(acc, l_i)                                      # yours
        tl.store(O + offs_m[:, None] * stride_os + offs_d[None, :], out.to(O.dtype.element_ty),
                 mask=offs_m[:, None] < S_Q)


def query_block_attention(q, k, v, *, causal=False, sm_scale=None):
    """Attention of one head through ``_query_block_kernel`` (given): your
    ``tile_update`` and ``tile_finish`` do the online softmax.

    ``q``: ``(S_q, d_head)``, ``k`` and ``v``: ``(S_k, d_head)``, float32
    torch tensors on one device (CUDA, or the CPU under
    ``TRITON_INTERPRET=1``); ``d_head`` in {16, 32, 64, 128}; any ``S_q``,
    ``S_k``.  ``sm_scale`` defaults to ``1/sqrt(d_head)``; ``causal`` uses
    the end-aligned mask.  The grid is ``(cdiv(S_q, 16),)``: program ``i``
    computes query rows ``16*i .. 16*i + 15`` against every tile of 16 keys.
    Returns ``(S_q, d_head)`` float32.  Given to you: nothing to write here.
    """
    if triton is None:
        raise ImportError("query_block_attention needs Triton, which has Linux wheels only "
                          "(pip install triton): use Linux or Colab for this part")
    if q.dim() != 2 or k.dim() != 2 or k.shape != v.shape or k.shape[1] != q.shape[1]:
        raise ValueError(f"q must be (S_q, d_head) and k, v (S_k, d_head): got "
                         f"{tuple(q.shape)}, {tuple(k.shape)}, {tuple(v.shape)}")
    s_q, d_head = q.shape
    if d_head not in (16, 32, 64, 128):
        raise ValueError(f"d_head={d_head} is not supported; use one of (16, 32, 64, 128)")
    q, k, v = (x.float().contiguous() for x in (q, k, v))
    out = torch.empty_like(q)                                            # (S_q, d_head)
    scale = 1.0 / math.sqrt(d_head) if sm_scale is None else float(sm_scale)
    grid = (triton.cdiv(s_q, QUERY_BLOCK),)                              # one program a block
    _query_block_kernel[grid](q, k, v, out, q.stride(0), k.stride(0), v.stride(0),
                              out.stride(0), s_q, k.shape[0], scale, D_HEAD=d_head,
                              CAUSAL=bool(causal), BLOCK_M=QUERY_BLOCK, BLOCK_N=QUERY_BLOCK)
    return out
