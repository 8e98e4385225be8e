"""Exercise C in the style of Meta's Llama 2/3 model.py (n_kv_heads, n_rep,
repeat_kv on a (bs, slen, n_kv_heads, head_dim) layout, complex RoPE).
Thin adapter: the course's repeat_kv takes (B, h_kv, S, d_head), so it
transposes to Llama's layout, repeats, and transposes back.
"""
from __future__ import annotations

import math

import numpy as np


def _repeat_kv_llama(x, n_rep):
    """torch.repeat_interleave(x, dim=2, repeats=n_rep) on (bs, slen, n_kv_heads, head_dim)."""
    bs, slen, n_kv_heads, head_dim = x.shape
    if n_rep == 1:
        return x
    return (np.broadcast_to(x[:, :, :, None, :], (bs, slen, n_kv_heads, n_rep, head_dim))
            .reshape(bs, slen, n_kv_heads * n_rep, head_dim))


def repeat_kv(x, n_rep):
    return _repeat_kv_llama(x.transpose(0, 2, 1, 3), n_rep).transpose(0, 2, 1, 3)


def _precompute_freqs_cis(dim, positions, theta):
    freqs = 1.0 / (theta ** (np.arange(0, dim, 2)[: dim // 2].astype(np.float64) / dim))
    return np.exp(1j * np.outer(np.asarray(positions, np.float64), freqs))


def _apply_rotary_emb(xq, xk, freqs_cis):
    """(bs, slen, n, hd) tensors; complex view built from the halves (rotate-half pairing)."""
    def rot(t):
        h = t.shape[-1] // 2
        c = (t[..., :h].astype(np.float64) + 1j * t[..., h:].astype(np.float64)) * freqs_cis[None, :, None, :]
        return np.concatenate([c.real, c.imag], -1).astype(t.dtype)
    return rot(xq), rot(xk)


def _softmax(scores):
    m = scores.max(-1, keepdims=True)
    m = np.where(np.isneginf(m), 0.0, m)
    e = np.exp(scores - m)
    z = e.sum(-1, keepdims=True)
    return e / np.where(z == 0, 1.0, z)


def grouped_query_attention(x, w_q, w_k, w_v, w_o, n_heads, n_kv_heads, *, causal=True,
                            positions=None, rope_base=10000.0):
    if n_kv_heads < 1 or n_heads % n_kv_heads:
        raise ValueError("n_heads must be a multiple of n_kv_heads")
    bsz, seqlen, dim = x.shape
    if w_q.shape[0] % n_heads or w_q.shape[1] != dim:
        raise ValueError(f"wq shape {w_q.shape} does not fit dim={dim}, n_heads={n_heads}")
    head_dim = w_q.shape[0] // n_heads
    if head_dim % 2:
        raise ValueError("head_dim must be even for RoPE")
    if w_k.shape != (n_kv_heads * head_dim, dim) or w_v.shape != (n_kv_heads * head_dim, dim):
        raise ValueError("wk/wv shape does not fit n_kv_heads * head_dim")
    if w_o.shape != (dim, n_heads * head_dim):
        raise ValueError("wo shape does not fit")
    n_rep = n_heads // n_kv_heads
    xq = (x @ w_q.T).reshape(bsz, seqlen, n_heads, head_dim)
    xk = (x @ w_k.T).reshape(bsz, seqlen, n_kv_heads, head_dim)
    xv = (x @ w_v.T).reshape(bsz, seqlen, n_kv_heads, head_dim)
    pos = np.arange(seqlen) if positions is None else np.asarray(positions)
    xq, xk = _apply_rotary_emb(xq, xk, _precompute_freqs_cis(head_dim, pos, rope_base))
    keys = _repeat_kv_llama(xk, n_rep)
    values = _repeat_kv_llama(xv, n_rep)
    xq, keys, values = (t.transpose(0, 2, 1, 3) for t in (xq, keys, values))
    scores = np.matmul(xq, keys.transpose(0, 1, 3, 2)) / math.sqrt(head_dim)
    if causal:
        mask = np.triu(np.full((seqlen, seqlen), -np.inf), k=1)
        scores = scores + mask
    scores = _softmax(scores.astype(np.float64)).astype(x.dtype)
    output = np.matmul(scores, values).transpose(0, 2, 1, 3).reshape(bsz, seqlen, -1)
    return (output @ w_o.T).astype(x.dtype)


def kv_cache_bytes(n_layers, n_kv_heads, d_head, seq_len, batch=1, bytes_per_elem=2):
    # cache_k and cache_v: (max_batch_size, max_seq_len, n_kv_heads, head_dim) per layer
    per_layer = batch * seq_len * n_kv_heads * d_head
    return int(n_layers * 2 * per_layer * bytes_per_elem)


def kv_cache_saving(n_heads, n_kv_heads):
    return n_heads / n_kv_heads


LLAMA3_70B_KV_SAVING = 8.0


def kv_exceeds_weights_at(n_layers, n_kv_heads, d_head, weight_bytes, bytes_per_elem=2):
    per_token = 2 * n_layers * n_kv_heads * d_head * bytes_per_elem
    n = math.floor(weight_bytes / per_token) + 1
    while n > 1 and (n - 1) * per_token > weight_bytes:   # guard float rounding
        n -= 1
    while n * per_token <= weight_bytes:
        n += 1
    return int(n)


def plot_gqa_heads(q, k, path, *, causal=True):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise ImportError("install matplotlib: pip install matplotlib")
    q = np.asarray(q, np.float64)
    k = np.asarray(k, np.float64)
    n_heads, s_q, hd = q.shape
    n_kv, s_k, _ = k.shape
    n_rep = n_heads // n_kv
    fig, axes = plt.subplots(n_kv, n_rep, figsize=(3 * n_rep, 3 * n_kv), squeeze=False)
    mask = np.triu(np.full((s_q, s_k), -np.inf), k=s_k - s_q + 1) if causal else 0.0
    for i in range(n_heads):
        g = i // n_rep
        w = _softmax(q[i] @ k[g].T / math.sqrt(hd) + mask)
        ax = axes[g][i % n_rep]
        ax.imshow(w)
        ax.set_title(f"q{i} / kv{g}")
        ax.set_xlabel("key")
        ax.set_ylabel("query")
    fig.savefig(path)
    plt.close(fig)
