"""Work a watched call hands to another thread or process.

The op trace of a probe (a ``TorchDispatchMode``) sees only the thread that
entered it, and a forked or spawned process is out of its reach: a call that
computes attention with PyTorch in a ``threading.Thread``, a thread pool,
``torch.jit.fork`` or a child process, then copies the result out with a
kernel of its own, looks to the trace like honest kernel work.  ``Elsewhere``
watches one call for that, as data:

* ``threads_started``: Python threads started during the call (``threading``,
  ``concurrent.futures``, ``_thread``), counted where they start;
* ``python_threads``: other Python threads alive at the start or the end
  (a pool started before the call, waiting for work);
* ``forks``: ``os.fork`` during the call (``multiprocessing`` included), by
  an at-fork hook;
* on the CPU only (``cpu=True``; a GPU's first launch runs the compiler,
  ``ptxas``, as a child process, and its driver runs threads of its own):
  ``other_cpu_s``, CPU time spent by every other thread of the process during
  the call, native ones (PyTorch's inter-op pool) and ones that ended
  included (the process's CPU clock less the calling thread's), and
  ``children``, child processes left or waited for (new ones still alive, or
  CPU time of children reaped during the call).

Honest kernel work in the interpreter runs in the calling thread alone (the
workers pin BLAS and OpenMP to one thread: ``one_blas_thread`` says whether
that holds here, and ``other_cpu_s`` is only judged where it does).  Like the
rest of the probes it runs beside the student's code and could be tampered
with in process (docs/THREAT_MODEL.md); it catches work moved elsewhere
without touching the grader.
"""
from __future__ import annotations

import _thread
import os
import sys
import threading
import time

_ACTIVE: list = []       # the watches in progress (the at-fork hook counts into them)


def _count_fork() -> None:
    for watch in _ACTIVE:
        watch.forks += 1


if hasattr(os, "register_at_fork"):
    os.register_at_fork(before=_count_fork)


def one_blas_thread() -> bool:
    """Whether BLAS and OpenMP are pinned to one thread here (the workers' default)."""
    return all(os.environ.get(var, "1") == "1"
               for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"))


def _children() -> set:
    """Process ids of this process's living (or unreaped) children."""
    found: set = set()
    try:
        tasks = os.listdir("/proc/self/task")
    except OSError:
        return found
    for tid in tasks:
        try:
            with open(f"/proc/self/task/{tid}/children") as f:
                found.update(int(p) for p in f.read().split())
        except (OSError, ValueError):
            continue
    return found


def _children_cpu() -> float:
    t = os.times()
    return t.children_user + t.children_system


class Elsewhere:
    """``with Elsewhere(cpu=...) as seen: call()``; then ``seen.result()``."""

    _STARTERS = ((threading, "_start_new_thread"), (threading, "_start_joinable_thread"),
                 (_thread, "start_new_thread"), (_thread, "start_joinable_thread"))

    def __init__(self, cpu: bool):
        self.cpu = cpu
        self.threads_started = 0
        self.forks = 0
        self._saved: list = []

    def _others(self) -> int:
        return len(set(sys._current_frames()) - {threading.get_ident()})

    def __enter__(self):
        watch = self
        for module, name in self._STARTERS:
            original = module.__dict__.get(name)
            if original is None:
                continue

            def start(*args, _original=original, **kwargs):
                watch.threads_started += 1
                return _original(*args, **kwargs)

            self._saved.append((module, name, original))
            setattr(module, name, start)
        self.python_threads = self._others()
        self._kids = _children()
        self._kids_cpu = _children_cpu()
        _ACTIVE.append(self)
        self._process = time.process_time()
        self._thread = time.thread_time()
        return self

    def __exit__(self, *exc):
        thread = time.thread_time() - self._thread
        process = time.process_time() - self._process
        _ACTIVE.remove(self)
        for module, name, original in reversed(self._saved):
            setattr(module, name, original)
        self._saved.clear()
        self.python_threads = max(self.python_threads, self._others())
        self.other_cpu_s = max(process - thread, 0.0)
        self.children = len(_children() - self._kids) + \
            (1 if _children_cpu() > self._kids_cpu else 0)
        return False

    def result(self) -> dict:
        seen = {"threads_started": self.threads_started, "python_threads": self.python_threads,
                "forks": self.forks}
        if self.cpu:
            seen["children"] = self.children
            if one_blas_thread():
                seen["other_cpu_s"] = round(self.other_cpu_s, 6)
        return seen
