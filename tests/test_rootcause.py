"""Root causes: a slip found upstream costs once, is named first, and is said once;
--deduct-each restores the old count (every failure costs)."""
from __future__ import annotations

import json
import time

import pytest
from click.testing import CliRunner

from grader.cli import main
from grader.report import FAILED, PASSED, Report, to_gradescope, to_junit, to_text
from grader.report import TestResult as Result  # not "Test*": pytest would collect it
from grader import rootcause
from grader.rootcause import Upstream, attribute
from grader.sandbox import bwrap, confine, forkserver
from tests.conftest import SOLUTIONS, copy_solutions, failures, grade_dir
from tests.data.mutants import all_mutants

AXIS = "the softmax ran over queries instead of keys"
SCALE = "the scores were not scaled by 1/sqrt(d_head)"


def _result(name, output, status=FAILED, points=2.0, exercise="ex02_mha"):
    return Result(exercise=exercise, name=name, title=name.replace("_", " "),
                  max_score=points, score=points if status == PASSED else 0.0,
                  status=status, output=output)


def _report():
    tests = [_result("test_softmax", "", PASSED),
             _result("test_attention", f"attention is wrong\n  at (0, 1)\nThis looks like: {AXIS}."),
             _result("test_attention_more", f"on a case:\nattention is wrong\nThis looks like: {AXIS}."),
             _result("test_mha", f"on a case:\nmha is wrong\nThis looks like: {AXIS}."),
             _result("test_mha_other", "mha is wrong\nThis looks like: no RoPE."),
             _result("test_mha_unnamed", "mha is wrong")]
    called = {id(tests[0]): ["softmax"], id(tests[1]): ["attention"],
              id(tests[2]): ["attention"], id(tests[3]): ["multi_head_attention"],
              id(tests[4]): ["multi_head_attention"], id(tests[5]): ["multi_head_attention"]}
    return Report(submission="s", suite="hidden", tests=tests, exercises=["ex02_mha"]), called


def test_a_downstream_failure_keeps_its_points_and_says_where_in_one_line():
    report, called = _report()
    followers = attribute(report, called)
    mha = report.tests[3]
    assert followers == [mha]
    assert mha.output == ("This follows from the attention mistake named above (test 3 of 3 "
                          "that show it): it keeps its points.")
    assert mha.score == mha.max_score and mha.kept and mha.status == FAILED
    # The root cause costs in its own function's tests, named first there ...
    root, again = report.tests[1], report.tests[2]
    assert root.output.splitlines()[0] == f"This looks like: {AXIS}."
    assert root.score == 0 and again.score == 0
    # ... and is referred to, not repeated, by the next test that shows it.
    assert again.output.splitlines()[0] == ("This looks like the same mistake as above "
                                            "(test 2 of 3 that show it).")
    assert AXIS not in again.output
    # Other mistakes, and failures that name none, are left to cost their points.
    assert report.tests[4].output.startswith("This looks like: no RoPE.")
    assert report.tests[5].output == "mha is wrong" and report.tests[5].score == 0
    assert report.notes == ["1 test(s) kept their points: each fails only from a mistake "
                            "found upstream, which costs once (--deduct-each counts each), "
                            "and says where."]


def test_deduct_each_restores_the_old_count():
    report, called = _report()
    attribute(report, called, deduct_each=True)
    assert [t.score for t in report.tests] == [2.0, 0, 0, 0, 0, 0]
    assert not any(t.kept for t in report.tests)
    assert report.tests[3].output.endswith("it costs its points too (--deduct-each).")
    assert report.notes[0].startswith("--deduct-each: 1 test(s)")


def test_a_kept_test_is_shown_as_passed_with_its_reason_not_as_a_failure():
    report, called = _report()
    attribute(report, called)
    mha = report.tests[3]
    assert mha.kept and not any(t.kept for t in report.tests if t is not mha)
    # Text: a row of its own kind, never "FAIL" at full score.
    rows = [line.split() for line in to_text(report).splitlines() if line.startswith("  ")]
    marks = {r[0]: r[-1] for r in rows if r[1:-1] == ["test", "mha"]}
    assert marks == {"KEPT": "2/2"}
    # Gradescope: passed, the output saying why (the root cause named upstream).
    entry = next(e for e in to_gradescope(report)["tests"] if e["name"].endswith("test mha"))
    assert entry["status"] == "passed" and entry["score"] == entry["max_score"]
    assert entry["output"].startswith("This follows from the attention mistake named above")
    statuses = [e["status"] for e in to_gradescope(report)["tests"]]
    assert statuses == ["passed", "failed", "failed", "passed", "failed", "failed"]
    # JUnit: no <failure> for it, and one fewer failure counted.
    junit = to_junit(report)
    assert 'failures="4"' in junit
    case = junit[junit.index('name="test mha"'):]
    case = case[:case.index("</testcase>")]
    assert "<failure" not in case and "it keeps its points" in case
    # With --deduct-each the same test is a plain failure everywhere.
    plain, called = _report()
    attribute(plain, called, deduct_each=True)
    assert not any(t.kept for t in plain.tests)
    assert [e["status"] for e in to_gradescope(plain)["tests"]].count("failed") == 5


def test_the_first_failure_shown_is_the_root_and_starts_with_its_diagnosis():
    """A failure that names nothing comes first in the suite: the failure of the
    most upstream function that names a mistake takes its place."""
    tests = [_result("test_causality", "later tokens changed earlier outputs"),
             _result("test_mha", f"on a case:\nmha is wrong\n  at 0\nThis looks like: {AXIS}."),
             _result("test_attention", f"on a case:\nattention is wrong\nThis looks like: {AXIS}.")]
    called = {id(tests[0]): ["multi_head_attention"], id(tests[1]): ["multi_head_attention"],
              id(tests[2]): ["attention"]}
    report = Report(submission="s", suite="hidden", tests=list(tests), exercises=["ex02_mha"])
    attribute(report, called)
    assert [t.name for t in report.tests] == ["test_attention", "test_causality", "test_mha"]
    assert report.tests[0].output.splitlines() == [f"This looks like: {AXIS}.", "on a case:",
                                                   "attention is wrong"]
    assert report.tests[2].output.startswith("This follows from the attention mistake named "
                                             "above (test 2 of 2")


def test_a_failure_that_passes_with_the_reference_upstream_module_follows_from_it():
    ex02 = _result("test_attention", f"attention is wrong\nThis looks like: {SCALE}.")
    ex03 = [_result(f"test_gqa_{i}", "gqa is wrong", exercise="ex03_gqa") for i in range(3)]
    report = Report(submission="s", suite="hidden", tests=[ex02, *ex03],
                    exercises=["ex02_mha", "ex03_gqa"])
    upstream = {"ex03_gqa": [Upstream("ex02_mha", True, frozenset({"test_gqa_0",
                                                                   "test_gqa_2"}))]}
    attribute(report, {id(ex02): ["attention"]}, upstream=upstream)
    assert [t.score for t in ex03] == [2.0, 0.0, 2.0]
    assert ex03[0].output == (f"This follows from your ex02_mha ({SCALE}, named there): with "
                              "a correct ex02_mha this test passes, so it keeps its points.")
    assert ex03[2].output == ("This follows from your ex02_mha, as said above (test 2 of 2 "
                              "that pass with a correct ex02_mha): it keeps its points.")
    assert ex03[1].output == "gqa is wrong"          # its own mistake: it costs


def test_a_failure_that_passes_with_the_reference_upstream_function_follows_from_it():
    """A downstream test that names another mistake, or none, follows from the
    upstream function when it passes with the reference's function."""
    tests = [_result("test_decode", f"decode is wrong\nThis looks like: {AXIS}."),
             _result("test_step", "This looks like: each step saw one key.\nstep is wrong"),
             _result("test_step_more", "step is wrong"),
             _result("test_flops", "flops: expected 4, got 2")]
    called = {id(tests[0]): ["decode_attention"], id(tests[1]): ["decode_with_cache"],
              id(tests[2]): ["decode_with_cache"], id(tests[3]): ["attention_flops"]}
    report = Report(submission="s", suite="hidden", tests=list(tests),
                    exercises=["ex05_decode_prefill"])
    for t in tests:
        t.exercise = "ex05_decode_prefill"
    upstream = {"ex05_decode_prefill": [Upstream("decode_attention", False,
                                                 frozenset({"test_step", "test_step_more"}))]}
    attribute(report, called, upstream=upstream)
    assert [t.score for t in tests] == [0.0, 2.0, 2.0, 0.0]
    # One line; the mistake its own check named, not said above, is kept in it.
    assert tests[1].output == ("This follows from your decode_attention (the mistake named "
                               "above): with a correct decode_attention this test passes, so "
                               "it keeps its points. Here it looks like: each step saw one "
                               "key.")
    assert tests[2].output.startswith("This follows from your decode_attention, as said above "
                                      "(test 2 of 2")
    assert tests[3].output == "flops: expected 4, got 2"   # not downstream of it: it costs


def test_a_mistake_named_only_downstream_is_said_where_the_cause_is():
    """The mistaken function's own test has no known mistake to compare with;
    a test downstream of it does, and passes with the reference function: the
    diagnosis goes to the first failure, the follower refers to it."""
    tests = [_result("test_split", "split_heads is wrong"),
             _result("test_merge", "on a case:\nThis looks like: strided features.\nwrong")]
    called = {id(tests[0]): ["split_heads"], id(tests[1]): ["split_heads", "merge_heads"]}
    report = Report(submission="s", suite="hidden", tests=list(tests), exercises=["ex02_mha"])
    upstream = {"ex02_mha": [Upstream("split_heads", False, frozenset({"test_merge"}))]}
    attribute(report, called, upstream=upstream)
    assert tests[0].output.splitlines() == ["This looks like: strided features.",
                                            "split_heads is wrong"]
    assert tests[1].kept and tests[1].output == (
        "This follows from your split_heads (the mistake named above): with a correct "
        "split_heads this test passes, so it keeps its points.")


def _mutant(tmp_path, name):
    """The solutions, with one mutant of tests/data/mutants applied."""
    (mutant,) = [m for m in all_mutants() if f"{m.file}:{m.name}" == name]
    sub = tmp_path / name.replace(":", "-")
    sub.mkdir()
    for path in SOLUTIONS.glob("ex*.py"):
        sub.joinpath(path.name).write_text(path.read_text())
    (sub / f"{mutant.file}.py").write_text(mutant.apply((SOLUTIONS / f"{mutant.file}.py")
                                                        .read_text()))
    return sub


def test_a_missing_scale_in_ex02_costs_in_ex02_only(tmp_path):
    """ex03 imports the student's ex02: the slip costs in ex02, and ex03's
    failures keep their points, each saying in one line that the cause is in
    ex02.  --deduct-each gives the old totals: every failure costs."""
    sub = _mutant(tmp_path, "ex02_mha:no_scale")
    once = grade_dir(sub, ["ex02_mha", "ex03_gqa"], seed=7)
    each = grade_dir(sub, ["ex02_mha", "ex03_gqa"], seed=7, deduct_each=True)
    assert not once.errors and not each.errors, once.errors + each.errors
    got = once.exercise_scores()
    assert got["ex02_mha"][0] < got["ex02_mha"][1]
    assert got["ex03_gqa"][0] == got["ex03_gqa"][1] > 0
    ex03 = failures(once, "ex03_gqa")
    assert ex03 and all(t.kept and "\n" not in t.output and "your ex02_mha" in t.output
                        for t in ex03), [t.output for t in ex03]
    assert ex03[0].output.startswith(f"This follows from your ex02_mha ({SCALE}, named there)")
    # The old count: each test that failed costs its points, in both exercises.
    assert [(t.name, t.status) for t in each.tests] == [(t.name, t.status) for t in once.tests]
    assert each.score == sum(t.max_score for t in each.tests if t.status == PASSED)
    kept = sum(t.max_score for t in once.tests if t.kept)
    assert each.score == once.score - kept and each.max_score == once.max_score
    assert each.exercise_scores()["ex03_gqa"][0] < got["ex03_gqa"][0]


def test_an_imported_module_missing_from_the_submission_is_said_to_be_missing(tmp_path):
    """ex03 alone, without the ex02_mha.py it imports (an outside submission
    handed in so): its tests run with the course's ex02 and keep their
    points, saying that the student's ex02_mha is not in the submission, not
    that it was merely left out of this run.  Left out, it says so."""
    alone = grade_dir(copy_solutions(tmp_path / "alone", ["ex03_gqa"]), ["ex03_gqa"], seed=3)
    assert not alone.errors, alone.errors
    got = alone.exercise_scores()["ex03_gqa"]
    assert got[0] == got[1] > 0
    kept = [t for t in alone.tests if t.kept]
    assert kept and kept[0].output.startswith(
        "This follows from your ex02_mha (not in this submission)"), kept[0].output
    mutated = _mutant(tmp_path, "ex02_mha:no_scale")
    left_out = grade_dir(mutated, ["ex03_gqa"], seed=3)
    kept = [t for t in left_out.tests if t.kept]
    assert kept and kept[0].output.startswith(
        "This follows from your ex02_mha (not graded in this run)"), kept[0].output


def test_a_top_left_decode_mask_costs_in_decode_attention_only(tmp_path):
    """ex05: decode_with_cache's tests name another mistake, or none, and pass
    with the reference decode_attention: they keep their points."""
    sub = _mutant(tmp_path, "ex05_decode_prefill:decode_mask_top_left")
    report = grade_dir(sub, ["ex05_decode_prefill"],
                       keyword="decode_attention or decode_with_cache")
    assert not report.errors, report.errors
    shown = failures(report, "ex05_decode_prefill")
    assert shown[0].output.startswith("This looks like: the causal mask is aligned to the "
                                      "top-left")
    cache = [t for t in shown if "decode_with_cache" in t.title]
    assert cache and all(t.kept and t.output.startswith("This follows from your "
                                                        "decode_attention") for t in cache)
    assert all("decode_attention" in t.title and not t.kept for t in shown if t not in cache)


def test_softmax_axis_the_first_failure_names_it_first_and_nothing_is_said_twice(tmp_path):
    sub = _mutant(tmp_path, "ex02_mha:softmax_over_queries")
    report = grade_dir(sub, ["ex02_mha"])
    assert not report.errors, report.errors
    shown = failures(report, "ex02_mha")
    assert len(shown) >= 5
    assert shown[0].output.startswith(f"This looks like: {AXIS}.")
    # Every sentence (a line that is not an indented detail) is said once.
    sentences = [line for t in shown for line in t.output.splitlines()
                 if line.strip() and not line.startswith(" ")]
    assert len(sentences) == len(set(sentences)), sentences
    assert sum(AXIS in line for line in sentences) == 1
    text = to_text(report)
    assert text.count(AXIS) == 1
    # The mask is not blamed: the direct answer is checked first.
    assert "causal mask is missing" not in text
    # Tests of multi_head_attention keep their points, each in one line.
    mha = [t for t in shown if "multi_head_attention" in t.title]
    assert mha and all(t.kept and "\n" not in t.output for t in mha)
    got, total = report.exercise_scores()["ex02_mha"]
    cost = sum(t.max_score for t in shown if not t.kept)
    assert got == total - cost and cost < total / 4


def test_deduct_each_and_the_gpu_tier_are_wired_through_check_grade_and_batch(
        tmp_path, monkeypatch):
    """The options reach ``Options`` (check, grade, and batch's ``run_batch``);
    --deduct-once, the old flag, is the default by its name; --require-gpu is
    --gpu-tier."""
    from grader import cli
    from grader.classroom import batch
    seen = []
    monkeypatch.setattr(cli, "_run", lambda path, options: seen.append(options) or
                        (Report(submission=str(path), suite=options.suite), []))
    monkeypatch.setattr(batch, "run_batch",
                        lambda subs, results, options, **kw: seen.append(options) or [])
    (tmp_path / "class" / "alice").mkdir(parents=True)
    runner = CliRunner()
    for args in ([], ["--deduct-once"], ["--deduct-each"], ["--gpu-tier"], ["--require-gpu"]):
        for command in (["check", "--path", str(tmp_path)], ["grade", str(tmp_path)],
                        ["batch", str(tmp_path / "class"), "--out", str(tmp_path / "g.csv")]):
            result = runner.invoke(main, [*command, *args], catch_exceptions=False)
            assert result.exit_code == 0, (command, args, result.output)
            got = seen.pop()
            assert got.deduct_each == (args == ["--deduct-each"]), (command, args)
            assert got.gpu_tier == (args in (["--gpu-tier"], ["--require-gpu"])), (command, args)


def test_a_batch_rerun_with_deduct_each_grades_again_with_the_old_count(tmp_path):
    sub = _mutant(tmp_path, "ex02_mha:softmax_over_queries")
    folder = tmp_path / "class"
    (folder / "alice").mkdir(parents=True)
    (folder / "alice" / "ex02_mha.py").write_text((sub / "ex02_mha.py").read_text())
    out = tmp_path / "grades.csv"
    runs = []
    for extra in ([], ["--deduct-each"]):
        result = CliRunner().invoke(main, ["batch", str(folder), "--out", str(out), "-e",
                                           "ex02", "--seed", "3", *extra],
                                    catch_exceptions=False)
        assert result.exit_code == 0, result.output
        assert "1 graded, 0 already graded" in result.output
        runs.append(json.loads((tmp_path / "results" / "alice.json").read_text()))
    once, each = runs
    assert each["extra_data"]["deduct_each"] is True and "deduct_each" not in once["extra_data"]
    kept = [t for t in once["tests"] if "it keeps its points" in t["output"]]
    assert kept and all(t["score"] == t["max_score"] and t["status"] == "passed" for t in kept)
    assert once["score"] == each["score"] + sum(t["max_score"] for t in kept)


def test_the_second_grading_is_one_for_every_exercise_each_from_its_own_copy(tmp_path,
                                                                             monkeypatch):
    """The root causes' regrade grades every exercise it asks about in one
    grading (one start, not one per exercise), each exercise's workers from a
    copy of its own: ex02's reference, put in ex02's copy, fixes ex02's
    failures and none of ex03's, whose copy keeps the student's ex02; the
    copies are gone after."""
    from grader import core
    sub = _mutant(tmp_path, "ex02_mha:no_scale")
    first = grade_dir(sub, ["ex02_mha", "ex03_gqa"], seed=7, check_upstream=False)
    failed = {e: failures(first, e) for e in ("ex02_mha", "ex03_gqa")}
    assert failed["ex02_mha"] and failed["ex03_gqa"], first.tests
    gradings, real = [], core.grade

    def grade(*args, **kwargs):
        gradings.append(dict(kwargs.get("folders") or {}))
        return real(*args, **kwargs)

    monkeypatch.setattr(core, "grade", grade)
    jobs = {"ex02_mha": ({"ex02_mha.py": (SOLUTIONS / "ex02_mha.py").read_text()},
                         rootcause._only(failed["ex02_mha"])),
            "ex03_gqa": ({}, rootcause._only(failed["ex03_gqa"]))}
    passed = rootcause.regrade(first, sub, core.Options(seed=7), jobs, time.perf_counter(),
                               grade=core.grade)
    assert len(gradings) == 1 and set(gradings[0]) == set(jobs), gradings
    assert {("ex02_mha", t.name) for t in failed["ex02_mha"]} <= passed
    assert not {("ex03_gqa", t.name) for t in failed["ex03_gqa"]} & passed
    assert not any(folder.exists() for folder in gradings[0].values())


@pytest.mark.skipif(not (bwrap.usable()[0] and confine.is_root() and forkserver.supported()),
                    reason="a fork server under namespaces needs Linux, bubblewrap and root "
                           "(elsewhere the root causes' gradings spawn their workers)")
def test_the_root_causes_gradings_fork_from_the_first_gradings_fork_server(tmp_path,
                                                                          monkeypatch):
    """The same student's code graded again (the root causes' evidence) forks
    its workers from the first grading's fork server, not from one that
    imports PyTorch again: one fork server for the whole grading, ended with
    it, its folder gone; the evidence is what it was (ex03's failures follow
    from the student's ex02)."""
    from grader import core
    spawned, regraded, real_spawn, real_grade = [], [], forkserver.ForkServer._spawn, core.grade

    def spawn(self):
        spawned.append(self)
        return real_spawn(self)

    def grade(*args, **kwargs):
        regraded.append(kwargs.get("fork_server"))
        return real_grade(*args, **kwargs)

    monkeypatch.setattr(forkserver.ForkServer, "_spawn", spawn)
    monkeypatch.setattr(core, "grade", grade)   # what core hands the root causes' regrade
    sub = _mutant(tmp_path, "ex02_mha:no_scale")
    report = real_grade(sub, core.Options(exercises=["ex02_mha", "ex03_gqa"], seed=7,
                                          isolation="strict"))
    assert not report.errors, report.errors
    assert "root causes" in report.phase_seconds and regraded, report.phase_seconds
    assert len(spawned) == 1 and all(lent is spawned[0] for lent in regraded), regraded
    assert spawned[0].root is None and spawned[0].proc.poll() is not None
    ex03 = failures(report, "ex03_gqa")
    assert ex03 and all(t.kept and "your ex02_mha" in t.output for t in ex03)


def test_the_functions_upstream_of_the_furthest_failures_are_replaced_together():
    """Failing tests reaching prefill, decode and decode_with_cache: the two
    upstream functions are replaced together for decode_with_cache's tests."""
    from grader.rootcause import upstream_functions
    tests = [_result("test_prefill", "wrong"), _result("test_decode", "wrong"),
             _result("test_cache", "wrong"), _result("test_cache_more", "wrong")]
    called = {id(tests[0]): ["prefill_attention"], id(tests[1]): ["decode_attention"],
              id(tests[2]): ["decode_with_cache"], id(tests[3]): ["decode_with_cache"]}
    fns, downstream = upstream_functions(tests, called, "ex05_decode_prefill")
    assert fns == ("prefill_attention", "decode_attention")
    assert downstream == tests[2:]
    assert upstream_functions(tests[2:], called, "ex05_decode_prefill") == ((), [])


@pytest.mark.slow
def test_a_slip_in_a_helper_two_functions_share_costs_once_in_ex05(tmp_path):
    """ex05's scale slip is in _attend, which prefill_attention and
    decode_attention share and decode_with_cache reaches through decode: it
    costs prefill_attention's tests only; decode's keep their points (the
    same mistake, named upstream), and decode_with_cache's too (they pass
    with both functions the reference's), each saying where."""
    sub = _mutant(tmp_path, "ex05_decode_prefill:no_scale")
    report = grade_dir(sub, ["ex05_decode_prefill"], seed=7)
    assert not report.errors, report.errors
    tests = [t for t in report.tests if t.exercise == "ex05_decode_prefill"]
    failed = [t for t in tests if t.status == FAILED and not t.kept]
    assert failed and all(t.name.startswith("test_prefill") for t in failed), \
        [t.name for t in failed]
    cache = [t for t in report.tests if "decode_with_cache" in t.title and t.status == FAILED]
    assert cache and all(t.kept and t.score == t.max_score for t in cache), to_text(report)
    assert any("This follows from your prefill_attention and decode_attention" in t.output
               for t in cache), to_text(report)
    got, total = report.exercise_scores()["ex05_decode_prefill"]
    lost = sum(t.max_score for t in report.tests
               if t.exercise == "ex05_decode_prefill" and t.status == FAILED and not t.kept)
    assert total - got == lost


def test_a_test_is_placed_by_the_function_it_is_named_after():
    """ex04: time_fn's tests drive it through a probe (no call recorded) and
    the slope test calls loglog_slope only to show a fit; named after time_fn
    and measure_scaling, the slope test follows from time_fn's mistake and
    keeps its 3 points, saying so."""
    total = "the total of all repeats was returned instead of the time of one call (the median)"
    tests = [_result("test_measure_scaling_shows_the_quadratic",
                     f"This looks like: {total}.\nslow", points=3.0),
             _result("test_time_fn_times_a_slow_function", f"This looks like: {total}.", points=1),
             _result("test_time_fn_takes_the_median", f"This looks like: {total}.", points=1)]
    for t in tests:
        t.exercise = "ex04_quadratic"
    called = {id(tests[0]): ["loglog_slope"], id(tests[1]): [], id(tests[2]): []}
    report = Report(submission="s", suite="hidden", tests=list(tests), exercises=["ex04_quadratic"])
    attribute(report, called)
    assert [t.score for t in tests] == [3.0, 0.0, 0.0]
    assert report.tests[0] is tests[1]          # the root cause is shown first
    assert tests[0].kept and tests[0].output == ("This follows from the time_fn mistake named "
                                                 "above (test 2 of 3 that show it): it keeps "
                                                 "its points.")


# -- no diagnosis contradicts a check the submission passed --------------------------

def _said(call) -> str:
    from grader.feedback import Feedback
    with pytest.raises(Feedback) as caught:
        call()
    return str(caught.value)


def test_the_other_checks_choose_between_mistakes_that_give_the_answer():
    """Of two mistakes that give a failure's answer, one whose own answer
    fails a check the submission passed is taken back and the other named
    alone; a mistake named alone stays (evidence chooses, it never strips a
    failure of the one mistake that gives its answer); checks of another
    function or exercise choose nothing (issue 50/51)."""
    import numpy as np

    from grader.feedback import check_close, named_mistake, take_passed
    take_passed()
    zeros, ones = np.zeros(3), np.ones(3)
    # the submission passes a case where AXIS's answer is wrong (ones) and SCALE's right
    check_close(zeros, zeros, what="y", atol=1e-6, rtol=0,
                mistakes={AXIS: ones, SCALE: zeros})
    passed = take_passed()
    both = _said(lambda: check_close(ones, zeros, what="y", atol=1e-6, rtol=0,
                                     mistakes={AXIS: ones, SCALE: ones}))
    alone = _said(lambda: check_close(ones, zeros, what="y", atol=1e-6, rtol=0,
                                      mistakes={AXIS: ones}))
    assert named_mistake(both) == f"{AXIS} (or: {SCALE})" and named_mistake(alone) == AXIS
    take_passed()
    tests = [_result("test_attention_passed", "", PASSED), _result("test_attention_both", both),
             _result("test_attention_alone", alone),
             _result("test_plot_attention_heads", both),
             _result("test_other_exercise", both, exercise="ex03_gqa")]
    called = {id(tests[3]): ["attention", "plot_attention_heads"]}
    report = Report(submission="s", suite="hidden", tests=tests,
                    exercises=["ex02_mha", "ex03_gqa"])
    assert rootcause.uncontradicted(report, {id(tests[0]): passed}, called) == 1
    assert named_mistake(tests[1].output) == SCALE
    assert "first mismatch at index (0,)" in tests[1].output      # what differs stays
    assert named_mistake(tests[2].output) == AXIS
    # a check of another function (a plot drawn from the student's own
    # weights) or of another exercise chooses nothing here
    assert named_mistake(tests[3].output) == f"{AXIS} (or: {SCALE})"
    assert named_mistake(tests[4].output) == f"{AXIS} (or: {SCALE})"


def test_a_passed_checks_mistakes_are_worked_out_only_when_a_failure_names_one():
    import numpy as np

    from grader.feedback import check_close, take_passed
    take_passed()
    asked = []

    def mistakes():
        asked.append(1)
        return {AXIS: np.ones(2)}

    check_close(np.zeros(2), np.zeros(2), what="y", atol=1e-6, rtol=0, mistakes=mistakes)
    passed = take_passed()
    quiet = [_result("test_attention_passed", "", PASSED),
             _result("test_attention_failed", "y is wrong")]
    report = Report(submission="s", suite="hidden", tests=quiet, exercises=["ex02_mha"])
    assert rootcause.uncontradicted(report, {id(quiet[0]): passed}, {}) == 0 and not asked
    named = [quiet[0], _result("test_attention_named",
                               f"y is wrong\nThis looks like: {SCALE}.")]
    report = Report(submission="s", suite="hidden", tests=named, exercises=["ex02_mha"])
    assert rootcause.uncontradicted(report, {id(named[0]): passed}, {}) == 0 and asked == [1]


def test_a_check_passed_in_a_loop_is_judged_on_its_own_case():
    """A suite's ``mistakes=lambda: ...`` made in a loop sees the loop's
    latest case when called later (Python's closures): each passed check
    keeps its own, so the first case (where the mistake changes nothing)
    rules nothing out."""
    import numpy as np

    from grader.feedback import check_close, ruled_out, take_passed
    take_passed()
    for scale in (1.0, 2.0):      # the mistake is off only where the scale is not 1
        want = np.ones(2)
        got = want if scale == 1.0 else want      # the submission is right both times
        check_close(got, want, what="y", atol=1e-9, rtol=0,
                    mistakes=lambda: {SCALE: want * scale})
        if scale == 1.0:
            first = take_passed()
    assert ruled_out(first) == set()
    assert ruled_out(take_passed()) == {SCALE}


def test_a_slip_that_two_mistakes_explain_in_2_bytes_is_named_from_the_4_byte_case(tmp_path):
    """ex06's cache counted in elements: in 2-byte elements it is what counting
    only K gives (the public check names both); the hidden 4-byte case tells
    them apart, and no line of the report names "only K" alone after it."""
    from grader.feedback import named_mistake
    from grader.reference.secret import roofline as rl
    sub = _mutant(tmp_path, "ex06_gqa_intensity:kv_in_elements")
    report = grade_dir(sub, ["ex06_gqa_intensity"], seed=3)
    assert not report.errors, report.errors
    named = [named_mistake(t.output) for t in failures(report, "ex06_gqa_intensity")]
    only_k, elements = rl.MISTAKES["kv_one_of_k_v"], rl.MISTAKES["kv_in_elements"]
    assert elements in named, named
    assert only_k not in named, named                # never named alone
    assert all(n is None or elements in n for n in named), named


def test_a_failure_follows_from_an_earlier_module_only_where_its_functions_reach_it(tmp_path):
    """A red team's ex03 answered wrongly beside its own ex02 and rightly beside
    the reference (the root-cause regrade), in a function that never calls
    ex02 (a flag read at import): that test is not kept as following from
    ex02, while one whose function does call ex02 still is."""
    sub = _mutant(tmp_path, "ex02_mha:rope_interleaved")
    (sub / "ex02_mha.py").write_text((sub / "ex02_mha.py").read_text() + "\n_STUDENT_MARK = 1\n")
    ex03 = (SOLUTIONS / "ex03_gqa.py").read_text()
    ex03 = ex03.replace("import numpy as np\n", "import numpy as np\n\nimport ex02_mha as _up\n"
                        "_MINE = hasattr(_up, '_STUDENT_MARK')\n", 1)
    ex03 = ex03.replace("    return 2 * n_layers * n_kv_heads * d_head * seq_len * batch * "
                        "bytes_per_elem",
                        "    return 2 * n_layers * n_kv_heads * d_head * seq_len * batch * "
                        "bytes_per_elem // (2 if _MINE else 1)", 1)
    (sub / "ex03_gqa.py").write_text(ex03)
    assert rootcause.reaching(sub / "ex03_gqa.py", ("ex02_mha",)) >= {"grouped_query_attention"}
    report = grade_dir(sub, ["ex02_mha", "ex03_gqa"], seed=5)
    assert not report.errors, report.errors
    sizes = [t for t in report.tests if t.exercise == "ex03_gqa" and "kv_cache_bytes" in t.name]
    assert sizes and all(t.score == 0 and not t.kept for t in sizes), \
        [(t.name, t.score, t.output) for t in sizes]
    gqa = [t for t in report.tests if t.exercise == "ex03_gqa" and t.kept]
    assert gqa and all("kv_cache_bytes" not in t.name for t in gqa), [t.name for t in gqa]
