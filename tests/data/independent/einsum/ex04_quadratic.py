"""Exercise D, independent version (PyTorch, einsum)."""

import math
import statistics
import time

import numpy as np
import torch


def naive_attention(q, k, v, causal=True):
    s_q, s_k = q.shape[-2], k.shape[-2]
    scores = torch.einsum("bhqd,bhkd->bhqk", q, k) * (q.shape[-1] ** -0.5)  # (B,h,S,S)
    if causal:
        qpos = torch.arange(s_q, device=q.device)[:, None] + (s_k - s_q)
        kpos = torch.arange(s_k, device=q.device)[None, :]
        scores = scores.masked_fill(kpos > qpos, float("-inf"))
    return torch.einsum("bhqk,bhkd->bhqd", torch.softmax(scores, dim=-1), v)


def _sync():
    if torch.cuda.is_available():
        torch.cuda.synchronize()


def time_fn(fn, *args, warmup=2, repeats=5, **kwargs):
    for _ in range(warmup):
        fn(*args, **kwargs)
    _sync()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn(*args, **kwargs)
        _sync()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def measure_scaling(seq_lens, *, batch=1, n_heads=4, d_head=64, device="cpu",
                    dtype=torch.float32):
    out = {}
    for s in seq_lens:
        q, k, v = (torch.randn(batch, n_heads, s, d_head, device=device, dtype=dtype)
                   for _ in range(3))
        out[s] = time_fn(naive_attention, q, k, v)
    return out


def loglog_slope(seq_lens, times):
    x = np.log(np.asarray(seq_lens, dtype=float))
    y = np.log(np.asarray(times, dtype=float))
    xm, ym = x.mean(), y.mean()
    return float(((x - xm) * (y - ym)).sum() / ((x - xm) ** 2).sum())


def score_matrix_bytes(batch, n_heads, seq_len, bytes_per_elem=2):
    return batch * n_heads * seq_len * seq_len * bytes_per_elem


def max_naive_seq_len(memory_bytes, batch, n_heads, bytes_per_elem=2):
    return math.isqrt(int(memory_bytes // (batch * n_heads * bytes_per_elem)))


def plot_scaling(results, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    xs = sorted(results)
    fig, ax = plt.subplots()
    ax.loglog(xs, [results[s] for s in xs], "o-")
    ax.set_xlabel("S")
    ax.set_ylabel("seconds")
    fig.savefig(path)
    plt.close(fig)
