"""Exercise B: multi-head attention with RoPE, in NumPy (nanoGPT-style).

Follows the shape of nanoGPT's CausalSelfAttention.forward: project, split
heads with view/transpose, att = (q @ k^T) * (1/sqrt(d)), masked_fill with
-inf, softmax, att @ v, re-assemble heads, output projection.  NumPy stands
in for torch.
"""
from __future__ import annotations

import math

import numpy as np


def _fdtype(*arrays):
    dt = np.result_type(*[np.asarray(a).dtype for a in arrays])
    return dt if np.issubdtype(dt, np.floating) else np.dtype(np.float64)


def softmax(x, axis=-1):
    x = np.asarray(x)
    x = x.astype(_fdtype(x), copy=False)
    mx = np.max(x, axis=axis, keepdims=True)
    mx = np.where(np.isfinite(mx), mx, 0.0)          # all -inf row: shift by 0
    e = np.exp(x - mx)
    denom = np.sum(e, axis=axis, keepdims=True)
    out = np.divide(e, denom, out=np.zeros_like(e), where=denom > 0)
    return out.astype(x.dtype, copy=False)


def causal_mask(s_q, s_k=None):
    if s_k is None:
        s_k = s_q
    # the "bias" buffer of nanoGPT is tril(ones(T, T)); here end-aligned for S_q != S_k
    bias = np.tril(np.ones((s_q, s_k), dtype=bool), k=s_k - s_q)
    return np.where(bias, 0.0, -np.inf).astype(np.float64)


def rope(x, positions, base=10000.0):
    x = np.asarray(x)
    d = x.shape[-1]
    if d % 2:
        raise ValueError(f"rope needs an even d_head, got {d}")
    dt = _fdtype(x)
    half = d // 2
    inv_freq = 1.0 / (base ** (np.arange(0, d, 2, dtype=np.float64) / d))   # (d/2,)
    ang = np.asarray(positions, dtype=np.float64)[:, None] * inv_freq[None, :]   # (S, d/2)
    cos, sin = np.cos(ang), np.sin(ang)
    x1, x2 = x[..., :half].astype(np.float64), x[..., half:].astype(np.float64)
    out = np.concatenate([x1 * cos - x2 * sin, x2 * cos + x1 * sin], axis=-1)
    return out.astype(dt)


def split_heads(x, n_heads):
    B, T, C = x.shape
    return x.reshape(B, T, n_heads, C // n_heads).transpose(0, 2, 1, 3)


def merge_heads(x):
    B, nh, T, hs = x.shape
    return x.transpose(0, 2, 1, 3).reshape(B, T, nh * hs)


def attention(q, k, v, mask=None):
    dt = _fdtype(q, k, v)
    att = (q @ np.swapaxes(k, -1, -2)) * (1.0 / math.sqrt(k.shape[-1]))
    if mask is not None:
        att = att + mask
    att = softmax(att.astype(dt), axis=-1)
    return (att @ v).astype(dt)


def multi_head_attention(x, w_q, w_k, w_v, w_o, n_heads, *, causal=True, positions=None,
                         rope_base=10000.0):
    B, T, C = x.shape
    dt = _fdtype(x)
    q = split_heads(x @ w_q.T, n_heads)
    k = split_heads(x @ w_k.T, n_heads)
    v = split_heads(x @ w_v.T, n_heads)
    pos = np.arange(T) if positions is None else np.asarray(positions)
    q, k = rope(q, pos, rope_base), rope(k, pos, rope_base)
    mask = causal_mask(T, T) if causal else None
    y = attention(q, k, v, mask)
    return (merge_heads(y) @ w_o.T).astype(dt)


def plot_attention_heads(q, k, path, *, causal=True):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as e:
        raise ImportError("plot_attention_heads needs matplotlib: pip install matplotlib") from e
    q, k = np.asarray(q, dtype=np.float64), np.asarray(k, dtype=np.float64)
    h, s_q, d = q.shape
    att = q @ k.transpose(0, 2, 1) / math.sqrt(d)
    if causal:
        att = att + causal_mask(s_q, k.shape[1])
    att = softmax(att, axis=-1)
    fig, axes = plt.subplots(1, h, figsize=(3 * h, 3), squeeze=False)
    for i in range(h):
        ax = axes[0, i]
        ax.imshow(att[i])
        ax.set_title(f"head {i}")
        ax.set_xlabel("key")
        ax.set_ylabel("query")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
