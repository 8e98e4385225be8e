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


def _causal_allowed(s_q, s_k, device):
    """``(s_q, s_k)`` bool: key ``j`` visible to query ``i`` (end-aligned)."""
    rows = torch.arange(s_q, device=device)[:, None] + (s_k - s_q)
    return torch.arange(s_k, device=device)[None, :] <= rows


def naive_attention(q, k, v, causal=True):
    """Scaled dot-product attention that materializes the scores.

    ``q``: ``(B, h, S_q, d_head)``, ``k`` and ``v``: ``(B, h, S_k, d_head)``
    (torch tensors, any floating dtype, any device).  Computes the full
    ``(B, h, S_q, S_k)`` score tensor ``q @ k^T / sqrt(d_head)``, applies the
    end-aligned causal mask when ``causal``, takes the softmax over keys and
    returns ``(B, h, S_q, d_head)`` in the dtype of ``q``.

    The softmax is ``exp(scores - logsumexp(scores))``; a row that may see no
    key (only when ``S_q > S_k``) gives zeros.
    """
    scale = 1.0 / math.sqrt(q.shape[-1])
    scores = torch.einsum("...qe,...ke->...qk", q, k) * scale       # (B, h, S_q, S_k)
    if causal:
        allowed = _causal_allowed(q.shape[-2], k.shape[-2], q.device)
        scores = torch.where(allowed, scores, float("-inf"))
    lse = torch.logsumexp(scores, dim=-1, keepdim=True)
    lse = torch.where(torch.isfinite(lse), lse, torch.zeros((), dtype=lse.dtype, device=lse.device))
    weights = torch.exp(scores - lse)
    return torch.einsum("...qk,...ke->...qe", weights, v).to(q.dtype)


def _sync():
    if torch.cuda.is_available():
        torch.cuda.synchronize()


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
        raise ValueError(f"time_fn: repeats must be at least 1, got {repeats}")
    for _ in range(max(0, int(warmup))):
        fn(*args, **kwargs)
    times = []
    for _ in range(int(repeats)):
        _sync()
        start = time.perf_counter()
        fn(*args, **kwargs)
        _sync()
        times.append(time.perf_counter() - start)
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
    with torch.no_grad():
        for s in seq_lens:
            s = int(s)
            q, k, v = torch.randn(3, batch, n_heads, s, d_head, device=device, dtype=dtype).unbind(0)
            results[s] = time_fn(naive_attention, q, k, v)
    return results


def loglog_slope(seq_lens, times):
    """Least-squares slope of ``log(time)`` against ``log(S)``.

    ``seq_lens`` and ``times`` are sequences of the same length (at least
    two points).  A slope of 2 means time grows like ``S**2``.  Returns a
    float.
    """
    xs = [math.log(float(s)) for s in seq_lens]
    ys = [math.log(float(t)) for t in times]
    if len(xs) != len(ys) or len(xs) < 2:
        raise ValueError("loglog_slope: need two sequences of equal length, at least 2 points")
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    sxx = sum((x - mx) ** 2 for x in xs)
    if sxx == 0:
        raise ValueError("loglog_slope: the lengths must not all be equal")
    return float(sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sxx)


def score_matrix_bytes(batch, n_heads, seq_len, bytes_per_elem=2):
    """Bytes of the ``(batch, n_heads, seq_len, seq_len)`` score tensor (an int).

    The chapter's case: ``score_matrix_bytes(8, 32, 8192)`` is 34.4 GB in
    fp16, for one layer.
    """
    return int(batch * n_heads * seq_len * seq_len * bytes_per_elem)


def max_naive_seq_len(memory_bytes, batch, n_heads, bytes_per_elem=2):
    """The largest ``S`` whose score tensor fits in ``memory_bytes`` (an int).

    "Fits" means ``score_matrix_bytes(batch, n_heads, S, bytes_per_elem) <=
    memory_bytes``; only the score tensor is counted.  0 when not even one
    score fits.
    """
    per_pair = batch * n_heads * bytes_per_elem
    if per_pair <= 0:
        raise ValueError("max_naive_seq_len: batch, n_heads and bytes_per_elem must be positive")
    if memory_bytes < per_pair:
        return 0
    s = math.isqrt(int(memory_bytes // per_pair))
    while score_matrix_bytes(batch, n_heads, s + 1, bytes_per_elem) <= memory_bytes:
        s += 1
    while s > 0 and score_matrix_bytes(batch, n_heads, s, bytes_per_elem) > memory_bytes:
        s -= 1
    return int(s)


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
        matplotlib.use("Agg", force=False)
        import matplotlib.pyplot as plt
    except ImportError as exc:  # pragma: no cover - depends on the install
        raise ImportError("plot_scaling needs matplotlib: pip install 'attn-course[plot]' "
                          "(or pip install matplotlib)") from exc
    lens = sorted(results)
    secs = [results[s] for s in lens]
    fig, ax = plt.subplots(figsize=(5, 4))
    ax.loglog(lens, secs, "o-", label="naive attention")
    if lens:
        s0, t0 = lens[0], secs[0]
        ax.loglog(lens, [t0 * (s / s0) ** 2 for s in lens], "--", color="gray", label="S**2 guide")
    if len(lens) >= 2:
        ax.set_title(f"log-log slope {loglog_slope(lens, secs):.2f}")
    ax.set_xlabel("sequence length S")
    ax.set_ylabel("time (s)")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return path
