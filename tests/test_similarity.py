"""Similar submissions: a planted copy is flagged, independent work is not."""
from __future__ import annotations

import csv
from pathlib import Path

import pytest
from click.testing import CliRunner

from grader.cli import main
from grader.registry import EXERCISES
from grader.rootcause import function_order
from grader.classroom.similarity import NOT_CODE, THRESHOLD, compare_exercise, stub_of
from tests.conftest import REPO, SOLUTIONS, copy_solutions
from tests.plant import disguise


# Written from the contract alone; the "_"-folders are kept corpora of another
# kind (adaptations of public code, some from the solutions' layout).
INDEPENDENT = sorted(p for p in (REPO / "tests" / "data" / "independent").iterdir()
                     if not p.name.startswith("_"))
CODE = [e for e in EXERCISES if e not in NOT_CODE]


def _independent(exercise: str) -> dict[str, str]:
    out = {d.name: (d / f"{exercise}.py").read_text() for d in INDEPENDENT
           if (d / f"{exercise}.py").is_file()}
    out["solutions"] = (SOLUTIONS / f"{exercise}.py").read_text()
    return out


@pytest.mark.parametrize("exercise", CODE)
def test_independent_right_answers_are_not_flagged(exercise):
    pairs = compare_exercise(exercise, _independent(exercise), stub=stub_of(exercise))
    assert pairs == [], [(p.a, p.b, round(p.score, 2)) for p in pairs]


@pytest.mark.parametrize("exercise", CODE)
def test_a_planted_copy_is_flagged_with_its_spans(exercise):
    sources = _independent(exercise)
    for original in ("solutions", "loops"):
        sources[f"copy_of_{original}"] = disguise(sources[original])   # all names changed
    pairs = compare_exercise(exercise, sources, stub=stub_of(exercise))
    assert {(p.a, p.b) for p in pairs} == {("copy_of_loops", "loops"),
                                           ("copy_of_solutions", "solutions")}
    for p in pairs:
        assert p.score >= THRESHOLD and p.spans_a and p.spans_b
        lines = p.source_b.count("\n") + 1
        assert all(1 <= a <= b <= lines for a, b in p.spans_b)
    scores = [p.score for p in pairs]
    assert scores == sorted(scores, reverse=True)


@pytest.mark.quick
def test_the_stubs_own_text_is_boilerplate():
    stub = stub_of("ex02_mha")
    # two students who handed in the stub with one line each: nothing alike is theirs
    a, b = stub + "\nX = 1\n", stub + "\nY = 2\n"
    assert compare_exercise("ex02_mha", {"a": a, "b": b}, stub=stub) == []
    assert compare_exercise("ex02_mha", {"a": a, "b": b}, stub="")   # without it: flagged


@pytest.mark.slow
def test_batch_writes_similarity_csv_and_no_points_depend_on_it(tmp_path):
    cls = tmp_path / "class"
    copy_solutions(cls / "alice", ["ex02_mha"])
    keep = tuple(function_order("ex02_mha"))
    copy = disguise((SOLUTIONS / "ex02_mha.py").read_text(), keep)
    (copy_solutions(cls / "bob", []) / "ex02_mha.py").write_text(copy)
    (cls / "=carol").mkdir()
    (cls / "=carol" / "ex02_mha.py").write_text(
        (REPO / "tests" / "data" / "independent" / "einsum" / "ex02_mha.py").read_text())
    out = tmp_path / "grades.csv"
    result = CliRunner().invoke(main, ["batch", str(cls), "--out", str(out), "-e", "B",
                                       "-j", "2"])
    assert result.exit_code == 0, result.output
    rows = list(csv.DictReader((tmp_path / "similarity.csv").open()))
    assert [(r["exercise"], r["submission_a"], r["submission_b"]) for r in rows] == \
        [("ex02_mha", "alice", "bob")]
    assert float(rows[0]["score"]) >= THRESHOLD and rows[0]["spans_a"]
    grades = {r["submission"]: r for r in csv.DictReader(out.open())}
    assert grades["alice"]["total"] == grades["bob"]["total"] == grades["'=carol"]["total"] \
        == grades["alice"]["max_total"]
    assert "similarity.csv" in result.output
