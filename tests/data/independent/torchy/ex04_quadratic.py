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
from dataclasses import dataclass
from fractions import Fraction

import torch


def _end_aligned_allowed(s_q: int, s_k: int, device) -> torch.Tensor:
    """Boolean ``(s_q, s_k)``: True where query ``i`` may see key ``j``
    (``j <= s_k - s_q + i``)."""
    return torch.ones(s_q, s_k, dtype=torch.bool, device=device).tril(diagonal=s_k - s_q)


def naive_attention(q, k, v, causal=True):
    """Scaled dot-product attention that materializes the scores.

    ``q``: ``(B, h, S_q, d_head)``, ``k`` and ``v``: ``(B, h, S_k, d_head)``
    (torch tensors, any floating dtype, any device).  Computes the full
    ``(B, h, S_q, S_k)`` score tensor ``q @ k^T / sqrt(d_head)``, applies the
    end-aligned causal mask when ``causal``, takes the softmax over keys and
    returns ``(B, h, S_q, d_head)`` in the dtype of ``q``.

    The softmax is taken in float32 for half-precision inputs (then cast
    back); query rows that may see no key (only when ``S_q > S_k``) give
    zeros.
    """
    s_q, s_k = q.shape[-2], k.shape[-2]
    scores = torch.matmul(q, k.transpose(-2, -1)) * (1.0 / math.sqrt(q.shape[-1]))
    allowed = None
    if causal:
        allowed = _end_aligned_allowed(s_q, s_k, scores.device)
        scores = scores.masked_fill(~allowed, float("-inf"))
    acc_dtype = torch.float32 if scores.dtype in (torch.float16, torch.bfloat16) else scores.dtype
    weights = torch.softmax(scores, dim=-1, dtype=acc_dtype)
    if causal and s_q > s_k:  # rows with no key at all: zeros, not NaN
        weights = weights.masked_fill(~allowed.any(dim=-1, keepdim=True), 0.0)
    return torch.matmul(weights.to(v.dtype), v).to(q.dtype)


def _synchronize() -> None:
    """Wait for queued GPU work (CUDA; also MPS where present)."""
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        torch.cuda.synchronize()
    mps = getattr(torch, "mps", None)
    if mps is not None and getattr(torch.backends, "mps", None) is not None \
            and torch.backends.mps.is_available():
        mps.synchronize()


@dataclass(frozen=True)
class _Timer:
    """Warm-up, then ``repeats`` synchronized wall-clock measurements."""

    warmup: int = 2
    repeats: int = 5

    def __post_init__(self):
        if self.warmup < 0 or self.repeats < 1:
            raise ValueError("warmup must be >= 0 and repeats >= 1")

    def samples(self, fn, *args, **kwargs) -> list:
        for _ in range(self.warmup):
            fn(*args, **kwargs)
        out = []
        for _ in range(self.repeats):
            _synchronize()
            t0 = time.perf_counter()
            fn(*args, **kwargs)
            _synchronize()
            out.append(time.perf_counter() - t0)
        return out

    def median(self, fn, *args, **kwargs) -> float:
        return float(statistics.median(self.samples(fn, *args, **kwargs)))


def time_fn(fn, *args, warmup=2, repeats=5, **kwargs):
    """Median wall-clock seconds of ``fn(*args, **kwargs)``.

    First call ``fn`` ``warmup`` times without timing (caches, allocators and
    lazy initialization warm up), then time ``repeats`` calls one by one and
    return the median (a float).  On a GPU, kernels run asynchronously: wait
    for them (``torch.cuda.synchronize()``) before starting and before
    stopping the clock, or you time the launch, not the work.  ``warmup``
    and ``repeats`` belong to the timer and are never passed to ``fn``.
    """
    return _Timer(int(warmup), int(repeats)).median(fn, *args, **kwargs)


def measure_scaling(seq_lens, *, batch=1, n_heads=4, d_head=64, device="cpu",
                    dtype=torch.float32):
    """Time ``naive_attention`` (causal) at each length of ``seq_lens``.

    For each ``S``, make random ``q``, ``k``, ``v`` of shape
    ``(batch, n_heads, S, d_head)`` with ``dtype`` on ``device`` and time
    ``naive_attention(q, k, v)`` with ``time_fn``.  Returns
    ``{S: seconds}``.
    """
    gen = torch.Generator(device="cpu").manual_seed(0)
    results = {}
    with torch.inference_mode():
        for s in seq_lens:
            s = int(s)
            q, k, v = (torch.randn(batch, n_heads, s, d_head, generator=gen)
                       .to(device=device, dtype=dtype) for _ in range(3))
            results[s] = time_fn(naive_attention, q, k, v)
            del q, k, v
    return results


def loglog_slope(seq_lens, times):
    """Least-squares slope of ``log(time)`` against ``log(S)``.

    ``seq_lens`` and ``times`` are sequences of the same length (at least
    two points).  A slope of 2 means time grows like ``S**2``.  Returns a
    float.
    """
    x = torch.log(torch.as_tensor([float(s) for s in seq_lens], dtype=torch.float64))
    y = torch.log(torch.as_tensor([float(t) for t in times], dtype=torch.float64))
    if x.numel() != y.numel() or x.numel() < 2:
        raise ValueError("need at least two (S, time) points of equal count")
    dx = x - x.mean()
    var = (dx * dx).sum()
    if var == 0:
        raise ValueError("the sequence lengths must not all be equal")
    return float((dx * (y - y.mean())).sum() / var)


def score_matrix_bytes(batch, n_heads, seq_len, bytes_per_elem=2):
    """Bytes of the ``(batch, n_heads, seq_len, seq_len)`` score tensor (an int).

    The chapter's case: ``score_matrix_bytes(8, 32, 8192)`` is 34.4 GB in
    fp16, for one layer.
    """
    return int(batch * n_heads * seq_len * seq_len * bytes_per_elem)


def max_naive_seq_len(memory_bytes, batch, n_heads, bytes_per_elem=2):
    """The largest ``S`` whose score tensor fits in ``memory_bytes`` (an int).

    "Fits" means ``score_matrix_bytes(batch, n_heads, S, bytes_per_elem) <=
    memory_bytes``; only the score tensor is counted.  (Exact integer
    square root, no float rounding at the boundary.)
    """
    per_entry = Fraction(batch * n_heads) * Fraction(bytes_per_elem)
    if per_entry <= 0:
        raise ValueError("batch, n_heads and bytes_per_elem must be positive")
    budget = Fraction(memory_bytes) / per_entry
    if budget < 0:
        return 0
    return math.isqrt(math.floor(budget))


def plot_scaling(results, path):
    """Save a log-log plot of time against ``S`` to ``path``.

    ``results`` is ``{S: seconds}`` (what ``measure_scaling`` returns).  Both
    axes logarithmic, labelled; a dashed ``S**2`` guide line through the
    first point helps the eye.  The file format follows the extension of
    ``path`` (``.png``).  Needs matplotlib; without it, raise
    ``ImportError`` with a message saying how to install it.

    (Drawn on a ``matplotlib.figure.Figure`` directly, so pyplot's global
    state and backend are left alone.)
    """
    try:
        from matplotlib.figure import Figure
    except ImportError as err:  # pragma: no cover - depends on the install
        raise ImportError(
            "plot_scaling needs matplotlib: pip install 'attn-course[plot]' "
            "(or pip install matplotlib)") from err
    lens = sorted(results)
    secs = [float(results[s]) for s in lens]
    fig = Figure(figsize=(6, 4.5))
    ax = fig.add_subplot(1, 1, 1)
    ax.loglog(lens, secs, "o-", label="naive attention (measured)")
    if lens:
        s0, t0 = lens[0], secs[0]
        ax.loglog(lens, [t0 * (s / s0) ** 2 for s in lens], "--", color="gray",
                  label=r"$\propto S^2$ guide")
    if len(lens) >= 2:
        ax.set_title(f"log-log slope {loglog_slope(lens, secs):.2f}")
    ax.set_xlabel("sequence length S")
    ax.set_ylabel("time per call (s)")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path)
