"""ex04_quadratic with its timer on ``torch.utils.benchmark`` (a real-style
submission for the grader's own tests): each repeat is a ``Timer.timeit(1)``,
which makes warm-up calls of its own and synchronizes CUDA itself."""
from __future__ import annotations

import math
import statistics
import time

import torch


def naive_attention(q, k, v, causal=True):
    """Scaled dot-product attention that materializes the scores.

    ``q``: ``(B, h, S_q, d_head)``, ``k`` and ``v``: ``(B, h, S_k, d_head)``
    (torch tensors, any floating dtype, any device).  Computes the full
    ``(B, h, S_q, S_k)`` score tensor ``q @ k^T / sqrt(d_head)``, applies the
    end-aligned causal mask when ``causal``, takes the softmax over keys and
    returns ``(B, h, S_q, d_head)`` in the dtype of ``q``.
    """
    d_head = q.shape[-1]
    scores = q @ k.transpose(-2, -1) / math.sqrt(d_head)          # (B, h, S_q, S_k)
    if causal:
        s_q, s_k = scores.shape[-2], scores.shape[-1]
        allowed = torch.ones(s_q, s_k, dtype=torch.bool, device=q.device).tril(s_k - s_q)
        scores = scores.masked_fill(~allowed, float("-inf"))
    return torch.softmax(scores, dim=-1) @ v                       # (B, h, S_q, d_head)


def time_fn(fn, *args, warmup=2, repeats=5, **kwargs):
    """Median wall-clock seconds of ``fn(*args, **kwargs)``.

    First call ``fn`` ``warmup`` times without timing (caches, allocators and
    lazy initialization warm up), then time ``repeats`` calls one by one and
    return the median (a float).  On a GPU, kernels run asynchronously: wait
    for them (``torch.cuda.synchronize()``) before starting and before
    stopping the clock, or you time the launch, not the work.  ``warmup``
    and ``repeats`` belong to the timer and are never passed to ``fn``.
    """
    from torch.utils import benchmark

    for _ in range(warmup):
        fn(*args, **kwargs)
    timer = benchmark.Timer(stmt="fn(*args, **kwargs)",
                            globals={"fn": fn, "args": args, "kwargs": kwargs})
    times = [timer.timeit(1).median for _ in range(repeats)]
    return statistics.median(times)


def measure_scaling(seq_lens, *, batch=1, n_heads=4, d_head=64, device="cpu",
                    dtype=torch.float32):
    """Time ``naive_attention`` (causal) at each length of ``seq_lens``.

    For each ``S``, make random ``q``, ``k``, ``v`` of shape
    ``(batch, n_heads, S, d_head)`` with ``dtype`` on ``device`` and time
    ``naive_attention(q, k, v)`` with ``time_fn``.  Returns
    ``{S: seconds}``, one entry per length asked (any lengths: the check
    asks for one at a time).
    """
    results = {}
    for s in seq_lens:
        q, k, v = (torch.randn(batch, n_heads, s, d_head, device=device, dtype=dtype)
                   for _ in range(3))
        results[s] = time_fn(naive_attention, q, k, v)
    return results


def loglog_slope(seq_lens, times):
    """Least-squares slope of ``log(time)`` against ``log(S)``.

    ``seq_lens`` and ``times`` are sequences of the same length (at least
    two points).  A slope of 2 means time grows like ``S**2``.  Returns a
    float.
    """
    xs = [math.log(s) for s in seq_lens]
    ys = [math.log(t) for t in times]
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    sxy = sum((x - mx) * (y - my) for x, y in zip(xs, ys))
    sxx = sum((x - mx) ** 2 for x in xs)
    return sxy / sxx


def score_matrix_bytes(batch, n_heads, seq_len, bytes_per_elem=2):
    """Bytes of the ``(batch, n_heads, seq_len, seq_len)`` score tensor (an int).

    The chapter's case: ``score_matrix_bytes(8, 32, 8192)`` is 34.4 GB in
    fp16, for one layer.
    """
    return batch * n_heads * seq_len * seq_len * bytes_per_elem


def max_naive_seq_len(memory_bytes, batch, n_heads, bytes_per_elem=2):
    """The largest ``S`` whose score tensor fits in ``memory_bytes`` (an int).

    "Fits" means ``score_matrix_bytes(batch, n_heads, S, bytes_per_elem) <=
    memory_bytes``; only the score tensor is counted.
    """
    return math.isqrt(int(memory_bytes) // (batch * n_heads * bytes_per_elem))


def plot_scaling(results, path):
    """Save a log-log plot of time against ``S`` to ``path``.

    ``results`` is ``{S: seconds}`` (what ``measure_scaling`` returns).  Both
    axes logarithmic, labelled; a dashed ``S**2`` guide line through the
    first point helps the eye.  The file format follows the extension of
    ``path`` (``.png``).  Needs matplotlib; without it, raise
    ``ImportError`` with a message saying how to install it.
    """
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as exc:
        raise ImportError("plot_scaling needs matplotlib: pip install matplotlib") from exc
    lens = sorted(results)
    times = [results[s] for s in lens]
    fig, ax = plt.subplots(figsize=(5, 4))
    ax.loglog(lens, times, "o-", label="naive attention")
    ax.loglog(lens, [times[0] * (s / lens[0]) ** 2 for s in lens], "--", color="gray",
              label="S^2")
    ax.set_xlabel("sequence length S")
    ax.set_ylabel("time (s)")
    ax.set_title(f"slope {loglog_slope(lens, times):.2f}")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


WHERE_THE_SLOPE_COMES_FROM = (
    "Naive attention compares every query with every key: the S x S score matrix, its "
    "softmax and the product of the weights with V each cost work proportional to S * S "
    "(times d_head), so the time grows like S**2 and the log-log slope is the exponent, "
    "2. The parts that grow like S (making q, k and v, the output) and the fixed cost of "
    "each call matter at short lengths and pull a measured slope below 2; on a CPU the "
    "S x S tensors outgrow the caches as S rises, which makes long lengths slower per "
    "element and pushes the slope a little above 2.")
