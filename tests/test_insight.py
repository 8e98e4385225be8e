"""The class's mistakes: stable ids in every result, and the class's table."""
from __future__ import annotations

import csv
import json

import pytest
from click.testing import CliRunner

from grader import insight
from grader.classroom.views import class_mistakes
from grader.cli import main
from grader.reference.secret.attention import MISTAKES
from grader.report import FAILED, PASSED, Report, to_gradescope
from grader.report import TestResult as Result
from tests.conftest import SOLUTIONS, copy_solutions, grade_dir
from tests.data.mutants.ex01_by_hand import MUTANTS as EX01
from tests.data.mutants.ex02_mha import MUTANTS as EX02


def _test(name, output, status=FAILED, exercise="ex02_mha"):
    return Result(exercise, name, name, 1.0, 0.0 if status == FAILED else 1.0, status,
                      output)


def test_a_diagnosis_carries_the_references_key_not_its_wording():
    out = f"x is wrong.\nThis looks like: {MISTAKES['no_scale']}."
    assert insight.diagnoses(out) == [("no_scale", MISTAKES["no_scale"])]
    both = f"This looks like: {MISTAKES['no_mask']} (or: {MISTAKES['kv_tile']})."
    assert [i for i, _ in insight.diagnoses(both)] == ["no_mask", "kv_tile"]
    # the grader's own diagnoses have keys too (the timer's, the heatmaps', ...),
    # kept when the line says more after the table's words
    warm_up = ("This looks like: timing without warm-up (call fn warmup times before "
               "the timed repeats).")
    assert insight.diagnoses(warm_up) == [("no_warmup", "timing without warm-up")]
    from grader.reference import heatmap_checks, timing
    assert insight.diagnoses(f"This looks like: {timing.MISTAKES['milliseconds']}.") == \
        [("milliseconds", timing.MISTAKES["milliseconds"])]
    assert insight.mistake_id(heatmap_checks.MISTAKES["transposed"]) == "transposed"
    # words no table holds: an id stable as long as the words are
    unkeyed = insight.diagnoses("This looks like: a slip no table names.")
    assert unkeyed[0][0].startswith("unkeyed-a-slip-no-table-names-")
    assert insight.diagnoses("This looks like: a slip no table names.") == unkeyed
    assert insight.diagnoses("all good") == []
    # exercise A's and the questions' slips have keys too
    from grader.reference.secret import by_hand, questions
    assert insight.diagnoses(f"This looks like: {by_hand.MISTAKES['no_mask']}.") == \
        [("by_hand.no_mask", by_hand.MISTAKES["no_mask"])]
    words = questions.key("Q05_KV_CACHE_GB")["mistakes"]["binary_units"][0]
    assert insight.mistake_id(words) == "questions.binary_units"
    other = questions.key("Q09_SCORES_GB")["mistakes"]["binary_units"][0]
    assert other != words and insight.mistake_id(other) == "questions.binary_units"


def test_every_failed_test_and_the_result_carry_the_ids_in_the_json():
    follows = (f"This follows from the softmax mistake named above ({MISTAKES['no_scale']}).\n"
               f"This looks like: {MISTAKES['no_scale']}.")
    report = Report("s", "hidden", exercises=["ex02_mha"], tests=[
        _test("test_attention", f"This looks like: {MISTAKES['no_scale']}."),
        _test("test_mha", follows),
        _test("test_ok", "", status=PASSED)])
    data = json.loads(json.dumps(to_gradescope(report)))
    assert [t.get("extra_data", {}).get("mistakes") for t in data["tests"]] == \
        [["no_scale"], ["no_scale"], None]
    assert report.tests[0].mistakes == ["no_scale"] and report.tests[2].mistakes == []
    listed = data["extra_data"]["mistakes"]
    assert [(m["test"], m["id"], m["follows"]) for m in listed] == \
        [("test_attention", "no_scale", False), ("test_mha", "no_scale", True)]
    # a root cause and what follows from it count once for the student
    rows = class_mistakes([("s", "s", data), ("t", "t", data)])
    assert rows == [["ex02_mha", "no_scale", MISTAKES["no_scale"], 2, "s; t"]]


def test_a_graded_mutant_names_its_mistake_by_key(tmp_path):
    mutant = next(m for m in EX02 if m.name == "no_scale")
    sub = copy_solutions(tmp_path / "s", ["ex02_mha"])
    path = sub / "ex02_mha.py"
    path.write_text(mutant.apply((SOLUTIONS / "ex02_mha.py").read_text()))
    data = to_gradescope(grade_dir(sub, exercises=["ex02_mha"]))
    ids = {m["id"] for m in data["extra_data"]["mistakes"]}
    assert "no_scale" in ids, data["extra_data"]["mistakes"]


def _read(path):
    return list(csv.DictReader(path.open(encoding="utf-8")))


@pytest.mark.slow
def test_batch_and_merge_write_the_class_mistakes(tmp_path):
    no_scale = next(m for m in EX01 if m.name == "no_scale")
    solution = (SOLUTIONS / "ex01_by_hand.py").read_text()
    cls = tmp_path / "class"
    for name in ("ann", "ben", "=cat"):     # two with the slip, one right (a CSV-hostile name)
        copy_solutions(cls / name, ["ex01_by_hand"])
        if name != "ben":
            (cls / name / "ex01_by_hand.py").write_text(no_scale.apply(solution))
    out = tmp_path / "whole" / "grades.csv"
    result = CliRunner().invoke(main, ["batch", str(cls), "--out", str(out), "-e", "A",
                                       "-j", "2"])
    assert result.exit_code == 0, result.output
    rows = _read(out.with_name("grades-mistakes.csv"))
    assert rows and rows[0]["exercise"] == "ex01_by_hand" and rows[0]["count"] == "2"
    assert rows[0]["students"] == "'=cat; ann"          # neutralised as every CSV cell is
    assert "1/sqrt(d_head) scale was forgotten" in rows[0]["text"]
    assert rows[0]["mistake_id"] == "by_hand.no_scale"   # the reference's key, qualified
    assert not [r for r in rows if r["mistake_id"].startswith("unkeyed-")], rows
    summary = out.with_name("grades-summary.txt").read_text()
    assert "Most common mistakes (of 3 submissions):" in summary
    assert "1/sqrt(d_head) scale was forgotten" in summary
    assert "grades-mistakes.csv" in result.output
    index = (out.parent / "report" / "index.html").read_text()    # the class's page
    assert "1/sqrt(d_head) scale was forgotten" in index and 'href="students/ann.html"' in index
    assert "This looks like:" in (out.parent / "report" / "students" / "ann.html").read_text()

    parts = []
    for k in (1, 2):
        part = tmp_path / f"part{k}" / "grades.csv"
        assert CliRunner().invoke(main, ["batch", str(cls), "--out", str(part), "-e", "A",
                                         "--shard", f"{k}/2"]).exit_code == 0
        parts.append(part)
    merged = tmp_path / "merged" / "grades.csv"
    result = CliRunner().invoke(main, ["merge", *map(str, parts), "--out", str(merged)])
    assert result.exit_code == 0, result.output
    assert merged.with_name("grades-mistakes.csv").read_text() == \
        out.with_name("grades-mistakes.csv").read_text()
    assert "Most common mistakes" in merged.with_name("grades-summary.txt").read_text()
    # A sharded class gets what a whole one does: the first shard compares the
    # whole class, merge takes its similarity.csv, and builds the class's pages
    # from the parts' results.
    from grader.classroom import similarity
    if similarity.available():
        assert similarity.similarity_csv(parts[1]).exists() is False
        assert similarity.similarity_csv(merged).read_text() == \
            similarity.similarity_csv(out).read_text()
        assert "similarity.csv" in result.output
    index = (merged.parent / "report" / "index.html").read_text()
    assert "1/sqrt(d_head) scale was forgotten" in index and 'href="students/ann.html"' in index
    assert "This looks like:" in (merged.parent / "report" / "students" / "ann.html").read_text()
    students = merged.parent / "report" / "students"
    assert "This looks like:" not in (students / "ben.html").read_text()
