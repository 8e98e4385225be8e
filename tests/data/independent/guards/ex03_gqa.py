"""Exercise C: grouped-query attention (GQA), in NumPy.

With GQA, ``h`` query heads share ``h_kv`` key/value heads (``h_kv``
divides ``h``): each group of ``h / h_kv`` consecutive query heads reads the
same K and V.  ``h_kv == h`` is ordinary multi-head attention, ``h_kv == 1``
is multi-query attention.  The KV cache shrinks by ``h / h_kv``.

Conventions as in ``ex02_mha`` (weights act as ``y = x @ W.T``; end-aligned
causal mask; rotate-half RoPE on q and k only): ``w_q`` is
``(h*d_head, d)``, ``w_k`` and ``w_v`` are ``(h_kv*d_head, d)``, ``w_o`` is
``(d, h*d_head)``.  You may import your own functions from ``ex02_mha``
(both files sit in the same folder when graded).

Sizes are in bytes, decimal (1 GB = 1e9 bytes).

Run the public tests with ``attn-grade check ex03``.
"""
from __future__ import annotations

import math
import numbers
from fractions import Fraction
from typing import Any, Union

import numpy as np

import operator

from ex02_mha import attention, causal_mask, merge_heads, rope, split_heads

Number = Union[int, float]

# Validation helpers are local (not imported from ex02_mha's private names), so
# this module only relies on ex02_mha's public contract.


def _as_int(value: Any, name: str, minimum: int = 1) -> int:
    """``value`` as an int >= ``minimum`` (no bools, no floats), else ``ValueError``."""
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
    """A floating NumPy array (float dtypes kept, ints/bools -> float64)."""
    arr = np.asarray(x)
    if arr.dtype.kind == "f":
        return arr
    if arr.dtype.kind in "iub":
        return arr.astype(np.float64)
    raise ValueError(f"{name} must hold real numbers, got dtype {arr.dtype}")


def _check_positions(positions: Any, seq_len: int) -> np.ndarray:
    """RoPE positions: a 1-D array of ``seq_len`` finite real numbers."""
    pos = np.asarray(positions)
    if pos.dtype.kind not in "iuf":
        raise ValueError(f"positions must be integers, got dtype {pos.dtype}")
    if pos.ndim != 1 or pos.shape[0] != seq_len:
        raise ValueError(f"positions must have shape ({seq_len},), got {pos.shape}")
    if pos.dtype.kind == "f" and not np.all(np.isfinite(pos)):
        raise ValueError("positions must be finite")
    return pos


def _as_positive_real(value: Any, name: str, allow_zero: bool = False) -> Number:
    """A finite real number > 0 (or >= 0 with ``allow_zero``), else ``ValueError``."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Real):
        raise ValueError(f"{name} must be a real number, got {type(value).__name__} ({value!r})")
    if not math.isfinite(float(value)):
        raise ValueError(f"{name} must be finite, got {value!r}")
    if value < 0 or (value == 0 and not allow_zero):
        raise ValueError(f"{name} must be {'>= 0' if allow_zero else '> 0'}, got {value!r}")
    if isinstance(value, numbers.Integral):
        return int(value)
    return float(value)


def _to_int_bytes(value: Union[int, Fraction, float]) -> int:
    """An exact byte count as int (fractional bytes, e.g. 4-bit elements, round up)."""
    if isinstance(value, int):
        return value
    return int(math.ceil(value))


def repeat_kv(x, n_rep):
    """``(B, h_kv, S, d_head)`` -> ``(B, h_kv*n_rep, S, d_head)``.

    Key/value head ``j`` serves query heads ``j*n_rep .. (j+1)*n_rep - 1``,
    so the output's heads read ``0, 0, .., 1, 1, ..`` (each repeated
    ``n_rep`` times in a row), not ``0, 1, .., 0, 1, ..``.

    Raises ``ValueError`` unless ``x`` is 4-D and ``n_rep`` a positive int.
    Always returns a new array (``n_rep == 1`` returns a copy).
    """
    arr = np.asarray(x)
    n_rep = _as_int(n_rep, "n_rep")
    if arr.ndim != 4:
        raise ValueError(f"repeat_kv expects (B, h_kv, S, d_head), got shape {arr.shape}")
    return np.repeat(arr, n_rep, axis=1)


def grouped_query_attention(x, w_q, w_k, w_v, w_o, n_heads, n_kv_heads, *, causal=True,
                            positions=None, rope_base=10000.0):
    """Grouped-query self-attention of ``x`` ``(B, S, d)`` -> ``(B, S, d)``.

    Equal to ``multi_head_attention`` when ``n_kv_heads == n_heads``.
    Raises ``ValueError`` when ``n_heads % n_kv_heads != 0`` or when a
    weight's shape does not fit ``x``, ``n_heads`` and ``n_kv_heads``.

    ``d_head`` is read from ``w_q`` (``w_q.shape[0] // n_heads``);
    ``w_k``/``w_v`` must be ``(n_kv_heads*d_head, d)`` and ``w_o``
    ``(d, n_heads*d_head)``.
    """
    x = _as_float_array(x, "x")
    w_q = _as_float_array(w_q, "w_q")
    w_k = _as_float_array(w_k, "w_k")
    w_v = _as_float_array(w_v, "w_v")
    w_o = _as_float_array(w_o, "w_o")
    n_heads = _as_int(n_heads, "n_heads")
    n_kv_heads = _as_int(n_kv_heads, "n_kv_heads")
    if n_heads % n_kv_heads != 0:
        raise ValueError(f"n_heads ({n_heads}) must be a multiple of n_kv_heads ({n_kv_heads})")
    if x.ndim != 3:
        raise ValueError(f"x must be (B, S, d), got shape {x.shape}")
    batch, seq_len, d_model = x.shape
    if seq_len == 0 or d_model == 0:
        raise ValueError(f"x must have positive S and d, got shape {x.shape}")
    if w_q.ndim != 2 or w_q.shape[1] != d_model or w_q.shape[0] == 0 or w_q.shape[0] % n_heads != 0:
        raise ValueError(
            f"w_q must have shape (n_heads*d_head, d) = ({n_heads}*d_head, {d_model}), got {w_q.shape}"
        )
    d_head = w_q.shape[0] // n_heads
    if d_head % 2 != 0:
        raise ValueError(f"RoPE needs an even d_head, got {d_head}")
    kv_shape = (n_kv_heads * d_head, d_model)
    for name, w in (("w_k", w_k), ("w_v", w_v)):
        if w.ndim != 2 or tuple(w.shape) != kv_shape:
            raise ValueError(f"{name} must have shape (n_kv_heads*d_head, d) = {kv_shape}, got {w.shape}")
    if w_o.ndim != 2 or tuple(w_o.shape) != (d_model, n_heads * d_head):
        raise ValueError(f"w_o must have shape (d, n_heads*d_head) = {(d_model, n_heads * d_head)}, got {w_o.shape}")
    pos = np.arange(seq_len) if positions is None else _check_positions(positions, seq_len)

    dtype = np.result_type(x, w_q, w_k, w_v, w_o)
    x = x.astype(dtype, copy=False)
    q = split_heads(x @ w_q.T.astype(dtype, copy=False), n_heads)       # (B, h, S, dh)
    k = split_heads(x @ w_k.T.astype(dtype, copy=False), n_kv_heads)    # (B, h_kv, S, dh)
    v = split_heads(x @ w_v.T.astype(dtype, copy=False), n_kv_heads)
    q = rope(q, pos, rope_base)
    k = rope(k, pos, rope_base)   # rotate before sharing: the cache would hold this k
    n_rep = n_heads // n_kv_heads
    k = repeat_kv(k, n_rep)
    v = repeat_kv(v, n_rep)
    mask = causal_mask(seq_len, seq_len) if causal else None
    out = attention(q, k, v, mask)
    return (merge_heads(out) @ w_o.T.astype(dtype, copy=False)).astype(dtype, copy=False)


def kv_cache_bytes(n_layers, n_kv_heads, d_head, seq_len, batch=1, bytes_per_elem=2):
    """Bytes of the KV cache: K and V, for every layer, KV head, position and
    sequence of the batch.  Returns an int.

    ``2 * n_layers * n_kv_heads * d_head * seq_len * batch * bytes_per_elem``.
    ``seq_len`` may be 0; ``bytes_per_elem`` may be fractional (e.g. 0.5 for
    4-bit), in which case the total is rounded up to whole bytes.
    """
    n_layers = _as_int(n_layers, "n_layers")
    n_kv_heads = _as_int(n_kv_heads, "n_kv_heads")
    d_head = _as_int(d_head, "d_head")
    seq_len = _as_int(seq_len, "seq_len", minimum=0)
    batch = _as_int(batch, "batch")
    bpe = _as_positive_real(bytes_per_elem, "bytes_per_elem")
    elems = 2 * n_layers * n_kv_heads * d_head * seq_len * batch
    if isinstance(bpe, int):
        return elems * bpe
    return _to_int_bytes(Fraction(elems) * Fraction(bpe))


def kv_cache_saving(n_heads, n_kv_heads):
    """How many times smaller this cache is than multi-head attention's
    (``h`` KV heads) for the same model: a float.

    ``n_heads / n_kv_heads``; ``ValueError`` unless ``n_kv_heads`` divides
    ``n_heads``.
    """
    n_heads = _as_int(n_heads, "n_heads")
    n_kv_heads = _as_int(n_kv_heads, "n_kv_heads")
    if n_heads % n_kv_heads != 0:
        raise ValueError(f"n_heads ({n_heads}) must be a multiple of n_kv_heads ({n_kv_heads})")
    return float(n_heads) / float(n_kv_heads)


# Llama-3-70B: 80 layers, 64 query heads, 8 KV heads, d_head 128.
LLAMA3_70B_KV_SAVING = 64 / 8  # 8.0: the layer count and d_head cancel out


def kv_exceeds_weights_at(n_layers, n_kv_heads, d_head, weight_bytes, bytes_per_elem=2):
    """The smallest context length (batch 1) whose KV cache is strictly
    larger than ``weight_bytes``: an int.

    Example: Llama-3-8B (32 layers, 8 KV heads, ``d_head`` 128, fp16,
    16 GB = 16e9 bytes of weights) gives 122071.

    Computed exactly (rational arithmetic, no float rounding):
    ``floor(weight_bytes / per_token) + 1`` where ``per_token`` is the cache
    of one token.
    """
    n_layers = _as_int(n_layers, "n_layers")
    n_kv_heads = _as_int(n_kv_heads, "n_kv_heads")
    d_head = _as_int(d_head, "d_head")
    weights = _as_positive_real(weight_bytes, "weight_bytes", allow_zero=True)
    bpe = _as_positive_real(bytes_per_elem, "bytes_per_elem")
    per_token = Fraction(2 * n_layers * n_kv_heads * d_head) * Fraction(bpe)
    return int(math.floor(Fraction(weights) / per_token)) + 1


def plot_gqa_heads(q, k, path, *, causal=True):
    """One heatmap per query head with its own colorbar, a row per K/V head."""
    q = _as_float_array(q, "q")
    k = _as_float_array(k, "k")
    if q.ndim != 3 or k.ndim != 3 or q.shape[2] != k.shape[2]:
        raise ValueError(f"q must be (h, S_q, d_head) and k (h_kv, S_k, d_head); got "
                         f"{q.shape} and {k.shape}")
    h, s_q, d_head = q.shape
    h_kv, s_k, _ = k.shape
    if h_kv < 1 or h % h_kv:
        raise ValueError(f"h={h} is not a multiple of h_kv={h_kv}")
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as exc:
        raise ImportError("plot_gqa_heads needs matplotlib: pip install matplotlib") from exc
    from ex02_mha import softmax

    n_rep = h // h_kv
    fig, axes = plt.subplots(h_kv, n_rep, figsize=(3.5 * n_rep, 3 * h_kv), squeeze=False)
    for i in range(h):
        g = i // n_rep
        scores = q[i] @ k[g].T / math.sqrt(d_head)
        if causal:
            scores = scores + causal_mask(s_q, s_k)
        ax = axes[g, i - g * n_rep]
        image = ax.matshow(softmax(scores, axis=-1), vmin=0.0, vmax=1.0)
        fig.colorbar(image, ax=ax, fraction=0.046)
        ax.set_title(f"query head {i} (kv head {g})", pad=18)
        ax.set_xlabel("keys")
        ax.set_ylabel("queries")
    fig.savefig(str(path))
    plt.close(fig)
