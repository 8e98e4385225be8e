"""Exercise D, PyTorch-benchmark style: torch.utils.benchmark's synchronizing
clock (the one benchmark.Timer is built on) and the HF eager attention path
(matmul, additive causal mask of finfo.min style replaced by -inf, softmax
in float32 then cast back to the query dtype).
"""
from __future__ import annotations

import math
import statistics
import time

import numpy as np
import torch
from torch.utils.benchmark.utils.timer import timer as _bench_clock


def naive_attention(q, k, v, causal=True):
    scaling = q.shape[-1] ** -0.5
    attn_weights = torch.matmul(q, k.transpose(2, 3)) * scaling          # (B, h, S_q, S_k): materialized
    if causal:
        s_q, s_k = q.shape[-2], k.shape[-2]
        cache_position = torch.arange(s_q, device=q.device) + (s_k - s_q)
        masked = torch.arange(s_k, device=q.device)[None, :] > cache_position[:, None]
        attn_weights = attn_weights.masked_fill(masked, float("-inf"))
    attn_weights = torch.nn.functional.softmax(
        attn_weights, dim=-1, dtype=torch.promote_types(attn_weights.dtype, torch.float32))
    attn_weights = torch.where(torch.isnan(attn_weights), torch.zeros_like(attn_weights), attn_weights)
    attn_weights = attn_weights.to(v.dtype)
    return torch.matmul(attn_weights, v).to(q.dtype)


def time_fn(fn, *args, warmup=2, repeats=5, **kwargs):
    # benchmark.Timer.timeit() adds its own warm-up calls, so use the clock it is built on:
    # torch.utils.benchmark's `timer`, which synchronizes the accelerator before reading time.
    for _ in range(warmup):
        fn(*args, **kwargs)
    samples = []
    for _ in range(repeats):
        t0 = _bench_clock()
        fn(*args, **kwargs)
        samples.append(_bench_clock() - t0)
    return float(statistics.median(samples))


def measure_scaling(seq_lens, *, batch=1, n_heads=4, d_head=64, device="cpu",
                    dtype=torch.float32):
    out = {}
    g = torch.Generator(device="cpu").manual_seed(0)
    for seq_len in seq_lens:
        shape = (batch, n_heads, seq_len, d_head)
        q, k, v = (torch.randn(shape, generator=g).to(device=device, dtype=dtype) for _ in range(3))
        with torch.inference_mode():
            out[seq_len] = time_fn(naive_attention, q, k, v, causal=True)
    return out


def loglog_slope(seq_lens, times):
    slope, _ = np.polyfit(np.log(np.asarray(seq_lens, dtype=np.float64)),
                          np.log(np.asarray(times, dtype=np.float64)), 1)
    return float(slope)


def score_matrix_bytes(batch, n_heads, seq_len, bytes_per_elem=2):
    return batch * n_heads * seq_len ** 2 * bytes_per_elem


def max_naive_seq_len(memory_bytes, batch, n_heads, bytes_per_elem=2):
    lo, hi = 0, 1
    while score_matrix_bytes(batch, n_heads, hi, bytes_per_elem) <= memory_bytes:
        hi *= 2
    while hi - lo > 1:               # invariant: bytes(lo) fits, bytes(hi) does not
        mid = (lo + hi) // 2
        if score_matrix_bytes(batch, n_heads, mid, bytes_per_elem) <= memory_bytes:
            lo = mid
        else:
            hi = mid
    return int(lo)


def plot_scaling(results, path):
    try:
        import matplotlib
        matplotlib.use("Agg")
        from matplotlib.figure import Figure
    except ImportError as err:
        raise ImportError("matplotlib is needed for plot_scaling: pip install matplotlib") from err
    s = np.array(sorted(results), dtype=float)
    t = np.array([results[k] for k in sorted(results)])
    fig = Figure(figsize=(5, 4))
    ax = fig.add_subplot()
    ax.plot(s, t, marker="o", label="measured")
    ax.plot(s, t[0] * (s / s[0]) ** 2, linestyle="--", color="gray", label=r"$\propto S^2$")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("S (tokens)")
    ax.set_ylabel("median time [s]")
    ax.legend()
    fig.savefig(path)


WHERE_THE_SLOPE_COMES_FROM = (
    "Naive attention builds a (B, h, S, S) score tensor: two matmuls of S*S*d_head multiply-adds "
    "each, plus a mask, a softmax and a cast over S*S elements. All of that grows like S**2, so on "
    "a log-log plot the time approaches slope 2 once it dominates. At short lengths fixed costs "
    "(dispatch, allocation, thread start-up) are a large share and pull the slope under 2; at long "
    "lengths the score tensor no longer fits in cache and memory bandwidth, not arithmetic, sets "
    "the pace, which can lift it a bit above 2."
)
