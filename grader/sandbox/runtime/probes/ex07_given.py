"""The kernel ex07 gives (``query_block_attention``), for a module that lacks it.

"Given, not a task": ``_query_block_kernel`` and ``query_block_attention``
are handed to students whole, and the step's tests grade only their
``tile_update`` and ``tile_finish``.  A module without the given code (a
student who deleted it, or wrote the step in a file of their own) is graded
through this copy, bound to the module's own ``tile_update`` and
``tile_finish`` (``bound``), instead of losing every tile test.  The copy
is the exercise's text, block for block (``tests/test_ex07_given.py``
fails when they differ).  Imports nothing of the grader; a worker imports
it only where Triton is installed.
"""
from __future__ import annotations

import math

import torch
import triton
import triton.language as tl

SUPPORTED_D_HEAD = (16, 32, 64, 128)


def tile_update(m_i, l_i, acc, s, v):  # replaced by the module's own (``bound``)
    raise NotImplementedError("tile_update: bound to the student's module by bound()")


def tile_finish(acc, l_i):  # replaced by the module's own (``bound``)
    raise NotImplementedError("tile_finish: bound to the student's module by bound()")


QUERY_BLOCK = 16   # BLOCK_M = BLOCK_N = 16: tl.dot needs at least 16 in every dimension


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


def bound(module):
    """``query_block_attention`` of this copy around ``module``'s ``tile_update``
    and ``tile_finish`` (the kernel reads them as its globals)."""
    global tile_update, tile_finish
    tile_update, tile_finish = module.tile_update, module.tile_finish
    return query_block_attention
