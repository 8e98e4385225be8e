"""Submissions per minute of ``attn-grade batch`` with --jobs 1 and --jobs 2.

Makes a class of copies of the reference solutions in a temporary folder
and grades it twice (``--force`` the second time).  By default only the A-C
exercises are graded; ``--all`` grades every exercise.  A benchmark, not a
test.

    python benchmarks/bench_batch.py [--students 6] [--all]
"""
from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--students", type=int, default=6)
    parser.add_argument("--all", action="store_true", help="grade every exercise")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        for i in range(args.students):
            dest = root / "class" / f"student{i:03d}"
            dest.mkdir(parents=True)
            for path in (REPO / "solutions").glob("ex*.py"):
                shutil.copy(path, dest)
        only = [] if args.all else ["-e", "ex01", "-e", "ex02", "-e", "ex03"]
        for jobs in (1, 2):
            cmd = [sys.executable, "-m", "grader.cli", "batch", str(root / "class"),
                   "--out", str(root / "grades.csv"), "--jobs", str(jobs), "--force", *only]
            start = time.perf_counter()
            subprocess.run(cmd, check=True, capture_output=True, cwd=REPO)
            seconds = time.perf_counter() - start
            print(f"--jobs {jobs}: {args.students} submissions in {seconds:.1f} s = "
                  f"{args.students / seconds * 60:.1f} submissions/minute")


if __name__ == "__main__":
    main()
