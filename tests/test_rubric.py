"""Staff's rubric points come back: merge --rubric."""
from __future__ import annotations

import csv
import io
import json

import pytest
from click.testing import CliRunner

from grader.classroom.gradebook import Gradebook
from grader.cli import main
from grader.safetext import csv_text
from tests.conftest import copy_solutions


def _sheet(rows: list[dict]) -> str:
    header = list(rows[0])
    return csv_text(header, [[r[h] for h in header] for r in rows])


@pytest.mark.slow
def test_merge_rubric_adds_staff_points_and_refuses_bad_rows(tmp_path):
    cls = tmp_path / "class"
    copy_solutions(cls / "alice", ["questions"])
    copy_solutions(cls / "bob", ["questions"])
    out = tmp_path / "grades.csv"
    result = CliRunner().invoke(main, ["batch", str(cls), "--out", str(out), "-e", "questions",
                                       "-j", "2"])
    assert result.exit_code == 0, result.output
    sheet = tmp_path / "grades_rubric.csv"
    rows = list(csv.DictReader(io.StringIO(sheet.read_text())))
    assert rows and {r["submission"] for r in rows} == {"alice", "bob"}
    first = rows[0]
    possible = float(first["points_possible"])
    before = out.read_text()

    bad = [dict(first, points=str(possible + 1)),
           dict(first, submission="zed", points="1"),
           dict(first, question="Q99_NOPE", points="1")]
    (tmp_path / "bad.csv").write_text(_sheet(bad))
    refused = CliRunner().invoke(main, ["merge", "--rubric", str(tmp_path / "bad.csv"),
                                        "--out", str(out)])
    assert refused.exit_code == 2
    assert f"give a number from 0 to {possible:g}" in refused.output
    assert "no student 'zed'" in refused.output and "no question 'Q99_NOPE'" in refused.output
    assert out.read_text() == before                       # nothing half-applied

    filled = [dict(r, points=str(possible if r is first else 0), comment="clear")
              if r["submission"] == "alice" else r for r in rows]
    (tmp_path / "filled.csv").write_text(_sheet(filled))
    done = CliRunner().invoke(main, ["merge", "--rubric", str(tmp_path / "filled.csv"),
                                     "--out", str(out), "--grader", "ta-one"])
    assert done.exit_code == 0, done.output
    grades = {r["submission"]: r for r in csv.DictReader(out.open())}
    assert float(grades["alice"]["staff_points"]) == possible
    assert float(grades["alice"]["total_with_staff"]) == \
        float(grades["alice"]["total"]) + possible
    assert float(grades["alice"]["final_total"]) == float(grades["alice"]["total"]) + possible
    assert float(grades["bob"]["staff_points"]) == 0
    # The staff's sheet comes back with what they gave, as does the page.
    back = {(r["submission"], r["question"]): r for r in
            csv.DictReader(io.StringIO(sheet.read_text()))}
    assert back[("alice", first["question"])]["points"] == f"{possible:g}"
    assert back[("alice", first["question"])]["graded_by"] == "ta-one"
    assert back[("bob", first["question"])]["points"] == ""
    index = (tmp_path / "report" / "index.html").read_text()
    assert "staff&#x27;s points" in index
    with Gradebook(tmp_path / "grades.sqlite") as book:
        [given] = [e for r in book.rows() if r.submission == "alice" for e in r.staff
                   if e["question"] == first["question"]]
        assert (given["points"], given["grader"], given["comment"]) == (possible, "ta-one",
                                                                       "clear")
        assert any(h["what"] == "staff points" and h["who"] == "ta-one"
                   for h in book.history())
    # applied twice: the same grades (the points are replaced, not added again)
    again = CliRunner().invoke(main, ["merge", "--rubric", str(tmp_path / "filled.csv"),
                                      "--out", str(out)])
    assert again.exit_code == 0 and {r["submission"]: r for r in csv.DictReader(out.open())} \
        == grades
    # a rerun of the batch, and a resubmission of alice's, keep the staff's points
    rerun = CliRunner().invoke(main, ["batch", str(cls), "--out", str(out), "-e", "questions"])
    assert rerun.exit_code == 0 and "0 graded, 2 already graded" in rerun.output
    (cls / "alice" / "questions.py").write_text((cls / "alice" / "questions.py").read_text()
                                                + "\n# resubmitted\n")
    resub = CliRunner().invoke(main, ["batch", str(cls), "--out", str(out), "-e", "questions"])
    assert resub.exit_code == 0 and "1 graded, 1 already graded" in resub.output
    assert {r["submission"]: r for r in csv.DictReader(out.open())} == grades
