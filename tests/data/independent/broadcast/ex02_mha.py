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

import numpy as np


def _float(x):
    """``x`` as a floating array (integers and bools become float64)."""
    x = np.asarray(x)
    return x if np.issubdtype(x.dtype, np.floating) else x.astype(np.float64)


def softmax(x, axis=-1):
    """Softmax of ``x`` along ``axis``, numerically stable.

    Must stay finite for logits as large as 1e4 (subtract the max first).
    Entries of ``-inf`` get weight 0; a slice that is all ``-inf`` (a query
    that may see no key) gives all zeros, not NaN.

    Computed as ``exp(x - logsumexp(x))``, the log-sum-exp itself shifted by
    the slice's maximum.  An all ``-inf`` slice is shifted by 0 instead (its
    maximum is ``-inf``) and its log-sum-exp is taken as 0, so every weight
    is ``exp(-inf) = 0``.  Returns ``x``'s floating dtype.
    """
    x = _float(x)
    m = np.max(x, axis=axis, keepdims=True)
    m = np.where(np.isfinite(m), m, 0.0).astype(x.dtype)
    z = x - m
    total = np.sum(np.exp(z), axis=axis, keepdims=True)
    lse = np.log(np.where(total > 0, total, 1.0)).astype(x.dtype)
    return np.exp(z - lse)


def causal_mask(s_q, s_k=None):
    """Additive causal mask of shape ``(s_q, s_k)``, aligned to the end.

    0.0 where query ``i`` may see key ``j`` (``j <= s_k - s_q + i``), ``-inf``
    elsewhere.  ``s_k`` defaults to ``s_q`` (the usual lower triangle); with
    ``s_q == 1`` the single query sees every key.  Returns float64.
    """
    s_k = s_q if s_k is None else s_k
    if s_q < 0 or s_k < 0:
        raise ValueError(f"causal_mask: negative sizes ({s_q}, {s_k})")
    allowed = np.arange(s_k)[None, :] <= (s_k - s_q) + np.arange(s_q)[:, None]
    return np.where(allowed, 0.0, -np.inf)


def _rope_angles(positions, d_head, base):
    """``(..., S, 1, d_head/2)`` rotation angles for rotate-half RoPE."""
    if d_head % 2:
        raise ValueError(f"rope: d_head must be even, got {d_head}")
    half = d_head // 2
    inv_freq = float(base) ** (-2.0 * np.arange(half) / d_head)
    pos = np.asarray(positions, dtype=np.float64)
    return (pos[..., None] * inv_freq)[..., None, :]


def rope(x, positions, base=10000.0):
    """Rotary position embedding (rotate-half convention).

    ``x``: ``(..., S, d_head)``; ``positions``: ``(S,)`` integers (absolute
    positions of the rows).  Feature ``j < d_head/2`` pairs with feature
    ``j + d_head/2``; the pair turns by angle ``positions * base ** (-2j /
    d_head)``:

        out[j]          = x[j] * cos - x[j + d/2] * sin
        out[j + d/2]    = x[j + d/2] * cos + x[j] * sin

    Raises ``ValueError`` when ``d_head`` is odd.

    The last axis is viewed as ``(2, d_head/2)`` (the two halves); the
    rotation is one broadcast expression over that view: each half times
    ``cos`` plus the other half (the halves swapped, the first one negated)
    times ``sin``.  ``positions`` may also carry leading axes that broadcast
    against ``x``'s (``(..., S)``).  Angles are computed in float64; the
    result has ``x``'s floating dtype.
    """
    x = _float(x)
    d_head = x.shape[-1]
    ang = _rope_angles(positions, d_head, base)              # (..., S, 1, half)
    cos, sin = np.cos(ang).astype(x.dtype), np.sin(ang).astype(x.dtype)
    halves = x.reshape(x.shape[:-1] + (2, d_head // 2))      # (..., S, 2, half)
    sign = np.array([[-1.0], [1.0]], dtype=x.dtype)          # (2, 1)
    out = halves * cos + sign * halves[..., ::-1, :] * sin
    return out.reshape(x.shape)


def split_heads(x, n_heads):
    """``(B, S, n_heads*d_head)`` -> ``(B, n_heads, S, d_head)``.

    Head ``i`` takes features ``i*d_head .. (i+1)*d_head - 1``.
    """
    x = np.asarray(x)
    b, s, width = x.shape
    if n_heads <= 0 or width % n_heads:
        raise ValueError(f"split_heads: width {width} is not a multiple of {n_heads} heads")
    return np.einsum("bshe->bhse", x.reshape(b, s, n_heads, width // n_heads))


def merge_heads(x):
    """``(B, h, S, d_head)`` -> ``(B, S, h*d_head)``: the inverse of ``split_heads``."""
    x = np.asarray(x)
    b, h, s, d_head = x.shape
    return np.einsum("bhse->bshe", x).reshape(b, s, h * d_head)


def attention(q, k, v, mask=None):
    """Scaled dot-product attention on split heads.

    ``q``: ``(B, h, S_q, d_head)``, ``k`` and ``v``: ``(B, h, S_k, d_head)``;
    ``mask``: additive, broadcastable to ``(B, h, S_q, S_k)`` (``None`` for
    no mask).  Scores are ``q @ k^T / sqrt(d_head)``, softmax runs over keys
    (the last axis).  Returns ``(B, h, S_q, d_head)``.

    The leading axes only have to broadcast against each other (``k`` and
    ``v`` of shape ``(B, h_kv, 1, S_k, d_head)`` against ``q`` of shape
    ``(B, h_kv, group, S_q, d_head)`` is how ``ex03_gqa`` shares K/V).  A
    query row whose keys are all masked gets zeros.  Returns ``q``'s
    floating dtype.
    """
    q, k, v = _float(q), _float(k), _float(v)
    dtype = q.dtype
    scores = np.einsum("...qe,...ke->...qk", q, k) / np.sqrt(q.shape[-1]).astype(dtype)
    if mask is not None:
        scores = scores + np.asarray(mask, dtype=scores.dtype)
    weights = softmax(scores, axis=-1)
    return np.einsum("...qk,...ke->...qe", weights, v).astype(dtype, copy=False)


def _project(x, w):
    """``x @ w.T`` for ``x`` ``(B, S, d)`` and ``w`` ``(n, d)``."""
    return np.einsum("bsd,nd->bsn", x, w)


def multi_head_attention(x, w_q, w_k, w_v, w_o, n_heads, *, causal=True, positions=None,
                         rope_base=10000.0):
    """Multi-head self-attention of ``x`` ``(B, S, d)`` -> ``(B, S, d)``.

    ``positions`` (``(S,)`` ints, default ``arange(S)``) are the tokens'
    absolute positions for RoPE; RoPE goes on q and k, never on v.  With
    ``causal`` the end-aligned causal mask is applied.

    Weights whose shapes do not fit ``x`` and ``n_heads`` raise
    ``ValueError``.  The merge of the heads and the output projection are
    one contraction (``w_o`` viewed as ``(d, h, d_head)``).  Returns ``x``'s
    floating dtype.
    """
    x = _float(x)
    w_q, w_k, w_v, w_o = (np.asarray(w) for w in (w_q, w_k, w_v, w_o))
    if x.ndim != 3:
        raise ValueError(f"multi_head_attention: x must be (B, S, d), got {x.shape}")
    b, s, d = x.shape
    if n_heads <= 0 or w_q.ndim != 2 or w_q.shape[0] % n_heads or w_q.shape[1] != d:
        raise ValueError(f"multi_head_attention: w_q {w_q.shape} does not fit d={d}, h={n_heads}")
    width = w_q.shape[0]
    for name, w, want in (("w_k", w_k, (width, d)), ("w_v", w_v, (width, d)),
                          ("w_o", w_o, (d, width))):
        if w.shape != want:
            raise ValueError(f"multi_head_attention: {name} is {w.shape}, expected {want}")
    positions = np.arange(s) if positions is None else np.asarray(positions)
    q = rope(split_heads(_project(x, w_q), n_heads), positions, rope_base)
    k = rope(split_heads(_project(x, w_k), n_heads), positions, rope_base)
    v = split_heads(_project(x, w_v), n_heads)
    mask = causal_mask(s) if causal else None
    o = attention(q, k, v, mask)                                # (B, h, S, d_head)
    out = np.einsum("bhse,dhe->bsd", o, w_o.reshape(d, n_heads, width // n_heads))
    return out.astype(x.dtype, copy=False)


def plot_attention_heads(q, k, path, *, causal=True):
    """Weights by broadcasting; masked cells left blank (a masked array)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    q, k = np.asarray(q, dtype=float), np.asarray(k, dtype=float)
    scores = (q[:, :, None, :] * k[:, None, :, :]).sum(-1) / np.sqrt(q.shape[-1])
    mask = causal_mask(q.shape[1], k.shape[1]) if causal else np.zeros(scores.shape[1:])
    weights = softmax(scores + mask, axis=-1)
    blank = np.broadcast_to(np.isinf(mask), weights.shape)
    h = len(weights)
    fig, axes = plt.subplots(1, h, figsize=(3 * h, 3), squeeze=False, layout="constrained")
    for i, ax in enumerate(axes.ravel()):
        ax.imshow(np.ma.masked_array(weights[i], blank[i]), cmap="viridis")
        ax.set(title=f"head {i}", xlabel="key", ylabel="query")
    fig.savefig(path)
    plt.close(fig)
