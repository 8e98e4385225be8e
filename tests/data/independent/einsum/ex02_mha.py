"""Exercise B, independent version: einsum, log-sum-exp softmax, dtype kept."""

import numpy as np


def softmax(x, axis=-1):
    """Softmax via log-sum-exp; a row that is all -inf gives zeros."""
    x = np.asarray(x)
    m = np.max(x, axis=axis, keepdims=True)
    # A fully masked row has max -inf: shift by 0 there so no inf - inf.
    m = np.where(np.isfinite(m), m, 0.0).astype(x.dtype, copy=False)
    z = x - m
    lse = np.log(np.sum(np.exp(z), axis=axis, keepdims=True))
    with np.errstate(invalid="ignore"):
        out = np.exp(z - lse)
    return np.nan_to_num(out, nan=0.0).astype(x.dtype, copy=False)


def causal_mask(s_q, s_k=None):
    """Additive end-aligned mask (s_q, s_k): 0 allowed, -inf masked."""
    if s_k is None:
        s_k = s_q
    qpos = np.arange(s_q)[:, None] + (s_k - s_q)  # absolute query position
    kpos = np.arange(s_k)[None, :]
    return np.where(kpos <= qpos, 0.0, -np.inf)


def rope(x, positions, base=10000.0):
    """Rotate-half RoPE on the last axis; x (..., S, d_head)."""
    x = np.asarray(x)
    d = x.shape[-1]
    if d % 2:
        raise ValueError(f"d_head must be even, got {d}")
    half = d // 2
    pos = np.asarray(positions, dtype=np.float64)
    inv = base ** (-np.arange(half, dtype=np.float64) * 2.0 / d)
    ang = np.einsum("s,f->sf", pos, inv)  # (S, half)
    cos = np.cos(ang).astype(x.dtype)
    sin = np.sin(ang).astype(x.dtype)
    x1, x2 = x[..., :half], x[..., half:]
    return np.concatenate([x1 * cos - x2 * sin, x2 * cos + x1 * sin], axis=-1)


def split_heads(x, n_heads):
    b, s, hd = x.shape
    return np.ascontiguousarray(
        np.einsum("bshd->bhsd", x.reshape(b, s, n_heads, hd // n_heads)))


def merge_heads(x):
    b, h, s, d = x.shape
    return np.einsum("bhsd->bshd", x).reshape(b, s, h * d)


def attention(q, k, v, mask=None):
    scores = np.einsum("...qd,...kd->...qk", q, k) / np.sqrt(q.shape[-1]).astype(q.dtype)
    if mask is not None:
        scores = scores + mask
    w = softmax(scores, axis=-1)
    return np.einsum("...qk,...kd->...qd", w, v)


def multi_head_attention(x, w_q, w_k, w_v, w_o, n_heads, *, causal=True,
                         positions=None, rope_base=10000.0):
    b, s, _ = x.shape
    if positions is None:
        positions = np.arange(s)
    q = split_heads(np.einsum("bsd,ed->bse", x, w_q), n_heads)
    k = split_heads(np.einsum("bsd,ed->bse", x, w_k), n_heads)
    v = split_heads(np.einsum("bsd,ed->bse", x, w_v), n_heads)
    q = rope(q, positions, rope_base)
    k = rope(k, positions, rope_base)
    mask = causal_mask(s).astype(x.dtype) if causal else None
    o = merge_heads(attention(q, k, v, mask))
    return np.einsum("bse,de->bsd", o, w_o)


def plot_attention_heads(q, k, path, *, causal=True):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    s = np.einsum("hqd,hkd->hqk", q, k) / np.sqrt(q.shape[-1])
    if causal:
        s = s + causal_mask(q.shape[1], k.shape[1])
    w = softmax(s, axis=-1)
    fig, axes = plt.subplots(1, len(w), figsize=(3 * len(w), 3), squeeze=False)
    for i, ax in enumerate(axes[0]):
        ax.imshow(w[i])
        ax.set_title(f"head {i}")
        ax.set_xlabel("key")
        ax.set_ylabel("query")
    fig.savefig(path)
    plt.close(fig)
