"""Exercise C in the style of Hugging Face transformers (LlamaAttention with
num_key_value_groups, repeat_kv via expand + reshape, eager_attention_forward).
Self-contained: RoPE/mask helpers re-declared here (HF copies them per model
with "# Copied from" too).  NumPy instead of torch.
"""
from __future__ import annotations

import numpy as np


def _softmax_fp32(x):
    orig = x.dtype
    x = x.astype(np.promote_types(orig, np.float32))
    mx = x.max(-1, keepdims=True)
    mx[~np.isfinite(mx)] = 0
    e = np.exp(x - mx)
    z = e.sum(-1, keepdims=True)
    return np.where(z > 0, e / np.where(z > 0, z, 1), 0).astype(orig)


def _rotate_half(x):
    half = x.shape[-1] // 2
    return np.concatenate((-x[..., half:], x[..., :half]), axis=-1)


def _cos_sin(head_dim, position_ids, base):
    if head_dim % 2:
        raise ValueError("head_dim must be even")
    inv_freq = 1.0 / (base ** (np.arange(0, head_dim, 2, dtype=np.float64) / head_dim))
    freqs = np.asarray(position_ids, np.float64)[:, None] * inv_freq[None, :]
    emb = np.concatenate((freqs, freqs), axis=-1)
    return np.cos(emb), np.sin(emb)


def _causal_bias(s_q, s_k):
    allowed = np.arange(s_k)[None, :] <= (np.arange(s_q) + s_k - s_q)[:, None]
    return np.where(allowed, 0.0, -np.inf)


def repeat_kv(hidden_states, n_rep):
    """(batch, num_key_value_heads, seqlen, head_dim) -> (batch, num_attention_heads, seqlen, head_dim)"""
    batch, num_key_value_heads, slen, head_dim = hidden_states.shape
    if n_rep == 1:
        return hidden_states
    hidden_states = np.broadcast_to(hidden_states[:, :, None, :, :],
                                    (batch, num_key_value_heads, n_rep, slen, head_dim))
    return hidden_states.reshape(batch, num_key_value_heads * n_rep, slen, head_dim)


def grouped_query_attention(x, w_q, w_k, w_v, w_o, n_heads, n_kv_heads, *, causal=True,
                            positions=None, rope_base=10000.0):
    if n_kv_heads <= 0 or n_heads % n_kv_heads != 0:
        raise ValueError(f"num_heads ({n_heads}) must be divisible by num_key_value_heads ({n_kv_heads})")
    bsz, q_len, hidden = x.shape
    if w_q.ndim != 2 or w_q.shape[1] != hidden or w_q.shape[0] % n_heads:
        raise ValueError(f"q_proj weight has shape {w_q.shape}")
    head_dim = w_q.shape[0] // n_heads
    for name, w in (("k_proj", w_k), ("v_proj", w_v)):
        if w.shape != (n_kv_heads * head_dim, hidden):
            raise ValueError(f"{name} weight has shape {w.shape}")
    if w_o.shape != (hidden, n_heads * head_dim):
        raise ValueError(f"o_proj weight has shape {w_o.shape}")
    num_key_value_groups = n_heads // n_kv_heads
    q = (x @ w_q.T).reshape(bsz, q_len, n_heads, head_dim).transpose(0, 2, 1, 3)
    k = (x @ w_k.T).reshape(bsz, q_len, n_kv_heads, head_dim).transpose(0, 2, 1, 3)
    v = (x @ w_v.T).reshape(bsz, q_len, n_kv_heads, head_dim).transpose(0, 2, 1, 3)
    cos, sin = _cos_sin(head_dim, np.arange(q_len) if positions is None else positions, rope_base)
    q = (q * cos + _rotate_half(q) * sin).astype(x.dtype)
    k = (k * cos + _rotate_half(k) * sin).astype(x.dtype)
    key_states = repeat_kv(k, num_key_value_groups)
    value_states = repeat_kv(v, num_key_value_groups)
    attn_weights = np.matmul(q, key_states.transpose(0, 1, 3, 2)) * head_dim ** -0.5
    if causal:
        attn_weights = attn_weights + _causal_bias(q_len, q_len).astype(x.dtype)
    attn_weights = _softmax_fp32(attn_weights)
    attn_output = np.matmul(attn_weights, value_states).transpose(0, 2, 1, 3).reshape(bsz, q_len, -1)
    return (attn_output @ w_o.T).astype(x.dtype)


def kv_cache_bytes(n_layers, n_kv_heads, d_head, seq_len, batch=1, bytes_per_elem=2):
    return int(2 * n_layers * n_kv_heads * d_head * seq_len * batch * bytes_per_elem)


def kv_cache_saving(n_heads, n_kv_heads):
    return float(n_heads) / float(n_kv_heads)


LLAMA3_70B_KV_SAVING = kv_cache_saving(64, 8)


def kv_exceeds_weights_at(n_layers, n_kv_heads, d_head, weight_bytes, bytes_per_elem=2):
    per_token = kv_cache_bytes(n_layers, n_kv_heads, d_head, 1, 1, bytes_per_elem)
    return int(weight_bytes // per_token) + 1


def plot_gqa_heads(q, k, path, *, causal=True):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as err:
        raise ImportError("plot_gqa_heads needs matplotlib: pip install matplotlib") from err
    q = np.asarray(q, np.float64)
    k = np.asarray(k, np.float64)
    h, s_q, d = q.shape
    h_kv, s_k, _ = k.shape
    groups = h // h_kv
    w = np.matmul(q, repeat_kv(k[None], groups)[0].transpose(0, 2, 1)) * d ** -0.5
    if causal:
        w = w + _causal_bias(s_q, s_k)
    w = _softmax_fp32(w)
    fig, axes = plt.subplots(h_kv, groups, figsize=(2.6 * groups, 2.6 * h_kv), squeeze=False)
    for i in range(h):
        g = i // groups
        ax = axes[g, i % groups]
        ax.imshow(w[i])
        ax.set_title(f"q{i} / kv{g}")
        ax.set_xlabel("key")
        ax.set_ylabel("query")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
