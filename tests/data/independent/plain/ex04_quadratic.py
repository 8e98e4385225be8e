"""Exercise D, plain version: matmul, numpy median and polyfit."""

import math
import time

import numpy as np
import torch


def naive_attention(q, k, v, causal=True):
    scale = 1.0 / math.sqrt(q.size(-1))
    scores = torch.matmul(q, k.transpose(-2, -1)) * scale  # (B, h, S_q, S_k)
    if causal:
        s_q, s_k = scores.shape[-2:]
        keep = torch.ones(s_q, s_k, dtype=torch.bool, device=q.device).tril(s_k - s_q)
        scores = scores.masked_fill(~keep, -math.inf)
    return torch.matmul(torch.softmax(scores, dim=-1), v)


def time_fn(fn, *args, warmup=2, repeats=5, **kwargs):
    cuda = torch.cuda.is_available()
    for _ in range(warmup):
        fn(*args, **kwargs)
    if cuda:
        torch.cuda.synchronize()
    samples = []
    for _ in range(repeats):
        start = time.perf_counter_ns()
        fn(*args, **kwargs)
        if cuda:
            torch.cuda.synchronize()
        samples.append((time.perf_counter_ns() - start) / 1e9)
    return np.median(samples)


def measure_scaling(seq_lens, *, batch=1, n_heads=4, d_head=64, device="cpu",
                    dtype=torch.float32):
    res = {}
    for s in seq_lens:
        shape = (batch, n_heads, s, d_head)
        q = torch.randn(shape, device=device, dtype=dtype)
        k = torch.randn(shape, device=device, dtype=dtype)
        v = torch.randn(shape, device=device, dtype=dtype)
        res[s] = time_fn(naive_attention, q, k, v, causal=True)
    return res


def loglog_slope(seq_lens, times):
    return np.polyfit(np.log(seq_lens), np.log(times), 1)[0]


def score_matrix_bytes(batch, n_heads, seq_len, bytes_per_elem=2):
    return batch * n_heads * seq_len ** 2 * bytes_per_elem


def max_naive_seq_len(memory_bytes, batch, n_heads, bytes_per_elem=2):
    s = int(math.sqrt(memory_bytes / (batch * n_heads * bytes_per_elem)))
    while score_matrix_bytes(batch, n_heads, s + 1, bytes_per_elem) <= memory_bytes:
        s += 1
    while s > 0 and score_matrix_bytes(batch, n_heads, s, bytes_per_elem) > memory_bytes:
        s -= 1
    return s


def plot_scaling(results, path):
    import matplotlib
    matplotlib.use("Agg")
    from matplotlib.figure import Figure
    fig = Figure()
    ax = fig.add_subplot()
    s = sorted(results)
    ax.plot(s, [results[x] for x in s], marker="o")
    ax.set_xscale("log")
    ax.set_yscale("log")
    fig.savefig(path)
