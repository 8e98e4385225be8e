"""Exercise D: measure the quadratic, in PyTorch.

Attention compares every query with every key, so a naive implementation
does ``S * S`` work per head and stores an ``S x S`` score matrix.  In this
exercise you time it and watch the quadratic appear on a real machine.

1. ``naive_attention``: attention that materializes the full score tensor
   ``(B, h, S, S)`` on purpose (that is what is being measured).
2. ``time_fn``: a correct timer: warm-up calls that are not timed, the CUDA
   synchronization a GPU needs, and the median of several repeats.
3. ``measure_scaling`` and ``loglog_slope``: time ``naive_attention`` at
   several lengths and fit the slope of log(time) against log(S).  Where the
   score computation dominates, the slope is close to 2 (on a CPU, caches
   often push it a little above 2: that is a real effect, not an error).
4. ``score_matrix_bytes`` and ``max_naive_seq_len``: the memory wall of the
   naive approach (the chapter's 34.4 GB score tensor).
5. ``plot_scaling``: a log-log plot of your measurement (needs matplotlib:
   ``pip install 'attn-course[plot]'``).

Conventions: ``B`` batch, ``h`` heads, ``S`` sequence length, ``d_head``
head width; tensors are ``(B, h, S, d_head)``.  Causal masks are aligned to
the end (query ``i`` sees keys ``0 .. S_k - S_q + i``; for ``S_q == S_k``
the usual lower triangle).  Sizes are in bytes.

Run the public tests with ``attn-grade check ex04``.
"""
from __future__ import annotations

import math
import statistics
import time

import torch


def _sync_if_cuda():
    """Wait for queued GPU work (no-op on a machine without CUDA)."""
    if torch.cuda.is_available():
        torch.cuda.synchronize()


def naive_attention(q, k, v, causal=True):
    """Scaled dot-product attention that materializes the scores.

    ``q``: ``(B, h, S_q, d_head)``, ``k`` and ``v``: ``(B, h, S_k, d_head)``
    (torch tensors, any floating dtype, any device).  Computes the full
    ``(B, h, S_q, S_k)`` score tensor ``q @ k^T / sqrt(d_head)``, applies the
    end-aligned causal mask when ``causal``, takes the softmax over keys and
    returns ``(B, h, S_q, d_head)`` in the dtype of ``q``.

    Written with explicit loops over batch and heads, in float64 inside; a
    query row that may see no key (only when ``S_q > S_k``) gives zeros.
    """
    if q.dim() != 4 or k.dim() != 4 or v.dim() != 4:
        raise ValueError("naive_attention: q, k, v must be (B, h, S, d_head)")
    batch, n_heads, s_q, d_head = q.shape
    s_k = k.shape[2]
    if k.shape[0] != batch or k.shape[1] != n_heads or k.shape[3] != d_head:
        raise ValueError("naive_attention: k does not fit q")
    if v.shape[:3] != k.shape[:3]:
        raise ValueError("naive_attention: v does not fit k")
    d_v = v.shape[3]
    compute = torch.float64
    device = q.device
    scale = 1.0 / math.sqrt(d_head)

    # The whole score tensor, on purpose: this is what grows like S**2.
    scores = torch.zeros((batch, n_heads, s_q, s_k), dtype=compute, device=device)
    for b in range(batch):
        for head in range(n_heads):
            scores[b, head] = (q[b, head].to(compute) @ k[b, head].to(compute).T) * scale

    if causal:
        # query i sits at position s_k - s_q + i and sees keys 0 .. s_k - s_q + i:
        # everything above that diagonal is masked.
        hidden = torch.ones((s_q, s_k), dtype=torch.bool, device=device)
        hidden = torch.triu(hidden, diagonal=s_k - s_q + 1)
        scores = scores.masked_fill(hidden, float("-inf"))

    out = torch.zeros((batch, n_heads, s_q, d_v), dtype=compute, device=device)
    for b in range(batch):
        for head in range(n_heads):
            row_scores = scores[b, head]                                  # (S_q, S_k)
            row_max = torch.amax(row_scores, dim=-1, keepdim=True)
            row_max = torch.where(row_max == float("-inf"), torch.zeros_like(row_max), row_max)
            exps = torch.exp(row_scores - row_max)
            total = torch.sum(exps, dim=-1, keepdim=True)
            total = torch.where(total == 0, torch.ones_like(total), total)  # rows that see nothing
            weights = exps / total
            out[b, head] = weights @ v[b, head].to(compute)
    return out.to(q.dtype)


def time_fn(fn, *args, warmup=2, repeats=5, **kwargs):
    """Median wall-clock seconds of ``fn(*args, **kwargs)``.

    First call ``fn`` ``warmup`` times without timing (caches, allocators and
    lazy initialization warm up), then time ``repeats`` calls one by one and
    return the median (a float).  On a GPU, kernels run asynchronously: wait
    for them (``torch.cuda.synchronize()``) before starting and before
    stopping the clock, or you time the launch, not the work.  ``warmup``
    and ``repeats`` belong to the timer and are never passed to ``fn``.
    """
    if repeats < 1:
        raise ValueError("time_fn: repeats must be at least 1")
    for _ in range(warmup):
        fn(*args, **kwargs)
    _sync_if_cuda()
    times = []
    for _ in range(repeats):
        _sync_if_cuda()
        start = time.perf_counter()
        fn(*args, **kwargs)
        _sync_if_cuda()
        stop = time.perf_counter()
        times.append(stop - start)
    return float(statistics.median(times))


def measure_scaling(seq_lens, *, batch=1, n_heads=4, d_head=64, device="cpu",
                    dtype=torch.float32):
    """Time ``naive_attention`` (causal) at each length of ``seq_lens``.

    For each ``S``, make random ``q``, ``k``, ``v`` of shape
    ``(batch, n_heads, S, d_head)`` with ``dtype`` on ``device`` and time
    ``naive_attention(q, k, v)`` with ``time_fn``.  Returns
    ``{S: seconds}``.
    """
    results = {}
    for seq_len in seq_lens:
        seq_len = int(seq_len)
        shape = (batch, n_heads, seq_len, d_head)
        q = torch.randn(shape, dtype=dtype, device=device)
        k = torch.randn(shape, dtype=dtype, device=device)
        v = torch.randn(shape, dtype=dtype, device=device)
        results[seq_len] = time_fn(naive_attention, q, k, v)
    return results


def loglog_slope(seq_lens, times):
    """Least-squares slope of ``log(time)`` against ``log(S)``.

    ``seq_lens`` and ``times`` are sequences of the same length (at least
    two points).  A slope of 2 means time grows like ``S**2``.  Returns a
    float.  (``times`` may also be the ``{S: seconds}`` dict of
    ``measure_scaling``.)
    """
    seq_lens = list(seq_lens)
    if isinstance(times, dict):
        times = [times[s] for s in seq_lens]
    times = list(times)
    if len(seq_lens) != len(times):
        raise ValueError("loglog_slope: seq_lens and times differ in length")
    if len(seq_lens) < 2:
        raise ValueError("loglog_slope: need at least two points")
    xs = [math.log(float(s)) for s in seq_lens]
    ys = [math.log(float(t)) for t in times]
    n = len(xs)
    mean_x = sum(xs) / n
    mean_y = sum(ys) / n
    numerator = 0.0
    denominator = 0.0
    for i in range(n):
        numerator += (xs[i] - mean_x) * (ys[i] - mean_y)
        denominator += (xs[i] - mean_x) ** 2
    if denominator == 0.0:
        raise ValueError("loglog_slope: need at least two different lengths")
    return float(numerator / denominator)


def score_matrix_bytes(batch, n_heads, seq_len, bytes_per_elem=2):
    """Bytes of the ``(batch, n_heads, seq_len, seq_len)`` score tensor (an int).

    The chapter's case: ``score_matrix_bytes(8, 32, 8192)`` is 34.4 GB in
    fp16, for one layer.
    """
    return int(batch * n_heads * seq_len * seq_len * bytes_per_elem)


def max_naive_seq_len(memory_bytes, batch, n_heads, bytes_per_elem=2):
    """The largest ``S`` whose score tensor fits in ``memory_bytes`` (an int).

    "Fits" means ``score_matrix_bytes(batch, n_heads, S, bytes_per_elem) <=
    memory_bytes``; only the score tensor is counted.
    """
    per_score = batch * n_heads * bytes_per_elem
    if per_score <= 0:
        raise ValueError("max_naive_seq_len: batch, n_heads and bytes_per_elem must be positive")
    if memory_bytes < 0:
        return 0
    if isinstance(memory_bytes, float) and memory_bytes.is_integer():
        memory_bytes = int(memory_bytes)
    # S * S * per_score <= memory_bytes  <=>  S * S <= floor(memory_bytes / per_score)
    if isinstance(memory_bytes, int) and isinstance(per_score, int):
        max_square = memory_bytes // per_score
    else:
        max_square = math.floor(memory_bytes / per_score)
    seq_len = math.isqrt(int(max_square))
    # guard against any rounding at the edges
    while seq_len > 0 and score_matrix_bytes(batch, n_heads, seq_len, bytes_per_elem) > memory_bytes:
        seq_len -= 1
    while score_matrix_bytes(batch, n_heads, seq_len + 1, bytes_per_elem) <= memory_bytes:
        seq_len += 1
    return int(seq_len)


def plot_scaling(results, path):
    """Save a log-log plot of time against ``S`` to ``path``.

    ``results`` is ``{S: seconds}`` (what ``measure_scaling`` returns).  Both
    axes logarithmic, labelled; a dashed ``S**2`` guide line through the
    first point helps the eye.  The file format follows the extension of
    ``path`` (``.png``).  Needs matplotlib; without it, raise
    ``ImportError`` with a message saying how to install it.  Returns
    ``path``.
    """
    try:
        from matplotlib.figure import Figure
    except ImportError as err:
        raise ImportError("plot_scaling needs matplotlib: pip install 'attn-course[plot]' "
                          "(or pip install matplotlib)") from err
    seq_lens = sorted(results)
    times = [results[s] for s in seq_lens]
    first_s = seq_lens[0]
    first_t = times[0]
    guide = [first_t * (s / first_s) ** 2 for s in seq_lens]

    fig = Figure(figsize=(6, 4.5))
    ax = fig.add_subplot(1, 1, 1)
    ax.loglog(seq_lens, times, "o-", label="naive attention (measured)")
    ax.loglog(seq_lens, guide, "--", color="gray", label="S**2 guide")
    ax.set_xlabel("sequence length S")
    ax.set_ylabel("time (seconds)")
    if len(seq_lens) >= 2:
        ax.set_title(f"naive attention: log-log slope {loglog_slope(seq_lens, times):.2f}")
    else:
        ax.set_title("naive attention")
    ax.legend()
    ax.grid(True, which="both", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path)
    return path
