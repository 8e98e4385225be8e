"""Exercise B: multi-head attention with RoPE, in NumPy.

Build the nine steps of a decoder's attention layer from the chapter:
projections, head split, RoPE on q and k, causal mask, softmax over keys,
weighted sum of values, head merge and output projection.

Conventions (the course's contract):

* Shapes: ``B`` batch, ``S`` sequence length, ``h`` heads, ``d`` model width,
  ``d_head`` head width, ``d == h * d_head`` is not required (only
  ``w_q``'s rows must be ``h * d_head``).
* Weights act as ``y = x @ W.T``: ``w_q``, ``w_k``, ``w_v`` are
  ``(h*d_head, d)`` and ``w_o`` is ``(d, h*d_head)``.
* Causal masks are aligned to the end: with ``S_q`` queries and ``S_k``
  keys, query ``i`` sits at position ``S_k - S_q + i`` and sees keys
  ``0 .. S_k - S_q + i``.
* RoPE is rotate-half: feature ``j`` pairs with ``j + d_head/2`` and turns by
  ``position * base ** (-2j / d_head)``.
* Every function works for float32 and float64 inputs and returns the
  input's floating dtype.

Run the public tests with ``attn-grade check ex02``.
"""
from __future__ import annotations

import math
import operator
from typing import Any, Optional, Sequence

import numpy as np

__all__ = [
    "softmax",
    "causal_mask",
    "rope",
    "split_heads",
    "merge_heads",
    "attention",
    "multi_head_attention",
]


# --------------------------------------------------------------------------
# Input validation helpers
# --------------------------------------------------------------------------

def _as_int(value: Any, name: str, minimum: int = 1) -> int:
    """Return ``value`` as a Python int, or raise ``ValueError``.

    Accepts Python and NumPy integers (not bools, not floats) that are at
    least ``minimum``.
    """
    if isinstance(value, (bool, np.bool_)):
        raise ValueError(f"{name} must be an integer, got a bool ({value!r})")
    try:
        out = operator.index(value)
    except TypeError:
        raise ValueError(f"{name} must be an integer, got {type(value).__name__} ({value!r})") from None
    if out < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {out}")
    return int(out)


def _as_float_array(x: Any, name: str) -> np.ndarray:
    """Convert an array-like to a floating NumPy array.

    Floating inputs keep their dtype (float32 stays float32); integer and
    bool inputs become float64; complex or non-numeric inputs are rejected.
    """
    arr = np.asarray(x)
    if arr.dtype.kind == "f":
        return arr
    if arr.dtype.kind in "iub":
        return arr.astype(np.float64)
    raise ValueError(f"{name} must hold real numbers, got dtype {arr.dtype}")


def _float_result_type(*arrays: np.ndarray) -> np.dtype:
    """Common floating dtype of already-floating arrays."""
    return np.result_type(*arrays)


def _check_positions(positions: Any, seq_len: int, name: str = "positions") -> np.ndarray:
    """Validate RoPE positions: a 1-D array of ``seq_len`` real numbers."""
    pos = np.asarray(positions)
    if pos.dtype.kind not in "iuf":
        raise ValueError(f"{name} must be integers, got dtype {pos.dtype}")
    if pos.ndim != 1:
        raise ValueError(f"{name} must be 1-D of shape ({seq_len},), got shape {pos.shape}")
    if pos.shape[0] != seq_len:
        raise ValueError(f"{name} has {pos.shape[0]} entries but the sequence has {seq_len} rows")
    if pos.dtype.kind == "f" and not np.all(np.isfinite(pos)):
        raise ValueError(f"{name} must be finite")
    return pos


# --------------------------------------------------------------------------
# Public functions
# --------------------------------------------------------------------------

def softmax(x, axis=-1):
    """Softmax of ``x`` along ``axis``, numerically stable.

    Must stay finite for logits as large as 1e4 (subtract the max first).
    Entries of ``-inf`` get weight 0; a slice that is all ``-inf`` (a query
    that may see no key) gives all zeros, not NaN.

    Floating inputs keep their dtype; integer inputs are computed in float64.
    Raises ``ValueError`` for a 0-d input or an axis out of range.
    """
    arr = _as_float_array(x, "x")
    if arr.ndim == 0:
        raise ValueError("softmax needs at least a 1-D input")
    axis = _as_int(axis, "axis", minimum=-arr.ndim)
    if axis >= arr.ndim:
        raise ValueError(f"axis {axis} is out of range for an input with {arr.ndim} dims")
    if arr.shape[axis] == 0:
        return arr.copy()
    row_max = np.max(arr, axis=axis, keepdims=True)
    # A slice that is all -inf has max -inf: shift it by 0 instead (its
    # exponentials are all exp(-inf) = 0), which avoids -inf - -inf = NaN.
    shift = np.where(np.isfinite(row_max), row_max, 0.0).astype(arr.dtype, copy=False)
    exps = np.exp(arr - shift)
    denom = np.sum(exps, axis=axis, keepdims=True)
    safe = np.where(denom > 0, denom, 1.0).astype(arr.dtype, copy=False)
    out = exps / safe
    return out.astype(arr.dtype, copy=False)


def causal_mask(s_q, s_k=None):
    """Additive causal mask of shape ``(s_q, s_k)``, aligned to the end.

    0.0 where query ``i`` may see key ``j`` (``j <= s_k - s_q + i``), ``-inf``
    elsewhere.  ``s_k`` defaults to ``s_q`` (the usual lower triangle); with
    ``s_q == 1`` the single query sees every key.  Returns float64.
    Raises ``ValueError`` for sizes that are not positive integers.
    """
    s_q = _as_int(s_q, "s_q")
    s_k = s_q if s_k is None else _as_int(s_k, "s_k")
    query_pos = (s_k - s_q) + np.arange(s_q)[:, None]  # absolute position of each query
    key_pos = np.arange(s_k)[None, :]
    return np.where(key_pos <= query_pos, 0.0, -np.inf).astype(np.float64)


def _rope_angles(positions: np.ndarray, d_head: int, base: float) -> np.ndarray:
    """Angles ``(S, d_head/2)``: ``position * base ** (-2j / d_head)`` in float64."""
    half = d_head // 2
    inv_freq = float(base) ** (-(2.0 * np.arange(half, dtype=np.float64)) / d_head)
    return positions.astype(np.float64)[:, None] * inv_freq[None, :]


def rope(x, positions, base=10000.0):
    """Rotary position embedding (rotate-half convention).

    ``x``: ``(..., S, d_head)``; ``positions``: ``(S,)`` integers (absolute
    positions of the rows).  Feature ``j < d_head/2`` pairs with feature
    ``j + d_head/2``; the pair turns by angle ``positions * base ** (-2j /
    d_head)``:

        out[j]          = x[j] * cos - x[j + d/2] * sin
        out[j + d/2]    = x[j + d/2] * cos + x[j] * sin

    Raises ``ValueError`` when ``d_head`` is odd (or zero), when ``x`` has
    fewer than 2 dims, when ``positions`` does not have one entry per row,
    or when ``base`` is not a positive number.  Angles are computed in
    float64; the result has ``x``'s floating dtype.
    """
    arr = _as_float_array(x, "x")
    if arr.ndim < 2:
        raise ValueError(f"rope expects x of shape (..., S, d_head), got shape {arr.shape}")
    seq_len, d_head = arr.shape[-2], arr.shape[-1]
    if d_head == 0 or d_head % 2 != 0:
        raise ValueError(f"rope needs an even, positive d_head, got {d_head}")
    try:
        base_f = float(base)
    except (TypeError, ValueError):
        raise ValueError(f"base must be a positive number, got {base!r}") from None
    if not math.isfinite(base_f) or base_f <= 0:
        raise ValueError(f"base must be a positive number, got {base!r}")
    pos = _check_positions(positions, seq_len)
    angles = _rope_angles(pos, d_head, base_f)  # (S, d/2)
    cos = np.cos(angles).astype(arr.dtype)
    sin = np.sin(angles).astype(arr.dtype)
    half = d_head // 2
    x1 = arr[..., :half]
    x2 = arr[..., half:]
    out = np.empty_like(arr)
    out[..., :half] = x1 * cos - x2 * sin
    out[..., half:] = x2 * cos + x1 * sin
    return out


def split_heads(x, n_heads):
    """``(B, S, n_heads*d_head)`` -> ``(B, n_heads, S, d_head)``.

    Head ``i`` takes features ``i*d_head .. (i+1)*d_head - 1``.  The reshape
    is followed by the transpose (a reshape alone would mix positions and
    heads).  Raises ``ValueError`` unless ``x`` is 3-D and its last axis is a
    multiple of ``n_heads``.
    """
    arr = np.asarray(x)
    n_heads = _as_int(n_heads, "n_heads")
    if arr.ndim != 3:
        raise ValueError(f"split_heads expects (B, S, n_heads*d_head), got shape {arr.shape}")
    batch, seq_len, width = arr.shape
    if width == 0 or width % n_heads != 0:
        raise ValueError(f"last axis ({width}) is not a positive multiple of n_heads ({n_heads})")
    d_head = width // n_heads
    return arr.reshape(batch, seq_len, n_heads, d_head).transpose(0, 2, 1, 3)


def merge_heads(x):
    """``(B, h, S, d_head)`` -> ``(B, S, h*d_head)``: the inverse of ``split_heads``.

    Raises ``ValueError`` unless ``x`` is 4-D.
    """
    arr = np.asarray(x)
    if arr.ndim != 4:
        raise ValueError(f"merge_heads expects (B, h, S, d_head), got shape {arr.shape}")
    batch, n_heads, seq_len, d_head = arr.shape
    return arr.transpose(0, 2, 1, 3).reshape(batch, seq_len, n_heads * d_head)


def _check_qkv(q: np.ndarray, k: np.ndarray, v: np.ndarray) -> tuple:
    """Shape checks shared by the attention entry points; returns the batch shape."""
    for name, t in (("q", q), ("k", k), ("v", v)):
        if t.ndim < 2:
            raise ValueError(f"{name} must be at least 2-D (..., S, d_head), got shape {t.shape}")
    if q.shape[-1] != k.shape[-1]:
        raise ValueError(f"q and k must have the same d_head, got {q.shape[-1]} and {k.shape[-1]}")
    if q.shape[-1] == 0:
        raise ValueError("d_head must be positive")
    if k.shape[-2] != v.shape[-2]:
        raise ValueError(f"k and v must have the same number of keys, got {k.shape[-2]} and {v.shape[-2]}")
    if q.shape[-2] == 0 or k.shape[-2] == 0:
        raise ValueError("attention needs at least one query and one key")
    try:
        return np.broadcast_shapes(q.shape[:-2], k.shape[:-2], v.shape[:-2])
    except ValueError:
        raise ValueError(
            f"batch/head dims of q {q.shape}, k {k.shape} and v {v.shape} do not match"
        ) from None


def attention(q, k, v, mask=None):
    """Scaled dot-product attention on split heads.

    ``q``: ``(B, h, S_q, d_head)``, ``k`` and ``v``: ``(B, h, S_k, d_head)``;
    ``mask``: additive, broadcastable to ``(B, h, S_q, S_k)`` (``None`` for
    no mask).  Scores are ``q @ k^T / sqrt(d_head)``, softmax runs over keys
    (the last axis).  Returns ``(B, h, S_q, d_head)``.

    Leading (batch, head) dims only need to broadcast; ``v`` may have its own
    width.  A query row whose keys are all masked gets zeros.  A boolean mask
    is rejected (``ValueError``): the contract's masks are additive.
    """
    q = _as_float_array(q, "q")
    k = _as_float_array(k, "k")
    v = _as_float_array(v, "v")
    _check_qkv(q, k, v)
    dtype = _float_result_type(q, k, v)
    s_q, s_k = q.shape[-2], k.shape[-2]
    scale = 1.0 / math.sqrt(q.shape[-1])
    scores = (q.astype(dtype, copy=False) @ np.swapaxes(k.astype(dtype, copy=False), -1, -2)) * dtype.type(scale)
    if mask is not None:
        m = np.asarray(mask)
        if m.dtype.kind == "b":
            raise ValueError("mask must be additive (0 / -inf floats), not boolean")
        if m.dtype.kind not in "iuf":
            raise ValueError(f"mask must hold real numbers, got dtype {m.dtype}")
        try:
            np.broadcast_shapes(m.shape, scores.shape)
        except ValueError:
            raise ValueError(
                f"mask of shape {m.shape} does not broadcast to the scores' shape {scores.shape}"
            ) from None
        scores = scores + m.astype(dtype, copy=False)
    weights = softmax(scores, axis=-1)
    out = weights @ v.astype(dtype, copy=False)
    assert out.shape[-2:] == (s_q, v.shape[-1])
    return out.astype(dtype, copy=False)


def _check_weight(w: np.ndarray, expected: tuple, name: str) -> None:
    if w.ndim != 2 or tuple(w.shape) != tuple(expected):
        raise ValueError(f"{name} must have shape {tuple(expected)}, got {tuple(w.shape)}")


def _default_positions(positions: Optional[Any], seq_len: int) -> np.ndarray:
    if positions is None:
        return np.arange(seq_len)
    return _check_positions(positions, seq_len)


def multi_head_attention(x, w_q, w_k, w_v, w_o, n_heads, *, causal=True, positions=None,
                         rope_base=10000.0):
    """Multi-head self-attention of ``x`` ``(B, S, d)`` -> ``(B, S, d)``.

    ``positions`` (``(S,)`` ints, default ``arange(S)``) are the tokens'
    absolute positions for RoPE; RoPE goes on q and k, never on v.  With
    ``causal`` the end-aligned causal mask is applied.

    ``d_head`` is read from ``w_q``: ``w_q.shape[0] // n_heads``.  Raises
    ``ValueError`` when ``x`` is not 3-D, a weight's shape does not fit
    (``w_q``/``w_k``/``w_v`` ``(h*d_head, d)``, ``w_o`` ``(d, h*d_head)``)
    or ``d_head`` is odd.
    """
    x = _as_float_array(x, "x")
    w_q = _as_float_array(w_q, "w_q")
    w_k = _as_float_array(w_k, "w_k")
    w_v = _as_float_array(w_v, "w_v")
    w_o = _as_float_array(w_o, "w_o")
    n_heads = _as_int(n_heads, "n_heads")
    if x.ndim != 3:
        raise ValueError(f"x must be (B, S, d), got shape {x.shape}")
    batch, seq_len, d_model = x.shape
    if seq_len == 0 or d_model == 0:
        raise ValueError(f"x must have positive S and d, got shape {x.shape}")
    if w_q.ndim != 2 or w_q.shape[1] != d_model or w_q.shape[0] % n_heads != 0 or w_q.shape[0] == 0:
        raise ValueError(
            f"w_q must have shape (n_heads*d_head, d) = ({n_heads}*d_head, {d_model}), got {w_q.shape}"
        )
    inner = w_q.shape[0]
    d_head = inner // n_heads
    if d_head % 2 != 0:
        raise ValueError(f"RoPE needs an even d_head, got {d_head}")
    _check_weight(w_k, (inner, d_model), "w_k")
    _check_weight(w_v, (inner, d_model), "w_v")
    _check_weight(w_o, (d_model, inner), "w_o")
    pos = _default_positions(positions, seq_len)
    dtype = _float_result_type(x, w_q, w_k, w_v, w_o)
    x = x.astype(dtype, copy=False)

    # 1. projections, 2. head split
    q = split_heads(x @ w_q.T.astype(dtype, copy=False), n_heads)
    k = split_heads(x @ w_k.T.astype(dtype, copy=False), n_heads)
    v = split_heads(x @ w_v.T.astype(dtype, copy=False), n_heads)
    # 3. RoPE on q and k (never v)
    q = rope(q, pos, rope_base)
    k = rope(k, pos, rope_base)
    # 4. mask, 5.-6. softmax over keys and weighted sum
    mask = causal_mask(seq_len, seq_len) if causal else None
    out = attention(q, k, v, mask)
    # 7. merge, 8. output projection
    return (merge_heads(out) @ w_o.T.astype(dtype, copy=False)).astype(dtype, copy=False)


def plot_attention_heads(q, k, path, *, causal=True):
    """One heatmap per head, each with its own colorbar."""
    q = _as_float_array(q, "q")
    k = _as_float_array(k, "k")
    if q.ndim != 3 or k.ndim != 3:
        raise ValueError(f"q and k must be (h, S, d_head); got {q.shape} and {k.shape}")
    if q.shape[0] != k.shape[0] or q.shape[2] != k.shape[2]:
        raise ValueError(f"q {q.shape} and k {k.shape} need the same heads and d_head")
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as exc:
        raise ImportError("plot_attention_heads needs matplotlib: pip install matplotlib") \
            from exc
    h, s_q, d_head = q.shape
    scores = np.matmul(q, np.swapaxes(k, 1, 2)) / math.sqrt(d_head)
    if causal:
        scores = scores + causal_mask(s_q, k.shape[1])
    weights = softmax(scores, axis=-1)
    fig, axes = plt.subplots(1, h, figsize=(3.5 * h, 3), squeeze=False)
    for i in range(h):
        ax = axes[0, i]
        image = ax.matshow(weights[i], vmin=0.0, vmax=1.0)
        fig.colorbar(image, ax=ax, fraction=0.046)
        ax.set_title(f"head {i}", pad=18)
        ax.set_xlabel("keys")
        ax.set_ylabel("queries")
    fig.savefig(str(path))
    plt.close(fig)
