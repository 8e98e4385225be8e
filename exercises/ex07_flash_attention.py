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
    raise NotImplementedError("ex07_flash_attention.online_softmax_step: your code here")


def blockwise_attention(q, k, v, block_size, causal=True):
    """Scaled dot-product attention computed ``block_size`` keys at a time.

    ``q``: ``(..., S_q, d_head)``, ``k`` and ``v``: ``(..., S_k, d_head)``
    (NumPy).  Walk over the keys in tiles of ``block_size`` (the last tile
    may be shorter), compute that tile's scaled, masked scores and fold them
    in with ``online_softmax_step``; never hold scores for more than
    ``block_size`` keys at once.  ``causal`` uses the end-aligned mask; rows
    that may see no key return zeros.  Returns ``(..., S_q, d_head)``.
    """
    raise NotImplementedError("ex07_flash_attention.blockwise_attention: your code here")


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
    raise NotImplementedError("ex07_flash_attention.tile_update: your code here")


@_jit
def tile_finish(acc, l_i):
    """The output of a query block after its last tile, in Triton:
    ``acc / l_i`` row by row, ``(BLOCK_M, D_HEAD)`` float32.  A row whose
    ``l_i`` is 0 saw no key at all (causal, ``S_q > S_k``): its output is
    zeros, never NaN."""
    raise NotImplementedError("ex07_flash_attention.tile_finish: your code here")


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
#
# Without Triton (macOS, Windows) `triton` is None: define your kernel
# under `if triton is not None:` so that this file still imports and
# the NumPy half above is checked there too.


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
    raise NotImplementedError("ex07_flash_attention.flash_attention: your code here")
