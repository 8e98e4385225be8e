"""Exercise C, plain version."""

import math

import numpy as np

from ex02_mha import attention, causal_mask, merge_heads, rope, split_heads


def repeat_kv(x, n_rep):
    return np.repeat(x, n_rep, axis=1)


def grouped_query_attention(x, w_q, w_k, w_v, w_o, n_heads, n_kv_heads, *,
                            causal=True, positions=None, rope_base=10000.0):
    if n_heads % n_kv_heads != 0:
        raise ValueError("n_heads % n_kv_heads != 0")
    b, s, d = x.shape
    d_head = w_q.shape[0] // n_heads
    ok = (w_q.shape == (n_heads * d_head, d) and w_k.shape == (n_kv_heads * d_head, d)
          and w_v.shape == (n_kv_heads * d_head, d) and w_o.shape == (d, n_heads * d_head))
    if not ok:
        raise ValueError("a weight's shape does not fit")
    pos = np.arange(s) if positions is None else positions
    q = rope(split_heads(x @ w_q.T, n_heads), pos, rope_base)
    k = rope(split_heads(x @ w_k.T, n_kv_heads), pos, rope_base)
    v = split_heads(x @ w_v.T, n_kv_heads)
    n_rep = n_heads // n_kv_heads
    o = attention(q, repeat_kv(k, n_rep), repeat_kv(v, n_rep), causal_mask(s) if causal else None)
    return merge_heads(o) @ w_o.T


def kv_cache_bytes(n_layers, n_kv_heads, d_head, seq_len, batch=1, bytes_per_elem=2):
    per_layer = n_kv_heads * d_head * seq_len * batch * bytes_per_elem
    return 2 * n_layers * per_layer  # K and V


def kv_cache_saving(n_heads, n_kv_heads):
    return kv_cache_bytes(1, n_heads, 1, 1) / kv_cache_bytes(1, n_kv_heads, 1, 1)


LLAMA3_70B_KV_SAVING = 8  # 64 heads / 8 KV heads


def kv_exceeds_weights_at(n_layers, n_kv_heads, d_head, weight_bytes, bytes_per_elem=2):
    per_token = kv_cache_bytes(n_layers, n_kv_heads, d_head, 1, 1, bytes_per_elem)
    n = math.ceil(weight_bytes / per_token)
    while n * per_token <= weight_bytes:
        n += 1
    while n > 1 and (n - 1) * per_token > weight_bytes:
        n -= 1
    return n


def plot_gqa_heads(q, k, path, *, causal=True):
    """A loop over query heads, one row of panels per K/V head (pcolormesh,
    the first query at the top, the y label on each row's first panel)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from ex02_mha import softmax

    q = np.asarray(q, dtype=np.float64)
    k = np.asarray(k, dtype=np.float64)
    h, h_kv = q.shape[0], k.shape[0]
    group = h // h_kv
    fig, axes = plt.subplots(h_kv, group, figsize=(3 * group, 3 * h_kv), squeeze=False)
    for i in range(h):
        g = i // group
        scores = np.matmul(q[i], k[g].T) / math.sqrt(q.shape[2])
        if causal:
            scores = scores + causal_mask(q.shape[1], k.shape[1])
        ax = axes[g][i % group]
        ax.pcolormesh(softmax(scores, axis=-1), vmin=0.0, vmax=1.0)
        ax.invert_yaxis()
        ax.set_title("q%d / kv%d" % (i, g))
        ax.set_xlabel("key")
        if i % group == 0:
            ax.set_ylabel("query")
    fig.savefig(path)
    plt.close(fig)
