"""False verdicts of the timing grades (ex04-ex06) on a heavily loaded machine.

Grades the reference through the ex04-ex06 hidden suites ``--runs`` times in
each setting, and counts every test that did not pass (the reference
deserves full marks: any other verdict is false):

* ``spells``: one grading after another while ``--per-core`` CPU-bound
  processes per core work in random spells (``tests/loadgen.py``; started
  and stopped here);
* ``batch``: ``attn-grade batch --jobs 4`` over ``--runs`` copies of the
  reference, in one go;
* ``mutants`` (``--mutants``): every known mistake of ex04-ex06
  (``tests/data/mutants``) graded under the spells; each must lose points.

Prints counts, wall times and false verdicts per 100 gradings, split into
failures (points lost) and "not graded" (needs a regrade).  A benchmark, not
a test: it loads the machine for minutes.

    python benchmarks/bench_load.py [--runs 20] [--settings spells,batch] [--mutants]
"""
from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from grader.core import Options, grade  # noqa: E402
from tests.loadgen import Spells  # noqa: E402

DF = ["ex04_quadratic", "ex05_decode_prefill", "ex06_gqa_intensity"]


def reference_copy(dest: Path) -> Path:
    dest.mkdir(parents=True)
    for name in DF:
        shutil.copy(REPO / "solutions" / f"{name}.py", dest)
    return dest


def verdicts(tests) -> tuple[list, list]:
    """(failed, not graded) among a grading's tests (name, output) of the
    reference; a GPU-only test that says it needs a GPU is neither."""
    failed, ungraded = [], []
    for t in tests:
        status, output = t["status"], t.get("output", "")
        if status in ("passed", "pass"):
            continue
        if "needs a GPU" in output:
            continue
        (failed if status in ("failed", "fail") else ungraded).append((t["name"], output[:200]))
    return failed, ungraded


def report(setting: str, runs: int, seconds: float, failed: list, ungraded: list,
           full: int) -> None:
    print(f"{setting}: {full}/{runs} gradings with full marks in {seconds:.0f} s "
          f"({seconds / max(runs, 1):.1f} s each)")
    per100 = 100.0 / max(runs, 1)
    print(f"  false verdicts per 100 gradings: {len(failed) * per100:.1f} failed, "
          f"{len(ungraded) * per100:.1f} not graded")
    for name, output in (failed + ungraded)[:10]:
        print(f"    {name}: {output.splitlines()[0] if output else ''}")


def run_spells(root: Path, runs: int, per_core: int) -> None:
    sub = reference_copy(root / "ref")
    failed, ungraded, full = [], [], 0
    start = time.perf_counter()
    with Spells(per_core=per_core):
        for _ in range(runs):
            rep = grade(sub, Options(suite="hidden", exercises=DF))
            tests = [{"name": t.full_name, "status": t.status, "output": t.output}
                     for t in rep.tests]
            f, u = verdicts(tests)
            failed += f
            ungraded += u
            full += not f and not u and not rep.errors and rep.score == rep.max_score
    report(f"spells ({per_core} busy processes per core)", runs, time.perf_counter() - start,
           failed, ungraded, full)


def run_batch(root: Path, runs: int, jobs: int) -> None:
    for i in range(runs):
        reference_copy(root / "class" / f"student{i:03d}")
    cmd = [sys.executable, "-m", "grader.cli", "batch", str(root / "class"),
           "--out", str(root / "grades.csv"), "--jobs", str(jobs), "--force",
           *[a for e in DF for a in ("-e", e)]]
    start = time.perf_counter()
    subprocess.run(cmd, check=True, capture_output=True, cwd=REPO)
    seconds = time.perf_counter() - start
    failed, ungraded, full = [], [], 0
    for path in sorted((root / "results").glob("*.json")):
        result = json.loads(path.read_text())
        tests = [{"name": t["name"], "status": t.get("status", ""),
                  "output": t.get("output", "")} for t in result.get("tests", [])]
        f, u = verdicts(tests)
        failed += f
        ungraded += u
        full += not f and not u and result.get("score") == sum(
            t.get("max_score", 0) for t in result.get("tests", []))
    report(f"batch --jobs {jobs}", runs, seconds, failed, ungraded, full)


def run_mutants(root: Path, per_core: int, only_timing: bool) -> None:
    from tests.data.mutants import all_mutants

    mutants = [m for m in all_mutants() if m.file in DF and (not only_timing or not m.only
                                                                or "synchron" in m.only)]
    lost, kept = 0, []
    start = time.perf_counter()
    with Spells(per_core=per_core):
        for m in mutants:
            sub = root / "mutants" / f"{m.file}-{m.name}"
            reference_copy(sub)
            path = sub / f"{m.file}.py"
            path.write_text(m.apply(path.read_text()))
            rep = grade(sub, Options(suite="hidden", exercises=[m.file],
                                     keyword=m.only or None))
            got, total = rep.exercise_scores()[m.file]
            if got < total:
                lost += 1
            else:
                kept.append(f"{m.file}:{m.name} ({got}/{total})")
    print(f"mutants under spells: {lost}/{len(mutants)} lost points in "
          f"{time.perf_counter() - start:.0f} s" + (f"; KEPT FULL MARKS: {kept}" if kept else ""))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=20, help="gradings per setting")
    parser.add_argument("--settings", default="spells,batch",
                        help="comma-separated: spells, batch")
    parser.add_argument("--per-core", type=int, default=3,
                        help="busy processes per core in the spells setting")
    parser.add_argument("--jobs", type=int, default=4, help="--jobs of the batch setting")
    parser.add_argument("--mutants", action="store_true",
                        help="also grade every ex04-ex06 mutant under the spells")
    parser.add_argument("--timing-mutants", action="store_true",
                        help="only the mutants that need a measurement (faster)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-load-") as tmp:
        root = Path(tmp)
        for setting in [s.strip() for s in args.settings.split(",") if s.strip()]:
            if setting == "spells":
                run_spells(root, args.runs, args.per_core)
            elif setting == "batch":
                run_batch(root, args.runs, args.jobs)
            else:
                parser.error(f"unknown setting {setting!r}: use spells or batch")
        if args.mutants or args.timing_mutants:
            run_mutants(root, args.per_core, args.timing_mutants)


if __name__ == "__main__":
    main()
