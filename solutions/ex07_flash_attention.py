"""Exercise G: the fused attention kernel (NumPy, then Triton).

Usually takes about 4 hours (the Triton kernel is most of it).  From the
chapters: "Attention from First Principles", section 5 (Complexity: the
34.4 GB score tensor, "hence FlashAttention") and section 8 (Production
implications: always use a fused attention kernel).

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
3. A step before the kernel: ``tile_update`` and ``tile_finish``, the
   online softmax written in Triton, inside a kernel that is given to you
   (``query_block_attention``: one head, one program per block of 16 query
   rows, the grid, the pointer arithmetic, the loads and the masks done).
4. ``flash_attention``: the whole loop as your own Triton kernel.

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

import numpy as np
import torch

try:  # Triton has Linux wheels only: on macOS and Windows the NumPy half still runs
    import triton
    import triton.language as tl
except ImportError:
    triton = tl = None


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
    """
    # BEGIN SOLUTION
    m_new = np.maximum(m, np.max(scores, axis=-1))              # (..., rows)
    shift = np.where(np.isneginf(m_new), 0.0, m_new)             # no -inf - -inf
    alpha = np.exp(m - shift)                                    # rescales the past
    p = np.exp(scores - shift[..., None])                        # (..., rows, n)
    l_new = alpha * l + np.sum(p, axis=-1)
    acc_new = alpha[..., None] * acc + p @ v                     # (..., rows, d_head)
    return m_new, l_new, acc_new
    # END SOLUTION


def blockwise_attention(q, k, v, block_size, causal=True):
    """Scaled dot-product attention computed ``block_size`` keys at a time.

    ``q``: ``(..., S_q, d_head)``, ``k`` and ``v``: ``(..., S_k, d_head)``
    (NumPy).  Walk over the keys in tiles of ``block_size`` (the last tile
    may be shorter), compute that tile's scaled, masked scores and fold them
    in with ``online_softmax_step``; never hold scores for more than
    ``block_size`` keys at once.  ``causal`` uses the end-aligned mask; rows
    that may see no key return zeros.  Returns ``(..., S_q, d_head)``.
    """
    # BEGIN SOLUTION
    q, k, v = np.asarray(q), np.asarray(k), np.asarray(v)
    s_q, d_head = q.shape[-2], q.shape[-1]
    s_k = k.shape[-2]
    scale = 1.0 / math.sqrt(d_head)
    m = np.full(q.shape[:-1], -np.inf, dtype=q.dtype)           # (..., S_q)
    l = np.zeros(q.shape[:-1], dtype=q.dtype)                    # (..., S_q)
    acc = np.zeros(q.shape[:-1] + (v.shape[-1],), dtype=q.dtype)  # (..., S_q, d_head)
    rows = (s_k - s_q + np.arange(s_q))[:, None]                 # absolute query positions
    for start in range(0, s_k, block_size):
        stop = min(start + block_size, s_k)
        scores = q @ np.swapaxes(k[..., start:stop, :], -1, -2) * scale  # (..., S_q, n)
        if causal:
            cols = np.arange(start, stop)[None, :]
            scores = np.where(cols <= rows, scores, -np.inf)
        m, l, acc = online_softmax_step(m, l, acc, scores, v[..., start:stop, :])
    out = np.divide(acc, l[..., None], out=np.zeros_like(acc), where=l[..., None] > 0)
    return out.astype(q.dtype, copy=False)
    # END SOLUTION


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
    # BEGIN SOLUTION
    m_new = tl.maximum(m_i, tl.max(s, 1))                      # (BLOCK_M,)
    m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)      # rows that saw no key yet
    alpha = tl.exp(m_i - m_safe)                               # rescales the past
    p = tl.exp(s - m_safe[:, None])                            # (BLOCK_M, BLOCK_N)
    l_new = l_i * alpha + tl.sum(p, 1)
    acc_new = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v)  # (BLOCK_M, D_HEAD)
    return m_new, l_new, acc_new
    # END SOLUTION


@_jit
def tile_finish(acc, l_i):
    """The output of a query block after its last tile, in Triton:
    ``acc / l_i`` row by row, ``(BLOCK_M, D_HEAD)`` float32.  A row whose
    ``l_i`` is 0 saw no key at all (causal, ``S_q > S_k``): its output is
    zeros, never NaN."""
    # BEGIN SOLUTION
    denom = tl.where(l_i > 0.0, l_i, 1.0)                     # no key seen: 0 / 1
    return acc / denom[:, None]
    # END SOLUTION


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
            # "ieee": float32 as float32 on a GPU too (not TF32's 10-bit mantissa),
            # so that the tile tests' float32 tolerance holds there as here
            s = tl.dot(q, k, input_precision="ieee") * sm_scale          # (BLOCK_M, BLOCK_N)
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
    if d_head not in SUPPORTED_D_HEAD:
        raise ValueError(f"d_head={d_head} is not supported; use one of {SUPPORTED_D_HEAD}")
    q, k, v = (x.float().contiguous() for x in (q, k, v))
    out = torch.empty_like(q)                                            # (S_q, d_head)
    scale = 1.0 / math.sqrt(d_head) if sm_scale is None else float(sm_scale)
    grid = (triton.cdiv(s_q, QUERY_BLOCK),)                              # one program a block
    _query_block_kernel[grid](q, k, v, out, q.stride(0), k.stride(0), v.stride(0),
                              out.stride(0), s_q, k.shape[0], scale, D_HEAD=d_head,
                              CAUSAL=bool(causal), BLOCK_M=QUERY_BLOCK, BLOCK_N=QUERY_BLOCK)
    return out


# BEGIN SOLUTION
# STUB: # Your Triton kernel goes here: an @triton.jit function (and helpers)
# STUB: # that flash_attention launches.  Triton must see your kernel's source,
# STUB: # so define it at module level in this file.
# STUB: #
# STUB: # A kernel is compiled for the GPU, not run as Python: it may read only
# STUB: # its arguments and globals made with tl.constexpr(...).  A plain
# STUB: # global (LOG2E = 1.44...) works in the CPU interpreter and is
# STUB: # rejected by the GPU compiler: compute such constants on the host and
# STUB: # pass them in (e.g. sm_scale * 1.4426950408889634 for exp2), or write
# STUB: # LOG2E = tl.constexpr(1.4426950408889634).  tl.dot needs tiles of at
# STUB: # least 16 in every dimension, and the tiles you keep must fit the
# STUB: # GPU's shared memory: the grader compiles your kernel for sm_80 and
# STUB: # sm_90 and tells you what the compiler says.
# STUB: #
# STUB: # Without Triton (macOS, Windows) `triton` is None: define your kernel
# STUB: # under `if triton is not None:` so that this file still imports and
# STUB: # the NumPy half above is checked there too.
_INTERPRET = os.environ.get("TRITON_INTERPRET") == "1"
# 1/ln(2): exp(x) == exp2(x * LOG2E).  Used on the host only: a kernel may not
# read a plain Python global (the GPU compiler rejects it).
LOG2E = 1.4426950408889634

if triton is not None:  # the kernel is built only where Triton is installed
    if _INTERPRET:
        # The interpreter runs every program in Python: small fixed tiles keep
        # CPU tests fast, and one config means no autotuning runs.
        _CONFIGS = [triton.Config({"BLOCK_M": 16, "BLOCK_N": 16}, num_warps=1)]
    else:
        # Sizes that suit recent GPUs (Ampere, Hopper).  A 128-row tile takes 8
        # warps: with 4, each thread would hold 128 float32 accumulators at
        # d_head 128 and the compiler spills registers to memory.  A 64x64 tile
        # on 4 warps is left out: on sm_80 at d_head 128 it needs 255 registers a
        # thread, ptxas's maximum (grader/gpu/aot.py's margin), one step from spilling.
        _CONFIGS = [
            triton.Config({"BLOCK_M": bm, "BLOCK_N": bn}, num_warps=w, num_stages=s)
            for bm, w, bn in ((64, 4, 32), (128, 8, 32), (128, 8, 64)) for s in (2, 3)
        ]

    @triton.autotune(configs=_CONFIGS, key=["S_Q", "S_K", "D_HEAD", "CAUSAL"])
    @triton.jit
    def _flash_fwd(
        Q, K, V, O,                                   # pointers to the tensors
        stride_qb, stride_qh, stride_qs, stride_qd,   # strides of q (and o: same layout)
        stride_kb, stride_kh, stride_ks, stride_kd,
        stride_vb, stride_vh, stride_vs, stride_vd,
        stride_ob, stride_oh, stride_os, stride_od,
        H, GROUP, S_Q, S_K, qk_scale,                 # qk_scale = sm_scale / ln(2), from the host
        D_HEAD: tl.constexpr, CAUSAL: tl.constexpr,
        BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
    ):
        """One program: BLOCK_M query rows of one (batch, head), all keys."""
        tl.static_assert(BLOCK_M >= 16)   # tl.dot needs tiles of at least 16
        tl.static_assert(BLOCK_N >= 16)
        tl.static_assert(D_HEAD >= 16)
        pid_m = tl.program_id(0)
        pid_bh = tl.program_id(1)
        b = pid_bh // H
        head = pid_bh % H
        kv_head = head // GROUP                       # GQA: the shared K/V head

        offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)   # query rows of this tile
        offs_n = tl.arange(0, BLOCK_N)
        offs_d = tl.arange(0, D_HEAD)
        q_ptrs = Q + b * stride_qb + head * stride_qh \
            + offs_m[:, None] * stride_qs + offs_d[None, :] * stride_qd
        q = tl.load(q_ptrs, mask=offs_m[:, None] < S_Q, other=0.0)      # (BLOCK_M, D_HEAD)
        k_base = K + b * stride_kb + kv_head * stride_kh
        v_base = V + b * stride_vb + kv_head * stride_vh

        m_i = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)   # running max (log2 units)
        l_i = tl.zeros([BLOCK_M], dtype=tl.float32)                 # running denominator
        acc = tl.zeros([BLOCK_M, D_HEAD], dtype=tl.float32)         # unnormalized output

        pos_m = S_K - S_Q + offs_m                    # end-aligned absolute positions
        hi = S_K
        if CAUSAL:                                    # keys past the tile's last row are hidden
            hi = tl.minimum(S_K, tl.maximum(S_K - S_Q + (pid_m + 1) * BLOCK_M, 0))
        for start_n in range(0, hi, BLOCK_N):
            cols = start_n + offs_n
            k = tl.load(k_base + cols[None, :] * stride_ks + offs_d[:, None] * stride_kd,
                        mask=cols[None, :] < S_K, other=0.0)            # (D_HEAD, BLOCK_N)
            v = tl.load(v_base + cols[:, None] * stride_vs + offs_d[None, :] * stride_vd,
                        mask=cols[:, None] < S_K, other=0.0)            # (BLOCK_N, D_HEAD)
            s = tl.dot(q, k) * qk_scale                                 # (BLOCK_M, BLOCK_N)
            visible = cols[None, :] < S_K
            if CAUSAL:
                visible = visible & (cols[None, :] <= pos_m[:, None])
            s = tl.where(visible, s, float("-inf"))
            m_new = tl.maximum(m_i, tl.max(s, 1))
            shift = tl.where(m_new == float("-inf"), 0.0, m_new)     # rows that saw no key yet
            alpha = tl.exp2(m_i - shift)                              # rescale the past
            p = tl.exp2(s - shift[:, None])
            l_i = l_i * alpha + tl.sum(p, 1)
            acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v)
            m_i = m_new

        l_safe = tl.where(l_i > 0.0, l_i, 1.0)        # a row that saw no key outputs zeros
        out = acc / l_safe[:, None]
        o_ptrs = O + b * stride_ob + head * stride_oh \
            + offs_m[:, None] * stride_os + offs_d[None, :] * stride_od
        tl.store(o_ptrs, out.to(O.dtype.element_ty), mask=offs_m[:, None] < S_Q)
# END SOLUTION


SUPPORTED_D_HEAD = (16, 32, 64, 128)


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
    """
    if triton is None:
        raise ImportError("flash_attention needs Triton, which has Linux wheels only "
                          "(pip install triton): use Linux or Colab for this part")
    # BEGIN SOLUTION
    if q.dim() != 4 or k.dim() != 4 or v.dim() != 4:
        raise ValueError("q, k and v must be 4-d: (B, heads, S, d_head)")
    batch, n_heads, s_q, d_head = q.shape
    _, n_kv, s_k, _ = k.shape
    if k.shape != v.shape or k.shape[0] != batch or k.shape[-1] != d_head:
        raise ValueError(f"k and v must be (B, h_kv, S_k, d_head) matching q: "
                         f"got q {tuple(q.shape)}, k {tuple(k.shape)}, v {tuple(v.shape)}")
    if n_kv == 0 or n_heads % n_kv:
        raise ValueError(f"h={n_heads} query heads is not a multiple of h_kv={n_kv}")
    if d_head not in SUPPORTED_D_HEAD:
        raise ValueError(f"d_head={d_head} is not supported; use one of {SUPPORTED_D_HEAD}")
    if not (q.dtype == k.dtype == v.dtype):
        raise ValueError("q, k and v must have one dtype")
    sm_scale = 1.0 / math.sqrt(d_head) if sm_scale is None else float(sm_scale)
    out = torch.empty_like(q)                                  # (B, h, S_q, d_head)

    def grid(meta):
        return (triton.cdiv(s_q, meta["BLOCK_M"]), batch * n_heads)

    _flash_fwd[grid](
        q, k, v, out,
        *q.stride(), *k.stride(), *v.stride(), *out.stride(),
        n_heads, n_heads // n_kv, s_q, s_k, sm_scale * LOG2E,   # scores in log2 units: exp2
        D_HEAD=d_head, CAUSAL=bool(causal),
    )
    return out
    # END SOLUTION
