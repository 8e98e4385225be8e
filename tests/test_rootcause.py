"""Root causes: a slip named upstream is named once, and (--deduct-once) costs once."""
from __future__ import annotations

import json

from click.testing import CliRunner

from grader.cli import main
from grader.report import FAILED, PASSED, Report, to_gradescope, to_junit, to_text
from grader.report import TestResult as Result  # not "Test*": pytest would collect it
from grader.rootcause import attribute
from tests.conftest import SOLUTIONS, failures, grade_dir

AXIS = "the softmax ran over queries instead of keys"


def _result(name, output, status=FAILED, points=2.0):
    return Result(exercise="ex02_mha", name=name, title=name.replace("_", " "),
                  max_score=points, score=points if status == PASSED else 0.0,
                  status=status, output=output)


def _report():
    tests = [_result("test_softmax", "", PASSED),
             _result("test_attention", f"attention is wrong\nThis looks like: {AXIS}."),
             _result("test_attention_more", f"on a case:\nThis looks like: {AXIS}."),
             _result("test_mha", f"on a case:\nmha is wrong\nThis looks like: {AXIS}."),
             _result("test_mha_other", "mha is wrong\nThis looks like: no RoPE."),
             _result("test_mha_unnamed", "mha is wrong")]
    called = {id(tests[0]): ["softmax"], id(tests[1]): ["attention"],
              id(tests[2]): ["attention"], id(tests[3]): ["multi_head_attention"],
              id(tests[4]): ["multi_head_attention"], id(tests[5]): ["multi_head_attention"]}
    return Report(submission="s", suite="hidden", tests=tests, exercises=["ex02_mha"]), called


def test_a_downstream_failure_names_its_root_cause_first():
    report, called = _report()
    followers = attribute(report, called)
    mha = report.tests[3]
    assert followers == [mha]
    assert mha.output.splitlines()[0] == (
        f"This follows from the attention mistake named above ({AXIS}).")
    assert mha.score == 0.0                       # without --deduct-once it still costs
    # Tests of the root function itself, and other mistakes, are left alone.
    assert not report.tests[2].output.startswith("This follows")
    assert not report.tests[4].output.startswith("This follows")
    assert not report.notes


def test_deduct_once_keeps_the_points_of_downstream_failures_and_says_which():
    report, called = _report()
    attribute(report, called, deduct_once=True)
    mha = report.tests[3]
    assert mha.score == mha.max_score and mha.status == FAILED
    assert "It keeps its points (--deduct-once)" in mha.output.splitlines()[0]
    assert [t.score for t in report.tests] == [2.0, 0.0, 0.0, 2.0, 0.0, 0.0]
    assert report.notes == ["--deduct-once: 1 test(s) kept their points because they fail "
                            "only from a mistake named upstream: ex02_mha: test mha"]
    assert report.notes[0] in to_text(report)


def test_a_kept_test_is_shown_as_passed_with_its_reason_not_as_a_failure():
    report, called = _report()
    attribute(report, called, deduct_once=True)
    mha = report.tests[3]
    assert mha.kept and not any(t.kept for t in report.tests if t is not mha)
    # Text: a row of its own kind, never "FAIL" at full score.
    rows = [line.split() for line in to_text(report).splitlines() if line.startswith("  ")]
    marks = {r[0]: r[-1] for r in rows if r[1:-1] == ["test", "mha"]}
    assert marks == {"KEPT": "2/2"}
    # Gradescope: passed, the output saying why (the root cause named upstream).
    entry = next(e for e in to_gradescope(report)["tests"] if e["name"].endswith("test mha"))
    assert entry["status"] == "passed" and entry["score"] == entry["max_score"]
    assert entry["output"].startswith(f"This follows from the attention mistake named above "
                                      f"({AXIS}). It keeps its points (--deduct-once)")
    # The other failures stay failures.
    statuses = [e["status"] for e in to_gradescope(report)["tests"]]
    assert statuses == ["passed", "failed", "failed", "passed", "failed", "failed"]
    # JUnit: no <failure> for it, and one fewer failure counted.
    junit = to_junit(report)
    assert 'failures="4"' in junit
    case = junit[junit.index('name="test mha"'):]
    case = case[:case.index("</testcase>")]
    assert "<failure" not in case and "It keeps its points" in case
    # Without --deduct-once the same test is a plain failure everywhere.
    plain, called = _report()
    attribute(plain, called)
    assert not any(t.kept for t in plain.tests)
    assert [e["status"] for e in to_gradescope(plain)["tests"]].count("failed") == 5


def _softmax_axis_submission(tmp_path):
    sub = tmp_path / "submission"
    sub.mkdir()
    source = (SOLUTIONS / "ex02_mha.py").read_text()
    wrong = source.replace("return softmax(scores, axis=-1) @ v",
                           "return softmax(scores, axis=-2) @ v")
    assert wrong != source
    (sub / "ex02_mha.py").write_text(wrong)
    return sub


KEYWORD = "attention_chapter or multi_head_attention_small or is_causal or sees_nothing"


def test_softmax_axis_is_blamed_not_the_mask_and_costs_once(tmp_path):
    sub = _softmax_axis_submission(tmp_path)
    plain = grade_dir(sub, ["ex02_mha"], keyword=KEYWORD)
    once = grade_dir(sub, ["ex02_mha"], keyword=KEYWORD, deduct_once=True)
    assert not plain.errors and not once.errors
    out = {t.name: t.output for t in failures(plain, "ex02_mha")}
    causal = out["test_mha_is_causal"]
    # The direct answer is checked before the mask is blamed.
    assert "causal mask is missing" not in causal
    assert f"This looks like: {AXIS}." in causal
    assert causal.startswith(f"This follows from the attention mistake named above ({AXIS}).")
    # The hint about rows that see no key is not shown for a mismatch elsewhere.
    assert "Rows 0 and 1" not in out["test_attention_query_that_sees_nothing"]
    assert f"This looks like: {AXIS}." in out["test_attention_query_that_sees_nothing"]
    got, total = plain.exercise_scores()["ex02_mha"]
    got_once, total_once = once.exercise_scores()["ex02_mha"]
    assert total == total_once
    kept = {t.name for t in once.tests if t.status == FAILED and t.score == t.max_score}
    assert kept == {"test_multi_head_attention_small", "test_mha_is_causal"}
    assert got_once == got + sum(t.max_score for t in once.tests if t.name in kept)
    assert any("kept their points" in n for n in once.notes)


def test_deduct_once_is_wired_through_grade_and_batch(tmp_path):
    sub = _softmax_axis_submission(tmp_path)
    runner = CliRunner()
    result = runner.invoke(main, ["grade", str(sub), "-e", "ex02", "-k", KEYWORD,
                                  "--deduct-once"], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    assert "--deduct-once: 2 test(s) kept their points" in result.output
    assert "It keeps its points (--deduct-once)" in result.output
    assert sum(line.startswith("  KEPT ") for line in result.output.splitlines()) == 2
    folder = tmp_path / "class"
    (folder / "alice").mkdir(parents=True)
    (folder / "alice" / "ex02_mha.py").write_text((sub / "ex02_mha.py").read_text())
    out = tmp_path / "grades.csv"
    scores = []
    # Without the option, then with it: the rerun grades again (not "already graded").
    for extra in ([], ["--deduct-once"]):
        result = runner.invoke(main, ["batch", str(folder), "--out", str(out), "-e", "ex02",
                                      *extra], catch_exceptions=False)
        assert result.exit_code == 0, result.output
        assert "1 graded, 0 already graded" in result.output
        data = json.loads((tmp_path / "results" / "alice.json").read_text())
        scores.append(data["score"])
    assert data["extra_data"]["deduct_once"] is True
    kept = [t for t in data["tests"] if "It keeps its points" in t["output"]]
    assert kept and all(t["score"] == t["max_score"] and t["status"] == "passed" for t in kept)
    assert scores[1] == scores[0] + sum(t["max_score"] for t in kept)
