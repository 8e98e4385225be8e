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

import numpy as np


def _out_dtype(*arrays):
    """The floating dtype the result should have: the inputs' common dtype
    when it is a floating type, float64 otherwise (e.g. integer inputs)."""
    dtype = np.result_type(*[np.asarray(a) for a in arrays])
    if np.issubdtype(dtype, np.floating):
        return dtype
    return np.dtype(np.float64)


def _softmax_row(row):
    """Softmax of one 1-D float64 row, by hand: subtract the row's max, take
    exp, divide by the sum.  ``-inf`` entries get weight exactly 0; a row
    that is all ``-inf`` (a query that may see no key) gives all zeros."""
    result = np.zeros(row.shape[0], dtype=np.float64)
    if row.shape[0] == 0:
        return result
    row_max = np.max(row)
    if row_max == -np.inf:
        return result              # attends to nothing: zeros, not NaN
    exps = np.exp(row - row_max)   # exp(-inf) = 0 for masked keys
    total = np.sum(exps)
    result[:] = exps / total
    return result


def softmax(x, axis=-1):
    """Softmax of ``x`` along ``axis``, numerically stable.

    Must stay finite for logits as large as 1e4 (subtract the max first).
    Entries of ``-inf`` get weight 0; a slice that is all ``-inf`` (a query
    that may see no key) gives all zeros, not NaN.

    Implementation: the axis is moved to the end, every row along it is
    handled on its own by ``_softmax_row`` (max-subtract, exp, sum, divide,
    in float64), and the result is cast back to the input's floating dtype.
    """
    x = np.asarray(x)
    out_dtype = _out_dtype(x)
    x64 = np.moveaxis(x.astype(np.float64), axis, -1)
    moved_shape = x64.shape
    n = moved_shape[-1]
    rows = x64.reshape(-1, n)
    result = np.zeros(rows.shape, dtype=np.float64)
    for r in range(rows.shape[0]):
        result[r] = _softmax_row(rows[r])
    result = np.moveaxis(result.reshape(moved_shape), -1, axis)
    return result.astype(out_dtype)


def causal_mask(s_q, s_k=None):
    """Additive causal mask of shape ``(s_q, s_k)``, aligned to the end.

    0.0 where query ``i`` may see key ``j`` (``j <= s_k - s_q + i``), ``-inf``
    elsewhere.  ``s_k`` defaults to ``s_q`` (the usual lower triangle); with
    ``s_q == 1`` the single query sees every key.  Returns float64.
    """
    if s_k is None:
        s_k = s_q
    s_q = int(s_q)
    s_k = int(s_k)
    if s_q < 0 or s_k < 0:
        raise ValueError("causal_mask: sizes must not be negative")
    mask = np.zeros((s_q, s_k), dtype=np.float64)
    for i in range(s_q):
        last_visible = s_k - s_q + i  # absolute position of query i
        for j in range(s_k):
            if j > last_visible:
                mask[i, j] = -np.inf
    return mask


def _rope_tables(positions, d_head, base):
    """cos and sin tables of shape ``(S, d_head/2)``: angle[s, j] =
    positions[s] * base ** (-2j / d_head)."""
    half = d_head // 2
    inv_freq = np.zeros(half, dtype=np.float64)
    for j in range(half):
        inv_freq[j] = float(base) ** (-2.0 * j / d_head)
    angles = np.outer(positions, inv_freq)
    return np.cos(angles), np.sin(angles)


def rope(x, positions, base=10000.0):
    """Rotary position embedding (rotate-half convention).

    ``x``: ``(..., S, d_head)``; ``positions``: ``(S,)`` integers (absolute
    positions of the rows).  Feature ``j < d_head/2`` pairs with feature
    ``j + d_head/2``; the pair turns by angle ``positions * base ** (-2j /
    d_head)``:

        out[j]          = x[j] * cos - x[j + d/2] * sin
        out[j + d/2]    = x[j + d/2] * cos + x[j] * sin

    Raises ``ValueError`` when ``d_head`` is odd (or when ``positions`` does
    not hold one position per row).
    """
    x = np.asarray(x)
    out_dtype = _out_dtype(x)
    if x.ndim < 2:
        raise ValueError("rope: x must be (..., S, d_head)")
    seq_len = x.shape[-2]
    d_head = x.shape[-1]
    if d_head % 2 != 0:
        raise ValueError(f"rope: d_head must be even, got {d_head}")
    positions = np.asarray(positions, dtype=np.float64).reshape(-1)
    if positions.shape[0] != seq_len:
        raise ValueError(f"rope: {positions.shape[0]} positions for {seq_len} rows")
    half = d_head // 2
    cos, sin = _rope_tables(positions, d_head, base)  # (S, half) each

    x64 = x.astype(np.float64)
    first = x64[..., :half]    # features 0 .. d/2 - 1
    second = x64[..., half:]   # features d/2 .. d - 1
    out = np.zeros(x64.shape, dtype=np.float64)
    out[..., :half] = first * cos - second * sin
    out[..., half:] = second * cos + first * sin
    return out.astype(out_dtype)


def split_heads(x, n_heads):
    """``(B, S, n_heads*d_head)`` -> ``(B, n_heads, S, d_head)``.

    Head ``i`` takes features ``i*d_head .. (i+1)*d_head - 1``.
    """
    x = np.asarray(x)
    if x.ndim != 3:
        raise ValueError("split_heads: x must be (B, S, n_heads*d_head)")
    batch, seq_len, width = x.shape
    if n_heads <= 0 or width % n_heads != 0:
        raise ValueError(f"split_heads: width {width} is not a multiple of {n_heads} heads")
    d_head = width // n_heads
    out = np.zeros((batch, n_heads, seq_len, d_head), dtype=x.dtype)
    for head in range(n_heads):
        out[:, head, :, :] = x[:, :, head * d_head:(head + 1) * d_head]
    return out


def merge_heads(x):
    """``(B, h, S, d_head)`` -> ``(B, S, h*d_head)``: the inverse of ``split_heads``."""
    x = np.asarray(x)
    if x.ndim != 4:
        raise ValueError("merge_heads: x must be (B, h, S, d_head)")
    batch, n_heads, seq_len, d_head = x.shape
    out = np.zeros((batch, seq_len, n_heads * d_head), dtype=x.dtype)
    for head in range(n_heads):
        out[:, :, head * d_head:(head + 1) * d_head] = x[:, head, :, :]
    return out


def attention(q, k, v, mask=None):
    """Scaled dot-product attention on split heads.

    ``q``: ``(B, h, S_q, d_head)``, ``k`` and ``v``: ``(B, h, S_k, d_head)``;
    ``mask``: additive, broadcastable to ``(B, h, S_q, S_k)`` (``None`` for
    no mask).  Scores are ``q @ k^T / sqrt(d_head)``, softmax runs over keys
    (the last axis).  Returns ``(B, h, S_q, d_head)``.

    Loops over batch, heads and query rows.  (An extension: ``k``/``v`` may
    have fewer heads ``h_kv`` dividing ``h``; query head ``i`` then reads
    K/V head ``i // (h // h_kv)``.  Inputs with fewer than four axes are
    treated as having leading axes of size 1.)
    """
    q = np.asarray(q)
    k = np.asarray(k)
    v = np.asarray(v)
    out_dtype = _out_dtype(q, k, v)
    original_q_shape = q.shape
    while q.ndim < 4:
        q = q[np.newaxis]
    while k.ndim < 4:
        k = k[np.newaxis]
    while v.ndim < 4:
        v = v[np.newaxis]
    if q.ndim != 4 or k.ndim != 4 or v.ndim != 4:
        raise ValueError("attention: q, k, v must be (B, h, S, d_head)")

    batch, n_heads, s_q, d_head = q.shape
    n_kv_heads = k.shape[1]
    s_k = k.shape[2]
    if k.shape[0] != batch or v.shape[0] != batch:
        raise ValueError("attention: q, k and v must have the same batch size")
    if k.shape[3] != d_head or v.shape[:3] != k.shape[:3]:
        raise ValueError("attention: k and v do not fit q")
    if n_kv_heads == 0 or n_heads % n_kv_heads != 0:
        raise ValueError("attention: the heads of q must be a multiple of those of k and v")
    group = n_heads // n_kv_heads
    d_v = v.shape[3]

    if mask is None:
        full_mask = np.zeros((batch, n_heads, s_q, s_k), dtype=np.float64)
    else:
        full_mask = np.broadcast_to(np.asarray(mask, dtype=np.float64),
                                    (batch, n_heads, s_q, s_k))

    q64 = q.astype(np.float64)
    k64 = k.astype(np.float64)
    v64 = v.astype(np.float64)
    scale = 1.0 / math.sqrt(d_head)

    out = np.zeros((batch, n_heads, s_q, d_v), dtype=np.float64)
    for b in range(batch):
        for head in range(n_heads):
            kv_head = head // group
            keys = k64[b, kv_head]      # (S_k, d_head)
            values = v64[b, kv_head]    # (S_k, d_v)
            for i in range(s_q):
                scores = (keys @ q64[b, head, i]) * scale + full_mask[b, head, i]  # (S_k,)
                weights = _softmax_row(scores)
                out[b, head, i] = weights @ values
    out = out.reshape(original_q_shape[:-1] + (d_v,))
    return out.astype(out_dtype)


def _project(x, w):
    """``x @ w.T`` batch element by batch element (float64)."""
    batch = x.shape[0]
    out = np.zeros((batch, x.shape[1], w.shape[0]), dtype=np.float64)
    for b in range(batch):
        out[b] = x[b] @ w.T
    return out


def multi_head_attention(x, w_q, w_k, w_v, w_o, n_heads, *, causal=True, positions=None,
                         rope_base=10000.0):
    """Multi-head self-attention of ``x`` ``(B, S, d)`` -> ``(B, S, d)``.

    ``positions`` (``(S,)`` ints, default ``arange(S)``) are the tokens'
    absolute positions for RoPE; RoPE goes on q and k, never on v.  With
    ``causal`` the end-aligned causal mask is applied.  Raises
    ``ValueError`` when a weight's shape does not fit ``x`` and ``n_heads``.
    """
    x = np.asarray(x)
    w_q = np.asarray(w_q)
    w_k = np.asarray(w_k)
    w_v = np.asarray(w_v)
    w_o = np.asarray(w_o)
    out_dtype = _out_dtype(x)
    if x.ndim != 3:
        raise ValueError("multi_head_attention: x must be (B, S, d)")
    batch, seq_len, d_model = x.shape
    if n_heads <= 0 or w_q.ndim != 2 or w_q.shape[0] % n_heads != 0:
        raise ValueError("multi_head_attention: w_q must be (n_heads*d_head, d)")
    d_head = w_q.shape[0] // n_heads
    width = n_heads * d_head
    if w_q.shape != (width, d_model):
        raise ValueError(f"multi_head_attention: w_q is {w_q.shape}, expected {(width, d_model)}")
    if w_k.shape != (width, d_model) or w_v.shape != (width, d_model):
        raise ValueError("multi_head_attention: w_k and w_v must be (n_heads*d_head, d)")
    if w_o.shape != (d_model, width):
        raise ValueError(f"multi_head_attention: w_o is {w_o.shape}, expected {(d_model, width)}")
    if positions is None:
        positions = np.arange(seq_len)

    x64 = x.astype(np.float64)
    # 1. projections
    q = _project(x64, w_q.astype(np.float64))
    k = _project(x64, w_k.astype(np.float64))
    v = _project(x64, w_v.astype(np.float64))
    # 2. head split
    q = split_heads(q, n_heads)
    k = split_heads(k, n_heads)
    v = split_heads(v, n_heads)
    # 3. RoPE on q and k (never v)
    q = rope(q, positions, rope_base)
    k = rope(k, positions, rope_base)
    # 4. mask; 5.-6. scores, softmax over keys, weighted sum (in attention)
    mask = causal_mask(seq_len, seq_len) if causal else None
    heads = attention(q, k, v, mask)
    # 7. merge heads
    merged = merge_heads(heads)
    # 8. output projection
    out = _project(merged, w_o.astype(np.float64))
    return out.astype(out_dtype)


def plot_attention_heads(q, k, path, *, causal=True):
    """Every weight by explicit loops; a 2-row grid, spare cells switched off."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    h, s_q, d_head = len(q), len(q[0]), len(q[0][0])
    s_k = len(k[0])
    weights = np.zeros((h, s_q, s_k))
    for head in range(h):
        for i in range(s_q):
            row = []
            for j in range(s_k):
                if causal and j > s_k - s_q + i:
                    row.append(-math.inf)
                    continue
                dot = 0.0
                for f in range(d_head):
                    dot += float(q[head][i][f]) * float(k[head][j][f])
                row.append(dot / math.sqrt(d_head))
            weights[head, i] = _softmax_row(np.array(row))
    n_rows = 2
    n_cols = -(-h // n_rows)
    fig, axes = plt.subplots(n_rows, n_cols, figsize=(3 * n_cols, 6), squeeze=False)
    for n in range(n_rows * n_cols):
        ax = axes[n // n_cols][n % n_cols]
        if n >= h:
            ax.axis("off")
            continue
        ax.imshow(weights[n])
        ax.set_title("head " + str(n))
        ax.set_xlabel("key")
        ax.set_ylabel("query")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
