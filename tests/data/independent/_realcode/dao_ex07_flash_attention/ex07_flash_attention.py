"""Exercise G in the style of Dao-AILab's flash_attn_triton.py (the Triton
FlashAttention forward by Tri Dao): @triton.heuristics for EVEN_M / EVEN_N,
natural-exp softmax with softmax_scale applied inside exp, the running
log-sum-exp lse_i alongside m_i, acc_o rescaled by exp(m_i - m_ij), the
(batch, seqlen, nheads, headdim) layout addressed through strides, and the
log-sum-exp written to an Lse buffer as the real kernel does for backward.
Changes from the original: bottom-right (end-aligned) causal mask, GQA head
mapping, and NaN guards for rows that see no key.
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
    """Dao's recurrence in NumPy: m_ij = max(m, rowmax), p = exp(s - m_ij), rescale."""
    m_ij = np.maximum(m, scores.max(axis=-1))
    finite = np.isfinite(m_ij)
    shift = np.where(finite, m_ij, 0.0)
    p = np.exp(scores - shift[..., None])
    acc_o_scale = np.exp(m - shift)
    l_new = acc_o_scale * l + p.sum(axis=-1)
    acc_new = acc_o_scale[..., None] * acc + np.matmul(p, v)
    return m_ij, l_new, acc_new


def blockwise_attention(q, k, v, block_size, causal=True):
    q = np.asarray(q); k = np.asarray(k); v = np.asarray(v)
    seqlen_q, seqlen_k, headdim = q.shape[-2], k.shape[-2], q.shape[-1]
    softmax_scale = headdim ** -0.5
    wdt = np.promote_types(q.dtype, np.float32)
    batch_shape = np.broadcast_shapes(q.shape[:-2], k.shape[:-2])
    m = np.full(batch_shape + (seqlen_q,), -np.inf, wdt)
    l = np.zeros(batch_shape + (seqlen_q,), wdt)
    acc = np.zeros(batch_shape + (seqlen_q, v.shape[-1]), wdt)
    row = np.arange(seqlen_q)[:, None] + (seqlen_k - seqlen_q)
    start_n = 0
    while start_n < seqlen_k:
        stop = min(seqlen_k, start_n + block_size)
        kb, vb = k[..., start_n:stop, :], v[..., start_n:stop, :]
        s = np.einsum("...md,...nd->...mn", q, kb) * softmax_scale
        if causal:
            s = s + np.where(np.arange(start_n, stop)[None, :] > row, -np.inf, 0.0)
        m, l, acc = online_softmax_step(m, l, acc, s, vb)
        start_n = stop
    with np.errstate(invalid="ignore", divide="ignore"):
        out = acc / l[..., None]
    out[~(l > 0)] = 0.0
    return out.astype(wdt)


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
    @triton.heuristics(
        {
            "EVEN_M": lambda args: args["seqlen_q"] % args["BLOCK_M"] == 0,
            "EVEN_N": lambda args: args["seqlen_k"] % args["BLOCK_N"] == 0,
        }
    )
    @triton.jit
    def _fwd_kernel(
        Q, K, V, Out, Lse,
        softmax_scale,
        stride_qb, stride_qh, stride_qm,
        stride_kb, stride_kh, stride_kn,
        stride_vb, stride_vh, stride_vn,
        stride_ob, stride_oh, stride_om,
        nheads, n_rep, seqlen_q, seqlen_k, seqlen_q_rounded,
        IS_CAUSAL: tl.constexpr, BLOCK_HEADDIM: tl.constexpr, IEEE: tl.constexpr,
        EVEN_M: tl.constexpr, EVEN_N: tl.constexpr,
        BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
    ):
        start_m = tl.program_id(0)
        off_hb = tl.program_id(1)
        off_b = off_hb // nheads
        off_h = off_hb % nheads
        off_hk = off_h // n_rep
        offs_m = start_m * BLOCK_M + tl.arange(0, BLOCK_M)
        offs_n = tl.arange(0, BLOCK_N)
        offs_d = tl.arange(0, BLOCK_HEADDIM)
        q_ptrs = Q + off_b * stride_qb + off_h * stride_qh + (offs_m[:, None] * stride_qm + offs_d[None, :])
        k_ptrs = K + off_b * stride_kb + off_hk * stride_kh + (offs_n[:, None] * stride_kn + offs_d[None, :])
        v_ptrs = V + off_b * stride_vb + off_hk * stride_vh + (offs_n[:, None] * stride_vn + offs_d[None, :])
        lse_i = tl.zeros([BLOCK_M], dtype=tl.float32) - float("inf")
        m_i = tl.zeros([BLOCK_M], dtype=tl.float32) - float("inf")
        acc_o = tl.zeros([BLOCK_M, BLOCK_HEADDIM], dtype=tl.float32)
        if EVEN_M:
            q = tl.load(q_ptrs)
        else:
            q = tl.load(q_ptrs, mask=offs_m[:, None] < seqlen_q, other=0.0)
        diag = seqlen_k - seqlen_q                        # bottom-right aligned causal mask
        end_n = seqlen_k if not IS_CAUSAL else tl.maximum(0, tl.minimum((start_m + 1) * BLOCK_M + diag, seqlen_k))
        for start_n in range(0, end_n, BLOCK_N):
            start_n = tl.multiple_of(start_n, BLOCK_N)
            if EVEN_N:
                k = tl.load(k_ptrs + start_n * stride_kn)
            else:
                k = tl.load(k_ptrs + start_n * stride_kn, mask=(start_n + offs_n)[:, None] < seqlen_k, other=0.0)
            if IEEE:
                qk = tl.dot(q, tl.trans(k), input_precision="ieee")
            else:
                qk = tl.dot(q, tl.trans(k))
            if not EVEN_N:
                qk += tl.where((start_n + offs_n)[None, :] < seqlen_k, 0, float("-inf"))
            if IS_CAUSAL:
                qk += tl.where(offs_m[:, None] + diag >= (start_n + offs_n)[None, :], 0, float("-inf"))
            m_ij = tl.maximum(tl.max(qk, 1) * softmax_scale, lse_i)
            m_ij_safe = tl.where(m_ij == float("-inf"), 0.0, m_ij)
            p = tl.exp(qk * softmax_scale - m_ij_safe[:, None])
            l_ij = tl.sum(p, 1)
            acc_o_scale = tl.exp(m_i - m_ij_safe)
            acc_o = acc_o * acc_o_scale[:, None]
            if EVEN_N:
                v = tl.load(v_ptrs + start_n * stride_vn)
            else:
                v = tl.load(v_ptrs + start_n * stride_vn, mask=(start_n + offs_n)[:, None] < seqlen_k, other=0.0)
            p = p.to(v.dtype)
            if IEEE:
                acc_o += tl.dot(p, v, input_precision="ieee")
            else:
                acc_o += tl.dot(p, v)
            m_i = m_ij
            l_i_new = tl.exp(lse_i - m_ij_safe) + l_ij
            lse_i = tl.where(l_i_new > 0, m_ij_safe + tl.log(l_i_new), float("-inf"))
        o_scale = tl.where(lse_i == float("-inf"), 0.0, tl.exp(m_i - lse_i))
        acc_o = acc_o * o_scale[:, None]
        lse_ptrs = Lse + off_hb * seqlen_q_rounded + offs_m
        tl.store(lse_ptrs, lse_i)
        out_ptrs = Out + off_b * stride_ob + off_h * stride_oh + (offs_m[:, None] * stride_om + offs_d[None, :])
        if EVEN_M:
            tl.store(out_ptrs, acc_o.to(Out.dtype.element_ty))
        else:
            tl.store(out_ptrs, acc_o.to(Out.dtype.element_ty), mask=offs_m[:, None] < seqlen_q)


def _flash_attn_forward(q, k, v, causal=False, softmax_scale=None):
    """q: (batch, seqlen_q, nheads, d); k, v: (batch, seqlen_k, nheads_k, d), as in flash_attn_triton."""
    batch, seqlen_q, nheads, d = q.shape
    _, seqlen_k, nheads_k, _ = k.shape
    softmax_scale = softmax_scale or 1.0 / math.sqrt(d)
    seqlen_q_rounded = math.ceil(seqlen_q / 128) * 128
    lse = torch.empty((batch, nheads, seqlen_q_rounded), device=q.device, dtype=torch.float32)
    o = torch.empty_like(q)
    BLOCK_M, BLOCK_N = (64, 32) if d <= 64 else (64, 16)
    num_warps = 4
    grid = (triton.cdiv(seqlen_q, BLOCK_M), batch * nheads)
    _fwd_kernel[grid](
        q, k, v, o, lse, softmax_scale,
        q.stride(0), q.stride(2), q.stride(1),
        k.stride(0), k.stride(2), k.stride(1),
        v.stride(0), v.stride(2), v.stride(1),
        o.stride(0), o.stride(2), o.stride(1),
        nheads, nheads // nheads_k, seqlen_q, seqlen_k, seqlen_q_rounded,
        IS_CAUSAL=causal, BLOCK_HEADDIM=d, IEEE=(q.dtype == torch.float32),
        BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N, num_warps=num_warps, num_stages=1,
    )
    return o, lse, softmax_scale


def flash_attention(q, k, v, *, causal=True, sm_scale=None):
    if triton is None:
        raise ImportError("flash_attention needs Triton, which has Linux wheels only "
                          "(pip install triton): use Linux or Colab for this part")
    if q.dim() != 4 or k.dim() != 4 or v.dim() != 4 or k.shape != v.shape:
        raise ValueError("expected q (B, h, S_q, d) and k, v (B, h_kv, S_k, d)")
    batch, nheads, seqlen_q, d = q.shape
    _, nheads_k, seqlen_k, dk = k.shape
    if k.shape[0] != batch or dk != d or nheads_k == 0 or nheads % nheads_k:
        raise ValueError("shapes do not match (need h % h_kv == 0, same batch and d_head)")
    if d not in SUPPORTED_D_HEAD:
        raise ValueError(f"FlashAttention here only supports head dimensions {SUPPORTED_D_HEAD}")
    if q.dtype not in (torch.float16, torch.bfloat16, torch.float32) or not (q.dtype == k.dtype == v.dtype):
        raise ValueError("All tensors must have the same type: fp16, bf16 or fp32")
    if not (q.device == k.device == v.device):
        raise ValueError("All tensors must be on the same device")
    # the last dim must be contiguous (stride 1), as in flash_attn_triton; other strides are free
    q_, k_, v_ = (t if t.stride(-1) == 1 else t.contiguous() for t in (q, k, v))
    if seqlen_q == 0:
        return torch.empty_like(q)
    scale = None if sm_scale is None else float(sm_scale)
    o, _, _ = _flash_attn_forward(q_.transpose(1, 2), k_.transpose(1, 2), v_.transpose(1, 2),
                                  causal=bool(causal), softmax_scale=scale)
    return o.transpose(1, 2).contiguous()
