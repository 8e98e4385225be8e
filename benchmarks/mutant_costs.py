"""What each mutant of tests/data/mutants costs its exercise, and whether the public check fails it.

Grades the mutant corpus in rounds, as ``tests/test_mutants.py`` does (one
mutant of each group of linked exercises per submission, the rest the
solutions), with each exercise's whole suites: no ``only`` selection, so
that a mutant's share is of the exercise's full maximum.  For each mutant it
prints the points its exercise lost and their share of the maximum (the
rule, docs/CURRICULUM_NOTES.md "What a mistake costs": one root cause is
charged once), the tests that failed and those that kept their points as
followers of a root cause, and whether the exercise's public tests (run in
the same grading, as `attn-grade check` runs them) failed.  Then the
distribution of the shares and the public check's catch rate.

A benchmark, not a test: the whole corpus is a few hundred gradings' worth
of work (tens of minutes on 2 cores); ``-e`` takes some exercises.

    python benchmarks/mutant_costs.py [-e D -e E] [--json out.json]
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from grader.core import Options, grade  # noqa: E402
from grader.registry import EXERCISES, by_letter  # noqa: E402
from tests.data.mutants import all_mutants  # noqa: E402
from tests.test_mutants import _rounds  # noqa: E402

SOLUTIONS = REPO / "solutions"


def _exercise(text: str) -> str:
    found = by_letter(text) if len(text) == 1 else None
    names = [found.name] if found else [n for n in EXERCISES if text in (n, n.split("_")[0])]
    if not names:
        raise SystemExit(f"no exercise {text!r}")
    return names[0]


def _grade_round(round_, cache: Path):
    with tempfile.TemporaryDirectory() as tmp:
        sub = Path(tmp) / "submission"
        sub.mkdir()
        for path in SOLUTIONS.glob("*.py"):
            (sub / path.name).write_text(path.read_text())
        for m in round_:
            (sub / f"{m.file}.py").write_text(m.apply((SOLUTIONS / f"{m.file}.py").read_text()))
        return grade(sub, Options(suite="hidden", exercises=sorted({m.file for m in round_}),
                                  check_cache=cache))


def _row(m, report) -> dict:
    got, total = report.exercise_scores()[m.file]
    tests = [t for t in report.tests if t.exercise == m.file]
    failed = [t for t in tests if t.status == "failed"]
    return {"exercise": m.file, "mutant": m.name, "lost": total - got, "max": total,
            "share": (total - got) / total if total else 0.0,
            "failed": [t.name for t in failed],
            "kept": [t.name for t in tests if t.kept],
            "public_failed": any(not t.hidden for t in failed),
            # where the grader says a failure follows from: a correct function
            # named here is a wrong attribution
            "follows": sorted({line.split(":")[0] for t in tests for line in t.output.splitlines()
                               if line.startswith("This follows from")}),
            "regrade": sum(t.status == "needs_regrade" for t in tests),
            "errors": list(report.errors)}


def _summary(rows: list[dict]) -> None:
    print("\nshare of its exercise a mutant lost (one root cause charged once):")
    for lo, hi in ((0, 0), (0, 0.05), (0.05, 0.10), (0.10, 0.20), (0.20, 0.35), (0.35, 1.01)):
        n = sum(lo < r["share"] <= hi or (hi == 0 and r["share"] == 0) for r in rows)
        label = "0 (kept full marks)" if hi == 0 else f"({lo:.0%}, {min(hi, 1):.0%}]"
        print(f"  {label:<22} {n:4d}  {'#' * n}")
    for exercise in dict.fromkeys(r["exercise"] for r in rows):
        mine = [r for r in rows if r["exercise"] == exercise]
        shares = [r["share"] for r in mine]
        worst = max(mine, key=lambda r: r["share"])
        print(f"  {exercise:<22} {len(mine):3d} mutants: median {statistics.median(shares):.1%}"
              f", max {worst['share']:.1%} ({worst['mutant']}, {worst['lost']:g}/"
              f"{worst['max']:g} points, {len(worst['failed'])} tests failed)")
    caught = sum(r["public_failed"] for r in rows)
    print(f"\npublic check: fails {caught} of {len(rows)} mutants ({caught / len(rows):.1%}); "
          "missed: " + ", ".join(f"{r['exercise']}:{r['mutant']}" for r in rows
                                 if not r["public_failed"]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-e", "--exercise", action="append", default=[], type=_exercise)
    parser.add_argument("--json", type=Path, default=None, help="also write the rows here")
    args = parser.parse_args()
    mutants = [m for m in all_mutants() if not args.exercise or m.file in args.exercise]
    rows = []
    with tempfile.TemporaryDirectory() as cache:
        for i, round_ in enumerate(_rounds(mutants), start=1):
            start = time.perf_counter()
            report = _grade_round(round_, Path(cache))
            for m in round_:
                row = _row(m, report)
                rows.append(row)
                print(f"{row['exercise']:<22} {row['mutant']:<40} lost {row['lost']:>4g}/"
                      f"{row['max']:<4g} {row['share']:6.1%}  failed {len(row['failed']):2d}"
                      f"  kept {len(row['kept']):2d}  public "
                      f"{'FAIL' if row['public_failed'] else 'pass'}"
                      + (f"  regrade {row['regrade']}" if row["regrade"] else "")
                      + "".join(f"\n    {line}" for line in row["follows"]), flush=True)
            print(f"  (round {i}: {time.perf_counter() - start:.1f} s)", file=sys.stderr)
    _summary(rows)
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
