"""Seconds to grade the reference with the hidden D-F suites (ex04-ex06).

Grades a copy of ``solutions/`` (so that the saved log-log plot does not
land in the repository) several times, each exercise on its own and then
all three together as ``attn-grade grade`` would, and prints the times, the
scores and the machine's measured peaks.  A benchmark, not a test: the
target is under 60 s for all three on a busy 2-core machine, full marks
every time.

    python benchmarks/bench_suites_d_f.py [--runs 5]
"""
from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
DF = ["ex04_quadratic", "ex05_decode_prefill", "ex06_gqa_intensity"]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    sys.path.insert(0, str(REPO))
    from grader.core import Options, grade

    with tempfile.TemporaryDirectory() as tmp:
        sub = Path(tmp)
        for name in DF:
            shutil.copy(REPO / "solutions" / f"{name}.py", sub / f"{name}.py")
        per_ex = {name: grade(sub, Options(exercises=[name])).seconds for name in DF}
        print("one exercise at a time: " + ", ".join(f"{n} {s:.1f} s"
                                                      for n, s in per_ex.items()))
        totals, full = [], 0
        for i in range(args.runs):
            report = grade(sub, Options(exercises=DF))
            totals.append(report.seconds)
            ok = report.score == report.max_score and not report.errors
            full += ok
            not_run = sum(t.status == "not_run" for t in report.tests)
            print(f"run {i + 1}: {report.seconds:.1f} s, {report.score:g}/{report.max_score:g}"
                  f"{'' if ok else '  <-- not full marks'}"
                  f"{f', {not_run} not run' if not_run else ''}")
            if i == 0:
                for key, value in report.machine.items():
                    print(f"  {key}: {value}")
    print(f"median {statistics.median(totals):.1f} s, max {max(totals):.1f} s over "
          f"{args.runs} runs; full marks {full}/{args.runs} (target: under 60 s, every run)")
    return 0 if full == args.runs else 1


if __name__ == "__main__":
    sys.exit(main())
