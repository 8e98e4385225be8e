"""Exercise C, independent version."""

import numpy as np

from ex02_mha import attention, causal_mask, merge_heads, rope, split_heads


def repeat_kv(x, n_rep):
    # KV head j serves query heads j*n_rep .. (j+1)*n_rep-1: repeat, not tile.
    b, hkv, s, d = x.shape
    return np.broadcast_to(x[:, :, None], (b, hkv, n_rep, s, d)).reshape(b, hkv * n_rep, s, d)


def grouped_query_attention(x, w_q, w_k, w_v, w_o, n_heads, n_kv_heads, *,
                            causal=True, positions=None, rope_base=10000.0):
    if n_kv_heads <= 0 or n_heads % n_kv_heads:
        raise ValueError("n_heads must be a multiple of n_kv_heads")
    b, s, d = x.shape
    if w_q.shape[0] % n_heads or w_q.shape[1] != d:
        raise ValueError(f"w_q shape {w_q.shape} does not fit")
    dh = w_q.shape[0] // n_heads
    for name, w in (("w_k", w_k), ("w_v", w_v)):
        if w.shape != (n_kv_heads * dh, d):
            raise ValueError(f"{name} shape {w.shape} does not fit")
    if w_o.shape != (d, n_heads * dh):
        raise ValueError(f"w_o shape {w_o.shape} does not fit")
    if positions is None:
        positions = np.arange(s)
    q = rope(split_heads(x @ w_q.T, n_heads), positions, rope_base)
    k = rope(split_heads(x @ w_k.T, n_kv_heads), positions, rope_base)
    v = split_heads(x @ w_v.T, n_kv_heads)
    rep = n_heads // n_kv_heads
    mask = causal_mask(s).astype(x.dtype) if causal else None
    o = attention(q, repeat_kv(k, rep), repeat_kv(v, rep), mask)
    return merge_heads(o) @ w_o.T


def kv_cache_bytes(n_layers, n_kv_heads, d_head, seq_len, batch=1, bytes_per_elem=2):
    return int(2 * n_layers * n_kv_heads * d_head * seq_len * batch * bytes_per_elem)


def kv_cache_saving(n_heads, n_kv_heads):
    return n_heads / n_kv_heads


LLAMA3_70B_KV_SAVING = kv_cache_saving(64, 8)


def kv_exceeds_weights_at(n_layers, n_kv_heads, d_head, weight_bytes, bytes_per_elem=2):
    per_token = kv_cache_bytes(n_layers, n_kv_heads, d_head, 1, 1, bytes_per_elem)
    # smallest L with L*per_token > weight_bytes
    return int(weight_bytes // per_token) + 1


def plot_gqa_heads(q, k, path, *, causal=True):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from ex02_mha import softmax

    h, s_q, d = q.shape
    h_kv, s_k, _ = k.shape
    r = h // h_kv
    s = np.einsum("grqd,gkd->grqk", q.reshape(h_kv, r, s_q, d), k) / np.sqrt(d)
    if causal:
        s = s + causal_mask(s_q, s_k)
    w = softmax(s, axis=-1).reshape(h, s_q, s_k)
    fig, axes = plt.subplots(1, h, figsize=(3 * h, 3), squeeze=False)
    for i, ax in enumerate(axes[0]):
        ax.imshow(w[i])
        ax.set_title(f"q{i} / kv{i // r}")
        ax.set_xlabel("key")
        ax.set_ylabel("query")
    fig.savefig(path)
    plt.close(fig)
