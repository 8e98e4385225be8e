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
import operator
import os
from dataclasses import dataclass
from typing import Optional, Tuple

import numpy as np
import torch
import triton
import triton.language as tl


# --------------------------------------------------------------------------
# NumPy: the online softmax and blockwise attention
# --------------------------------------------------------------------------


def _as_float_array(x, name: str) -> np.ndarray:
    """A floating NumPy array (float dtypes kept, ints/bools -> float64)."""
    arr = np.asarray(x)
    if arr.dtype.kind == "f":
        return arr
    if arr.dtype.kind in "iub":
        return arr.astype(np.float64)
    raise ValueError(f"{name} must hold real numbers, got dtype {arr.dtype}")


def _as_int(value, name: str, minimum: int = 1) -> int:
    """``value`` as an int >= ``minimum`` (no bools, no floats), else ``ValueError``."""
    if isinstance(value, (bool, np.bool_)):
        raise ValueError(f"{name} must be an integer, got a bool")
    try:
        out = operator.index(value)
    except TypeError:
        raise ValueError(f"{name} must be an integer, got {type(value).__name__} ({value!r})") from None
    if out < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {out}")
    return int(out)


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

    The inputs are not modified; new arrays are returned, in the common
    floating dtype of the inputs.  ``v``'s leading dims need only broadcast
    against the rows' (e.g. one K/V head shared by several query heads).
    Raises ``ValueError`` when the shapes do not fit together.
    """
    m = _as_float_array(m, "m")
    l = _as_float_array(l, "l")
    acc = _as_float_array(acc, "acc")
    scores = _as_float_array(scores, "scores")
    v = _as_float_array(v, "v")
    if m.ndim < 1:
        raise ValueError("m must be at least 1-D (..., rows)")
    if l.shape != m.shape:
        raise ValueError(f"l must have m's shape {m.shape}, got {l.shape}")
    if acc.ndim != m.ndim + 1 or acc.shape[:-1] != m.shape:
        raise ValueError(f"acc must be (..., rows, d_head) with (..., rows) = {m.shape}, got {acc.shape}")
    if scores.ndim != m.ndim + 1 or scores.shape[:-1] != m.shape:
        raise ValueError(f"scores must be (..., rows, n) with (..., rows) = {m.shape}, got {scores.shape}")
    if v.ndim < 2 or v.shape[-2] != scores.shape[-1] or v.shape[-1] != acc.shape[-1]:
        raise ValueError(
            f"v must be (..., n, d_head) with n = {scores.shape[-1]} and d_head = {acc.shape[-1]}, got {v.shape}"
        )
    try:
        np.broadcast_shapes(v.shape[:-2], m.shape[:-1])
    except ValueError:
        raise ValueError(f"v's leading dims {v.shape[:-2]} do not broadcast to {m.shape[:-1]}") from None

    dtype = np.result_type(m, l, acc, scores, v)
    neg_inf = dtype.type(-np.inf)
    if scores.shape[-1] == 0:  # an empty tile changes nothing
        return m.astype(dtype, copy=True), l.astype(dtype, copy=True), acc.astype(dtype, copy=True)
    tile_max = np.max(scores, axis=-1).astype(dtype, copy=False)
    m_new = np.maximum(m.astype(dtype, copy=False), tile_max)
    # Where the maximum is still -inf nothing has been seen: shift by 0, not -inf.
    shift = np.where(m_new == neg_inf, dtype.type(0), m_new)
    # alpha rescales what was summed against the old maximum; exactly 1 where
    # the maximum did not move (this also covers the all -inf rows).
    with np.errstate(invalid="ignore", over="ignore"):
        alpha = np.where(m == m_new, dtype.type(1), np.exp(m - shift))
    p = np.exp(scores.astype(dtype, copy=False) - shift[..., None])      # masked: exp(-inf) = 0
    l_new = alpha * l + np.sum(p, axis=-1)
    acc_new = alpha[..., None] * acc + p @ v.astype(dtype, copy=False)
    return m_new.astype(dtype, copy=False), l_new.astype(dtype, copy=False), acc_new.astype(dtype, copy=False)


def blockwise_attention(q, k, v, block_size, causal=True):
    """Scaled dot-product attention computed ``block_size`` keys at a time.

    ``q``: ``(..., S_q, d_head)``, ``k`` and ``v``: ``(..., S_k, d_head)``
    (NumPy).  Walk over the keys in tiles of ``block_size`` (the last tile
    may be shorter), compute that tile's scaled, masked scores and fold them
    in with ``online_softmax_step``; never hold scores for more than
    ``block_size`` keys at once.  ``causal`` uses the end-aligned mask; rows
    that may see no key return zeros.  Returns ``(..., S_q, d_head)``.

    Leading dims of ``q``, ``k`` and ``v`` need only broadcast; ``v`` may
    have its own width.  The scale is ``1/sqrt(d_head)``.  Raises
    ``ValueError`` for shapes that do not fit or a non-positive
    ``block_size``.
    """
    q = _as_float_array(q, "q")
    k = _as_float_array(k, "k")
    v = _as_float_array(v, "v")
    block_size = _as_int(block_size, "block_size")
    for name, t in (("q", q), ("k", k), ("v", v)):
        if t.ndim < 2:
            raise ValueError(f"{name} must be (..., S, d_head), got shape {t.shape}")
    if q.shape[-1] != k.shape[-1] or q.shape[-1] == 0:
        raise ValueError(f"q and k need the same positive d_head, got {q.shape[-1]} and {k.shape[-1]}")
    if k.shape[-2] != v.shape[-2]:
        raise ValueError(f"k and v must hold the same number of keys, got {k.shape[-2]} and {v.shape[-2]}")
    s_q, s_k = q.shape[-2], k.shape[-2]
    if s_q == 0 or s_k == 0:
        raise ValueError("blockwise_attention needs at least one query and one key")
    try:
        lead = np.broadcast_shapes(q.shape[:-2], k.shape[:-2], v.shape[:-2])
    except ValueError:
        raise ValueError(f"leading dims of q {q.shape}, k {k.shape}, v {v.shape} do not broadcast") from None

    dtype = np.result_type(q, k, v)
    q = np.broadcast_to(q.astype(dtype, copy=False), lead + q.shape[-2:])
    scale = dtype.type(1.0 / math.sqrt(q.shape[-1]))
    d_v = v.shape[-1]
    m = np.full(lead + (s_q,), -np.inf, dtype=dtype)
    l = np.zeros(lead + (s_q,), dtype=dtype)
    acc = np.zeros(lead + (s_q, d_v), dtype=dtype)
    query_pos = (s_k - s_q) + np.arange(s_q)          # absolute positions (end-aligned)
    for start in range(0, s_k, block_size):
        stop = min(start + block_size, s_k)
        k_tile = k[..., start:stop, :].astype(dtype, copy=False)
        v_tile = v[..., start:stop, :].astype(dtype, copy=False)
        scores = (q @ np.swapaxes(k_tile, -1, -2)) * scale          # (..., S_q, <= block_size)
        if causal:
            hidden = np.arange(start, stop)[None, :] > query_pos[:, None]
            scores = np.where(hidden, dtype.type(-np.inf), scores)
        m, l, acc = online_softmax_step(m, l, acc, scores, v_tile)
    safe_l = np.where(l > 0, l, dtype.type(1))
    out = np.where((l > 0)[..., None], acc / safe_l[..., None], dtype.type(0))
    return out.astype(dtype, copy=False)


# --------------------------------------------------------------------------
# Triton: the fused kernel
# --------------------------------------------------------------------------
#
# One program handles BLOCK_M query rows of one (batch, query head) and
# streams the keys of its K/V head past them BLOCK_N at a time.  Scores are
# kept in base 2 (qk_scale = sm_scale * log2(e), passed from the host), so
# exp2 replaces exp.  The key loop runs in two phases: tiles every row of the
# block sees completely (no mask work), then the tiles on the causal
# diagonal and the ragged end of the keys (masked).


@triton.jit
def _fold_key_tile(acc, l_i, m_i, q, k_base, v_base, start_n, offs_m, offs_n, offs_d,
                   stride_kn, stride_kd, stride_vn, stride_vd, seq_k, diag, qk_scale,
                   MASKED: tl.constexpr, IS_CAUSAL: tl.constexpr, IEEE_DOT: tl.constexpr):
    """Fold one tile of BLOCK_N keys into the running (acc, l_i, m_i)."""
    cols = start_n + offs_n
    k_ptrs = k_base + cols[:, None] * stride_kn + offs_d[None, :] * stride_kd
    v_ptrs = v_base + cols[:, None] * stride_vn + offs_d[None, :] * stride_vd
    if MASKED:
        col_ok = cols < seq_k
        k = tl.load(k_ptrs, mask=col_ok[:, None], other=0.0)
    else:
        k = tl.load(k_ptrs)
    if IEEE_DOT:
        s = tl.dot(q, tl.trans(k), input_precision="ieee")
    else:
        s = tl.dot(q, tl.trans(k))
    s = s * qk_scale
    if MASKED:
        keep = col_ok[None, :]
        if IS_CAUSAL:
            keep = keep & (cols[None, :] <= offs_m[:, None] + diag)
        s = tl.where(keep, s, float("-inf"))
    m_new = tl.maximum(m_i, tl.max(s, 1))
    # A row that has seen only masked keys keeps m = -inf: shift it by 0.
    m_shift = tl.where(m_new == float("-inf"), 0.0, m_new)
    alpha = tl.exp2(m_i - m_shift)
    p = tl.exp2(s - m_shift[:, None])
    l_i = l_i * alpha + tl.sum(p, 1)
    acc = acc * alpha[:, None]
    if MASKED:
        v = tl.load(v_ptrs, mask=col_ok[:, None], other=0.0)
    else:
        v = tl.load(v_ptrs)
    if IEEE_DOT:
        acc = tl.dot(p.to(v.dtype), v, acc, input_precision="ieee")
    else:
        acc = tl.dot(p.to(v.dtype), v, acc)
    return acc, l_i, m_new


@triton.jit
def _flash_attn_fwd_kernel(
    Q, K, V, Out,
    stride_qb, stride_qh, stride_qm, stride_qd,
    stride_kb, stride_kh, stride_kn, stride_kd,
    stride_vb, stride_vh, stride_vn, stride_vd,
    stride_ob, stride_oh, stride_om, stride_od,
    n_heads, group, seq_q, seq_k, qk_scale,
    HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
    IS_CAUSAL: tl.constexpr, IEEE_DOT: tl.constexpr,
):
    pid_m = tl.program_id(0)
    pid_bh = tl.program_id(1)
    off_b = (pid_bh // n_heads).to(tl.int64)
    off_h = (pid_bh % n_heads).to(tl.int64)
    off_kvh = off_h // group          # GQA: read the shared K/V head in place

    q_base = Q + off_b * stride_qb + off_h * stride_qh
    k_base = K + off_b * stride_kb + off_kvh * stride_kh
    v_base = V + off_b * stride_vb + off_kvh * stride_vh
    o_base = Out + off_b * stride_ob + off_h * stride_oh

    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, HEAD_DIM)
    row_ok = offs_m < seq_q
    q = tl.load(q_base + offs_m[:, None] * stride_qm + offs_d[None, :] * stride_qd,
                mask=row_ok[:, None], other=0.0)

    m_i = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
    acc = tl.zeros([BLOCK_M, HEAD_DIM], dtype=tl.float32)

    # End-aligned causal mask: query row i sees keys 0 .. i + diag.
    diag = seq_k - seq_q
    first_row = pid_m * BLOCK_M
    if IS_CAUSAL:
        hi = tl.minimum(seq_k, first_row + BLOCK_M + diag)      # keys any row of the block sees
        full_hi = tl.minimum(seq_k, first_row + diag + 1)       # keys every row of the block sees
    else:
        hi = seq_k
        full_hi = seq_k
    full_hi = tl.maximum(full_hi, 0)
    full_hi = (full_hi // BLOCK_N) * BLOCK_N                    # whole tiles only

    for start_n in range(0, full_hi, BLOCK_N):
        acc, l_i, m_i = _fold_key_tile(acc, l_i, m_i, q, k_base, v_base, start_n, offs_m, offs_n,
                                       offs_d, stride_kn, stride_kd, stride_vn, stride_vd, seq_k,
                                       diag, qk_scale, False, IS_CAUSAL, IEEE_DOT)
    for start_n in range(full_hi, hi, BLOCK_N):
        acc, l_i, m_i = _fold_key_tile(acc, l_i, m_i, q, k_base, v_base, start_n, offs_m, offs_n,
                                       offs_d, stride_kn, stride_kd, stride_vn, stride_vd, seq_k,
                                       diag, qk_scale, True, IS_CAUSAL, IEEE_DOT)

    # Rows that saw no key (l == 0, acc == 0) give zeros, not 0/0.
    l_safe = tl.where(l_i == 0.0, 1.0, l_i)
    out = acc / l_safe[:, None]
    o_ptrs = o_base + offs_m[:, None] * stride_om + offs_d[None, :] * stride_od
    tl.store(o_ptrs, out.to(Out.dtype.element_ty), mask=row_ok[:, None])


SUPPORTED_D_HEAD = (16, 32, 64, 128)
_SUPPORTED_DTYPES = (torch.float16, torch.bfloat16, torch.float32)
_LOG2E = 1.4426950408889634


@dataclass(frozen=True)
class _LaunchConfig:
    """Tile sizes and launch parameters of one call."""

    block_m: int
    block_n: int
    num_warps: int
    num_stages: int


def _launch_config(seq_q: int, d_head: int, dtype: torch.dtype) -> _LaunchConfig:
    """64 x 32 tiles; a 16-row query tile for decode-like calls (few queries)."""
    block_m = 16 if seq_q <= 16 else 64
    block_n = 32
    num_warps = 4
    num_stages = 2 if (dtype == torch.float32 and d_head == 128) else 3
    return _LaunchConfig(block_m, block_n, num_warps, num_stages)


def _validate_flash_inputs(q, k, v) -> None:
    for name, t in (("q", q), ("k", k), ("v", v)):
        if not isinstance(t, torch.Tensor):
            raise ValueError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
        if t.ndim != 4:
            raise ValueError(f"{name} must be 4-D (B, heads, S, d_head), got shape {tuple(t.shape)}")
    if not (q.device == k.device == v.device):
        raise ValueError(f"q, k, v must be on one device, got {q.device}, {k.device}, {v.device}")
    if q.dtype not in _SUPPORTED_DTYPES:
        raise ValueError(f"dtype {q.dtype} is not supported; use float16, bfloat16 or float32")
    if not (q.dtype == k.dtype == v.dtype):
        raise ValueError(f"q, k, v must share a dtype, got {q.dtype}, {k.dtype}, {v.dtype}")
    if k.shape != v.shape:
        raise ValueError(f"k and v must have the same shape, got {tuple(k.shape)} and {tuple(v.shape)}")
    b, h, _, d = q.shape
    if k.shape[0] != b:
        raise ValueError(f"batch sizes differ: q has {b}, k has {k.shape[0]}")
    if k.shape[3] != d:
        raise ValueError(f"q and k/v need the same d_head, got {d} and {k.shape[3]}")
    if d not in SUPPORTED_D_HEAD:
        raise ValueError(f"d_head {d} is not supported; supported: {SUPPORTED_D_HEAD}")
    h_kv = k.shape[1]
    if h == 0 or h_kv == 0 or h % h_kv != 0:
        raise ValueError(f"query heads ({h}) must be a positive multiple of K/V heads ({h_kv})")
    if b == 0:
        raise ValueError("batch must be positive")


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

    Details: raises ``RuntimeError`` for CPU tensors unless Triton's
    interpreter is on (``TRITON_INTERPRET=1``).  Float32 inputs use IEEE
    float32 dot products (not TF32), so float32 results match a float32
    reference closely; the softmax statistics and accumulator are float32
    for every dtype.  ``S_q == 0`` returns an empty tensor; ``S_k == 0``
    (no key at all) returns zeros.
    """
    _validate_flash_inputs(q, k, v)
    interpreting = os.environ.get("TRITON_INTERPRET") == "1"
    if not q.is_cuda and not interpreting:
        raise RuntimeError(
            "flash_attention runs a Triton kernel: pass CUDA tensors, or set TRITON_INTERPRET=1 "
            "before importing triton to run CPU tensors through Triton's interpreter"
        )
    if not isinstance(causal, (bool, int)):
        raise ValueError(f"causal must be a bool, got {type(causal).__name__}")
    b, h, s_q, d = q.shape
    h_kv, s_k = k.shape[1], k.shape[2]
    if sm_scale is None:
        scale = 1.0 / math.sqrt(d)
    else:
        try:
            scale = float(sm_scale)
        except (TypeError, ValueError):
            raise ValueError(f"sm_scale must be a real number, got {sm_scale!r}") from None
        if not math.isfinite(scale):
            raise ValueError(f"sm_scale must be finite, got {sm_scale!r}")

    out = torch.empty((b, h, s_q, d), dtype=q.dtype, device=q.device)
    if s_q == 0:
        return out
    if s_k == 0:
        return out.zero_()

    q_c, k_c, v_c = q.contiguous(), k.contiguous(), v.contiguous()
    cfg = _launch_config(s_q, d, q.dtype)
    grid = (triton.cdiv(s_q, cfg.block_m), b * h)
    _flash_attn_fwd_kernel[grid](
        q_c, k_c, v_c, out,
        q_c.stride(0), q_c.stride(1), q_c.stride(2), q_c.stride(3),
        k_c.stride(0), k_c.stride(1), k_c.stride(2), k_c.stride(3),
        v_c.stride(0), v_c.stride(1), v_c.stride(2), v_c.stride(3),
        out.stride(0), out.stride(1), out.stride(2), out.stride(3),
        h, h // h_kv, s_q, s_k, scale * _LOG2E,
        HEAD_DIM=d, BLOCK_M=cfg.block_m, BLOCK_N=cfg.block_n,
        IS_CAUSAL=bool(causal), IEEE_DOT=(q.dtype == torch.float32),
        num_warps=cfg.num_warps, num_stages=cfg.num_stages,
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
    tile_max = tl.max(s, 1)
    m_new = tl.maximum(m_i, tile_max)
    finite = m_new > float("-inf")
    shift = tl.where(finite, m_new, 0.0)
    alpha = tl.where(finite, tl.exp(m_i - shift), 1.0)
    p = tl.where(s > float("-inf"), tl.exp(s - shift[:, None]), 0.0)
    l_new = alpha * l_i + tl.sum(p, 1)
    acc_new = alpha[:, None] * acc + tl.dot(p.to(v.dtype), v)
    return m_new, l_new, acc_new


@_jit
def tile_finish(acc, l_i):
    """The output of a query block after its last tile, in Triton:
    ``acc / l_i`` row by row, ``(BLOCK_M, D_HEAD)`` float32.  A row whose
    ``l_i`` is 0 saw no key at all (causal, ``S_q > S_k``): its output is
    zeros, never NaN."""
    empty = l_i == 0.0
    safe = tl.where(empty, 1.0, l_i)
    out = acc / safe[:, None]
    return tl.where(empty[:, None], 0.0, out)


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
