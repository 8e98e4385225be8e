"""Exercise B, plain version: matmul, loops over heads, float64 inside and out
(but attention, which hands float32 inputs back in float32, as the stub asks)."""

import numpy as np


def softmax(x, axis=-1):
    x = np.asarray(x, dtype=np.float64)
    m = np.max(x, axis=axis, keepdims=True)
    m[~np.isfinite(m)] = 0.0
    e = np.exp(x - m)
    s = e.sum(axis=axis, keepdims=True)
    s[s == 0] = 1.0  # a row with no visible key: all weights 0
    return e / s


def causal_mask(s_q, s_k=None):
    s_k = s_q if s_k is None else s_k
    m = np.zeros((s_q, s_k))
    for i in range(s_q):
        m[i, s_k - s_q + i + 1:] = -np.inf
        if s_k - s_q + i + 1 <= 0:
            m[i, :] = -np.inf
    return m


def rope(x, positions, base=10000.0):
    x = np.asarray(x, dtype=np.float64)
    d = x.shape[-1]
    if d % 2 != 0:
        raise ValueError("rope needs an even d_head")
    h = d // 2
    freqs = np.array([base ** (-2 * j / d) for j in range(h)])
    ang = np.outer(np.array(list(positions), dtype=np.float64), freqs)
    c, s = np.cos(ang), np.sin(ang)
    out = np.empty_like(x)
    out[..., :h] = x[..., :h] * c - x[..., h:] * s
    out[..., h:] = x[..., h:] * c + x[..., :h] * s
    return out


def split_heads(x, n_heads):
    b, s, w = x.shape
    return x.reshape(b, s, n_heads, w // n_heads).transpose(0, 2, 1, 3)


def merge_heads(x):
    b, h, s, d = x.shape
    return x.transpose(0, 2, 1, 3).reshape(b, s, h * d)


def attention(q, k, v, mask=None):
    d = q.shape[-1]
    scores = np.matmul(q, np.swapaxes(k, -1, -2)) / np.sqrt(d)
    if mask is not None:
        scores = scores + mask
    return np.matmul(softmax(scores), v).astype(np.result_type(q, k, v))


def multi_head_attention(x, w_q, w_k, w_v, w_o, n_heads, *, causal=True,
                         positions=None, rope_base=10000.0):
    x = np.asarray(x, dtype=np.float64)
    b, s, _ = x.shape
    pos = range(s) if positions is None else positions
    heads = []
    q_all = split_heads(x @ w_q.T, n_heads)
    k_all = split_heads(x @ w_k.T, n_heads)
    v_all = split_heads(x @ w_v.T, n_heads)
    mask = causal_mask(s) if causal else None
    for i in range(n_heads):
        q = rope(q_all[:, i], pos, rope_base)
        k = rope(k_all[:, i], pos, rope_base)
        heads.append(attention(q, k, v_all[:, i], mask))
    return merge_heads(np.stack(heads, axis=1)) @ w_o.T


def plot_attention_heads(q, k, path, *, causal=True):
    """A loop over heads; pcolormesh with the first query at the top, one y
    label per row of panels."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    q = np.asarray(q, dtype=np.float64)
    k = np.asarray(k, dtype=np.float64)
    h = q.shape[0]
    rows = 2 if h > 3 else 1
    cols = (h + rows - 1) // rows
    fig, axes = plt.subplots(rows, cols, figsize=(3 * cols, 3 * rows), squeeze=False)
    for i in range(h):
        scores = np.matmul(q[i], k[i].T) / np.sqrt(q.shape[2])
        if causal:
            scores = scores + causal_mask(q.shape[1], k.shape[1])
        ax = axes[i // cols][i % cols]
        ax.pcolormesh(softmax(scores, axis=-1), vmin=0.0, vmax=1.0)
        ax.invert_yaxis()
        ax.set_title("head %d" % i)
        ax.set_xlabel("key")
        if i % cols == 0:
            ax.set_ylabel("query")
    for j in range(h, rows * cols):
        axes[j // cols][j % cols].set_visible(False)
    fig.savefig(path)
    plt.close(fig)
