"""Exercise D, triton.testing.do_bench style: a warm-up phase, then a list of
per-call timings (CUDA events on a GPU, perf_counter on a CPU) reduced with a
quantile (the median, quantiles=[0.5]).  Attention written with einsum like
the reference implementations in Triton's tutorials and tests.
"""
from __future__ import annotations

import math
import statistics
import time

import torch


def naive_attention(q, k, v, causal=True):
    sm_scale = 1.0 / math.sqrt(q.shape[-1])
    p = torch.einsum("bhqd,bhkd->bhqk", q, k) * sm_scale
    if causal:
        n_q, n_k = q.shape[-2], k.shape[-2]
        M = torch.tril(torch.ones((n_q, n_k), device=q.device, dtype=torch.bool), diagonal=n_k - n_q)
        p[:, :, ~M] = float("-inf")
    p = torch.softmax(p.to(torch.promote_types(p.dtype, torch.float32)), dim=-1)
    p = p.nan_to_num(0.0).to(v.dtype)
    return torch.einsum("bhqk,bhkd->bhqd", p, v).to(q.dtype)


def time_fn(fn, *args, warmup=2, repeats=5, **kwargs):
    use_cuda = torch.cuda.is_available()
    for _ in range(warmup):
        fn(*args, **kwargs)
    if use_cuda:
        torch.cuda.synchronize()
        start = [torch.cuda.Event(enable_timing=True) for _ in range(repeats)]
        end = [torch.cuda.Event(enable_timing=True) for _ in range(repeats)]
        for i in range(repeats):
            start[i].record()
            fn(*args, **kwargs)
            end[i].record()
        torch.cuda.synchronize()
        times = torch.tensor([s.elapsed_time(e) for s, e in zip(start, end)], dtype=torch.float64) / 1e3
    else:
        ts = []
        for _ in range(repeats):
            t0 = time.perf_counter()
            fn(*args, **kwargs)
            ts.append(time.perf_counter() - t0)
        times = torch.tensor(ts, dtype=torch.float64)
    return float(statistics.median(times.tolist()))


def measure_scaling(seq_lens, *, batch=1, n_heads=4, d_head=64, device="cpu",
                    dtype=torch.float32):
    res = {}
    for N_CTX in seq_lens:
        q = torch.randn((batch, n_heads, N_CTX, d_head), dtype=dtype, device=device)
        k = torch.randn_like(q)
        v = torch.randn_like(q)
        with torch.no_grad():
            res[N_CTX] = time_fn(naive_attention, q, k, v)
    return res


def loglog_slope(seq_lens, times):
    x = torch.log(torch.tensor(list(seq_lens), dtype=torch.float64))
    y = torch.log(torch.tensor(list(times), dtype=torch.float64))
    A = torch.stack([x, torch.ones_like(x)], dim=1)
    sol = torch.linalg.lstsq(A, y[:, None]).solution
    return float(sol[0, 0])


def score_matrix_bytes(batch, n_heads, seq_len, bytes_per_elem=2):
    return int(batch) * int(n_heads) * int(seq_len) * int(seq_len) * int(bytes_per_elem)


def max_naive_seq_len(memory_bytes, batch, n_heads, bytes_per_elem=2):
    s = int(math.sqrt(memory_bytes / (batch * n_heads * bytes_per_elem)))
    while score_matrix_bytes(batch, n_heads, s, bytes_per_elem) > memory_bytes:
        s -= 1
    while score_matrix_bytes(batch, n_heads, s + 1, bytes_per_elem) <= memory_bytes:
        s += 1
    return s


def plot_scaling(results, path):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise ImportError("plot_scaling: matplotlib is not installed (pip install matplotlib)")
    xs = sorted(results)
    ys = [results[x] * 1e3 for x in xs]
    plt.figure(figsize=(5, 4))
    plt.plot(xs, ys, "-o", label="naive (ms)")
    plt.plot(xs, [ys[0] * (x / xs[0]) ** 2 for x in xs], "k--", label="S^2 guide")
    plt.xscale("log")
    plt.yscale("log")
    plt.xlabel("N_CTX")
    plt.ylabel("ms")
    plt.legend()
    plt.savefig(path)
    plt.close()


WHERE_THE_SLOPE_COMES_FROM = (
    "Every query is compared with every key: the QK^T and PV products cost about 4*S*S*d_head "
    "FLOPs per head and the softmax reads and writes S*S scores, so the dominant term is "
    "quadratic and log(time) rises with slope about 2. It is not exactly 2 because a linear and "
    "constant part (launch and Python overhead, allocation of q, k, v-sized buffers) still "
    "matters at small S, and because once S*S no longer fits in cache each score costs a trip to "
    "DRAM, so the larger sizes run slower per element and bend the fit slightly above 2."
)
