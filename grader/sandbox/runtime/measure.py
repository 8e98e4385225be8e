"""The grader's own measurement kit: a timer and a probe of the machine's peaks.

Trusted code (never the student's), part of the worker runtime.  It runs in
the grading process (``grader.sandbox.runtime.measure``: the machine's peaks,
shown at the top of the report) and inside the worker, beside the probes
(the reference timings that serve as a control for a student's
measurement).  It imports nothing from the ``grader`` package, only the
standard library and PyTorch.

* ``time_call(fn, *args, warmup=2, repeats=5, device=None, **kwargs)``: the
  median of ``repeats`` timed calls after ``warmup`` untimed ones, with the
  device synchronized before the clock starts and before it stops (a CUDA
  kernel launch returns before the kernel has run).
* ``one_thread()``: a context that pins PyTorch's CPU threads to one.  On a
  small, shared CPU, two threads that must meet at every operation stall
  whenever the other core is busy (naive attention at S=256 was measured at
  25 ms with two threads against 0.85 ms with one): one thread is slower at
  best but far more stable, and stability is what a graded slope needs.
* ``best_seconds(fn, *args)``: the fastest of a few calls, for peaks.
* ``machine_peaks(device)``: matrix-multiply FLOP/s and copy bandwidth,
  measured on ``device`` (``"cpu"`` at one thread, or ``"cuda"``).
"""
from __future__ import annotations

import contextlib
import statistics
import time
from dataclasses import dataclass

import torch


def default_device() -> str:
    """``"cuda"`` where PyTorch sees a GPU, else ``"cpu"``."""
    return "cuda" if torch.cuda.is_available() else "cpu"


def synchronize(device=None) -> None:
    """Wait for every queued kernel on ``device`` (no-op on the CPU)."""
    dev = torch.device(device) if device is not None else None
    if dev is not None and dev.type != "cuda":
        return
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        torch.cuda.synchronize(dev)


@contextlib.contextmanager
def one_thread():
    """Run the block with PyTorch's intra-op threads pinned to one."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)


@dataclass(frozen=True)
class Timing:
    median: float          # seconds
    times: tuple           # every timed repeat, in order


def time_call(fn, *args, warmup: int = 2, repeats: int = 5, device=None, clock=None,
              **kwargs) -> Timing:
    """Median seconds of ``fn(*args, **kwargs)``; ``device`` is synchronized
    around every timed call (``None``: synchronize CUDA if it is in use).
    ``clock``: ``time.perf_counter`` (wall clock) unless given, e.g.
    ``cpu_clock(device)``."""
    if repeats < 1:
        raise ValueError("repeats must be at least 1")
    clock = clock or time.perf_counter
    for _ in range(warmup):
        fn(*args, **kwargs)
    times = []
    for _ in range(repeats):
        synchronize(device)
        start = clock()
        fn(*args, **kwargs)
        synchronize(device)
        times.append(clock() - start)
    return Timing(statistics.median(times), tuple(times))


def cpu_clock(device=None):
    """The clock for what the machine can do, whatever else runs on it.

    On a CPU at one thread (``one_thread``) the work runs on the calling
    thread, so its CPU time (``time.thread_time``) is the time the work took
    on a core, without the time other processes held that core: on the
    2-core machine under a load of 4 per core, a 1024x1024 matmul measured
    ~150 ms of wall clock and ~40 ms of CPU time, the same 40 ms as when
    quiet.  On a GPU, the wall clock (the CPU thread only waits)."""
    if device is not None and torch.device(device).type != "cpu":
        return time.perf_counter
    return time.thread_time


# -- the machine's peaks ----------------------------------------------------

def best_seconds(fn, *args, repeats: int = 5, device=None, clock=time.perf_counter) -> float:
    """The fastest of ``repeats + 1`` synchronized calls (the slow first call
    is simply never the fastest).  A peak is what the machine can do, and
    noise only ever slows a run (``time_call`` takes the median: a
    measurement, not a peak)."""
    best = float("inf")
    for _ in range(repeats + 1):
        synchronize(device)
        start = clock()
        fn(*args)
        synchronize(device)
        best = min(best, clock() - start)
    return best


@dataclass(frozen=True)
class Peaks:
    """What the grading machine can do, measured once per grading run."""
    device: str
    flops: float           # matrix-multiply FLOP/s
    bytes_per_s: float     # copy bandwidth (bytes read + bytes written per second)
    dtype: str             # the matmul's dtype
    threads: int           # CPU threads used (0 on a GPU)
    matmul_n: int
    copy_bytes: int

    @property
    def ridge(self) -> float:
        """FLOPs per byte at which the two roofs meet."""
        return self.flops / self.bytes_per_s

    def __str__(self) -> str:
        where = f"{self.device}, {self.threads} thread" + ("s" if self.threads != 1 else "") \
            if self.device == "cpu" else self.device
        return (f"{_si(self.flops)}FLOP/s matmul ({self.dtype}, n={self.matmul_n}), "
                f"{_si(self.bytes_per_s)}B/s copy ({self.copy_bytes >> 20} MiB); "
                f"ridge point {self.ridge:.1f} FLOP/byte [{where}]")


def _si(x: float) -> str:
    for unit, scale in (("T", 1e12), ("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(x) >= scale:
            return f"{x / scale:.3g} {unit}"
    return f"{x:.3g} "


def matmul_flops(device: str = "cpu", n: int | None = None, dtype=None,
                 repeats: int = 5) -> tuple[float, int, torch.dtype]:
    """FLOP/s of an ``n x n`` matrix multiply (``2 n^3`` FLOPs).

    The best of ``repeats`` timed runs, not the median: a peak is what the
    machine can do, and noise on a shared machine only ever slows a run.  On
    a CPU, in CPU time (``cpu_clock``): a peak measured low on a busy machine
    would make an honest student's kernel look faster than the machine."""
    cuda = torch.device(device).type == "cuda"
    # 1024 on a CPU: 2.1 GFLOP, tens of ms at one thread, big enough that
    # call overhead is negligible; 8192 on a GPU: 1.1 TFLOP, about a ms.
    n = n or (8192 if cuda else 1024)
    dtype = dtype or (torch.float16 if cuda else torch.float32)
    a = torch.randn(n, n, device=device, dtype=dtype)
    b = torch.randn(n, n, device=device, dtype=dtype)
    best = best_seconds(torch.matmul, a, b, repeats=repeats, device=device,
                        clock=cpu_clock(device))
    return 2.0 * n ** 3 / best, n, dtype


def copy_bandwidth(device: str = "cpu", nbytes: int | None = None,
                   repeats: int = 5) -> tuple[float, int]:
    """Bytes per second of ``dst.copy_(src)``, counting the read and the write.

    64 MiB on a CPU is well past any last-level cache; 1 GiB on a GPU.  Best
    of ``repeats``, as for the matmul."""
    cuda = torch.device(device).type == "cuda"
    nbytes = nbytes or ((1 << 30) if cuda else (64 << 20))
    src = torch.empty(nbytes // 4, device=device, dtype=torch.float32).uniform_()
    dst = torch.empty_like(src)
    best = best_seconds(dst.copy_, src, repeats=repeats, device=device,
                        clock=cpu_clock(device))
    return 2.0 * src.numel() * 4 / best, src.numel() * 4


def machine_peaks(device: str | None = None) -> Peaks:
    """Measure the matmul and copy peaks of ``device`` (CPU at one thread)."""
    device = device or default_device()
    if torch.device(device).type == "cuda":
        flops, n, dtype = matmul_flops(device)
        bw, nbytes = copy_bandwidth(device)
        threads = 0
    else:
        with one_thread():
            flops, n, dtype = matmul_flops(device)
            bw, nbytes = copy_bandwidth(device)
        threads = 1
    return Peaks(device=str(device), flops=flops, bytes_per_s=bw,
                 dtype=str(dtype).replace("torch.", ""), threads=threads,
                 matmul_n=n, copy_bytes=nbytes)


PEAKS_KEY = "machine peaks"


def grading_peaks(machine: dict, device: str | None = None) -> Peaks:
    """The peaks of this grading run: measured the first time a suite asks,
    then kept in the report's ``machine`` dict (shown at the top)."""
    peaks = machine.get(PEAKS_KEY)
    if not isinstance(peaks, Peaks):
        peaks = machine_peaks(device)
        machine[PEAKS_KEY] = peaks
    return peaks
