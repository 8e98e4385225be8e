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

    The leading axes broadcast against each other.  Where the maximum does
    not move (all ``-inf`` tiles included) the rescale factor is exactly 1,
    so such a row's ``l`` and ``acc`` come back unchanged.
    """
    m, l, acc = np.asarray(m), np.asarray(l), np.asarray(acc)
    scores, v = np.asarray(scores), np.asarray(v)
    if scores.shape[-1] == 0:
        return m, l, acc
    m_new = np.maximum(m, scores.max(axis=-1))
    shift = np.where(np.isneginf(m_new), 0.0, m_new)            # finite everywhere
    alpha = np.where(m_new == m, 1.0, np.exp(m - shift))         # exp(-inf) = 0 on a first hit
    p = np.exp(scores - shift[..., None])                        # masked entries: exp(-inf) = 0
    l_new = alpha * l + p.sum(axis=-1)
    acc_new = alpha[..., None] * acc + np.einsum("...rn,...ne->...re", p, v)
    dtype = np.result_type(acc, scores, v)
    return m_new.astype(dtype, copy=False), l_new.astype(dtype, copy=False), acc_new.astype(dtype, copy=False)


def blockwise_attention(q, k, v, block_size, causal=True):
    """Scaled dot-product attention computed ``block_size`` keys at a time.

    ``q``: ``(..., S_q, d_head)``, ``k`` and ``v``: ``(..., S_k, d_head)``
    (NumPy).  Walk over the keys in tiles of ``block_size`` (the last tile
    may be shorter), compute that tile's scaled, masked scores and fold them
    in with ``online_softmax_step``; never hold scores for more than
    ``block_size`` keys at once.  ``causal`` uses the end-aligned mask; rows
    that may see no key return zeros.  Returns ``(..., S_q, d_head)``.

    The leading axes of ``q`` and ``k``/``v`` only have to broadcast (K/V
    of shape ``(B, h_kv, 1, S_k, d)`` against queries ``(B, h_kv, group,
    S_q, d)`` is GQA without copies).  Returns ``q``'s floating dtype.
    """
    if int(block_size) != block_size or block_size < 1:
        raise ValueError(f"blockwise_attention: block_size must be a positive integer, got {block_size}")
    block_size = int(block_size)
    q, k, v = np.asarray(q), np.asarray(k), np.asarray(v)
    dtype = q.dtype if np.issubdtype(q.dtype, np.floating) else np.dtype(np.float64)
    s_q, d_head = q.shape[-2], q.shape[-1]
    s_k = k.shape[-2]
    lead = np.broadcast_shapes(q.shape[:-2], k.shape[:-2], v.shape[:-2])
    m = np.full(lead + (s_q,), -np.inf, dtype=dtype)
    l = np.zeros(lead + (s_q,), dtype=dtype)
    acc = np.zeros(lead + (s_q, v.shape[-1]), dtype=dtype)
    scale = dtype.type(1.0 / np.sqrt(d_head))
    last_visible = (s_k - s_q) + np.arange(s_q)[:, None]           # (S_q, 1): end-aligned
    for start in range(0, s_k, block_size):
        stop = min(start + block_size, s_k)
        scores = np.einsum("...qe,...ke->...qk", q, k[..., start:stop, :]) * scale
        if causal:
            scores = np.where(np.arange(start, stop)[None, :] <= last_visible, scores, -np.inf)
        m, l, acc = online_softmax_step(m, l, acc, scores.astype(dtype, copy=False), v[..., start:stop, :])
    seen = l > 0
    out = np.where(seen[..., None], acc / np.where(seen, l, 1.0)[..., None], 0.0)
    return out.astype(dtype, copy=False)


# Your Triton kernel goes here: an @triton.jit function (and helpers)
# that flash_attention launches.  Triton must see your kernel's source,
# so define it at module level in this file.


@triton.jit
def _fold_key_tiles(acc, l_i, m_i, q, kT_ptrs, v_ptrs, stride_kn, stride_vn, lo, hi, S_K, last_key, offs_n,
                    sm_scale, MASKED: tl.constexpr, CAUSAL: tl.constexpr, BLOCK_N: tl.constexpr,
                    PRECISION: tl.constexpr):
    """Fold the key tiles ``lo, lo + BLOCK_N, .. < hi`` into the running
    ``(acc, l_i, m_i)`` of one tile of query rows.

    ``MASKED`` tiles may run past ``S_K`` or cross the causal diagonal: their
    loads are masked and their scores set to ``-inf`` where a key is out of
    range or in a row's future.  Unmasked tiles are fully visible to every
    row, so they skip both.  The online softmax: new row maximum, shift by
    it (by 0 while a row has seen only ``-inf``), rescale the old ``l_i``
    and ``acc`` by ``exp(m_old - m_new)``, add this tile's share.
    """
    for start_n in range(lo, hi, BLOCK_N):
        cols = start_n + offs_n
        if MASKED:
            col_ok = cols < S_K
            kT = tl.load(kT_ptrs + start_n * stride_kn, mask=col_ok[None, :], other=0.0)
        else:
            kT = tl.load(kT_ptrs + start_n * stride_kn)
        s = tl.dot(q, kT, input_precision=PRECISION) * sm_scale                # (BLOCK_M, BLOCK_N)
        if MASKED:
            keep = col_ok[None, :]
            if CAUSAL:
                keep = keep & (cols[None, :] <= last_key[:, None])
            s = tl.where(keep, s, float("-inf"))

        m_new = tl.maximum(m_i, tl.max(s, 1))
        shift = tl.where(m_new == float("-inf"), 0.0, m_new)
        alpha = tl.exp(m_i - shift)                                             # 0 on a row's first keys
        p = tl.exp(s - shift[:, None])                                          # 0 where masked
        l_i = l_i * alpha + tl.sum(p, 1)
        if MASKED:
            vt = tl.load(v_ptrs + start_n * stride_vn, mask=col_ok[:, None], other=0.0)
        else:
            vt = tl.load(v_ptrs + start_n * stride_vn)
        acc = acc * alpha[:, None] + tl.dot(p.to(vt.dtype), vt, input_precision=PRECISION)
        m_i = m_new
    return acc, l_i, m_i


@triton.jit
def _flash_fwd_kernel(
    Q, K, V, O,
    stride_qb, stride_qh, stride_qm, stride_qd,
    stride_kb, stride_kh, stride_kn, stride_kd,
    stride_vb, stride_vh, stride_vn, stride_vd,
    stride_ob, stride_oh, stride_om, stride_od,
    H_KV, GROUP, S_Q, S_K, sm_scale,
    CAUSAL: tl.constexpr, HEAD_DIM: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, PRECISION: tl.constexpr,
):
    """One program: one (batch, K/V head) pair and one tile of BLOCK_M query
    rows, for every query head of that K/V head's group in turn.

    Keys come in two phases: the tiles every row of the query tile may see
    in full (no masks), then the tiles that cross the causal diagonal or the
    end of the keys (masked).  Running statistics and products in fp32.
    """
    pid_bk = tl.program_id(0)                 # batch * H_KV + kv head
    pid_m = tl.program_id(1)                  # query tile
    b = (pid_bk // H_KV).to(tl.int64)
    hk = (pid_bk % H_KV).to(tl.int64)

    start_m = pid_m * BLOCK_M
    offs_m = start_m + tl.arange(0, BLOCK_M)
    offs_n = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, HEAD_DIM)
    row_ok = offs_m < S_Q
    diag = S_K - S_Q                          # query i sees keys 0 .. diag + i
    last_key = diag + offs_m                  # (BLOCK_M,)

    if CAUSAL:
        # keys 0 .. diag + start_m are visible to every row of the tile; keys
        # from diag + start_m + BLOCK_M on to none of them.
        full_end = (tl.minimum(tl.maximum(diag + start_m + 1, 0), S_K) // BLOCK_N) * BLOCK_N
        hi = tl.minimum(tl.maximum(diag + start_m + BLOCK_M, 0), S_K)
    else:
        full_end = (S_K // BLOCK_N) * BLOCK_N
        hi = S_K

    # K is addressed transposed, (HEAD_DIM, BLOCK_N), by broadcasting the
    # offsets: d along rows, keys along columns.  V as (BLOCK_N, HEAD_DIM).
    kT_ptrs = K + b * stride_kb + hk * stride_kh + offs_d[:, None] * stride_kd + offs_n[None, :] * stride_kn
    v_ptrs = V + b * stride_vb + hk * stride_vh + offs_n[:, None] * stride_vn + offs_d[None, :] * stride_vd

    for g in range(0, GROUP):                 # the query heads sharing this K/V head
        h = hk * GROUP + g
        q_ptrs = Q + b * stride_qb + h * stride_qh + offs_m[:, None] * stride_qm + offs_d[None, :] * stride_qd
        q = tl.load(q_ptrs, mask=row_ok[:, None], other=0.0)

        m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)
        l_i = tl.zeros([BLOCK_M], tl.float32)
        acc = tl.zeros([BLOCK_M, HEAD_DIM], tl.float32)

        acc, l_i, m_i = _fold_key_tiles(acc, l_i, m_i, q, kT_ptrs, v_ptrs, stride_kn, stride_vn,
                                        0, full_end, S_K, last_key, offs_n, sm_scale,
                                        MASKED=False, CAUSAL=CAUSAL, BLOCK_N=BLOCK_N, PRECISION=PRECISION)
        acc, l_i, m_i = _fold_key_tiles(acc, l_i, m_i, q, kT_ptrs, v_ptrs, stride_kn, stride_vn,
                                        full_end, hi, S_K, last_key, offs_n, sm_scale,
                                        MASKED=True, CAUSAL=CAUSAL, BLOCK_N=BLOCK_N, PRECISION=PRECISION)

        out = acc / tl.where(l_i > 0.0, l_i, 1.0)[:, None]                     # rows that saw nothing: 0
        o_ptrs = O + b * stride_ob + h * stride_oh + offs_m[:, None] * stride_om + offs_d[None, :] * stride_od
        tl.store(o_ptrs, out.to(O.dtype.element_ty), mask=row_ok[:, None])


SUPPORTED_D_HEAD = (16, 32, 64, 128)
_SUPPORTED_DTYPES = (torch.float16, torch.bfloat16, torch.float32)


def _launch_config(dtype, d_head):
    """Tile sizes and launch options: tiles that fit the shared memory of
    sm_80 / sm_90 for every supported ``d_head`` and dtype."""
    if dtype == torch.float32:
        # fp32 tiles are twice as large; exact fp32 products ("ieee"), not tf32.
        return dict(BLOCK_M=64, BLOCK_N=32 if d_head == 128 else 64, PRECISION="ieee",
                    num_warps=4, num_stages=2)
    if d_head <= 32:
        return dict(BLOCK_M=64, BLOCK_N=64, PRECISION="tf32", num_warps=4, num_stages=3)
    return dict(BLOCK_M=128, BLOCK_N=64, PRECISION="tf32", num_warps=8, num_stages=3 if d_head == 64 else 2)


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

    The grid is ``(B * h_kv, ceil(S_q / BLOCK_M))``: a program takes one
    K/V head and one tile of query rows and loops over the ``h // h_kv``
    query heads of that head's group, so a group's programs share their K/V
    head's tiles (any strides: the tensors are read where they are).
    """
    for name, t in (("q", q), ("k", k), ("v", v)):
        if not isinstance(t, torch.Tensor) or t.dim() != 4:
            raise ValueError(f"flash_attention: {name} must be a 4-D tensor (B, heads, S, d_head)")
    if not (q.dtype == k.dtype == v.dtype) or q.dtype not in _SUPPORTED_DTYPES:
        raise ValueError(f"flash_attention: q, k, v must share one dtype of float16, bfloat16, "
                         f"float32; got {q.dtype}, {k.dtype}, {v.dtype}")
    if not (q.device == k.device == v.device):
        raise ValueError("flash_attention: q, k and v must be on the same device")
    b, h, s_q, d_head = q.shape
    if k.shape != v.shape:
        raise ValueError(f"flash_attention: k {tuple(k.shape)} and v {tuple(v.shape)} differ")
    h_kv, s_k = k.shape[1], k.shape[2]
    if k.shape[0] != b or k.shape[3] != d_head:
        raise ValueError(f"flash_attention: k/v {tuple(k.shape)} do not fit q {tuple(q.shape)}")
    if h_kv == 0 or h % h_kv:
        raise ValueError(f"flash_attention: h={h} is not a multiple of h_kv={h_kv}")
    if d_head not in SUPPORTED_D_HEAD:
        raise ValueError(f"flash_attention: d_head={d_head} not in {SUPPORTED_D_HEAD}")
    scale = 1.0 / math.sqrt(d_head) if sm_scale is None else float(sm_scale)

    out = torch.empty((b, h, s_q, d_head), dtype=q.dtype, device=q.device)
    if out.numel() == 0:
        return out
    cfg = _launch_config(q.dtype, d_head)
    grid = (b * h_kv, triton.cdiv(s_q, cfg["BLOCK_M"]))
    _flash_fwd_kernel[grid](
        q, k, v, out,
        *q.stride(), *k.stride(), *v.stride(), *out.stride(),
        h_kv, h // h_kv, s_q, s_k, scale,
        CAUSAL=bool(causal), HEAD_DIM=d_head, **cfg,
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
    m_new = tl.maximum(m_i, tl.max(s, 1))
    anchor = tl.where(m_new == float("-inf"), 0.0, m_new)
    alpha = tl.exp2((m_i - anchor) * 1.4426950408889634)          # exp(x) = 2^(x log2 e)
    p = tl.exp2((s - anchor[:, None]) * 1.4426950408889634)
    return m_new, l_i * alpha + tl.sum(p, 1), acc * alpha[:, None] + tl.dot(p, v.to(p.dtype))


@_jit
def tile_finish(acc, l_i):
    """The output of a query block after its last tile, in Triton:
    ``acc / l_i`` row by row, ``(BLOCK_M, D_HEAD)`` float32.  A row whose
    ``l_i`` is 0 saw no key at all (causal, ``S_q > S_k``): its output is
    zeros, never NaN."""
    inv = tl.where(l_i > 0.0, 1.0 / l_i, 0.0)
    return acc * inv[:, None]


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
