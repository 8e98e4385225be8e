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
import numbers
import operator
import statistics
import time
from fractions import Fraction
from typing import Any, Callable, Dict, Mapping, Sequence

import torch

__all__ = [
    "naive_attention",
    "time_fn",
    "measure_scaling",
    "loglog_slope",
    "score_matrix_bytes",
    "max_naive_seq_len",
    "plot_scaling",
]


# --------------------------------------------------------------------------
# Validation helpers
# --------------------------------------------------------------------------

def _as_int(value: Any, name: str, minimum: int = 1) -> int:
    """``value`` as an int >= ``minimum`` (no bools, no floats), else ``ValueError``."""
    if isinstance(value, bool):
        raise ValueError(f"{name} must be an integer, got a bool")
    try:
        out = operator.index(value)
    except TypeError:
        raise ValueError(f"{name} must be an integer, got {type(value).__name__} ({value!r})") from None
    if out < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {out}")
    return int(out)


def _as_real(value: Any, name: str, *, positive: bool = True) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise ValueError(f"{name} must be a real number, got {type(value).__name__}")
    if not math.isfinite(float(value)):
        raise ValueError(f"{name} must be finite, got {value!r}")
    if positive and value <= 0:
        raise ValueError(f"{name} must be > 0, got {value!r}")
    if not positive and value < 0:
        raise ValueError(f"{name} must be >= 0, got {value!r}")
    return value


def _check_attention_inputs(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> None:
    for name, t in (("q", q), ("k", k), ("v", v)):
        if not isinstance(t, torch.Tensor):
            raise ValueError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
        if t.ndim != 4:
            raise ValueError(f"{name} must be 4-D (B, h, S, d_head), got shape {tuple(t.shape)}")
        if not t.dtype.is_floating_point:
            raise ValueError(f"{name} must be a floating tensor, got {t.dtype}")
    if not (q.device == k.device == v.device):
        raise ValueError(f"q, k, v must share a device, got {q.device}, {k.device}, {v.device}")
    if k.shape != v.shape:
        raise ValueError(f"k and v must have the same shape, got {tuple(k.shape)} and {tuple(v.shape)}")
    if q.shape[0] != k.shape[0]:
        raise ValueError(f"batch sizes differ: q {q.shape[0]}, k {k.shape[0]}")
    if q.shape[-1] != k.shape[-1] or q.shape[-1] == 0:
        raise ValueError(f"q and k need the same positive d_head, got {q.shape[-1]} and {k.shape[-1]}")
    if k.shape[1] == 0 or q.shape[1] % k.shape[1] != 0:
        raise ValueError(f"q's heads ({q.shape[1]}) must be a multiple of k's heads ({k.shape[1]})")
    if q.shape[2] == 0 or k.shape[2] == 0:
        raise ValueError("attention needs at least one query and one key")


def _end_aligned_causal_mask(s_q: int, s_k: int, device: torch.device) -> torch.Tensor:
    """Boolean ``(s_q, s_k)``: True where query ``i`` may NOT see key ``j``."""
    rows = torch.arange(s_q, device=device).unsqueeze(1) + (s_k - s_q)
    cols = torch.arange(s_k, device=device).unsqueeze(0)
    return cols > rows


# --------------------------------------------------------------------------
# Public functions
# --------------------------------------------------------------------------

def naive_attention(q, k, v, causal=True):
    """Scaled dot-product attention that materializes the scores.

    ``q``: ``(B, h, S_q, d_head)``, ``k`` and ``v``: ``(B, h, S_k, d_head)``
    (torch tensors, any floating dtype, any device).  Computes the full
    ``(B, h, S_q, S_k)`` score tensor ``q @ k^T / sqrt(d_head)``, applies the
    end-aligned causal mask when ``causal``, takes the softmax over keys and
    returns ``(B, h, S_q, d_head)`` in the dtype of ``q``.

    Also accepts K/V with fewer heads (grouped-query attention, query head
    ``i`` reads K/V head ``i // (h // h_kv)``); the K/V heads are repeated,
    which is fine here: this version is naive on purpose.  Query rows that
    may see no key (``S_q > S_k``) return zeros.  Raises ``ValueError`` for
    inputs of the wrong rank, shape, dtype or device.
    """
    _check_attention_inputs(q, k, v)
    n_rep = q.shape[1] // k.shape[1]
    if n_rep > 1:
        k = k.repeat_interleave(n_rep, dim=1)
        v = v.repeat_interleave(n_rep, dim=1)
    if k.dtype != q.dtype:
        k = k.to(q.dtype)
    if v.dtype != q.dtype:
        v = v.to(q.dtype)
    s_q, s_k, d_head = q.shape[2], k.shape[2], q.shape[3]
    scores = torch.matmul(q, k.transpose(-1, -2)) * (1.0 / math.sqrt(d_head))  # (B, h, S_q, S_k)
    blocked = None
    if causal:
        blocked = _end_aligned_causal_mask(s_q, s_k, q.device)
        scores = scores.masked_fill(blocked, float("-inf"))
    # Half-precision inputs: the softmax runs in float32 for accuracy.
    soft_dtype = torch.float32 if q.dtype in (torch.float16, torch.bfloat16) else q.dtype
    weights = torch.softmax(scores, dim=-1, dtype=soft_dtype)
    if blocked is not None and s_q > s_k:
        # Rows that see no key at all: softmax of all -inf is NaN; attend to nothing.
        empty_rows = blocked.all(dim=-1).unsqueeze(-1)  # (S_q, 1)
        weights = weights.masked_fill(empty_rows, 0.0)
    out = torch.matmul(weights.to(v.dtype), v)
    return out.to(q.dtype)


def _sync_if_cuda() -> None:
    """Wait for queued GPU work, if there is a GPU; a no-op on CPU-only machines."""
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

    ``ValueError`` unless ``fn`` is callable, ``warmup >= 0`` and
    ``repeats >= 1``.
    """
    if not callable(fn):
        raise ValueError(f"fn must be callable, got {type(fn).__name__}")
    warmup = _as_int(warmup, "warmup", minimum=0)
    repeats = _as_int(repeats, "repeats", minimum=1)
    for _ in range(warmup):
        fn(*args, **kwargs)
    _sync_if_cuda()
    samples = []
    for _ in range(repeats):
        _sync_if_cuda()
        start = time.perf_counter()
        fn(*args, **kwargs)
        _sync_if_cuda()
        samples.append(time.perf_counter() - start)
    return float(statistics.median(samples))


def measure_scaling(seq_lens, *, batch=1, n_heads=4, d_head=64, device="cpu",
                    dtype=torch.float32):
    """Time ``naive_attention`` (causal) at each length of ``seq_lens``.

    For each ``S``, make random ``q``, ``k``, ``v`` of shape
    ``(batch, n_heads, S, d_head)`` with ``dtype`` on ``device`` and time
    ``naive_attention(q, k, v)`` with ``time_fn``.  Returns
    ``{S: seconds}``.

    The inputs come from a fixed seed (reproducible, and the global RNG is
    left alone).  ``ValueError`` for an empty ``seq_lens``, non-positive
    sizes or a non-floating dtype.
    """
    try:
        lens = [_as_int(s, "seq_lens entry") for s in seq_lens]
    except TypeError:
        raise ValueError("seq_lens must be a sequence of positive integers") from None
    if not lens:
        raise ValueError("seq_lens must not be empty")
    batch = _as_int(batch, "batch")
    n_heads = _as_int(n_heads, "n_heads")
    d_head = _as_int(d_head, "d_head")
    if not isinstance(dtype, torch.dtype) or not dtype.is_floating_point:
        raise ValueError(f"dtype must be a floating torch.dtype, got {dtype!r}")
    dev = torch.device(device)
    gen = torch.Generator(device="cpu").manual_seed(0)
    results: Dict[int, float] = {}
    for s in lens:
        shape = (batch, n_heads, s, d_head)
        q, k, v = (torch.randn(shape, generator=gen).to(device=dev, dtype=dtype) for _ in range(3))
        results[s] = time_fn(naive_attention, q, k, v)
        del q, k, v
    return results


def loglog_slope(seq_lens, times):
    """Least-squares slope of ``log(time)`` against ``log(S)``.

    ``seq_lens`` and ``times`` are sequences of the same length (at least
    two points).  A slope of 2 means time grows like ``S**2``.  Returns a
    float.  ``ValueError`` for mismatched lengths, fewer than two points,
    non-positive values, or all lengths equal.
    """
    xs = [float(s) for s in seq_lens]
    ys = [float(t) for t in times]
    if len(xs) != len(ys):
        raise ValueError(f"seq_lens ({len(xs)}) and times ({len(ys)}) differ in length")
    if len(xs) < 2:
        raise ValueError("a slope needs at least two points")
    if any(not math.isfinite(v) or v <= 0 for v in xs + ys):
        raise ValueError("sequence lengths and times must be positive and finite")
    lx = [math.log(v) for v in xs]
    ly = [math.log(v) for v in ys]
    mx = sum(lx) / len(lx)
    my = sum(ly) / len(ly)
    sxx = sum((a - mx) ** 2 for a in lx)
    if sxx == 0:
        raise ValueError("all sequence lengths are equal: the slope is undefined")
    sxy = sum((a - mx) * (b - my) for a, b in zip(lx, ly))
    return float(sxy / sxx)


def score_matrix_bytes(batch, n_heads, seq_len, bytes_per_elem=2):
    """Bytes of the ``(batch, n_heads, seq_len, seq_len)`` score tensor (an int).

    The chapter's case: ``score_matrix_bytes(8, 32, 8192)`` is 34.4 GB in
    fp16, for one layer.  A fractional ``bytes_per_elem`` is rounded up to
    whole bytes.
    """
    batch = _as_int(batch, "batch")
    n_heads = _as_int(n_heads, "n_heads")
    seq_len = _as_int(seq_len, "seq_len", minimum=0)
    bpe = _as_real(bytes_per_elem, "bytes_per_elem")
    elems = batch * n_heads * seq_len * seq_len
    if isinstance(bpe, numbers.Integral):
        return int(elems * int(bpe))
    return int(math.ceil(Fraction(elems) * Fraction(bpe)))


def max_naive_seq_len(memory_bytes, batch, n_heads, bytes_per_elem=2):
    """The largest ``S`` whose score tensor fits in ``memory_bytes`` (an int).

    "Fits" means ``score_matrix_bytes(batch, n_heads, S, bytes_per_elem) <=
    memory_bytes``; only the score tensor is counted.  Exact integer
    arithmetic (``math.isqrt``), then checked against
    ``score_matrix_bytes`` itself; 0 if not even ``S = 1`` fits.
    """
    mem = _as_real(memory_bytes, "memory_bytes", positive=False)
    batch = _as_int(batch, "batch")
    n_heads = _as_int(n_heads, "n_heads")
    bpe = _as_real(bytes_per_elem, "bytes_per_elem")
    per_elem_row = Fraction(batch * n_heads) * Fraction(bpe)
    s = math.isqrt(int(math.floor(Fraction(mem) / per_elem_row)))
    # Guard the boundary against any rounding in score_matrix_bytes.
    while s > 0 and score_matrix_bytes(batch, n_heads, s, bpe) > mem:
        s -= 1
    while score_matrix_bytes(batch, n_heads, s + 1, bpe) <= mem:
        s += 1
    return int(s)


def plot_scaling(results, path):
    """Save a log-log plot of time against ``S`` to ``path``.

    ``results`` is ``{S: seconds}`` (what ``measure_scaling`` returns).  Both
    axes logarithmic, labelled; a dashed ``S**2`` guide line through the
    first point helps the eye.  The file format follows the extension of
    ``path`` (``.png``).  Needs matplotlib; without it, raise
    ``ImportError`` with a message saying how to install it.

    Uses matplotlib's object API with the Agg canvas (no global pyplot
    state, no display needed).  ``ValueError`` for empty or non-positive
    results.
    """
    if not isinstance(results, Mapping) or not results:
        raise ValueError("results must be a non-empty {S: seconds} mapping")
    points = sorted((float(s), float(t)) for s, t in results.items())
    if any(not (math.isfinite(s) and math.isfinite(t)) or s <= 0 or t <= 0 for s, t in points):
        raise ValueError("every S and every time must be positive and finite for a log-log plot")
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise ImportError(
            "plot_scaling needs matplotlib: pip install 'attn-course[plot]' (or pip install matplotlib)"
        ) from exc
    xs = [s for s, _ in points]
    ys = [t for _, t in points]
    fig = Figure(figsize=(6, 4.5))
    FigureCanvasAgg(fig)
    ax = fig.add_subplot(1, 1, 1)
    ax.loglog(xs, ys, "o-", label="naive attention (measured)")
    s0, t0 = xs[0], ys[0]
    ax.loglog(xs, [t0 * (s / s0) ** 2 for s in xs], "--", color="gray", label=r"$\propto S^2$ guide")
    if len(xs) >= 2 and xs[0] != xs[-1]:
        slope = loglog_slope(xs, ys)
        ax.set_title(f"Naive attention: time vs sequence length (slope {slope:.2f})")
    else:
        ax.set_title("Naive attention: time vs sequence length")
    ax.set_xlabel("sequence length S (tokens)")
    ax.set_ylabel("time (seconds)")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(str(path))
