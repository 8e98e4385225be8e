"""Exercise G's speed timing holds the GPU alone (``flash_speed.device_lock``).

A batch's ``--jobs`` slots share one GPU: two gradings timing at once would
each be timed against the other's load.  The order of what two processes
did is read from a log they append to (no clock is judged).
"""
from __future__ import annotations

import multiprocessing
import os
import time
from pathlib import Path

import pytest

from grader.reference import flash_speed
from tests.test_ex07_speed import CASE, Clock, FakeSide

GPU = "GPU-1234abcd-0000"


def _log(path: Path, line: str) -> None:
    with open(path, "a") as f:      # appends of one short line: whole, in order
        f.write(line + "\n")


def _wait_for(path: Path, line: str, limit_s: float = 60.0) -> None:
    """Until ``line`` is in the log (a bound only against a hang)."""
    end = time.monotonic() + limit_s
    while line not in (path.read_text().splitlines() if path.exists() else []):
        assert time.monotonic() < end, f"{line!r} never came: {path.read_text()!r}"
        time.sleep(0.01)


def _holder(folder, log, release):
    with flash_speed.device_lock(GPU, folder) as lock:
        _log(log, f"A in held={lock['held']}")
        while not os.path.exists(release):
            time.sleep(0.01)
        _log(log, "A out")


def _waiter(folder, log):
    _log(log, "B wants")
    with flash_speed.device_lock(GPU, folder, on_wait=lambda: _log(log, "B waits")) as lock:
        _log(log, f"B in waited={lock['waited_s'] > 0}")


def test_two_processes_never_hold_the_gpu_at_once(tmp_path):
    """B asks while A holds the GPU: B waits, and gets it only after A let go."""
    ctx = multiprocessing.get_context("fork")
    log, release = tmp_path / "log", tmp_path / "release"
    a = ctx.Process(target=_holder, args=(tmp_path, log, str(release)))
    a.start()
    _wait_for(log, "A in held=True")
    b = ctx.Process(target=_waiter, args=(tmp_path, log))
    b.start()
    _wait_for(log, "B waits")          # B found it held
    release.touch()
    for p in (a, b):
        p.join(60)
        assert p.exitcode == 0
    assert log.read_text().splitlines() == \
        ["A in held=True", "B wants", "B waits", "A out", "B in waited=True"]


def test_another_device_and_the_cpu_do_not_wait(tmp_path):
    with flash_speed.device_lock(GPU, tmp_path) as first:
        with flash_speed.device_lock("GPU-other", tmp_path) as other:
            assert first["held"] and other["held"] and other["waited_s"] == 0
        with flash_speed.device_lock("", tmp_path) as cpu:
            assert cpu == {"held": False, "file": "", "waited_s": 0.0}


def test_a_gpu_held_too_long_is_a_regrade(tmp_path):
    """Past ``wait_s`` (a clock that moves 100 s a look), the timing is not
    made: a grader fault, said as one sentence (a regrade)."""
    ticks = iter(range(0, 10_000, 100))
    with flash_speed.device_lock(GPU, tmp_path):
        with pytest.raises(RuntimeError, match="over 150 s.*needs a regrade"):
            with flash_speed.device_lock(GPU, tmp_path, wait_s=150.0,
                                         clock=lambda: float(next(ticks))):
                pass


class _OnGpu(FakeSide):
    """The trusted side on a GPU: its warm-up names the device."""

    def probe(self, name, *args, **kwargs):
        answer = super().probe(name, *args, **kwargs)
        if name == "ex07_flash_attention.speed_prepare":
            answer["device_id"] = GPU
        return answer


def test_each_timed_case_holds_the_lock_and_says_so(tmp_path):
    """``measure`` holds the device's lock through each case's timing and
    records it; while another holds it, the timing does not start."""
    clock = Clock()
    seen = []

    class Watching(_OnGpu):
        def probe(self, name, *args, **kwargs):
            if name == "ex07_flash_attention.speed_run":    # is the GPU locked now?
                seen.append(_locked(tmp_path))
            return super().probe(name, *args, **kwargs)
    result = flash_speed.measure(Watching(clock, 0.004), _OnGpu(clock, 0.002), [CASE, CASE],
                                 rounds=2, clock=clock, lock_dir=tmp_path)
    assert seen and all(seen)
    assert result["lock"]["held"] and [c["lock"]["held"] for c in result["cases"]] == [True] * 2
    assert not _locked(tmp_path)
    # the CPU (no device id): nothing locked, and the result says so
    result = flash_speed.measure(FakeSide(clock, 0.004), FakeSide(clock, 0.002), [CASE],
                                 rounds=2, clock=clock, lock_dir=tmp_path)
    assert result["lock"] == {"held": False, "waited_s": 0.0}


def _locked(folder: Path) -> bool:
    """Does another open file hold the GPU's lock?"""
    import fcntl
    fd = os.open(folder / f"gpu-{GPU}.lock", os.O_RDWR | os.O_CREAT)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return False
    except BlockingIOError:
        return True
    finally:
        os.close(fd)
