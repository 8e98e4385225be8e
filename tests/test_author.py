"""An author's loop: one exercise checked end to end, in one command.

    python -m pytest -q --exercise ex02_mha

runs the tests marked ``author`` (tests/conftest.py): those here, its stub and
contract checks (tests/test_stubs.py), its registry entry
(tests/test_manifest.py), its mutants, each graded alone
(tests/test_mutants.py), and the student edition's leak tests
(tests/test_release.py).  The tests of this file are the loop's own: without
``--exercise`` they are not collected, since the default run holds the same
promises for every exercise at once (tests/test_grading.py,
tests/test_one_max.py, the exercises' own test files).  CI runs one loop
(.github/workflows/ci.yml), and the default run checks what a loop selects
(``test_a_loop_selects_one_exercise_and_the_release_checks``).
"""
from __future__ import annotations

import subprocess
import sys

import pytest

from grader.core import Options, maximum
from grader.registry import EXERCISES
from grader.report import to_text
from tests.conftest import (EXERCISES_DIR, REPO, SOLUTIONS, author_exercises, failures,
                            grade_dir)


def pytest_generate_tests(metafunc):
    """The loop's exercises; without ``--exercise``, one placeholder that
    tests/conftest.py deselects (``loop_only``)."""
    if "exercise" in metafunc.fixturenames:
        chosen = author_exercises(metafunc.config)
        metafunc.parametrize("exercise", chosen or [
            pytest.param(None, marks=pytest.mark.loop_only, id="no-exercise")])


@pytest.mark.author
def test_the_solution_gets_full_marks_in_both_suites(exercise):
    """One grading per suite: full marks, out of the maximum every student
    is graded out of, and the hidden suite adds tests to the public one."""
    report = grade_dir(SOLUTIONS, [exercise])
    got, total = report.exercise_scores()[exercise]
    assert total > 0 and got == total, to_text(report)
    assert total == maximum(Options(exercises=[exercise]))[exercise]
    assert not report.errors, report.errors
    public = grade_dir(SOLUTIONS, [exercise], suite="public")   # ex01's has no points
    assert public.score == public.max_score and not failures(public), to_text(public)
    assert len(public.tests) < len(report.tests)


@pytest.mark.author
def test_the_stub_gets_nothing_and_says_why(exercise):
    """Out of the same maximum, and every failure says something (what the
    stub left undone: "not implemented yet", "fill it in", ...)."""
    report = grade_dir(EXERCISES_DIR, [exercise], import_timeout=120)
    assert not report.errors, report.errors
    most = maximum(Options(exercises=[exercise]))[exercise]   # the plan of this one alone
    assert report.exercise_scores()[exercise] == (0, most)
    failed = failures(report)
    assert failed and all(t.output.strip() for t in failed), to_text(report)


def _loop(*args) -> list[str]:
    """The test ids an author's loop with ``args`` would run."""
    done = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-n", "0",
                           "-p", "no:cacheprovider", *args],
                          cwd=REPO, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    return [ln for ln in done.stdout.splitlines() if "::" in ln]


def test_a_loop_selects_one_exercise_and_the_release_checks():
    """What ``--exercise ex02_mha`` selects: its mutants alone (no round
    holds another exercise's), its suites, stub and registry checks, the
    release's leak tests, and nothing parametrized by another exercise."""
    ids = _loop("--exercise", "B")          # a letter names it too
    mutants = [i for i in ids if "test_mutant_loses_points_and_is_named" in i]
    assert mutants and all("[ex02_mha:" in i and "+" not in i for i in mutants), mutants
    from tests.data.mutants import all_mutants
    assert len(mutants) == sum(m.file == "ex02_mha" for m in all_mutants())
    for wanted in ("test_author.py::test_the_solution_gets_full_marks_in_both_suites[ex02_mha]",
                   "test_author.py::test_the_stub_gets_nothing_and_says_why[ex02_mha]",
                   "test_stubs.py::test_committed_stub_is_the_derived_one[ex02_mha]",
                   "test_release.py::test_no_solution_or_reference_code_in_the_edition",
                   "test_release.py::test_no_working_logic_of_a_task_in_the_edition"):
        assert any(i.endswith(wanted) for i in ids), (wanted, ids)
    others = [n for n in EXERCISES if n != "ex02_mha"]
    assert not [i for i in ids if any(f"[{n}" in i or f"-{n}]" in i for n in others)], ids
    assert "test_a_loop_selects_one_exercise" not in "\n".join(ids)


@pytest.mark.quick
def test_an_unknown_exercise_is_one_sentence():
    done = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q",
                           "--exercise", "ex99_nothing"], cwd=REPO, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 4 and "no exercise 'ex99_nothing'" in done.stderr, done.stderr
