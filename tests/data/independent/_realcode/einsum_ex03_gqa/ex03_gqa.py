"""Exercise C, grouped einsum style (as in many JAX/Flax and Gemma code bases:
queries reshaped to (B, h_kv, groups, S, d) and contracted against the one
K/V head with einsum, no copy of K/V).  Uses the student's own ex02_mha
helpers, as the stub suggests.
"""
from __future__ import annotations

import numpy as np

from ex02_mha import causal_mask, merge_heads, rope, softmax, split_heads


def repeat_kv(x, n_rep):
    b, h_kv, s, d = x.shape
    out = np.empty((b, h_kv, n_rep, s, d), dtype=x.dtype)
    out[...] = x[:, :, None]
    return out.reshape(b, h_kv * n_rep, s, d)


def _grouped_attention(q, k, v, mask):
    """q (B, h, Sq, d); k, v (B, h_kv, Sk, d) -> (B, h, Sq, d) without repeating K/V."""
    B, h, Sq, d = q.shape
    h_kv = k.shape[1]
    qg = q.reshape(B, h_kv, h // h_kv, Sq, d)
    logits = np.einsum("bgrqd,bgkd->bgrqk", qg, k) / np.sqrt(d)
    if mask is not None:
        logits = logits + mask
    probs = softmax(logits.astype(q.dtype), axis=-1)
    return np.einsum("bgrqk,bgkd->bgrqd", probs, v).reshape(B, h, Sq, d).astype(q.dtype)


def grouped_query_attention(x, w_q, w_k, w_v, w_o, n_heads, n_kv_heads, *, causal=True,
                            positions=None, rope_base=10000.0):
    if not n_kv_heads or n_heads % n_kv_heads:
        raise ValueError(f"n_heads={n_heads} is not a multiple of n_kv_heads={n_kv_heads}")
    B, S, d = x.shape
    if w_q.ndim != 2 or w_q.shape[1] != d or w_q.shape[0] % n_heads:
        raise ValueError("w_q must be (n_heads*d_head, d)")
    dh = w_q.shape[0] // n_heads
    if w_k.shape != (n_kv_heads * dh, d) or w_v.shape != (n_kv_heads * dh, d):
        raise ValueError("w_k and w_v must be (n_kv_heads*d_head, d)")
    if w_o.shape != (d, n_heads * dh):
        raise ValueError("w_o must be (d, n_heads*d_head)")
    pos = np.arange(S) if positions is None else np.asarray(positions)
    q = rope(split_heads(x @ w_q.T, n_heads), pos, rope_base)
    k = rope(split_heads(x @ w_k.T, n_kv_heads), pos, rope_base)
    v = split_heads(x @ w_v.T, n_kv_heads)
    y = _grouped_attention(q, k, v, causal_mask(S, S) if causal else None)
    return (merge_heads(y) @ w_o.T).astype(x.dtype)


def kv_cache_bytes(n_layers, n_kv_heads, d_head, seq_len, batch=1, bytes_per_elem=2):
    return int(np.prod([2, n_layers, n_kv_heads, d_head, seq_len, batch, bytes_per_elem], dtype=np.int64))


def kv_cache_saving(n_heads, n_kv_heads):
    return kv_cache_bytes(1, n_heads, 1, 1) / kv_cache_bytes(1, n_kv_heads, 1, 1)


LLAMA3_70B_KV_SAVING = 8.0


def kv_exceeds_weights_at(n_layers, n_kv_heads, d_head, weight_bytes, bytes_per_elem=2):
    per_token = kv_cache_bytes(n_layers, n_kv_heads, d_head, 1, 1, bytes_per_elem)
    return int(weight_bytes // per_token + 1)


def plot_gqa_heads(q, k, path, *, causal=True):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as e:
        raise ImportError("plot_gqa_heads needs matplotlib: pip install matplotlib") from e
    q = np.asarray(q, np.float64)
    k = np.asarray(k, np.float64)
    h, s_q, d = q.shape
    h_kv, s_k, _ = k.shape
    r = h // h_kv
    logits = np.einsum("grqd,gkd->grqk", q.reshape(h_kv, r, s_q, d), k) / np.sqrt(d)
    if causal:
        logits = logits + causal_mask(s_q, s_k)
    w = softmax(logits, axis=-1)
    fig, axes = plt.subplots(h_kv, r, figsize=(2.8 * r, 2.8 * h_kv), squeeze=False)
    for g in range(h_kv):
        for j in range(r):
            ax = axes[g, j]
            ax.imshow(w[g, j])
            ax.set_title(f"q{g * r + j} / kv{g}")
            ax.set_xlabel("key")
            ax.set_ylabel("query")
    fig.savefig(path)
    plt.close(fig)
