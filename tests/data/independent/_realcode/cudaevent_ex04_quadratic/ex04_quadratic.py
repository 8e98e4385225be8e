"""Exercise D, Megatron-style core attention (baddbmm with alpha=1/sqrt(d) into
a preallocated (B*h, S_q, S_k) buffer) and CUDA-event timing, falling back to
time.perf_counter_ns on a CPU.
"""
from __future__ import annotations

import math
import statistics
import time

import torch


def naive_attention(q, k, v, causal=True):
    b, h, sq, d = q.shape
    sk = k.shape[2]
    q_ = q.reshape(b * h, sq, d)
    k_ = k.reshape(b * h, sk, d)
    v_ = v.reshape(b * h, sk, d)
    matmul_input_buffer = torch.empty(b * h, sq, sk, dtype=q.dtype, device=q.device)
    scores = torch.baddbmm(matmul_input_buffer, q_, k_.transpose(1, 2), beta=0.0,
                           alpha=1.0 / math.sqrt(d))
    scores = scores.view(b, h, sq, sk)
    if causal:
        mask = torch.triu(torch.ones(sq, sk, dtype=torch.bool, device=q.device), diagonal=sk - sq + 1)
        scores = scores.masked_fill(mask, float("-inf"))
    probs = torch.softmax(scores.to(torch.promote_types(scores.dtype, torch.float32)), dim=-1)
    probs = torch.where(mask.all(-1, keepdim=True), 0.0, probs) if causal else probs
    ctx = torch.bmm(probs.to(v.dtype).view(b * h, sq, sk), v_)
    return ctx.view(b, h, sq, d).to(q.dtype)


def time_fn(fn, *args, warmup=2, repeats=5, **kwargs):
    cuda = torch.cuda.is_available()
    for _ in range(warmup):
        fn(*args, **kwargs)
    samples = []
    for _ in range(repeats):
        if cuda:
            torch.cuda.synchronize()
            start = torch.cuda.Event(enable_timing=True)
            stop = torch.cuda.Event(enable_timing=True)
            start.record()
            fn(*args, **kwargs)
            stop.record()
            stop.synchronize()
            samples.append(start.elapsed_time(stop) / 1000.0)
        else:
            t0 = time.perf_counter_ns()
            fn(*args, **kwargs)
            samples.append((time.perf_counter_ns() - t0) * 1e-9)
    return float(statistics.median(samples))


def measure_scaling(seq_lens, *, batch=1, n_heads=4, d_head=64, device="cpu",
                    dtype=torch.float32):
    timings = {}
    for s in seq_lens:
        qkv = torch.randn(3, batch, n_heads, s, d_head, device=device, dtype=dtype)
        q, k, v = qkv.unbind(0)
        with torch.no_grad():
            timings[s] = time_fn(naive_attention, q, k, v, True)
    return timings


def loglog_slope(seq_lens, times):
    lx = [math.log(float(s)) for s in seq_lens]
    ly = [math.log(float(t)) for t in times]
    return float(statistics.linear_regression(lx, ly).slope)


def score_matrix_bytes(batch, n_heads, seq_len, bytes_per_elem=2):
    return int(batch * n_heads * seq_len * seq_len * bytes_per_elem)


def max_naive_seq_len(memory_bytes, batch, n_heads, bytes_per_elem=2):
    per_entry = batch * n_heads * bytes_per_elem
    s = math.isqrt(int(memory_bytes) // per_entry)
    return int(s)


def plot_scaling(results, path):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as exc:
        raise ImportError("matplotlib required: pip install matplotlib") from exc
    pts = sorted(results.items())
    s0, t0 = pts[0]
    fig, ax = plt.subplots()
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.plot([p[0] for p in pts], [p[1] for p in pts], "s-", label="naive_attention")
    ax.plot([p[0] for p in pts], [t0 * (p[0] / s0) ** 2 for p in pts], ls="--", label="S**2")
    ax.set_xlabel("sequence length")
    ax.set_ylabel("seconds")
    ax.legend()
    fig.savefig(path)
    plt.close(fig)


WHERE_THE_SLOPE_COMES_FROM = (
    "The slope comes from the S x S score matrix: baddbmm computes S*S dot products of length "
    "d_head per head, the softmax and masking touch each of the S*S scores, and the bmm with V "
    "again does S*S*d_head multiply-adds. That quadratic work dominates, so time ~ S**2 and the "
    "log-log slope is near 2. It deviates because of terms that do not scale quadratically "
    "(per-call overhead, allocation, thread scheduling) at small S, and cache effects at large S, "
    "where the score buffer spills to main memory and each element gets slower."
)
