"""Exercise G in the style of Triton's matrix-multiplication tutorial
(03-matrix-multiplication.py) applied to attention: a 1-D launch grid
decomposed into (query block, head) program ids with GROUP_SIZE_M-style
grouped ordering for L2 reuse, pointer blocks built once and advanced with
``ptrs += BLOCK_N * stride`` each iteration, accumulation in float32 with
``acc = tl.dot(a, b, acc)``.  Natural-exp online softmax.
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
    scores = np.asarray(scores)
    tile_max = scores.max(axis=-1)
    m_new = np.fmax(m, tile_max)
    ref = m_new.copy()
    ref[np.isneginf(ref)] = 0.0
    correction = np.exp(m - ref)
    p = np.exp(scores - ref[..., None])
    return m_new, correction * l + p.sum(-1), correction[..., None] * acc + p @ v


def blockwise_attention(q, k, v, block_size, causal=True):
    q = np.asarray(q)
    k = np.asarray(k)
    v = np.asarray(v)
    M, N, D = q.shape[-2], k.shape[-2], q.shape[-1]
    out_dtype = np.promote_types(q.dtype, np.float32)
    lead = np.broadcast_shapes(q.shape[:-2], k.shape[:-2])
    m = np.full(lead + (M,), -np.inf, out_dtype)
    l = np.zeros(lead + (M,), out_dtype)
    acc = np.zeros(lead + (M, v.shape[-1]), out_dtype)
    qs = q * (1.0 / math.sqrt(D))
    for n0 in range(0, N, block_size):
        n1 = min(N, n0 + block_size)
        s = qs @ np.swapaxes(k[..., n0:n1, :], -1, -2)
        if causal:
            visible = np.arange(n0, n1)[None, :] <= (np.arange(M) + N - M)[:, None]
            s = np.where(visible, s, -np.inf)
        m, l, acc = online_softmax_step(m, l, acc, s, v[..., n0:n1, :])
    denom = np.where(l > 0, l, 1.0)
    return (np.where((l > 0)[..., None], acc / denom[..., None], 0.0)).astype(out_dtype)


# -- 3. a step before the kernel: the online softmax inside a given kernel ----------
def _jit(fn):
    return triton.jit(fn) if triton is not None else fn


@_jit
def tile_update(m_i, l_i, acc, s, v):
    m_ij = tl.maximum(m_i, tl.max(s, 1))
    m_safe = tl.where(m_ij == float("-inf"), 0.0, m_ij)
    alpha = tl.exp(m_i - m_safe)
    p = tl.exp(s - m_safe[:, None])
    l_i = l_i * alpha + tl.sum(p, 1)
    acc = acc * alpha[:, None]
    acc = tl.dot(p.to(v.dtype), v, acc)
    return m_ij, l_i, acc


@_jit
def tile_finish(acc, l_i):
    l_safe = tl.where(l_i == 0.0, 1.0, l_i)
    return tl.where(l_i[:, None] == 0.0, 0.0, acc / l_safe[:, None])


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




SUPPORTED_D_HEAD = (16, 32, 64, 128)

if triton is not None:
    @triton.jit
    def attention_kernel(
            q_ptr, k_ptr, v_ptr, o_ptr,
            M, N, H, N_REP, num_pid_m, sm_scale,
            stride_qb, stride_qh, stride_qm, stride_qd,
            stride_kb, stride_kh, stride_kn, stride_kd,
            stride_vb, stride_vh, stride_vn, stride_vd,
            stride_ob, stride_oh, stride_om, stride_od,
            D: tl.constexpr, CAUSAL: tl.constexpr, F32_IEEE: tl.constexpr,
            BLOCK_SIZE_M: tl.constexpr, BLOCK_SIZE_N: tl.constexpr, GROUP_SIZE_H: tl.constexpr):
        # -----------------------------------------------------------
        # Map program ids `pid` to the (query block, head) it should compute,
        # in grouped ordering: GROUP_SIZE_H heads that share a K/V head run together.
        pid = tl.program_id(axis=0)
        num_pid_h = H
        num_pid_in_group = GROUP_SIZE_H * num_pid_m
        group_id = pid // num_pid_in_group
        first_pid_h = group_id * GROUP_SIZE_H
        group_size_h = min(num_pid_h - first_pid_h, GROUP_SIZE_H)
        pid_h = first_pid_h + ((pid % num_pid_in_group) % group_size_h)
        pid_m = (pid % num_pid_in_group) // group_size_h
        pid_b = tl.program_id(axis=1)
        kv_h = pid_h // N_REP
        # -----------------------------------------------------------
        # Create pointers for the first blocks of Q, K^T and V.
        offs_m = pid_m * BLOCK_SIZE_M + tl.arange(0, BLOCK_SIZE_M)
        offs_n = tl.arange(0, BLOCK_SIZE_N)
        offs_d = tl.arange(0, D)
        q_ptrs = q_ptr + pid_b * stride_qb + pid_h * stride_qh + (offs_m[:, None] * stride_qm + offs_d[None, :] * stride_qd)
        kT_ptrs = k_ptr + pid_b * stride_kb + kv_h * stride_kh + (offs_d[:, None] * stride_kd + offs_n[None, :] * stride_kn)
        v_ptrs = v_ptr + pid_b * stride_vb + kv_h * stride_vh + (offs_n[:, None] * stride_vn + offs_d[None, :] * stride_vd)
        q = tl.load(q_ptrs, mask=offs_m[:, None] < M, other=0.0)
        m_i = tl.full((BLOCK_SIZE_M,), float("-inf"), tl.float32)
        l_i = tl.zeros((BLOCK_SIZE_M,), dtype=tl.float32)
        accumulator = tl.zeros((BLOCK_SIZE_M, D), dtype=tl.float32)
        q_pos = N - M + offs_m
        for n in range(0, tl.cdiv(N, BLOCK_SIZE_N)):
            n_idx = n * BLOCK_SIZE_N + offs_n
            kT = tl.load(kT_ptrs, mask=n_idx[None, :] < N, other=0.0)
            if F32_IEEE:
                s = tl.dot(q, kT, input_precision="ieee")
            else:
                s = tl.dot(q, kT)
            s = s * sm_scale
            ok = n_idx[None, :] < N
            if CAUSAL:
                ok = ok & (n_idx[None, :] <= q_pos[:, None])
            s = tl.where(ok, s, float("-inf"))
            m_new = tl.maximum(m_i, tl.max(s, axis=1))
            m_ref = tl.where(m_new > float("-inf"), m_new, 0.0)
            p = tl.exp(s - m_ref[:, None])
            corr = tl.exp(m_i - m_ref)
            l_i = l_i * corr + tl.sum(p, axis=1)
            v = tl.load(v_ptrs, mask=n_idx[:, None] < N, other=0.0)
            if F32_IEEE:
                accumulator = tl.dot(p.to(v.dtype), v, accumulator * corr[:, None], input_precision="ieee")
            else:
                accumulator = tl.dot(p.to(v.dtype), v, accumulator * corr[:, None])
            m_i = m_new
            # Advance the pointers to the next K/V block.
            kT_ptrs += BLOCK_SIZE_N * stride_kn
            v_ptrs += BLOCK_SIZE_N * stride_vn
        l_div = tl.where(l_i > 0.0, l_i, 1.0)
        o = accumulator / l_div[:, None]
        o_ptrs = o_ptr + pid_b * stride_ob + pid_h * stride_oh + (offs_m[:, None] * stride_om + offs_d[None, :] * stride_od)
        tl.store(o_ptrs, o.to(o_ptr.dtype.element_ty), mask=offs_m[:, None] < M)


def flash_attention(q, k, v, *, causal=True, sm_scale=None):
    if triton is None:
        raise ImportError("flash_attention needs Triton, which has Linux wheels only "
                          "(pip install triton): use Linux or Colab for this part")
    # Check constraints.
    if q.ndim != 4 or k.ndim != 4 or k.shape != v.shape:
        raise ValueError("Incompatible dimensions: q (B, h, S_q, d), k and v (B, h_kv, S_k, d)")
    B, H, M, D = q.shape
    _, H_KV, N, _ = k.shape
    if k.shape[0] != B or k.shape[3] != D or H_KV < 1 or H % H_KV:
        raise ValueError("Incompatible dimensions")
    if D not in SUPPORTED_D_HEAD:
        raise ValueError(f"unsupported d_head {D}")
    if q.dtype not in (torch.float16, torch.bfloat16, torch.float32) or len({q.dtype, k.dtype, v.dtype}) != 1:
        raise ValueError("dtype must be one of float16, bfloat16, float32 for all inputs")
    if len({q.device, k.device, v.device}) != 1:
        raise ValueError("inputs on different devices")
    o = torch.empty(q.shape, device=q.device, dtype=q.dtype)
    if M == 0:
        return o
    BLOCK_SIZE_M, BLOCK_SIZE_N = 32, 32
    num_pid_m = triton.cdiv(M, BLOCK_SIZE_M)
    GROUP_SIZE_H = H // H_KV
    grid = (num_pid_m * H, B)
    attention_kernel[grid](
        q, k, v, o, M, N, H, H // H_KV, num_pid_m,
        (1.0 / math.sqrt(D)) if sm_scale is None else float(sm_scale),
        q.stride(0), q.stride(1), q.stride(2), q.stride(3),
        k.stride(0), k.stride(1), k.stride(2), k.stride(3),
        v.stride(0), v.stride(1), v.stride(2), v.stride(3),
        o.stride(0), o.stride(1), o.stride(2), o.stride(3),
        D=D, CAUSAL=bool(causal), F32_IEEE=q.dtype == torch.float32,
        BLOCK_SIZE_M=BLOCK_SIZE_M, BLOCK_SIZE_N=BLOCK_SIZE_N, GROUP_SIZE_H=GROUP_SIZE_H,
        num_warps=4, num_stages=2)
    return o
