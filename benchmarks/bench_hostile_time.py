"""How long the slowest hostile submission holds a grading, against its budgets.

The submission (the red team's): every module sleeps just under the import
time limit, and every call sleeps just under the call limit and then exits.
Before budgets, each test re-imported it (a crash was not a time-out, so the
four-time-out cut-off never came): about 6 hours for the hidden suite.  Now a
crash counts toward the cut-off, each exercise has a budget and the grading
another.  Grades it once with the command line, as an instructor would, and
prints the wall time, the exit status, and how its tests ended.

    python benchmarks/bench_hostile_time.py [--grading-budget 1800] [--import-limit 60]

With the defaults it takes about half an hour (it sleeps; it hardly uses a
core).  ``--import-limit`` and ``--grading-budget`` scale it down.
"""
from __future__ import annotations

import argparse
import collections
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--grading-budget", type=float, default=1800.0)
    parser.add_argument("--import-limit", type=float, default=60.0,
                        help="the grader's import time limit (its default is 60 s)")
    args = parser.parse_args()
    sys.path.insert(0, str(REPO))
    from grader.registry import EXERCISES
    from tests.test_budget import SLOW_CRASH as MODULE   # the test's submission, in full
    folder = Path(tempfile.mkdtemp(prefix="hostile-time-"))
    for name, ex in EXERCISES.items():
        (folder / f"{name}.py").write_text(MODULE.format(
            import_s=args.import_limit * 0.95, call_s=ex.call_timeout * 0.9))
    out = folder / "result.json"
    cmd = [str(Path(sys.executable).parent / "attn-grade"), "grade", str(folder),
           "--grading-budget", f"{args.grading_budget:g}", "--format", "json",
           "--out", str(out)]
    start = time.monotonic()
    proc = subprocess.run(cmd, capture_output=True, text=True)
    wall = time.monotonic() - start
    data = json.loads(out.read_text())
    endings = collections.Counter()
    for t in data["tests"]:
        text = t.get("output", "")
        key = ("crashed" if "exited with code 1" in text else
               "cut off after 4 failures" if "ran out of time or crashed" in text else
               "exercise budget spent" if "s time budget of" in text and "grading" not in text
               else "grading budget spent" if "this grading's time budget" in text else
               "timed out" if "did not finish within" in text else "other")
        endings[key] += 1
    print(f"wall {wall:.0f} s against a grading budget of {args.grading_budget:g} s; "
          f"exit status {proc.returncode}; score {data['score']}; {len(data['tests'])} tests")
    for key, n in endings.most_common():
        print(f"  {key:28s} {n}")


if __name__ == "__main__":
    main()
