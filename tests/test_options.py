"""A grading option lives once: a field of ``grader.core.Options`` that knows
its command-line form (``argv``, what a batch gives each grading process)
and whether it can change a grade (``cache_key``); ``grade`` and ``batch``
share one set of click options (``grader.cli.GRADING_OPTIONS``).  And a
result carries its per-exercise scores, so that the batch reads them back
rather than parsing test names.  No grading here: the CLI's grading is
replaced by a recorder."""
from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from grader import cli
from grader.classroom import batch
from grader.cli import GRADING_OPTIONS, main
from grader.core import Options
from grader.report import Report, exercise_scores_of, to_gradescope
from grader.report import TestResult as Result

# A value unlike the default for every field with a flag.
CHANGED = {"suite": "public", "exercises": ["ex02_mha", "ex01_by_hand"], "call_timeout": 2.5,
           "gpu_tier": True, "keyword": "softmax and not causal", "seed": 12345,
           "student_id": "s1234567", "deduct_each": True, "isolation": "strict",
           "artifacts_dir": Path("out dir"), "exercise_budget": 77.25, "grading_budget": 600.5,
           "compile_cache": Path("compiles dir")}


def _flagged() -> list[dataclasses.Field]:
    return [f for f in dataclasses.fields(Options) if f.metadata["flag"]]


def _graded_with(monkeypatch, args: list[str]) -> Options:
    seen = []
    monkeypatch.setattr(cli, "_run", lambda path, options: seen.append(options) or
                        (Report(submission=str(path), suite=options.suite), []))
    result = CliRunner().invoke(main, ["grade", ".", *args], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    [options] = seen
    return options


def test_every_flagged_option_is_changed_here():
    assert {f.name for f in _flagged()} == set(CHANGED), (
        "a new option of Options with a flag: give it a value in CHANGED")


def test_argv_is_read_back_by_grade_as_the_same_options(monkeypatch):
    options = Options(**CHANGED)
    assert _graded_with(monkeypatch, options.argv()) == options


def test_the_defaults_have_an_empty_command_line(monkeypatch):
    assert Options().argv() == []
    assert _graded_with(monkeypatch, []) == Options()


def test_each_option_alone_round_trips(monkeypatch):
    for name, value in CHANGED.items():
        options = Options(**{name: value})
        assert _graded_with(monkeypatch, options.argv()) == options, name


@pytest.mark.parametrize("field", ["memory_mb", "import_timeout", "markers", "check_upstream"])
def test_an_option_without_a_flag_is_refused_off_its_default(field):
    value = {"memory_mb": 1, "import_timeout": 1.0, "markers": "gpu",
             "check_upstream": False}[field]
    with pytest.raises(ValueError, match=f"Options.{field}="):
        Options(**{field: value}).argv()


def test_the_cache_key_holds_what_changes_a_grade_and_nothing_else():
    key = Options().cache_key()
    scored = {f.name for f in dataclasses.fields(Options) if f.metadata["scores"]}
    assert set(key) == scored
    assert {"artifacts_dir", "check_cache", "fork_server"}.isdisjoint(key)
    assert key["exercises"] == "all"
    assert Options(exercises=["b", "a"]).cache_key()["exercises"] == ["a", "b"]
    unscored = ("artifacts_dir", "compile_cache")     # where files go, not what is graded
    json.dumps(Options(**{k: v for k, v in CHANGED.items() if k not in unscored})
               .cache_key())   # stored in the result as JSON
    for name, value in CHANGED.items():
        if name not in unscored:
            assert Options(**{name: value}).cache_key() != key, name
    assert Options(artifacts_dir=Path("x")).cache_key() == key
    assert Options(compile_cache=Path("x")).cache_key() == key


def _params(command: str) -> dict[str, tuple]:
    return {p.name: tuple(p.opts) for p in main.commands[command].params}


def test_grade_and_batch_share_one_set_of_options_written_once():
    shared = {}
    for decorate in GRADING_OPTIONS:
        [param] = decorate(lambda: None).__click_params__
        shared[param.name] = tuple(param.opts)
    grade, batch_ = _params("grade"), _params("batch")
    assert {n: grade[n] for n in shared} == shared == {n: batch_[n] for n in shared}
    # Options with a flag: every one is `grade`'s, under that flag
    flags = {opt for opts in grade.values() for opt in opts}
    assert all(f.metadata["flag"] in flags for f in _flagged())
    # Neither command spells a shared option of its own (a copy would drift).
    source = Path(cli.__file__).read_text()
    for start, end in (('@main.command(name="grade")', "def grade_cmd("),
                       ('@main.command()\n@click.argument("folder"', "def batch(")):
        decorators = source[source.index(start):source.index(end)]
        assert "@grading_options" in decorators
        for opts in shared.values():
            assert not any(f'"{opt}"' in decorators for opt in opts), (end, opts)


def test_batch_hands_its_options_to_run_batch(monkeypatch, tmp_path):
    seen = []
    monkeypatch.setattr(batch, "run_batch",
                        lambda subs, results, options, **kw: seen.append(options) or [])
    (tmp_path / "class" / "alice").mkdir(parents=True)
    args = ["batch", str(tmp_path / "class"), "--out", str(tmp_path / "g.csv"), "--suite",
            "public", "-e", "B", "--timeout", "3", "--seed", "9", "--deduct-each",
            "--gpu-tier", "--isolation", "fallback"]
    result = CliRunner().invoke(main, args, catch_exceptions=False)
    assert result.exit_code == 0, result.output
    # and the class's compile cache, beside its gradebook (a batch's own choice)
    assert seen == [Options(suite="public", exercises=["ex02_mha"], call_timeout=3.0, seed=9,
                            deduct_each=True, gpu_tier=True, isolation="fallback",
                            compile_cache=tmp_path / "g_compile")]


def test_a_result_carries_its_exercise_scores_and_the_batch_reads_them():
    report = Report(submission="s", suite="hidden", exercises=["ex01_by_hand", "ex02_mha"])
    report.tests = [Result(exercise="ex01_by_hand", name="a", title="a: b: c", score=1.0,
                               max_score=2.0, status="failed"),
                    Result(exercise="ex02_mha", name="x", title="x", score=3.0, max_score=3.0,
                               status="passed")]
    data = json.loads(json.dumps(to_gradescope(report)))
    for test in data["tests"]:
        test["name"] = "renamed: by someone"   # names are not read
    assert exercise_scores_of(data) == report.exercise_scores() == {
        "ex01_by_hand": (1.0, 2.0), "ex02_mha": (3.0, 3.0)}
    outcome = batch.Outcome(batch.Submission("s", Path("s")), Path("s.json"))
    batch._read_extra(outcome, data)
    assert outcome.scores == report.exercise_scores()
