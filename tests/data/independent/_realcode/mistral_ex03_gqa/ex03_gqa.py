"""Exercise C in the style of mistral-inference (mistral/model.py):
repeat_kv via repeat_interleave along the heads dim, n_kv_heads / repeats,
rotate-half RoPE from precomputed cos/sin.  NumPy's np.repeat is
torch.repeat_interleave.  Self-contained.
"""
from __future__ import annotations

import numpy as np


def repeat_kv(x, n_rep):
    # mistral: keys = torch.repeat_interleave(keys, repeats=repeats, dim=dim)
    return np.repeat(x, n_rep, axis=1)


def _rope(x, positions, base):
    d = x.shape[-1]
    if d % 2:
        raise ValueError("d_head must be even")
    freqs = 1.0 / base ** (np.arange(0, d, 2, dtype=np.float64) / d)
    ang = np.outer(np.asarray(positions, np.float64), freqs)
    cos, sin = np.cos(ang), np.sin(ang)
    a, b = x[..., : d // 2], x[..., d // 2:]
    return np.concatenate([a * cos - b * sin, b * cos + a * sin], -1).astype(x.dtype)


def _attend(q, k, v, causal):
    scale = q.shape[-1] ** -0.5
    s = np.einsum("bhqd,bhkd->bhqk", q.astype(np.float64), k.astype(np.float64)) * scale
    if causal:
        sq, sk = s.shape[-2:]
        s = np.where(np.tril(np.ones((sq, sk), bool), sk - sq), s, -np.inf)
    mx = np.max(s, -1, keepdims=True)
    mx = np.where(np.isfinite(mx), mx, 0.0)
    p = np.exp(s - mx)
    den = p.sum(-1, keepdims=True)
    p = p / np.maximum(den, np.finfo(np.float64).tiny) * (den > 0)
    return np.einsum("bhqk,bhkd->bhqd", p, v.astype(np.float64)).astype(q.dtype)


def grouped_query_attention(x, w_q, w_k, w_v, w_o, n_heads, n_kv_heads, *, causal=True,
                            positions=None, rope_base=10000.0):
    if n_kv_heads <= 0 or n_heads % n_kv_heads != 0:
        raise ValueError("n_heads % n_kv_heads != 0")
    repeats = n_heads // n_kv_heads
    B, S, dim = x.shape
    if w_q.shape[1] != dim or w_q.shape[0] % n_heads:
        raise ValueError("wq does not fit")
    head_dim = w_q.shape[0] // n_heads
    if tuple(w_k.shape) != (n_kv_heads * head_dim, dim) or tuple(w_v.shape) != (n_kv_heads * head_dim, dim):
        raise ValueError("wk/wv do not fit")
    if tuple(w_o.shape) != (dim, n_heads * head_dim):
        raise ValueError("wo does not fit")
    pos = np.arange(S) if positions is None else np.asarray(positions)
    xq = (x @ w_q.T).reshape(B, S, n_heads, head_dim).transpose(0, 2, 1, 3)
    xk = (x @ w_k.T).reshape(B, S, n_kv_heads, head_dim).transpose(0, 2, 1, 3)
    xv = (x @ w_v.T).reshape(B, S, n_kv_heads, head_dim).transpose(0, 2, 1, 3)
    xq, xk = _rope(xq, pos, rope_base), _rope(xk, pos, rope_base)
    out = _attend(xq, repeat_kv(xk, repeats), repeat_kv(xv, repeats), causal)
    return (out.transpose(0, 2, 1, 3).reshape(B, S, n_heads * head_dim) @ w_o.T).astype(x.dtype)


def kv_cache_bytes(n_layers, n_kv_heads, d_head, seq_len, batch=1, bytes_per_elem=2):
    return 2 * n_layers * batch * seq_len * n_kv_heads * d_head * int(bytes_per_elem)


def kv_cache_saving(n_heads, n_kv_heads):
    return float(n_heads / n_kv_heads)


LLAMA3_70B_KV_SAVING = 64 / 8


def kv_exceeds_weights_at(n_layers, n_kv_heads, d_head, weight_bytes, bytes_per_elem=2):
    per_tok = kv_cache_bytes(n_layers, n_kv_heads, d_head, 1, 1, bytes_per_elem)
    lo, hi = 1, 1
    while kv_cache_bytes(n_layers, n_kv_heads, d_head, hi, 1, bytes_per_elem) <= weight_bytes:
        hi *= 2
    while lo < hi:                      # smallest S with bytes(S) > weight_bytes
        mid = (lo + hi) // 2
        if mid * per_tok > weight_bytes:
            hi = mid
        else:
            lo = mid + 1
    return int(lo)


def plot_gqa_heads(q, k, path, *, causal=True):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as e:
        raise ImportError("pip install matplotlib to draw plot_gqa_heads") from e
    q = np.asarray(q, np.float64)
    k = np.asarray(k, np.float64)
    h, h_kv = q.shape[0], k.shape[0]
    rep = h // h_kv
    kk = repeat_kv(k[None], rep)[0]
    sc = np.einsum("hqd,hkd->hqk", q, kk) / np.sqrt(q.shape[-1])
    if causal:
        sq, sk = sc.shape[-2:]
        sc = np.where(np.tril(np.ones((sq, sk), bool), sk - sq), sc, -np.inf)
    mx = np.max(sc, -1, keepdims=True)
    p = np.exp(sc - np.where(np.isfinite(mx), mx, 0))
    den = p.sum(-1, keepdims=True)
    p = np.where(den > 0, p / np.where(den > 0, den, 1), 0)
    fig, axes = plt.subplots(h_kv, rep, figsize=(2.5 * rep + 1, 2.5 * h_kv), squeeze=False)
    for i in range(h):
        g, j = divmod(i, rep)
        axes[g, j].imshow(p[i])
        axes[g, j].set_title(f"q{i} / kv{g}")
        axes[g, j].set_xlabel("key")
        if j == 0:
            axes[g, j].set_ylabel("query")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
