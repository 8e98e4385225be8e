"""Seconds to grade one submission with the hidden A-C suites, worker start included.

Runs ``attn-grade grade solutions -e ex01 -e ex02 -e ex03`` as a fresh
process several times and prints each wall time and the median.  A
benchmark, not a test: the target is under 10 s on a 2-core machine.

    python benchmarks/bench_grade_a_c.py [--runs 5]
"""
from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    cmd = [sys.executable, "-m", "grader.cli", "grade", str(REPO / "solutions"),
           "-e", "ex01", "-e", "ex02", "-e", "ex03", "--format", "json"]
    times = []
    for i in range(args.runs):
        start = time.perf_counter()
        proc = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO)
        times.append(time.perf_counter() - start)
        if proc.returncode:
            sys.exit(f"grading failed:\n{proc.stderr}")
        score = json.loads(proc.stdout)["score"]
        print(f"run {i + 1}: {times[-1]:.2f} s  ({score:g} points)")
    print(f"median: {statistics.median(times):.2f} s over {args.runs} runs "
          f"(target: under 10 s)")


if __name__ == "__main__":
    main()
