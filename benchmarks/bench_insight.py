"""What the class-insight passes add to grading a class of 200 on 2 cores.

Grades a few distinct submissions for real (the solutions and mutants of
them, every exercise, the hidden suites, one at a time) to measure seconds
per submission, then makes a class of 200 from copies of the solutions, the
independent submissions and the mutants, and times the passes ``batch``
adds: the gradebook's recording, the mistakes table, the similarity pass
(``grader.classroom.similarity``) and every view with the class report
(``grader.classroom.views.write_all``), and the report's size on disk.  The class's
grading time is estimated as seconds per submission * 200 / 2 (``--jobs 2``
on 2 cores).  A benchmark, not a test.

    python benchmarks/bench_insight.py [--students 200] [--graded 4]
"""
from __future__ import annotations

import argparse
import importlib
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from grader.classroom import similarity, views  # noqa: E402
from grader.classroom.batch import Submission  # noqa: E402
from grader.classroom.gradebook import Gradebook  # noqa: E402
from grader.registry import EXERCISES  # noqa: E402


def variants(exercise: str) -> list[str]:
    base = [(REPO / "solutions" / f"{exercise}.py").read_text()]
    base += [p.read_text() for p in sorted((REPO / "tests" / "data" / "independent").glob(
        f"*/{exercise}.py"))]
    try:
        mutants = importlib.import_module(f"tests.data.mutants.{exercise}").MUTANTS
    except Exception:   # noqa: BLE001 - a mutant module that does not load: no mutants
        mutants = []
    return base + [m.apply(base[0]) for m in mutants if base[0].count(m.find) == 1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--students", type=int, default=200)
    parser.add_argument("--graded", type=int, default=4, help="submissions graded for real")
    parser.add_argument("--no-similarity", action="store_true",
                        help="leave the similarity pass out (its pages are capped: a class of "
                             "hundreds costs it time, not report size)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        cls = root / "class"
        kinds = {ex: variants(ex) for ex in EXERCISES}
        for i in range(args.students):
            dest = cls / f"s{i:03d}"
            dest.mkdir(parents=True)
            for ex, texts in kinds.items():
                (dest / f"{ex}.py").write_text(texts[(i * 7 + len(ex)) % len(texts)])
        results = root / "results"
        results.mkdir()
        graded, seconds = [], 0.0
        for i in range(args.graded):
            out = results / f"s{i:03d}.json"
            start = time.perf_counter()
            subprocess.run([sys.executable, "-m", "grader.cli", "grade", str(cls / f"s{i:03d}"),
                            "--format", "json", "--out", str(out)], cwd=REPO,
                           capture_output=True)
            seconds += time.perf_counter() - start
            graded.append(json.loads(out.read_text()))
        per_sub = seconds / args.graded
        class_s = per_sub * args.students / 2
        loaded = [(f"s{i:03d}", f"s{i:03d}", graded[i % len(graded)])
                  for i in range(args.students)]
        subs = [Submission(f"s{i:03d}", cls / f"s{i:03d}") for i in range(args.students)]
        book = Gradebook(root / "grades.sqlite")
        start = time.perf_counter()
        for label, key, data in loaded:
            book.record_student(label, result_key=key)
            book.record_grading(label, data)
        t_record = time.perf_counter() - start
        start = time.perf_counter()
        rows = views.class_mistakes(book.results())
        t_mistakes = time.perf_counter() - start
        start = time.perf_counter()
        pairs = [] if args.no_similarity else similarity.class_pairs(subs)
        book.set_pairs(pairs)
        t_similarity = time.perf_counter() - start
        start = time.perf_counter()
        views.write_all(book, root / "grades.csv", results_dir=results)
        t_report = time.perf_counter() - start
        report = root / "report"
        size = sum(p.stat().st_size for p in report.rglob("*") if p.is_file())
        parts = {"students/": sum(p.stat().st_size for p in (report / "students").glob("*")),
                 "pair pages": sum(p.stat().st_size for p in report.glob("pair-*.html")),
                 "similar.html": sum(p.stat().st_size for p in report.glob("similar.html")),
                 "index.html": (report / "index.html").stat().st_size}
        book.close()
    added = t_record + t_mistakes + t_similarity + t_report
    print(f"grading: {per_sub:.1f} s per submission (mean of {args.graded}); a class of "
          f"{args.students} with --jobs 2: about {class_s:.0f} s")
    print(f"gradebook {t_record:.2f} s, mistakes table {t_mistakes:.2f} s, similarity "
          f"{t_similarity:.1f} s ({len(pairs)} pairs listed), every view {t_report:.1f} s; "
          f"report/ {size / 1e6:.1f} MB (" + ", ".join(f"{k} {v / 1e6:.2f} MB"
                                                       for k, v in parts.items()) + ")")
    print(f"added: {added:.1f} s = {100 * added / class_s:.1f} % of the class's grading time")


if __name__ == "__main__":
    main()
