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

import numpy as np
import torch
import triton
import triton.language as tl


def _out_dtype(*arrays):
    """The common floating dtype of the inputs (float64 for non-floats)."""
    dtype = np.result_type(*[np.asarray(x) for x in arrays])
    if np.issubdtype(dtype, np.floating):
        return dtype
    return np.dtype(np.float64)


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

    Works row by row (a loop over the leading axes, flattened, and over the
    rows), in float64; the results come back in the inputs' common dtype.
    """
    out_dtype = _out_dtype(m, l, acc, scores, v)
    scores = np.asarray(scores, dtype=np.float64)
    lead = scores.shape[:-2]
    rows, n = scores.shape[-2], scores.shape[-1]
    v = np.asarray(v, dtype=np.float64)
    d_head = v.shape[-1]
    m = np.broadcast_to(np.asarray(m, dtype=np.float64), lead + (rows,))
    l = np.broadcast_to(np.asarray(l, dtype=np.float64), lead + (rows,))
    acc = np.broadcast_to(np.asarray(acc, dtype=np.float64), lead + (rows, d_head))
    v = np.broadcast_to(v, lead + (n, d_head))

    count = 1
    for size in lead:
        count *= size
    scores_flat = scores.reshape(count, rows, n)
    v_flat = v.reshape(count, n, d_head)
    m_old = m.reshape(count, rows)
    l_old = l.reshape(count, rows)
    acc_old = acc.reshape(count, rows, d_head)

    m_new = np.zeros((count, rows), dtype=np.float64)
    l_new = np.zeros((count, rows), dtype=np.float64)
    acc_new = np.zeros((count, rows, d_head), dtype=np.float64)
    for b in range(count):
        for r in range(rows):
            row = scores_flat[b, r]
            tile_max = np.max(row) if n > 0 else -np.inf
            new_max = max(m_old[b, r], tile_max)
            if new_max == -np.inf:
                # nothing but -inf so far: keep the row as it was (no NaN)
                m_new[b, r] = m_old[b, r]
                l_new[b, r] = l_old[b, r]
                acc_new[b, r] = acc_old[b, r]
                continue
            rescale = math.exp(m_old[b, r] - new_max)   # exp(-inf) = 0 for a fresh row
            p = np.exp(row - new_max)                   # masked scores give 0
            m_new[b, r] = new_max
            l_new[b, r] = rescale * l_old[b, r] + np.sum(p)
            acc_new[b, r] = rescale * acc_old[b, r] + p @ v_flat[b]

    return (m_new.reshape(lead + (rows,)).astype(out_dtype),
            l_new.reshape(lead + (rows,)).astype(out_dtype),
            acc_new.reshape(lead + (rows, d_head)).astype(out_dtype))


def blockwise_attention(q, k, v, block_size, causal=True):
    """Scaled dot-product attention computed ``block_size`` keys at a time.

    ``q``: ``(..., S_q, d_head)``, ``k`` and ``v``: ``(..., S_k, d_head)``
    (NumPy).  Walk over the keys in tiles of ``block_size`` (the last tile
    may be shorter), compute that tile's scaled, masked scores and fold them
    in with ``online_softmax_step``; never hold scores for more than
    ``block_size`` keys at once.  ``causal`` uses the end-aligned mask; rows
    that may see no key return zeros.  Returns ``(..., S_q, d_head)``.

    (``k`` and ``v`` are broadcast against ``q``'s leading axes.  Scale
    ``1/sqrt(d_head)``.)
    """
    out_dtype = _out_dtype(q, k, v)
    q = np.asarray(q, dtype=np.float64)
    k = np.asarray(k, dtype=np.float64)
    v = np.asarray(v, dtype=np.float64)
    block_size = int(block_size)
    if block_size < 1:
        raise ValueError("blockwise_attention: block_size must be at least 1")
    if q.ndim < 2 or k.ndim < 2 or v.ndim < 2:
        raise ValueError("blockwise_attention: q, k, v must be (..., S, d_head)")
    s_q, d_head = q.shape[-2], q.shape[-1]
    s_k = k.shape[-2]
    d_v = v.shape[-1]
    if k.shape[-1] != d_head or v.shape[-2] != s_k:
        raise ValueError("blockwise_attention: k and v do not fit q")
    lead = q.shape[:-2]
    k = np.broadcast_to(k, lead + (s_k, d_head))
    v = np.broadcast_to(v, lead + (s_k, d_v))
    count = 1
    for size in lead:
        count *= size
    q_flat = q.reshape(count, s_q, d_head)
    k_flat = k.reshape(count, s_k, d_head)
    v_flat = v.reshape(count, s_k, d_v)
    scale = 1.0 / math.sqrt(d_head)

    m = np.full((count, s_q), -np.inf)
    l = np.zeros((count, s_q))
    acc = np.zeros((count, s_q, d_v))
    for start in range(0, s_k, block_size):
        stop = min(start + block_size, s_k)
        n = stop - start
        # this tile's scores only: (count, S_q, n), at most block_size keys
        tile = np.zeros((count, s_q, n))
        for b in range(count):
            tile[b] = (q_flat[b] @ k_flat[b, start:stop].T) * scale
        if causal:
            for i in range(s_q):
                last_visible = s_k - s_q + i          # query i's absolute position
                first_hidden = last_visible + 1 - start  # first hidden column of this tile
                if first_hidden < 0:
                    first_hidden = 0
                if first_hidden < n:
                    tile[:, i, first_hidden:] = -np.inf
        m, l, acc = online_softmax_step(m, l, acc, tile, v_flat[:, start:stop])

    out = np.zeros((count, s_q, d_v))
    for b in range(count):
        for i in range(s_q):
            if l[b, i] > 0:
                out[b, i] = acc[b, i] / l[b, i]
            # else: the row saw no key; its output stays zero
    return out.reshape(lead + (s_q, d_v)).astype(out_dtype)


# Your Triton kernel goes here: an @triton.jit function (and helpers)
# that flash_attention launches.  Triton must see your kernel's source,
# so define it at module level in this file.
#
# A kernel is compiled for the GPU, not run as Python: it may read only
# its arguments and globals made with tl.constexpr(...).  A plain
# global (LOG2E = 1.44...) works in the CPU interpreter and is
# rejected by the GPU compiler: compute such constants on the host and
# pass them in (e.g. sm_scale * 1.4426950408889634 for exp2), or write
# LOG2E = tl.constexpr(1.4426950408889634).  tl.dot needs tiles of at
# least 16 in every dimension, and the tiles you keep must fit the
# GPU's shared memory: the grader compiles your kernel for sm_80 and
# sm_90 and tells you what the compiler says.

_LOG2E = 1.4426950408889634  # host side only: folded into the scale before launch
_BLOCK_M = 16  # query rows per program
_BLOCK_N = 16  # keys per tile of the inner loop


@triton.jit
def _flash_attention_kernel(
    Q, K, V, O,
    stride_qb, stride_qh, stride_qm, stride_qd,
    stride_kb, stride_kh, stride_kn, stride_kd,
    stride_vb, stride_vh, stride_vn, stride_vd,
    stride_ob, stride_oh, stride_om, stride_od,
    S_q, S_k, group, qk_scale,
    HEAD_DIM: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    CAUSAL: tl.constexpr,
    IEEE_FP32: tl.constexpr,
):
    # One program per (query block, head, batch element).
    pid_m = tl.program_id(0)      # which block of BLOCK_M query rows
    pid_h = tl.program_id(1)      # which query head
    pid_b = tl.program_id(2)      # which batch element
    kv_h = pid_h // group         # GQA: the K/V head this query head reads (in place)

    q_base = Q + pid_b.to(tl.int64) * stride_qb + pid_h.to(tl.int64) * stride_qh
    k_base = K + pid_b.to(tl.int64) * stride_kb + kv_h.to(tl.int64) * stride_kh
    v_base = V + pid_b.to(tl.int64) * stride_vb + kv_h.to(tl.int64) * stride_vh
    o_base = O + pid_b.to(tl.int64) * stride_ob + pid_h.to(tl.int64) * stride_oh

    rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)     # query rows of this program
    cols_in_tile = tl.arange(0, BLOCK_N)
    feats = tl.arange(0, HEAD_DIM)
    row_ok = rows < S_q

    # the query tile stays in registers for the whole loop
    q_ptrs = q_base + rows[:, None] * stride_qm + feats[None, :] * stride_qd
    q = tl.load(q_ptrs, mask=row_ok[:, None], other=0.0)

    m_i = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)   # running max (log2 units)
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)                 # running denominator
    acc = tl.zeros([BLOCK_M, HEAD_DIM], dtype=tl.float32)       # unnormalized output

    # End-aligned causal mask: query row r sits at S_k - S_q + r.
    diag = S_k - S_q
    if CAUSAL:
        # keys after the last row's position are hidden from the whole block
        hi = diag + (pid_m + 1) * BLOCK_M
        hi = tl.minimum(hi, S_k)
        hi = tl.maximum(hi, 0)
    else:
        hi = S_k

    for start_n in range(0, hi, BLOCK_N):
        cols = start_n + cols_in_tile
        col_ok = cols < S_k
        # K^T tile (HEAD_DIM, BLOCK_N)
        kt_ptrs = k_base + cols[None, :] * stride_kn + feats[:, None] * stride_kd
        kt = tl.load(kt_ptrs, mask=col_ok[None, :], other=0.0)
        if IEEE_FP32:
            qk = tl.dot(q, kt, input_precision="ieee")
        else:
            qk = tl.dot(q, kt)
        qk = qk * qk_scale                   # scale and log2(e) in one factor
        visible = col_ok[None, :]
        if CAUSAL:
            visible = visible & (cols[None, :] <= diag + rows[:, None])
        qk = tl.where(visible, qk, float("-inf"))

        m_new = tl.maximum(m_i, tl.max(qk, 1))
        # rows that have seen only -inf: shift by 0 instead of -inf (no NaN)
        m_shift = tl.where(m_new == float("-inf"), 0.0, m_new)
        alpha = tl.math.exp2(m_i - m_shift)          # rescales what was summed so far
        p = tl.math.exp2(qk - m_shift[:, None])
        l_i = l_i * alpha + tl.sum(p, 1)

        v_ptrs = v_base + cols[:, None] * stride_vn + feats[None, :] * stride_vd
        v = tl.load(v_ptrs, mask=col_ok[:, None], other=0.0)
        if IEEE_FP32:
            pv = tl.dot(p.to(v.dtype), v, input_precision="ieee")
        else:
            pv = tl.dot(p.to(v.dtype), v)
        acc = acc * alpha[:, None] + pv
        m_i = m_new

    # rows that saw no key (only when S_q > S_k, causal) have l == 0: output 0
    l_safe = tl.where(l_i == 0.0, 1.0, l_i)
    out = acc / l_safe[:, None]
    o_ptrs = o_base + rows[:, None] * stride_om + feats[None, :] * stride_od
    tl.store(o_ptrs, out.to(O.dtype.element_ty), mask=row_ok[:, None])


SUPPORTED_D_HEAD = (16, 32, 64, 128)
_SUPPORTED_DTYPES = (torch.float16, torch.bfloat16, torch.float32)


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

    Launch: a 3-D grid, one program per (block of 16 query rows, query
    head, batch element); each walks the keys 16 at a time (for ``causal``
    only up to the last key its rows may see).  float32 inputs use IEEE
    float32 dot products (no TF32), so they match a float32 reference.
    """
    for name, t in (("q", q), ("k", k), ("v", v)):
        if not isinstance(t, torch.Tensor):
            raise ValueError(f"flash_attention: {name} must be a torch tensor")
        if t.dim() != 4:
            raise ValueError(f"flash_attention: {name} must be (B, heads, S, d_head), "
                             f"got {tuple(t.shape)}")
    if q.dtype not in _SUPPORTED_DTYPES:
        raise ValueError(f"flash_attention: dtype {q.dtype} not supported "
                         "(float16, bfloat16 or float32)")
    if k.dtype != q.dtype or v.dtype != q.dtype:
        raise ValueError("flash_attention: q, k and v must have one dtype")
    if k.device != q.device or v.device != q.device:
        raise ValueError("flash_attention: q, k and v must be on one device")
    batch, n_heads, s_q, d_head = q.shape
    kv_batch, n_kv_heads, s_k, kv_d_head = k.shape
    if tuple(v.shape) != tuple(k.shape):
        raise ValueError("flash_attention: k and v must have the same shape")
    if kv_batch != batch:
        raise ValueError("flash_attention: q and k/v have different batch sizes")
    if kv_d_head != d_head:
        raise ValueError("flash_attention: q and k/v have different d_head")
    if d_head not in SUPPORTED_D_HEAD:
        raise ValueError(f"flash_attention: d_head {d_head} not in {SUPPORTED_D_HEAD}")
    if n_kv_heads == 0 or n_heads % n_kv_heads != 0:
        raise ValueError(f"flash_attention: {n_heads} query heads are not a multiple of "
                         f"{n_kv_heads} K/V heads")
    interpret = os.environ.get("TRITON_INTERPRET", "0").strip().lower() in ("1", "true", "yes", "on")
    if not interpret and not q.is_cuda:
        raise ValueError("flash_attention: tensors must be on a CUDA device "
                         "(or set TRITON_INTERPRET=1 before importing to run on the CPU)")
    if sm_scale is None:
        sm_scale = 1.0 / math.sqrt(d_head)

    out = torch.empty((batch, n_heads, s_q, d_head), dtype=q.dtype, device=q.device)
    if batch == 0 or n_heads == 0 or s_q == 0:
        return out
    if s_k == 0:
        # no key at all: every row attends to nothing
        out.zero_()
        return out

    group = n_heads // n_kv_heads
    qk_scale = float(sm_scale) * _LOG2E
    grid = (triton.cdiv(s_q, _BLOCK_M), n_heads, batch)
    _flash_attention_kernel[grid](
        q, k, v, out,
        q.stride(0), q.stride(1), q.stride(2), q.stride(3),
        k.stride(0), k.stride(1), k.stride(2), k.stride(3),
        v.stride(0), v.stride(1), v.stride(2), v.stride(3),
        out.stride(0), out.stride(1), out.stride(2), out.stride(3),
        s_q, s_k, group, qk_scale,
        HEAD_DIM=d_head,
        BLOCK_M=_BLOCK_M,
        BLOCK_N=_BLOCK_N,
        CAUSAL=bool(causal),
        IEEE_FP32=(q.dtype == torch.float32),
        num_warps=4,
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
    m_tile = tl.max(s, 1)
    m_new = tl.maximum(m_i, m_tile)
    m_use = tl.where(m_new == float("-inf"), 0.0, m_new)
    rescale = tl.exp(m_i - m_use)
    p = tl.exp(s - m_use[:, None])
    acc = acc * rescale[:, None]
    acc += tl.dot(p.to(v.dtype), v)
    l_i = l_i * rescale
    l_i += tl.sum(p, 1)
    return m_new, l_i, acc


@_jit
def tile_finish(acc, l_i):
    """The output of a query block after its last tile, in Triton:
    ``acc / l_i`` row by row, ``(BLOCK_M, D_HEAD)`` float32.  A row whose
    ``l_i`` is 0 saw no key at all (causal, ``S_q > S_k``): its output is
    zeros, never NaN."""
    denom = l_i
    denom = tl.where(denom == 0.0, 1.0, denom)
    return acc / denom[:, None]


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
