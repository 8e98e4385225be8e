"""Exercise B in the style of xFormers' reference attention (einsum-based).

xformers.ops.fmha's ref_attention / scaled_dot_product_attention helpers:
q scaled first (q * scale), einsum for q k^T and for p v, an additive
LowerTriangularFromBottomRightMask-style bias built from the key/query counts,
softmax in float32 or better.  NumPy stands in for torch.
"""
from __future__ import annotations

import numpy as np


def softmax(x, axis=-1):
    x = np.asarray(x)
    dtype = x.dtype if x.dtype.kind == "f" else np.float64
    x = x.astype(dtype)
    x_max = np.amax(x, axis=axis, keepdims=True)
    x_max = np.nan_to_num(x_max, neginf=0.0, posinf=0.0)
    p = np.exp(x - x_max)
    z = p.sum(axis=axis, keepdims=True)
    with np.errstate(invalid="ignore", divide="ignore"):
        p = p / z
    p[np.broadcast_to(z == 0, p.shape)] = 0
    return p


def causal_mask(s_q, s_k=None):
    """LowerTriangularFromBottomRightMask materialized."""
    s_k = s_q if s_k is None else s_k
    q_idx = np.arange(s_q)[:, None]
    k_idx = np.arange(s_k)[None, :]
    bias = np.zeros((s_q, s_k), dtype=np.float64)
    bias[k_idx - q_idx > s_k - s_q] = -np.inf
    return bias


def rope(x, positions, base=10000.0):
    x = np.asarray(x)
    d = x.shape[-1]
    if d % 2 == 1:
        raise ValueError("odd d_head")
    theta = base ** (-2.0 * np.arange(d // 2) / d)
    ang = np.einsum("s,f->sf", np.asarray(positions, dtype=np.float64), theta)
    c = np.concatenate([np.cos(ang)] * 2, -1)
    s = np.concatenate([np.sin(ang)] * 2, -1)
    xr = np.concatenate([-x[..., d // 2:], x[..., : d // 2]], -1)
    return (x * c + xr * s).astype(x.dtype)


def split_heads(x, n_heads):
    b, s, hd = x.shape
    return np.einsum("bshd->bhsd", x.reshape(b, s, n_heads, hd // n_heads))


def merge_heads(x):
    b, h, s, d = x.shape
    return np.einsum("bhsd->bshd", x).reshape(b, s, h * d)


def attention(q, k, v, mask=None):
    dtype = np.result_type(q, k, v)
    scale = 1.0 / np.sqrt(q.shape[-1])
    q = q * scale
    attn = np.einsum("bhqd,bhkd->bhqk", q, k)
    if mask is not None:
        attn = attn + mask
    attn = softmax(attn.astype(np.promote_types(dtype, np.float32)), axis=-1)
    return np.einsum("bhqk,bhkd->bhqd", attn, v).astype(dtype)


def multi_head_attention(x, w_q, w_k, w_v, w_o, n_heads, *, causal=True, positions=None,
                         rope_base=10000.0):
    S = x.shape[1]
    pos = np.arange(S) if positions is None else np.asarray(positions)
    q = rope(split_heads(np.einsum("bsd,ed->bse", x, w_q), n_heads), pos, rope_base)
    k = rope(split_heads(np.einsum("bsd,ed->bse", x, w_k), n_heads), pos, rope_base)
    v = split_heads(np.einsum("bsd,ed->bse", x, w_v), n_heads)
    out = attention(q, k, v, causal_mask(S) if causal else None)
    return np.einsum("bse,de->bsd", merge_heads(out), w_o).astype(x.dtype)


def plot_attention_heads(q, k, path, *, causal=True):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as e:
        raise ImportError("needs matplotlib (pip install matplotlib)") from e
    q = np.asarray(q, dtype=np.float64)
    k = np.asarray(k, dtype=np.float64)
    att = np.einsum("hqd,hkd->hqk", q, k) / np.sqrt(q.shape[-1])
    if causal:
        att = att + causal_mask(q.shape[1], k.shape[1])
    att = softmax(att)
    fig, axs = plt.subplots(1, att.shape[0], figsize=(2.5 * att.shape[0], 2.8), squeeze=False)
    for i, ax in enumerate(axs[0]):
        ax.imshow(att[i], cmap="Blues")
        ax.set_title(f"head {i}")
        ax.set_xlabel("key")
        if i == 0:
            ax.set_ylabel("query")
    fig.savefig(path, dpi=80)
    plt.close(fig)
