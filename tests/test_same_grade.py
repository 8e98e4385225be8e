"""Same work, same grade: a known mistake costs the same points under every seed.

Each grading draws a fresh secret seed for the hidden suites' random cases
(``grader/reference/cases.py``).  The fixed cases, which every grading runs
first, expose every known mistake (the curriculum's "Common mistakes" and
``tests/data/mutants/``); the random ones only add coverage.  So:

* ``test_every_mutant_gets_one_score_under_20_seeds``: every mutant of the
  corpus, its exercise's seed-dependent tests under 20 seeds, one score and
  one outcome of each test under all of them (``tests/seed_sweep.py`` says
  how it runs them in one process per exercise, and why its shortcuts are
  exact).  About 100 s of CPU, more than the default run can spend: it runs
  with ``ATTN_SEED_SWEEP=full``;
* ``test_the_fixed_cases_decide_every_known_mistake``: the same under 3
  seeds, and every test a mutant fails, it fails on a fixed case (before
  any random case is drawn); the default run sweeps the mutants it grades
  (tests/test_mutants.py's first rounds), the corpus tier the rest (about
  45 s of CPU in all);
* the seed is read nowhere but through ``grader.reference.cases``, so that
  every other test is the same under every seed by construction;
* a failure that only a random case finds says so, with its seed (the rule
  of docs/AUTHORING.md, "Same work, same grade").
"""
from __future__ import annotations

import ast
import os
import time

import pytest

from grader.feedback import Feedback
from grader.paths import PACKAGE_DIR, SUITES_DIR
from grader.reference import cases
from tests import seed_sweep
from tests.conftest import copy_solutions, failures, grade_dir
from tests.data.mutants import all_mutants
from tests.test_mutants import IN_DEFAULT_RUN

MUTANTS = all_mutants()
SWEPT = sorted({m.file for m in MUTANTS})
FULL_SEEDS = 20
FAST_SEEDS = 3
# The default run sweeps the mutants it grades (tests/test_mutants.py's
# first rounds); the corpus tier (``--corpus``) the rest.
PARTS = [pytest.param(ex, "default", id=ex) for ex in SWEPT] + \
        [pytest.param(ex, "corpus", id=f"{ex}-corpus", marks=pytest.mark.corpus) for ex in SWEPT]


def _part(mutant, part) -> bool:
    """Whether ``mutant`` is in ``part`` ("default", "corpus"; None: all)."""
    return part is None or ((mutant.file, mutant.name) in IN_DEFAULT_RUN) == (part == "default")


def test_only_the_cases_module_reads_the_run_seed():
    """Every other module of the grader, the suites' helpers included, gets
    its randomness through ``grader.reference.cases``: a test that names none
    of its seed readers is the same under every seed."""
    readers = seed_sweep.SEED_READERS | {"_RUN_SEED"}
    own = PACKAGE_DIR / "reference" / "cases.py"
    found = []
    for path in sorted(PACKAGE_DIR.rglob("*.py")):
        if path == own:
            continue
        names = seed_sweep._names(ast.parse(path.read_text()))
        suite = SUITES_DIR in path.parents
        bad = names & (readers if not suite else {"_RUN_SEED"})
        if bad:
            found.append(f"{path.relative_to(PACKAGE_DIR)}: {sorted(bad)}")
    assert not found, found


def test_the_seed_dependent_tests_are_found():
    hidden = SUITES_DIR / "hidden"
    ex03 = seed_sweep.seed_dependent(hidden / "test_ex03_gqa_hidden.py")
    assert {"test_gqa_random", "test_repeat_kv_random"} <= ex03
    assert "test_kv_cache_bytes_hidden" not in ex03 and "test_gqa_value_errors" not in ex03
    # through a helper of the module: _mha_cases draws the random cases
    assert "test_mha_shift_invariance" in seed_sweep.seed_dependent(
        hidden / "test_ex02_mha_hidden.py")


def test_a_failure_only_a_random_case_finds_says_so_with_its_seed():
    def wrong():
        raise Feedback("softmax(x) is wrong")
    with cases.run_seed(1234):
        with pytest.raises(Feedback) as fixed:
            cases.on_case("shape (2, 3)", wrong)
        with pytest.raises(Feedback) as drawn:
            cases.on_case("shape (2, 3, 4, 5)", wrong, drawn=True)
    assert str(fixed.value) == "on a case with shape (2, 3):\nsoftmax(x) is wrong"
    text = str(drawn.value)
    assert text.startswith("on a random case with shape (2, 3, 4, 5):\nsoftmax(x) is wrong\n")
    assert cases.RANDOM_ONLY in text and "--seed 1234" in text


# A softmax wrong only for 4-D arrays: no fixed case of test_softmax_random
# has four axes, and the random ones of this seed do.
FOUR_D_SOFTMAX = """
def softmax(x, axis=-1):
    x = np.asarray(x)
    if x.ndim == 4:
        axis = 0
    m = np.max(x, axis=axis, keepdims=True)
    m = np.where(np.isfinite(m), m, 0.0)
    e = np.exp(x - m)
    s = np.sum(e, axis=axis, keepdims=True)
    return np.divide(e, s, out=np.zeros_like(e), where=s > 0)
"""


@pytest.mark.slow
def test_a_mistake_only_a_random_case_finds_fails_and_names_its_seed(tmp_path):
    sub = copy_solutions(tmp_path / "sub", ["ex02_mha"])
    path = sub / "ex02_mha.py"
    path.write_text(path.read_text() + FOUR_D_SOFTMAX)
    report = grade_dir(sub, ["ex02_mha"], keyword="softmax_random", seed=4)
    failed = failures(report, "ex02_mha")
    assert failed, "the seed's random cases hold no 4-D array: pick another seed"
    for t in failed:
        assert t.output.startswith("on a random case with shape (")
        assert cases.RANDOM_ONLY in t.output and "--seed 4`" in t.output


def _sweep(exercise, n_seeds, tmp_path, part=None) -> list[seed_sweep.Verdict]:
    """The solution and every mutant of ``exercise`` (of its ``part``:
    ``_part``) under ``n_seeds`` seeds."""
    sweep = seed_sweep.Sweep(exercise, seed_sweep.seeds(n_seeds), tmp_path)
    try:
        start = time.perf_counter()
        solution = sweep.solution()
        wrong = {name: per for name, per in solution.statuses.items()
                 if set(per.values()) - {"passed"}}
        assert not wrong, f"the solution does not pass {sorted(wrong)}: {solution.texts}"
        verdicts = [sweep.mutant(m) for m in MUTANTS if m.file == exercise and _part(m, part)]
        assert verdicts, f"no mutant of {exercise} in the {part} part"
        print(f"{exercise}: {len(sweep.items)} seed-dependent tests, {len(verdicts)} "
              f"mutants, {n_seeds} seeds: {sum(v.runs for v in verdicts) + solution.runs} "
              f"runs in {time.perf_counter() - start:.1f} s")
        return verdicts
    finally:
        sweep.close()


def _randomly_decided(verdict) -> list[str]:
    """The tests this mutant fails only once a random case was drawn."""
    return [f"{verdict.name}: {name} fails on a random case, no fixed case catches it:\n"
            f"{verdict.texts.get(name, '')[:1200]}"
            for name, runs in verdict.read_seed_failures.items() if runs]


@pytest.mark.slow
@pytest.mark.skipif(os.environ.get("ATTN_SEED_SWEEP") != "full",
                    reason="the full 20-seed sweep runs with ATTN_SEED_SWEEP=full")
@pytest.mark.parametrize("exercise", SWEPT)
def test_every_mutant_gets_one_score_under_20_seeds(exercise, tmp_path):
    verdicts = _sweep(exercise, FULL_SEEDS, tmp_path)
    problems = [p for v in verdicts for p in [v.problem()] if p]
    assert not problems, "\n\n".join(problems)


@pytest.mark.slow
@pytest.mark.parametrize("exercise, part", PARTS)
def test_the_fixed_cases_decide_every_known_mistake(exercise, part, tmp_path):
    verdicts = _sweep(exercise, FAST_SEEDS, tmp_path, part)
    problems = [p for v in verdicts for p in [v.problem()] if p]
    problems += [p for v in verdicts for p in _randomly_decided(v)]
    assert not problems, "\n\n".join(problems)
