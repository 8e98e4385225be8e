"""Exercise B in the style of Hugging Face transformers' Llama modeling code.

rotate_half / apply_rotary_pos_emb, a RotaryEmbedding that builds cos/sin
from inv_freq, eager_attention_forward (softmax upcast then cast back to the
query dtype), and an Attention module with q_proj/k_proj/v_proj/o_proj.
NumPy instead of torch; weights act as y = x @ W.T like nn.Linear.
"""
from __future__ import annotations

import numpy as np


def softmax(x, axis=-1):
    x = np.asarray(x)
    orig = x.dtype if np.issubdtype(x.dtype, np.floating) else np.dtype(np.float64)
    work = np.promote_types(orig, np.float32)           # "upcast attention to fp32"
    x = x.astype(work)
    x_max = np.max(x, axis=axis, keepdims=True)
    x_max[~np.isfinite(x_max)] = 0
    unnorm = np.exp(x - x_max)
    total = unnorm.sum(axis=axis, keepdims=True)
    probs = np.where(total > 0, unnorm / np.where(total > 0, total, 1), 0)
    return probs.astype(orig)


def causal_mask(s_q, s_k=None):
    s_k = s_q if s_k is None else s_k
    # like _prepare_4d_causal_attention_mask_with_cache_position: cache_position = past + arange
    cache_position = np.arange(s_q) + (s_k - s_q)
    min_value = -np.inf
    mask = np.full((s_q, s_k), min_value, dtype=np.float64)
    with np.errstate(invalid="ignore"):
        mask = mask * (np.arange(s_k)[None, :] > cache_position[:, None])
    mask[np.isnan(mask)] = 0.0                                  # -inf * 0
    return mask + 0.0


def rotate_half(x):
    """Rotates half the hidden dims of the input."""
    x1 = x[..., : x.shape[-1] // 2]
    x2 = x[..., x.shape[-1] // 2:]
    return np.concatenate((-x2, x1), axis=-1)


class RotaryEmbedding:
    def __init__(self, dim, base=10000.0):
        if dim % 2:
            raise ValueError(f"head dim must be even for RoPE, got {dim}")
        self.inv_freq = 1.0 / (base ** (np.arange(0, dim, 2, dtype=np.int64).astype(np.float64) / dim))

    def __call__(self, position_ids):
        freqs = np.asarray(position_ids, dtype=np.float64)[:, None] * self.inv_freq[None, :]
        emb = np.concatenate((freqs, freqs), axis=-1)
        return np.cos(emb), np.sin(emb)


def apply_rotary_pos_emb(q, cos, sin):
    return (q * cos) + (rotate_half(q) * sin)


def rope(x, positions, base=10000.0):
    x = np.asarray(x)
    cos, sin = RotaryEmbedding(x.shape[-1], base)(positions)
    return apply_rotary_pos_emb(x.astype(np.float64), cos, sin).astype(x.dtype)


def split_heads(x, n_heads):
    bsz, q_len, hidden = x.shape
    head_dim = hidden // n_heads
    return np.swapaxes(x.reshape(bsz, q_len, n_heads, head_dim), 1, 2)


def merge_heads(x):
    bsz, n, q_len, head_dim = x.shape
    return np.ascontiguousarray(np.swapaxes(x, 1, 2)).reshape(bsz, q_len, n * head_dim)


def eager_attention_forward(query, key, value, attention_mask, scaling):
    attn_weights = np.matmul(query, np.swapaxes(key, 2, 3)) * scaling
    if attention_mask is not None:
        attn_weights = attn_weights + attention_mask
    attn_weights = softmax(attn_weights, axis=-1).astype(query.dtype)
    attn_output = np.matmul(attn_weights, value)
    return attn_output, attn_weights


def attention(q, k, v, mask=None):
    out, _ = eager_attention_forward(q, k, v, mask, q.shape[-1] ** -0.5)
    return out.astype(q.dtype)


def multi_head_attention(x, w_q, w_k, w_v, w_o, n_heads, *, causal=True, positions=None,
                         rope_base=10000.0):
    bsz, q_len, _ = x.shape
    head_dim = w_q.shape[0] // n_heads
    query_states = split_heads(x @ w_q.T, n_heads)
    key_states = split_heads(x @ w_k.T, n_heads)
    value_states = split_heads(x @ w_v.T, n_heads)
    position_ids = np.arange(q_len) if positions is None else np.asarray(positions)
    cos, sin = RotaryEmbedding(head_dim, rope_base)(position_ids)
    query_states = apply_rotary_pos_emb(query_states, cos, sin).astype(x.dtype)
    key_states = apply_rotary_pos_emb(key_states, cos, sin).astype(x.dtype)
    attention_mask = causal_mask(q_len, q_len).astype(x.dtype) if causal else None
    attn_output, _ = eager_attention_forward(query_states, key_states, value_states,
                                             attention_mask, head_dim ** -0.5)
    return (merge_heads(attn_output) @ w_o.T).astype(x.dtype)


def plot_attention_heads(q, k, path, *, causal=True):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as err:
        raise ImportError("matplotlib is required: pip install matplotlib") from err
    q = np.asarray(q, dtype=np.float64)[None]
    k = np.asarray(k, dtype=np.float64)[None]
    mask = causal_mask(q.shape[2], k.shape[2]) if causal else None
    _, probs = eager_attention_forward(q, k, k, mask, q.shape[-1] ** -0.5)
    probs = probs[0]
    n = probs.shape[0]
    ncols = min(n, 4)
    nrows = -(-n // ncols)
    fig, axes = plt.subplots(nrows, ncols, figsize=(3 * ncols, 3 * nrows), squeeze=False)
    for idx, ax in enumerate(axes.flat):
        if idx >= n:
            ax.axis("off")
            continue
        ax.imshow(probs[idx])
        ax.set_title(f"head {idx}")
        ax.set_xlabel("key")
        ax.set_ylabel("query")
    fig.savefig(path)
    plt.close(fig)
