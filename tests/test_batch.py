"""Batch grading: a class in one command; one broken submission costs only itself."""
from __future__ import annotations

import csv
import json

from click.testing import CliRunner

from grader.batch import Submission, grade_one
from grader.cli import main
from tests.conftest import copy_solutions

ONLY = ["-e", "ex01", "-e", "ex03"]


def make_class(root):
    copy_solutions(root / "alice", ["ex01_by_hand", "ex02_mha", "ex03_gqa"])
    copy_solutions(root / "bob", ["ex01_by_hand"])                  # ex03 missing
    (root / "carol").mkdir()
    (root / "carol" / "ex03_gqa.py").write_text("def repeat_kv(:\n")  # syntax error
    (root / "dave").mkdir()                                         # nothing at all
    return root


def read_csv(path):
    return {row["submission"]: row for row in csv.DictReader(path.open())}


def test_batch_grades_a_class_and_reruns_skip(tmp_path):
    make_class(tmp_path / "class")
    out = tmp_path / "grades.csv"
    args = ["batch", str(tmp_path / "class"), "--out", str(out), "--jobs", "2", *ONLY]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0, result.output
    rows = read_csv(out)
    assert set(rows) == {"alice", "bob", "carol", "dave"}
    assert float(rows["alice"]["total"]) == float(rows["alice"]["max_total"]) > 0
    assert float(rows["bob"]["ex01_by_hand"]) == 7 and float(rows["bob"]["ex03_gqa"]) == 0
    assert float(rows["carol"]["total"]) == 0 and not rows["carol"]["error"]
    assert "no exercise modules" in rows["dave"]["error"]
    results = tmp_path / "results"
    for name in rows:
        data = json.loads((results / f"{name}.json").read_text())
        assert "score" in data and "tests" in data
    assert "4 graded, 0 already graded" in result.output

    again = CliRunner().invoke(main, args)
    assert "0 graded, 4 already graded" in again.output
    assert read_csv(out) == rows
    for name in ("ex02_mha.py", "ex03_gqa.py"):  # ex03 imports ex02
        (tmp_path / "class" / "bob" / name).write_text(
            (tmp_path / "class" / "alice" / name).read_text())
    third = CliRunner().invoke(main, args)
    assert "1 graded, 3 already graded" in third.output      # bob changed
    assert float(read_csv(out)["bob"]["ex03_gqa"]) > 0
    forced = CliRunner().invoke(main, args + ["--force"])
    assert "4 graded, 0 already graded" in forced.output


def test_a_submission_that_outlasts_its_limit_costs_only_its_row(tmp_path):
    sub = copy_solutions(tmp_path / "slow", ["ex01_by_hand"])
    (sub / "ex01_by_hand.py").write_text("import time\ntime.sleep(60)\n")
    outcome = grade_one(Submission("slow", sub), tmp_path / "results", suite="hidden",
                        timeout=None, submission_timeout=3, force=False,
                        exercises=["ex01_by_hand"])
    assert "longer than 3 s" in outcome.error
    data = json.loads(outcome.result_path.read_text())
    assert data["score"] == 0 and "not graded" in data["output"]


def test_batch_bad_input(tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    file = tmp_path / "f.txt"
    file.write_text("x")
    for args, phrase in [([str(tmp_path / "nope")], "does not exist"),
                         ([str(empty)], "holds no submissions"),
                         ([str(file)], "is not a folder"),
                         ([str(empty), "--jobs", "0"], "--jobs"),
                         ([str(empty), "-e", "ex42"], "unknown exercise")]:
        result = CliRunner().invoke(main, ["batch", *args, "--out", str(tmp_path / "g.csv")])
        assert result.exit_code == 2, result.output
        assert phrase in result.output
