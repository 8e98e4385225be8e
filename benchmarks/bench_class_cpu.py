"""Processor seconds of a grading, summed over every process of its tree, and a class's throughput.

A grading's work is spread over processes that ``getrusage`` of the command
does not see: its workers run under bubblewrap in PID namespaces of their
own and are forked by the fork server, which is killed, not waited for.  So
``TreeCpu`` samples ``/proc/<pid>/stat`` (utime + stime) of every process
below the command (bubblewrap's children and the forked workers included:
the host's /proc shows them all) every 20 ms until they exit, and sums each
process's last sample.  A process that lives less than a sample's interval
is missed, and up to one interval of each process's end is: the sum is a
slight undercount.  The workers' cgroups here are memory cgroups (v1),
without ``cpu.stat``, so they are not read.  ``rusage`` of the command's
reaped children is printed beside it: what the kernel could hand back.

Figures, each from outside (``python -m grader.cli``), for each tree given
(``--before``: another checkout, e.g. ``git worktree add /tmp/before <commit>``,
run the same way on the same machine, in the same run):

1. ``grade solutions`` (the hidden grading of the reference, all modules),
   and again with a compile cache an earlier grading filled (``--compile-cache``,
   where the tree has it: a class's batch shares one);
2. ``batch --jobs 1`` of two independent correct submissions
   (``tests/data/independent/plain``): the processor seconds of the second one,
   graded after the first in the same batch (what the tree had used when the
   second's result was written, less what it had when the first's was);
3. ``batch --jobs 2`` of a class of ``--students`` copies of the reference:
   submissions per minute and processor seconds per submission.

A benchmark, not a test: the figures depend on the machine and its load,
printed with them (``/proc/loadavg``).  Never an assertion on time.

    python benchmarks/bench_class_cpu.py [--before /tmp/before] [--students 4]
                                        [--exercise ex01 ...] [--skip-single]
"""
from __future__ import annotations

import argparse
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
TICK = os.sysconf("SC_CLK_TCK")
INTERVAL = 0.02


def _load() -> str:
    return "loadavg " + " ".join(Path("/proc/loadavg").read_text().split()[:3])


def _children(pid: int) -> list[int]:
    out = []
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return out
    for tid in tasks:
        try:
            with open(f"/proc/{pid}/task/{tid}/children") as f:
                out += [int(c) for c in f.read().split()]
        except (OSError, ValueError):
            continue
    return out


def _below(pid: int) -> list[int]:
    out, todo = [], [pid]
    while todo:
        for child in _children(todo.pop()):
            if child not in out:
                out.append(child)
                todo.append(child)
    return out


def _cpu(pid: int) -> tuple[str, float] | None:
    """(a key that names this process, not a later one of its pid; its utime +
    stime in seconds)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            text = f.read()
    except OSError:
        return None
    fields = text[text.rindex(")") + 2:].split()
    # fields[0] is the state (stat's 3rd field): utime, stime are the 14th, 15th.
    utime, stime, start = int(fields[11]), int(fields[12]), fields[19]
    return f"{pid}:{start}", (utime + stime) / TICK


class TreeCpu:
    """Processor seconds of ``pid`` and of every process that ever ran below it,
    sampled until it exits (see the module's text for what it misses)."""

    def __init__(self, pid: int):
        self.pid = pid
        self.last: dict[str, float] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _sample(self) -> None:
        for pid in [self.pid, *_below(self.pid)]:
            got = _cpu(pid)
            if got is not None:
                with self._lock:
                    self.last[got[0]] = max(got[1], self.last.get(got[0], 0.0))

    def _run(self) -> None:
        while not self._stop.is_set():
            self._sample()
            time.sleep(INTERVAL)

    def total(self) -> float:
        with self._lock:
            return sum(self.last.values())

    def processes(self) -> int:
        with self._lock:
            return len(self.last)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()


def _run(repo: Path, args: list[str], on_poll=None) -> tuple[float, float, float, int, int]:
    """``python -m grader.cli ARGS`` in ``repo``: (wall s, tree cpu s, rusage of
    reaped children cpu s, processes seen, exit status).  ``on_poll(tree)``
    runs every 20 ms while it runs."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    env = {**os.environ, "PYTHONPATH": str(repo)}
    start = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-m", "grader.cli", *args], cwd=repo, env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    tree = TreeCpu(proc.pid)
    while proc.poll() is None:
        if on_poll is not None:
            on_poll(tree)
        time.sleep(INTERVAL)
    wall = time.perf_counter() - start
    tree.stop()
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    reaped = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    if proc.returncode not in (0, 1, 3):
        print(f"    exit {proc.returncode}: {proc.stderr.read()[-1500:]}")
    return wall, tree.total(), reaped, tree.processes(), proc.returncode


def _only(exercises: list[str]) -> list[str]:
    return [w for e in exercises for w in ("-e", e)]


def single(name: str, repo: Path, root: Path, exercises: list[str]) -> None:
    out = root / f"{name}-reference.json"
    wall, cpu, reaped, n, code = _run(repo, ["grade", str(repo / "solutions"), "--format",
                                             "json", "--out", str(out), *_only(exercises)])
    print(f"  [{name}] grade solutions: {wall:6.1f} s wall, {cpu:6.1f} cpu-s over {n} "
          f"processes (rusage of reaped children {reaped:.1f} cpu-s), exit {code}; {_load()}")


def single_warm(name: str, repo: Path, root: Path, exercises: list[str]) -> None:
    """``grade solutions`` with a compile cache the same grading filled just
    before (``--compile-cache``: a class's, or a grader's kept between runs),
    where the tree has one."""
    if not (repo / "grader" / "reference" / "compile_cache.py").is_file():
        print(f"  [{name}] grade solutions, warm compile cache: this tree has no --compile-cache")
        return
    cache = root / f"{name}-compile-cache"
    args = ["grade", str(repo / "solutions"), "--format", "json", "--compile-cache", str(cache),
            *_only(exercises)]
    _run(repo, args + ["--out", str(root / f"{name}-cold.json")])
    wall, cpu, reaped, n, code = _run(repo, args + ["--out", str(root / f"{name}-warm.json")])
    print(f"  [{name}] grade solutions, warm compile cache: {wall:6.1f} s wall, {cpu:6.1f} "
          f"cpu-s over {n} processes, exit {code}; {_load()}")


def second_in_batch(name: str, repo: Path, root: Path, exercises: list[str]) -> None:
    folder = root / f"{name}-pair"
    for who in ("a_first", "b_second"):
        shutil.copytree(REPO / "tests" / "data" / "independent" / "plain", folder / who)
    results = root / f"{name}-pair-results"
    done: dict[str, float] = {}     # result written -> the tree's cpu-s then

    def poll(tree: TreeCpu) -> None:
        for who in ("a_first", "b_second"):
            if who not in done and (results / f"{who}.json").exists():
                done[who] = tree.total()
    wall, cpu, _, n, code = _run(repo, ["batch", str(folder), "--jobs", "1", "--force",
                                        "--out", str(root / f"{name}-pair.csv"),
                                        "--results", str(results), *_only(exercises)], poll)
    first, second = done.get("a_first", float("nan")), done.get("b_second", float("nan"))
    # The batch's own close (its CSV, summary, histogram) comes after the second.
    print(f"  [{name}] batch --jobs 1 of two independent correct submissions: {wall:6.1f} s "
          f"wall, {cpu:6.1f} cpu-s in all; until the first's result {first:.1f} cpu-s, the "
          f"second's grading {second - first:.1f} cpu-s, the batch's close "
          f"{cpu - second:.1f} cpu-s; exit {code}; {_load()}")


def throughput(name: str, repo: Path, root: Path, students: int, exercises: list[str]) -> None:
    folder = root / f"{name}-class"
    for i in range(students):
        dest = folder / f"student{i:03d}"
        dest.mkdir(parents=True)
        for path in (REPO / "solutions").glob("*.py"):
            shutil.copy(path, dest)
    wall, cpu, _, n, code = _run(repo, ["batch", str(folder), "--jobs", "2", "--force",
                                        "--out", str(root / f"{name}-class.csv"),
                                        *_only(exercises)])
    print(f"  [{name}] batch --jobs 2 of {students} reference copies: {wall:6.1f} s wall = "
          f"{students / wall * 60:.2f} submissions/minute; {cpu:6.1f} cpu-s = "
          f"{cpu / students:.1f} cpu-s per submission over {n} processes; exit {code}; "
          f"{_load()}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", type=Path, default=None,
                        help="another checkout to measure the same way (run first)")
    parser.add_argument("--students", type=int, default=4)
    parser.add_argument("--exercise", "-e", action="append", default=[],
                        help="only these exercises (grade's -e); default: all")
    parser.add_argument("--skip-single", action="store_true")
    parser.add_argument("--skip-pair", action="store_true")
    parser.add_argument("--skip-class", action="store_true")
    args = parser.parse_args()
    trees = ([("before", args.before.resolve())] if args.before else []) + [("this", REPO)]
    print(f"{os.cpu_count()} cores; {_load()}; exercises: "
          f"{', '.join(args.exercise) or 'all'}")
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        for step, skip in ((single, args.skip_single), (single_warm, args.skip_single),
                           (second_in_batch, args.skip_pair)):
            if not skip:
                for name, repo in trees:
                    step(name, repo, root, args.exercise)
        if not args.skip_class:
            for name, repo in trees:
                throughput(name, repo, root, args.students, args.exercise)


if __name__ == "__main__":
    main()
