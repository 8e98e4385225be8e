"""Exercise G in the style of Triton's tutorial 06 (fused attention):
softmax in base 2 (qk_scale = sm_scale * log2(e), tl.math.exp2), m_i / l_i /
acc carried across key tiles, acc rescaled by alpha, causal loop bound cut
at the diagonal, plain pointer arithmetic with masks (no make_block_ptr),
an autotuner over a few configs.  The NumPy half is the same recurrence.
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
    m_new = np.maximum(m, np.max(scores, axis=-1))
    m_use = np.where(np.isneginf(m_new), 0.0, m_new)          # -inf - -inf would be NaN
    alpha = np.exp(m - m_use)
    p = np.exp(scores - m_use[..., None])
    l_new = l * alpha + np.sum(p, axis=-1)
    acc_new = acc * alpha[..., None] + p @ v
    return m_new, l_new, acc_new


def blockwise_attention(q, k, v, block_size, causal=True):
    q, k, v = np.asarray(q), np.asarray(k), np.asarray(v)
    dtype = np.result_type(q.dtype, k.dtype, v.dtype, np.float32)
    n_ctx_q, n_ctx_k, head_dim = q.shape[-2], k.shape[-2], q.shape[-1]
    sm_scale = 1.0 / math.sqrt(head_dim)
    lead = np.broadcast_shapes(q.shape[:-2], k.shape[:-2], v.shape[:-2])
    m_i = np.full(lead + (n_ctx_q,), -np.inf, dtype=dtype)
    l_i = np.zeros(lead + (n_ctx_q,), dtype=dtype)
    acc = np.zeros(lead + (n_ctx_q, v.shape[-1]), dtype=dtype)
    offs_m = np.arange(n_ctx_q) + (n_ctx_k - n_ctx_q)            # end-aligned positions
    for start_n in range(0, n_ctx_k, block_size):
        end_n = min(start_n + block_size, n_ctx_k)
        qk = (q @ np.swapaxes(k[..., start_n:end_n, :], -1, -2)) * sm_scale
        if causal:
            offs_n = np.arange(start_n, end_n)
            qk = np.where(offs_n[None, :] <= offs_m[:, None], qk, -np.inf)
        m_i, l_i, acc = online_softmax_step(m_i, l_i, acc, qk, v[..., start_n:end_n, :])
    out = np.where(l_i[..., None] > 0, acc / np.where(l_i > 0, l_i, 1.0)[..., None], 0.0)
    return out.astype(np.result_type(q.dtype, np.float32) if q.dtype.kind == "f" else dtype)


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
    _INTERPRET = os.environ.get("TRITON_INTERPRET", "0") == "1"
    _configs = [
        triton.Config({"BLOCK_M": 64, "BLOCK_N": 32}, num_stages=2, num_warps=4),
        triton.Config({"BLOCK_M": 64, "BLOCK_N": 64}, num_stages=2, num_warps=4),
        triton.Config({"BLOCK_M": 128, "BLOCK_N": 32}, num_stages=2, num_warps=8),
    ]
    if _INTERPRET:
        _configs = _configs[:1]

    @triton.jit
    def _attn_fwd_inner(acc, l_i, m_i, q, K_block, V_block, stride_kn, stride_kk, stride_vn, stride_vk,
                        offs_m_pos, offs_n, offs_d, lo, hi, N_CTX_K, qk_scale,
                        CAUSAL: tl.constexpr, BLOCK_N: tl.constexpr, INPUT_PRECISION: tl.constexpr):
        for start_n in range(lo, hi, BLOCK_N):
            cols = start_n + offs_n
            k = tl.load(K_block + offs_d[:, None] * stride_kk + cols[None, :] * stride_kn,
                        mask=cols[None, :] < N_CTX_K, other=0.0)
            qk = tl.dot(q, k, input_precision=INPUT_PRECISION) * qk_scale      # log2 units
            keep = cols[None, :] < N_CTX_K
            if CAUSAL:
                keep = keep & (cols[None, :] <= offs_m_pos[:, None])
            qk = tl.where(keep, qk, float("-inf"))
            m_ij = tl.maximum(m_i, tl.max(qk, 1))
            m_sub = tl.where(m_ij == float("-inf"), 0.0, m_ij)
            p = tl.math.exp2(qk - m_sub[:, None])
            alpha = tl.math.exp2(m_i - m_sub)
            l_i = l_i * alpha + tl.sum(p, 1)
            acc = acc * alpha[:, None]
            v = tl.load(V_block + cols[:, None] * stride_vn + offs_d[None, :] * stride_vk,
                        mask=cols[:, None] < N_CTX_K, other=0.0)
            acc = tl.dot(p.to(v.dtype), v, acc, input_precision=INPUT_PRECISION)
            m_i = m_ij
        return acc, l_i, m_i

    @triton.autotune(configs=_configs, key=["N_CTX_Q", "N_CTX_K", "HEAD_DIM", "CAUSAL"])
    @triton.jit
    def _attn_fwd(Q, K, V, Out, qk_scale,
                  stride_qz, stride_qh, stride_qm, stride_qk,
                  stride_kz, stride_kh, stride_kn, stride_kk,
                  stride_vz, stride_vh, stride_vn, stride_vk,
                  stride_oz, stride_oh, stride_om, stride_ok,
                  H, N_REP, N_CTX_Q, N_CTX_K,
                  HEAD_DIM: tl.constexpr, CAUSAL: tl.constexpr, INPUT_PRECISION: tl.constexpr,
                  BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
        start_m = tl.program_id(0)
        off_hz = tl.program_id(1)
        off_z = off_hz // H
        off_h = off_hz % H
        off_kvh = off_h // N_REP                      # repeat_interleave grouping, read in place
        q_offset = off_z.to(tl.int64) * stride_qz + off_h.to(tl.int64) * stride_qh
        k_offset = off_z.to(tl.int64) * stride_kz + off_kvh.to(tl.int64) * stride_kh
        v_offset = off_z.to(tl.int64) * stride_vz + off_kvh.to(tl.int64) * stride_vh
        o_offset = off_z.to(tl.int64) * stride_oz + off_h.to(tl.int64) * stride_oh
        offs_m = start_m * BLOCK_M + tl.arange(0, BLOCK_M)
        offs_n = tl.arange(0, BLOCK_N)
        offs_d = tl.arange(0, HEAD_DIM)
        m_i = tl.zeros([BLOCK_M], dtype=tl.float32) - float("inf")
        l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
        acc = tl.zeros([BLOCK_M, HEAD_DIM], dtype=tl.float32)
        q = tl.load(Q + q_offset + offs_m[:, None] * stride_qm + offs_d[None, :] * stride_qk,
                    mask=offs_m[:, None] < N_CTX_Q, other=0.0)
        offs_m_pos = N_CTX_K - N_CTX_Q + offs_m
        if CAUSAL:
            hi = tl.minimum(N_CTX_K, N_CTX_K - N_CTX_Q + (start_m + 1) * BLOCK_M)
        else:
            hi = N_CTX_K
        acc, l_i, m_i = _attn_fwd_inner(acc, l_i, m_i, q, K + k_offset, V + v_offset,
                                        stride_kn, stride_kk, stride_vn, stride_vk,
                                        offs_m_pos, offs_n, offs_d, 0, hi, N_CTX_K, qk_scale,
                                        CAUSAL, BLOCK_N, INPUT_PRECISION)
        l_safe = tl.where(l_i == 0.0, 1.0, l_i)
        out = acc / l_safe[:, None]                    # rows that saw no key: acc == 0 -> 0
        tl.store(Out + o_offset + offs_m[:, None] * stride_om + offs_d[None, :] * stride_ok,
                 out.to(Out.dtype.element_ty), mask=offs_m[:, None] < N_CTX_Q)


def flash_attention(q, k, v, *, causal=True, sm_scale=None):
    if triton is None:
        raise ImportError("flash_attention needs Triton, which has Linux wheels only "
                          "(pip install triton): use Linux or Colab for this part")
    if q.dim() != 4 or k.dim() != 4 or v.shape != k.shape:
        raise ValueError("q must be (B, h, S_q, d) and k, v (B, h_kv, S_k, d)")
    Z, H, N_CTX_Q, HEAD_DIM = q.shape
    Zk, H_KV, N_CTX_K, HEAD_DIM_K = k.shape
    if Zk != Z or HEAD_DIM_K != HEAD_DIM or H_KV == 0 or H % H_KV:
        raise ValueError(f"incompatible shapes {tuple(q.shape)} and {tuple(k.shape)}")
    if HEAD_DIM not in SUPPORTED_D_HEAD:
        raise ValueError(f"d_head={HEAD_DIM} not in {SUPPORTED_D_HEAD}")
    if q.dtype not in (torch.float16, torch.bfloat16, torch.float32) or k.dtype != q.dtype or v.dtype != q.dtype:
        raise ValueError("q, k, v must share one dtype among float16, bfloat16, float32")
    if q.device != k.device or q.device != v.device:
        raise ValueError("q, k, v must be on one device")
    o = torch.empty_like(q)
    if N_CTX_Q == 0:
        return o
    if sm_scale is None:
        sm_scale = 1.0 / math.sqrt(HEAD_DIM)
    qk_scale = float(sm_scale) * 1.44269504089                  # 1/ln(2): exp(x) = exp2(x * log2 e)
    grid = lambda args: (triton.cdiv(N_CTX_Q, args["BLOCK_M"]), Z * H, 1)
    _attn_fwd[grid](q, k, v, o, qk_scale,
                    q.stride(0), q.stride(1), q.stride(2), q.stride(3),
                    k.stride(0), k.stride(1), k.stride(2), k.stride(3),
                    v.stride(0), v.stride(1), v.stride(2), v.stride(3),
                    o.stride(0), o.stride(1), o.stride(2), o.stride(3),
                    H, H // H_KV, N_CTX_Q, N_CTX_K,
                    HEAD_DIM=HEAD_DIM, CAUSAL=bool(causal),
                    INPUT_PRECISION="ieee" if q.dtype == torch.float32 else "tf32")
    return o
