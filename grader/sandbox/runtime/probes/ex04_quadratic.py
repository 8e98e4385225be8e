"""Probes for ex04_quadratic: timers, the scaling run with its control, the plot.

Trusted code run in the worker next to the student's module.  Everything
returned is plain data; the grading process decides.  On a CPU every
measurement here runs at one PyTorch thread (see ``measure.one_thread``).
"""
from __future__ import annotations

import contextlib
import importlib.util
import math
import sys
import time

import torch

from .. import measure
from .common import watch_figures


def _number(value):
    """A student's return value as a float, or a note of what it was."""
    if isinstance(value, bool):
        return {"not_a_number": "bool"}
    try:
        return float(value)
    except (TypeError, ValueError):
        return {"not_a_number": type(value).__name__}


# -- time_fn ------------------------------------------------------------------

def run_timer(module, delays, warmup=None, repeats=None, call_args=(), call_kwargs=None):
    """Call ``module.time_fn`` on a scripted function whose ``i``-th call sleeps
    ``delays[i]`` seconds (the last delay repeats).  ``warmup``/``repeats``
    are passed only when given.  Returns the result and what the function saw."""
    seen = []

    def scripted(*args, **kwargs):
        i = len(seen)
        seen.append({"args": list(args), "kwargs": sorted(kwargs)})
        time.sleep(delays[min(i, len(delays) - 1)])

    opts = {}
    if warmup is not None:
        opts["warmup"] = warmup
    if repeats is not None:
        opts["repeats"] = repeats
    start = time.perf_counter()
    result = module.time_fn(scripted, *call_args, **opts, **(call_kwargs or {}))
    wall = time.perf_counter() - start
    return {"result": _number(result), "calls": len(seen), "seen": seen[:20], "wall": wall}


def time_cuda(module, target_s=0.05):
    """A GPU kernel of known length, timed by ``module.time_fn`` and by CUDA events."""
    if not torch.cuda.is_available():
        return {"no_cuda": True}
    torch.cuda.init()
    # torch.cuda._sleep spins the GPU for a number of clock cycles: calibrate
    # the count so that the kernel runs about ``target_s`` seconds.
    cycles = 1_000_000
    for _ in range(20):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        torch.cuda._sleep(cycles)
        end.record()
        torch.cuda.synchronize()
        took = start.elapsed_time(end) / 1e3
        if took >= target_s * 0.8:
            break
        cycles = int(cycles * min(100.0, max(2.0, target_s / max(took, 1e-6))))
    events = []
    for _ in range(3):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        torch.cuda._sleep(cycles)
        end.record()
        torch.cuda.synchronize()
        events.append(start.elapsed_time(end) / 1e3)
    result = module.time_fn(torch.cuda._sleep, cycles, warmup=1, repeats=3)
    torch.cuda.synchronize()
    return {"result": _number(result), "kernel_s": sorted(events)[1]}


class _StandinGPU:
    """A CPU stand-in for a GPU's asynchrony, for grading ``time_fn`` on a
    CPU-only machine.

    ``launch(seconds)`` queues work and returns at once, as a CUDA kernel
    launch does; the queue drains in real time, one item after another.
    ``synchronize()`` (installed as ``torch.cuda.synchronize`` and friends)
    blocks until everything queued is done.  A timer that synchronizes sees
    each call take ``seconds``; one that does not sees microseconds."""

    def __init__(self):
        self.done_at = 0.0          # perf_counter time when the queue is empty
        self.syncs = 0

    def launch(self, seconds: float) -> None:
        self.done_at = max(time.perf_counter(), self.done_at) + seconds

    def synchronize(self, *args, **kwargs) -> None:
        self.syncs += 1
        while (left := self.done_at - time.perf_counter()) > 0:
            time.sleep(left)

    def stream(self, *args, **kwargs):
        gpu = self

        class Stream:
            def synchronize(self):
                gpu.synchronize()

            def query(self):
                return time.perf_counter() >= gpu.done_at
        return Stream()

    def event_class(self):
        gpu = self

        class Event:
            """Records when the queue reaches it; times in ms, as CUDA's do."""
            def __init__(self, *args, **kwargs):
                self.at = None

            def record(self, *args, **kwargs):
                self.at = max(time.perf_counter(), gpu.done_at)

            def synchronize(self):
                while self.at is not None and (left := self.at - time.perf_counter()) > 0:
                    time.sleep(left)

            wait = synchronize

            def query(self):
                return self.at is None or time.perf_counter() >= self.at

            def elapsed_time(self, end):
                return (end.at - self.at) * 1e3
        return Event

    def patches(self) -> list:
        """(object, attribute, stand-in) for what a timer may call."""
        out = [(torch.cuda, "is_available", lambda: True),
               (torch.cuda, "is_initialized", lambda: True),
               (torch.cuda, "init", lambda: None),
               (torch.cuda, "synchronize", self.synchronize),
               (torch.cuda, "current_stream", self.stream),
               (torch.cuda, "default_stream", self.stream),
               (torch.cuda, "Event", self.event_class()),
               (torch.cuda, "device_count", lambda: 1),
               (torch.cuda, "current_device", lambda: 0)]
        acc = getattr(torch, "accelerator", None)
        if acc is not None:
            out += [(acc, name, fn) for name, fn in (
                ("is_available", lambda: True), ("synchronize", self.synchronize),
                ("current_accelerator", lambda *a, **k: torch.device("cuda")))
                if hasattr(acc, name)]
        return out


def time_standin_gpu(module, work_s=0.05, warmup=1, repeats=3):
    """``time_fn`` of a kernel on ``_StandinGPU``: each call queues ``work_s``
    seconds of work and returns at once.

    The student's module is executed afresh while the stand-in is installed,
    so that a device chosen at import (``DEVICE = "cuda" if
    torch.cuda.is_available() else "cpu"``) sees it too.  Returns the result,
    the work per call and the synchronizations seen; ``{"unsupported": why}``
    when the module or its timer could not run on the stand-in (it then
    cannot be judged here: a real GPU can)."""
    gpu = _StandinGPU()
    saved = []
    try:
        for obj, name, value in gpu.patches():
            saved.append((obj, name, getattr(obj, name)))
            setattr(obj, name, value)
        try:
            path = getattr(module, "__file__", None)
            spec = importlib.util.spec_from_file_location(f"_standin_{module.__name__}", path)
            fresh = importlib.util.module_from_spec(spec)
            # Registered while it runs, as an import would: a dataclass (or
            # anything else that looks its module up) needs it there.
            sys.modules[spec.name] = fresh
            try:
                spec.loader.exec_module(fresh)
            finally:
                sys.modules.pop(spec.name, None)
        except Exception as exc:
            return {"unsupported": f"importing it with a GPU present raised "
                                   f"{type(exc).__name__}: {str(exc)[:200]}"}
        calls = []

        def kernel():
            calls.append(1)
            gpu.launch(work_s)

        try:
            result = fresh.time_fn(kernel, warmup=warmup, repeats=repeats)
        except Exception as exc:
            return {"unsupported": f"time_fn raised {type(exc).__name__}: {str(exc)[:200]}"}
    finally:
        for obj, name, value in reversed(saved):
            setattr(obj, name, value)
    return {"result": _number(result), "work_s": work_s, "syncs": gpu.syncs,
            "calls": len(calls)}


# -- the scaling run ----------------------------------------------------------

def _naive(q, k, v):
    """The grader's own causal naive attention (the control)."""
    s = q.shape[-2]
    scores = torch.matmul(q, k.transpose(-2, -1)) * (1.0 / math.sqrt(q.shape[-1]))
    mask = torch.ones(s, s, dtype=torch.bool, device=q.device).triu(1)
    return torch.matmul(torch.softmax(scores.masked_fill(mask, float("-inf")), dim=-1), v)


def _threads(device):
    return measure.one_thread() if torch.device(device).type == "cpu" \
        else contextlib.nullcontext()


def _ref_times(seq_lens, device, batch, n_heads, d_head, dtype, repeats=5, clock=None):
    out = []
    for s in seq_lens:
        q, k, v = (torch.randn(batch, n_heads, s, d_head, device=device, dtype=dtype)
                   for _ in range(3))
        out.append(measure.time_call(_naive, q, k, v, warmup=1, repeats=repeats,
                                     device=device, clock=clock).median)
        del q, k, v
    return out


# The chapter's lengths, 128 to 4096, in half-octave steps (each a multiple of
# 64): five consecutive ones span a factor of 4 in S, 16 in time.
LENGTH_GRID = (128, 192, 256, 384, 512, 768, 1024, 1536, 2048, 3072, 4096)
MIN_POINTS = 5     # a slope fitted to five lengths, never fewer


def pick_lengths(module, device="cpu", batch=1, n_heads=4, d_head=64, target_s=None,
                 n_points=MIN_POINTS):
    """Lengths where the quadratic dominates on this device: walk up
    ``LENGTH_GRID`` until the control takes ``target_s`` (or the grid, or the
    device's memory, ends), then take that S and the ``n_points - 1`` grid
    lengths below it (at least ``MIN_POINTS``; the grid's first ones when the
    machine is slow even at 128).

    ``target_s``: 20 ms on a CPU (at one thread, S about 1024 on the machine
    this was written on; the smallest length, a quarter of it, still spends
    most of its time in the S*S work rather than in call overhead), 10 ms on
    a GPU (there, launch overhead is ~10 us per kernel, so the smallest point
    still runs ~100x longer than the overhead; a GPU fast enough reaches the
    chapter's 4096).  The largest score tensor is kept under a sixth of free
    GPU memory (scores, softmax and mask live at once)."""
    cuda = torch.device(device).type == "cuda"
    target_s = target_s or (0.01 if cuda else 0.02)
    n_points = max(int(n_points), MIN_POINTS)
    max_len = LENGTH_GRID[-1]
    if cuda:
        free, _ = torch.cuda.mem_get_info()
        max_len = min(max_len, int(math.isqrt(free // (6 * 4 * batch * n_heads))))
    grid = [s for s in LENGTH_GRID if s <= max_len] or [LENGTH_GRID[0]]
    pilot = {}
    top = 0
    with _threads(device):
        for top, s in enumerate(grid):
            # CPU time on a CPU: the lengths are the machine's, not the moment's
            # (a loaded machine would otherwise pick shorter, overhead-bound ones).
            pilot[s] = _ref_times([s], device, batch, n_heads, d_head, torch.float32,
                                  repeats=3, clock=measure.cpu_clock(device))[0]
            if pilot[s] >= target_s:
                break
    top = max(top, min(n_points, len(grid)) - 1)
    lens = grid[max(0, top - n_points + 1):top + 1]
    return {"seq_lens": lens, "pilot": [[k, v] for k, v in pilot.items()]}


def scaling_run(module, seq_lens, device="cpu", batch=1, n_heads=4, d_head=64):
    """One attempt: for each length, the grader's control, the student's
    ``measure_scaling([S])``, the control again.

    Interleaved length by length so that each of the student's times has a
    control measured within a fraction of a second of it, under the same
    load: on a busy machine a long call is preempted more often than a short
    one, which raises the slope of every wall-clock measurement made at that
    moment, the grader's as much as the student's.

    While the student's code runs, ``module.naive_attention`` is wrapped so
    that every call it makes is timed here too (with the device
    synchronized): the grader can compare the times reported with the time
    the calls really took."""
    dtype = torch.float32
    observed = []
    original = getattr(module, "naive_attention", None)

    def watched(*args, **kwargs):
        q = args[0] if args else kwargs.get("q")
        measure.synchronize(device)
        start = time.perf_counter()
        out = original(*args, **kwargs)
        measure.synchronize(device)
        observed.append([list(getattr(q, "shape", ())), time.perf_counter() - start])
        return out

    ref_before, ref_after, pairs, wall = [], [], [], 0.0
    for s in seq_lens:
        # Each run gets its own pin: the student's code may change the thread count.
        with _threads(device):
            ref_before += _ref_times([s], device, batch, n_heads, d_head, dtype)
        if original is not None:
            module.naive_attention = watched
        try:
            with _threads(device):
                start = time.perf_counter()
                result = module.measure_scaling([s], batch=batch, n_heads=n_heads,
                                                d_head=d_head, device=device)
                wall += time.perf_counter() - start
        finally:
            if original is not None:
                module.naive_attention = original
        with _threads(device):
            ref_after += _ref_times([s], device, batch, n_heads, d_head, dtype)
        if not isinstance(result, dict):
            return {"bad_result": type(result).__name__}
        got = []
        for key, value in result.items():
            try:
                got.append([int(key), _number(value)])
            except (TypeError, ValueError):
                return {"bad_key": repr(key)[:60]}
        if [k for k, _ in got] != [s]:
            return {"student": got[:20], "asked": [s]}
        pairs += got
    return {"student": pairs, "ref_before": ref_before, "ref_after": ref_after,
            "observed": observed[:500], "wall": wall}


# -- the plot -------------------------------------------------------------------

def _axes(figure) -> list:
    """What ``plot_scaling`` drew, read as the figure is saved: per axes, its
    scales, lines (points and styles) and labels."""
    return [{"xscale": ax.get_xscale(), "yscale": ax.get_yscale(),
             "lines": [line.get_xydata().astype("float64").tolist()
                       for line in ax.get_lines()][:10],
             "styles": [str(line.get_linestyle()) for line in ax.get_lines()][:10],
             "xlabel": ax.get_xlabel(), "ylabel": ax.get_ylabel()}
            for ax in figure.get_axes()]


def plot(module, pairs, name="scaling.png"):
    """Run ``module.plot_scaling`` on ``{S: seconds}``; report what was drawn.

    ``Figure.savefig`` is watched to read the axes' scales and the plotted
    data at the moment the figure is saved at the path; the file's bytes come
    back when they are that save's (``common.watch_figures``)."""
    times = {int(s): float(t) for s, t in pairs}
    return watch_figures(lambda path: module.plot_scaling(times, path), _axes, name, "plot-")
