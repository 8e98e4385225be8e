"""Seconds to grade the reference (all seven exercises, hidden suites) with
each worker under bubblewrap's namespaces against the older uid-only path.

Each grading is a fresh ``attn-grade grade`` process, as a batch run makes
them; the two isolations alternate so that load from elsewhere on the
machine hits both alike, and medians are reported.  Target: namespaces at
most 15 % slower.  A benchmark, not a test.

    python benchmarks/bench_isolation.py [--repeats 3] [-e ex01 ...]
    python benchmarks/bench_isolation.py --startup 20   # one worker's start, alone
"""
from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
MODES = ("strict", "fallback")


def grade_once(sub: Path, out: Path, isolation: str, only: list[str]) -> tuple[float, dict]:
    cmd = [sys.executable, "-m", "grader.cli", "grade", str(sub), "--format", "json",
           "--out", str(out), "--isolation", isolation]
    for ex in only:
        cmd += ["-e", ex]
    start = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO)
    seconds = time.perf_counter() - start
    if proc.returncode not in (0, 3):
        raise SystemExit(f"{isolation}: the grader failed: {proc.stderr[-2000:]}")
    return seconds, json.loads(out.read_text())


def startup(n: int) -> None:
    """Seconds from starting a worker to its first answer (import of ex02_mha,
    which imports PyTorch, and one call), then closing it: the per-worker cost
    of each isolation, measured in this process, alternating."""
    sys.path.insert(0, str(REPO))
    from grader.sandbox.launch import Launcher
    launchers = {"namespaces": Launcher.here("strict"), "fallback": Launcher.here("fallback")}
    times: dict[str, list[float]] = {"namespaces": [], "fallback": []}
    for i in range(n):
        for mode in (("namespaces", "fallback") if i % 2 == 0 else ("fallback", "namespaces")):
            start = time.perf_counter()
            worker = launchers[mode].worker(REPO / "solutions", "ex02_mha", call_timeout=10)
            try:
                worker.request(
                    {"op": "getattr", "name": "__name__"}, "reading its name")
            finally:
                worker.close()
            times[mode].append(time.perf_counter() - start)
    for mode, ts in times.items():
        print(f"{mode:<10} worker start to first answer and close: median "
              f"{statistics.median(ts):.2f} s (min {min(ts):.2f}, max {max(ts):.2f}, n={n})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--startup", type=int, default=0, metavar="N",
                        help="only time N worker starts with each isolation")
    parser.add_argument("-e", "--exercise", action="append", default=[],
                        help="only this exercise (repeatable) [default: all seven]")
    args = parser.parse_args()
    if args.startup:
        startup(args.startup)
        return
    times: dict[str, list[float]] = {m: [] for m in MODES}
    with tempfile.TemporaryDirectory() as tmp:
        sub = Path(tmp) / "reference"
        sub.mkdir()
        for path in (REPO / "solutions").glob("ex*.py"):
            shutil.copy(path, sub)
        for i in range(args.repeats):
            order = MODES if i % 2 == 0 else MODES[::-1]
            for mode in order:
                seconds, data = grade_once(sub, Path(tmp) / f"{mode}.json", mode,
                                           args.exercise)
                got = data["score"]
                most = sum(t["max_score"] for t in data["tests"])
                regrade = data.get("extra_data", {}).get("needs_regrade", 0)
                times[mode].append(seconds)
                print(f"run {i + 1} {mode:<8} {seconds:7.1f} s  {got:g}/{most:g} points, "
                      f"{regrade} needing a regrade, isolation "
                      f"{data.get('extra_data', {}).get('isolation')}", flush=True)
    med = {m: statistics.median(times[m]) for m in MODES}
    ratio = med["strict"] / med["fallback"]
    print(f"median: namespaces {med['strict']:.1f} s, uid-only fallback "
          f"{med['fallback']:.1f} s: {100 * (ratio - 1):+.1f} % "
          f"(target at most +15 %) over {args.repeats} runs each")


if __name__ == "__main__":
    main()
