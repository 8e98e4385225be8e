"""Exercise D: measure the quadratic, in PyTorch.

Usually takes about 1.5 hours.  From the chapters: "Attention from First
Principles", section 5 (Complexity) and hands-on exercise D; "Attention"
(chapter 03), "The quadratic term".

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
5. ``plot_scaling``: a log-log plot of your measurement with a dashed
   ``S**2`` guide (matplotlib: a dependency of the course package; Colab
   has it).
6. ``WHERE_THE_SLOPE_COMES_FROM``: in a few sentences (5 to 250 words, a
   ``str``), where the slope of your measurement comes from: which work
   grows like ``S**2``, and why a measured slope sits near 2 but not
   exactly at it.  Collected for your course staff, who grade it with a
   rubric (no autograder points).

``attn-grade check ex04`` measures your ``measure_scaling`` on your machine,
as grading does: at five or more lengths of the chapter's 128 to 4096 in
half-octave steps (128, 192, 256, 384, 512, 768, 1024, 1536, 2048, 3072,
4096), the longest being where the grader's own naive attention takes about
20 ms on a CPU (one thread), 10 ms on a GPU, or 4096.  It shows your times
next to the grader's control, the fitted slope (the grader's fit and your
``loglog_slope``), and writes your ``plot_scaling`` of them as
``ex04_scaling.png`` into its output folder (``attn-grade-output``).

Conventions: ``B`` batch, ``h`` heads, ``S`` sequence length, ``d_head``
head width; tensors are ``(B, h, S, d_head)``.  Causal masks are aligned to
the end (query ``i`` sees keys ``0 .. S_k - S_q + i``; for ``S_q == S_k``
the usual lower triangle).  Sizes are in bytes.  ``naive_attention`` is
compared with a float64 reference to ``atol=2e-5, rtol=2e-4`` (the course's
precision rule).

Run the public tests with ``attn-grade check ex04``.
"""
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
    raise NotImplementedError("ex04_quadratic.naive_attention: your code here")


def time_fn(fn, *args, warmup=2, repeats=5, **kwargs):
    """Median wall-clock seconds of ``fn(*args, **kwargs)``.

    First call ``fn`` ``warmup`` times without timing (caches, allocators and
    lazy initialization warm up), then time ``repeats`` calls one by one and
    return the median (a float).  On a GPU, kernels run asynchronously: wait
    for them (``torch.cuda.synchronize()``) before starting and before
    stopping the clock, or you time the launch, not the work.  ``warmup``
    and ``repeats`` belong to the timer and are never passed to ``fn``.
    More warm-up calls are fine (``torch.utils.benchmark`` makes some of its
    own): the grader wants at least ``warmup + repeats`` calls, the slow
    first ones untimed, and the median of the timed ones.
    """
    raise NotImplementedError("ex04_quadratic.time_fn: your code here")


def measure_scaling(seq_lens, *, batch=1, n_heads=4, d_head=64, device="cpu",
                    dtype=torch.float32):
    """Time ``naive_attention`` (causal) at each length of ``seq_lens``.

    For each ``S``, make random ``q``, ``k``, ``v`` of shape
    ``(batch, n_heads, S, d_head)`` with ``dtype`` on ``device`` and time
    ``naive_attention(q, k, v)`` with ``time_fn``.  Returns
    ``{S: seconds}``, one entry per length asked (any lengths: the check
    asks for one at a time).
    """
    raise NotImplementedError("ex04_quadratic.measure_scaling: your code here")


def loglog_slope(seq_lens, times):
    """Least-squares slope of ``log(time)`` against ``log(S)``.

    ``seq_lens`` and ``times`` are sequences of the same length (at least
    two points).  A slope of 2 means time grows like ``S**2``.  Returns a
    float.
    """
    raise NotImplementedError("ex04_quadratic.loglog_slope: your code here")


def score_matrix_bytes(batch, n_heads, seq_len, bytes_per_elem=2):
    """Bytes of the ``(batch, n_heads, seq_len, seq_len)`` score tensor (an int).

    The chapter's case: ``score_matrix_bytes(8, 32, 8192)`` is 34.4 GB in
    fp16, for one layer.
    """
    raise NotImplementedError("ex04_quadratic.score_matrix_bytes: your code here")


def max_naive_seq_len(memory_bytes, batch, n_heads, bytes_per_elem=2):
    """The largest ``S`` whose score tensor fits in ``memory_bytes`` (an int).

    "Fits" means ``score_matrix_bytes(batch, n_heads, S, bytes_per_elem) <=
    memory_bytes``; only the score tensor is counted.
    """
    raise NotImplementedError("ex04_quadratic.max_naive_seq_len: your code here")


def plot_scaling(results, path):
    """Save a log-log plot of time against ``S`` to ``path``.

    ``results`` is ``{S: seconds}`` (what ``measure_scaling`` returns); plot
    the times in seconds, or in ms, us or ns (a unit moves a log-log line,
    not its slope).  Both axes logarithmic, labelled; a dashed ``S**2`` guide line through the
    first point helps the eye.  The file format follows the extension of
    ``path`` (``.png``).  Needs matplotlib; without it, raise
    ``ImportError`` with a message saying how to install it.
    """
    raise NotImplementedError("ex04_quadratic.plot_scaling: your code here")


WHERE_THE_SLOPE_COMES_FROM = None  # TODO: your answer
