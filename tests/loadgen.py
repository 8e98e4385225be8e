"""A busy machine on demand: CPU-bound processes working in random spells.

Used by the repeated-run test of the reference (``tests/test_ex04_06.py``)
and by ``benchmarks/bench_load.py``: the timing rules must hold while other
processes come and go, as on a shared grading machine.  Each process spins
for a random 0.1-1.5 s, rests for a random 0.05-0.8 s, and so on until the
context exits; the processes are started and stopped here, never left
behind.
"""
from __future__ import annotations

import multiprocessing as mp
import os
import random
import time

BUSY_S = (0.1, 1.5)
REST_S = (0.05, 0.8)


def _spells(stop, seed: int) -> None:
    rng = random.Random(seed)
    x = 0
    while not stop.is_set():
        until = time.perf_counter() + rng.uniform(*BUSY_S)
        while time.perf_counter() < until:     # CPU-bound: plain Python arithmetic
            x = (x * 1103515245 + 12345) & 0xFFFFFFFF
        stop.wait(rng.uniform(*REST_S))


class Spells:
    """``with Spells(per_core=3):`` runs ``per_core`` x cores busy processes."""

    def __init__(self, per_core: int = 3, seed: int = 0):
        self.count = per_core * (os.cpu_count() or 1)
        self.seed = seed
        self._ctx = mp.get_context("spawn")     # no copy of the caller's threads or torch
        self._stop = self._ctx.Event()
        self._procs: list = []

    def __enter__(self) -> "Spells":
        for i in range(self.count):
            p = self._ctx.Process(target=_spells, args=(self._stop, self.seed + i), daemon=True)
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
