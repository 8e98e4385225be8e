"""Exercise 7 (NumPy part), independent version.  No Triton kernel here."""

import numpy as np


def online_softmax_step(m, l, acc, scores, v):
    m_tile = scores.max(axis=-1)
    m_new = np.maximum(m, m_tile)
    # Rows that have seen only -inf so far: use 0 as the shift, avoid inf-inf.
    safe = np.where(np.isneginf(m_new), 0.0, m_new)
    alpha = np.exp(m - safe)  # rescale of the old state (exp(-inf)=0)
    p = np.exp(scores - safe[..., None])
    l_new = alpha * l + p.sum(axis=-1)
    acc_new = alpha[..., None] * acc + np.einsum("...rn,...nd->...rd", p, v)
    return m_new, l_new, acc_new


def blockwise_attention(q, k, v, block_size, causal=True):
    q = np.asarray(q)
    s_q, d = q.shape[-2], q.shape[-1]
    s_k = k.shape[-2]
    lead = np.broadcast_shapes(q.shape[:-2], k.shape[:-2])
    m = np.full(lead + (s_q,), -np.inf)
    l = np.zeros(lead + (s_q,))
    acc = np.zeros(lead + (s_q, v.shape[-1]))
    qpos = np.arange(s_q)[:, None] + (s_k - s_q)
    for j in range(0, s_k, block_size):
        kb, vb = k[..., j:j + block_size, :], v[..., j:j + block_size, :]
        sc = np.einsum("...qd,...kd->...qk", q, kb) / np.sqrt(d)
        if causal:
            kpos = np.arange(j, j + kb.shape[-2])[None, :]
            sc = np.where(kpos <= qpos, sc, -np.inf)
        m, l, acc = online_softmax_step(m, l, acc, sc, vb)
    with np.errstate(invalid="ignore", divide="ignore"):
        out = np.where(l[..., None] > 0, acc / np.where(l > 0, l, 1)[..., None], 0.0)
    return out.astype(np.result_type(q, k, v), copy=False)

# The step before the kernel needs Triton where it runs; the module
# still imports without it.
import math

import torch

try:
    import triton
    import triton.language as tl
except ImportError:
    triton = tl = None


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
    m_new = tl.maximum(m_i, tl.max(s, axis=1))
    ref = tl.where(m_new == float("-inf"), tl.zeros_like(m_new), m_new)
    scale_old = tl.exp(m_i - ref)
    probs = tl.exp(s - ref[:, None])
    return m_new, scale_old * l_i + tl.sum(probs, axis=1), \
        scale_old[:, None] * acc + tl.dot(probs.to(v.dtype), v)


@_jit
def tile_finish(acc, l_i):
    """The output of a query block after its last tile, in Triton:
    ``acc / l_i`` row by row, ``(BLOCK_M, D_HEAD)`` float32.  A row whose
    ``l_i`` is 0 saw no key at all (causal, ``S_q > S_k``): its output is
    zeros, never NaN."""
    return acc / tl.maximum(l_i, 1e-30)[:, None]


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
