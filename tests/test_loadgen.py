"""The load generator the timing tests rely on does what it says."""
from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from tests.loadgen import Spells, runnable

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")


def _cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat", "rb") as f:
        fields = f.read().rpartition(b")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")   # utime + stime


def test_runnable_counts_busy_processes():
    seen = []
    with Spells(per_core=1):          # always spinning or resting briefly
        time.sleep(1.0)
        for _ in range(20):
            seen.append(runnable())
            time.sleep(0.05)
    assert max(seen) >= 2, seen


def test_top_up_rests_while_the_machine_is_already_that_busy():
    """Spells that would add to a load already there rest instead."""
    spin = [sys.executable, "-c", "while True: pass"]
    busy = [subprocess.Popen(spin) for _ in range((os.cpu_count() or 1) + 2)]  # > the target
    try:
        time.sleep(0.3)
        with Spells(per_core=1, top_up=True) as top:
            start = time.monotonic()
            time.sleep(2.0)
            used = [_cpu_seconds(p.pid) for p in top._procs]
            wall = time.monotonic() - start
    finally:
        for p in busy:
            p.kill()
            p.wait()
    assert max(used) < 0.25 * wall, (used, wall)


def test_top_up_spins_unless_others_reach_the_target(monkeypatch):
    import tests.loadgen as loadgen
    for now, target, rests in ((1, 3, False), (3, 3, False), (4, 3, True), (9, None, False)):
        monkeypatch.setattr(loadgen, "runnable", lambda: now)
        assert loadgen._enough_without_me(target) is rests, (now, target)
    monkeypatch.setattr(loadgen, "runnable", lambda: None)       # not Linux: spin
    assert loadgen._enough_without_me(3) is False
