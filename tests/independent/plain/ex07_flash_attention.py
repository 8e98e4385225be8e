"""Exercise 7, NumPy part, plain version (state kept in float64)."""

import numpy as np


def online_softmax_step(m, l, acc, scores, v):
    new_m = np.maximum(m, np.max(scores, axis=-1))
    finite = np.isfinite(new_m)
    shift = np.where(finite, new_m, 0.0)
    corr = np.where(np.isfinite(m), np.exp(m - shift), 0.0)
    p = np.exp(scores - shift[..., None])
    l = corr * l + p.sum(-1)
    acc = corr[..., None] * acc + p @ v
    return new_m, l, acc


def blockwise_attention(q, k, v, block_size, causal=True):
    s_q, d = q.shape[-2:]
    s_k = k.shape[-2]
    batch = np.broadcast_shapes(q.shape[:-2], k.shape[:-2], v.shape[:-2])
    m = np.full(batch + (s_q,), -np.inf)
    l = np.zeros(batch + (s_q,))
    acc = np.zeros(batch + (s_q, v.shape[-1]))
    offset = s_k - s_q
    for start in range(0, s_k, block_size):
        stop = min(start + block_size, s_k)
        sc = q @ np.swapaxes(k[..., start:stop, :], -1, -2) / np.sqrt(d)
        if causal:
            qi = np.arange(s_q)[:, None] + offset
            kj = np.arange(start, stop)[None, :]
            sc = sc + np.where(kj > qi, -np.inf, 0.0)
        m, l, acc = online_softmax_step(m, l, acc, sc, v[..., start:stop, :])
    safe = np.where(l == 0, 1.0, l)
    return acc / safe[..., None]
