"""A class's grading: the reference's seconds per exercise, and submissions per minute.

1. ``attn-grade grade solutions`` (the hidden grading, all nine modules),
   timed from outside, with the seconds per exercise and per phase its JSON
   result gives (``extra_data.seconds``).
2. ``attn-grade batch --jobs 2`` over a class of copies of the reference
   solutions, ``--wrong K`` of them with one of ex02's mutants (so that the
   second grading for root causes runs: ex03 builds on ex02), timed from
   outside: submissions per minute.

A benchmark, not a test: the figures depend on the machine and its load
(printed with them, from ``os.getloadavg``).

    python benchmarks/bench_class.py [--students 4] [--wrong 1] [--jobs 2]
                                     [--skip-single] [--skip-batch]
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))


def _load() -> str:
    return "load average " + ", ".join(f"{x:.2f}" for x in os.getloadavg())


def single(root: Path) -> None:
    out = root / "reference.json"
    print(f"grade solutions (hidden, all modules); {_load()}")
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "grader.cli", "grade", "solutions",
                           "--format", "json", "--out", str(out)],
                          cwd=REPO, capture_output=True, text=True)
    wall = time.perf_counter() - start
    data = json.loads(out.read_text())
    seconds = data["extra_data"].get("seconds", {})
    print(f"  {wall:.1f} s from outside (exit {done.returncode}), {data['execution_time']:.1f} s "
          f"inside; score {data['score']:g}; {_load()}")
    for name, s in seconds.get("exercises", {}).items():
        print(f"    {name:22s} {s:6.1f} s")
    for name, s in seconds.get("phases", {}).items():
        print(f"    ({name}) {s:.1f} s")


def make_class(folder: Path, students: int, wrong: int) -> None:
    from tests.data.mutants.ex02_mha import MUTANTS
    mutant = next(m for m in MUTANTS if m.name == "softmax_over_queries")
    for i in range(students):
        dest = folder / f"student{i:03d}"
        dest.mkdir(parents=True)
        for path in (REPO / "solutions").glob("*.py"):
            shutil.copy(path, dest)
        if i < wrong:
            mha = dest / "ex02_mha.py"
            mha.write_text(mutant.apply(mha.read_text()))


def batch(root: Path, students: int, wrong: int, jobs: int) -> None:
    make_class(root / "class", students, wrong)
    cmd = [sys.executable, "-m", "grader.cli", "batch", str(root / "class"),
           "--out", str(root / "grades.csv"), "--jobs", str(jobs), "--force"]
    print(f"batch --jobs {jobs}: {students} submissions ({wrong} with a mistake in ex02); "
          f"{_load()}")
    start = time.perf_counter()
    done = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True)
    seconds = time.perf_counter() - start
    print(f"  {seconds:.1f} s (exit {done.returncode}) = "
          f"{students / seconds * 60:.2f} submissions/minute; {_load()}")
    if done.returncode not in (0, 1):
        print(done.stdout[-2000:], done.stderr[-2000:])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--students", type=int, default=4)
    parser.add_argument("--wrong", type=int, default=1,
                        help="how many of them carry a mistake in ex02")
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--skip-single", action="store_true")
    parser.add_argument("--skip-batch", action="store_true")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        if not args.skip_single:
            single(root)
        if not args.skip_batch:
            batch(root, args.students, min(args.wrong, args.students), args.jobs)


if __name__ == "__main__":
    main()
