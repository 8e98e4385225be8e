"""A busy machine on demand: CPU-bound processes working in random spells.

Used by the repeated-run test of the reference (``tests/test_ex04_06.py``)
and by ``benchmarks/bench_load.py``: the timing rules must hold while other
processes come and go, as on a shared grading machine.  Each process spins
for a random 0.1-1.5 s, rests for a random 0.05-0.8 s, and so on until the
context exits; the processes are started and stopped here, never left
behind.

``top_up=True`` keeps the machine at least that busy without adding to a
load that is already there: before each spell a process counts the
processes running or waiting for a core (``/proc/<pid>/status``), and rests
instead of spinning when the others already reach the target.  Under
pytest-xdist the suite's other workers are most of the load; the spells
fill in when they pause or finish.
"""
from __future__ import annotations

import multiprocessing as mp
import os
import random
import time

BUSY_S = (0.1, 1.5)
REST_S = (0.05, 0.8)


def runnable() -> int | None:
    """Processes running or waiting for a core now, of those this process can
    see (a container's own, not its host's); None where unknown."""
    from grader.sandbox.confine import proc_status
    try:
        pids = [name for name in os.listdir("/proc") if name.isdigit()]
    except OSError:
        return None
    states = (proc_status(pid) for pid in pids)     # None: gone meanwhile
    return sum(1 for fields in states if fields and fields.get("State", "").strip()[:1] == "R")


def _enough_without_me(target: int | None) -> bool:
    """Do other processes keep ``target`` runnable already (top-up only)?"""
    if target is None:
        return False
    now = runnable()
    return now is not None and now - 1 >= target     # less this process


def _spells(stop, seed: int, target: int | None) -> None:
    rng = random.Random(seed)
    x = 0
    while not stop.is_set():
        if _enough_without_me(target):
            stop.wait(rng.uniform(*REST_S))
            continue
        until = time.perf_counter() + rng.uniform(*BUSY_S)
        while time.perf_counter() < until:     # CPU-bound: plain Python arithmetic
            x = (x * 1103515245 + 12345) & 0xFFFFFFFF
        stop.wait(rng.uniform(*REST_S))


class Spells:
    """``with Spells(per_core=3):`` runs ``per_core`` x cores busy processes.
    With ``top_up=True`` the machine is kept at least as busy as they alone
    would keep it beside one grading: a process spins only while fewer than
    that many other processes, and one more, are runnable."""

    def __init__(self, per_core: int = 3, seed: int = 0, top_up: bool = False):
        self.count = per_core * (os.cpu_count() or 1)
        self.target = self.count + 1 if top_up else None
        self.seed = seed
        self._ctx = mp.get_context("spawn")     # no copy of the caller's threads or torch
        self._stop = self._ctx.Event()
        self._procs: list = []

    def __enter__(self) -> "Spells":
        for i in range(self.count):
            p = self._ctx.Process(target=_spells, args=(self._stop, self.seed + i, self.target),
                                  daemon=True)
            p.start()
            self._procs.append(p)
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        for p in self._procs:
            p.join(timeout=5)
            if p.is_alive():
                p.kill()
                p.join(timeout=5)
        self._procs.clear()
