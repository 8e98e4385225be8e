"""Every known mistake loses points, and the feedback names it.

Mutants are graded together: one submission holds one mutant of each group
of exercises (a round), the rest of it correct.  An exercise that imports no
other exercise and is imported by none is a group of its own; exercises
linked by imports (ex03 imports ex02) form one group, so that a round holds
one mutant of them at most and grades only that one's exercise: no mistake
reaches an exercise from a sibling.  A grading runs each exercise in its own
worker, so a mistake costs only its own exercise (``test_grading`` and
``test_attacks`` hold the grader to that), and each mutant is judged on its
own exercise's results alone; what the round saves is a grading's start (the
fork server's PyTorch, pytest's session) per mutant.  The same grading's
public tests are the public check (``tests/test_public_catches.py``): it must
fail too, naming the mistake, unless the mutant is listed there.

The default run grades the first ``DEFAULT_ROUNDS`` rounds; the rest are
the corpus tier (``python -m pytest -q --corpus``, which CI runs), and an
author's loop (``--exercise``) grades every mutant of its exercise.

Every diagnosis the failing tests print carries a table's key: none of the
mistakes the corpus makes is named in words that no table holds
(``grader.insight``'s ``unkeyed-`` ids; tests/test_mistake_keys.py checks the
grader's source for them).
"""
from __future__ import annotations

import pytest

from grader import insight
from grader.registry import EXERCISES
from tests.conftest import SOLUTIONS, failures, grade_dir
from tests.data.mutants import Mutant, all_mutants, diagnosis_lines
from tests.test_public_catches import MUTANTS as PUBLIC_MUTANTS
from tests.test_public_catches import public_keyword, public_problems

MUTANTS = all_mutants()
PUBLIC_EXERCISES = {m.file for m in PUBLIC_MUTANTS}   # not the questions


def _group(exercise: str) -> str:
    """The exercise's group: the first, by name, of the exercises it is linked
    to through imports (either way, transitively); itself when unlinked."""
    linked = {exercise}
    grew = True
    while grew:
        grew = False
        for name, ex in EXERCISES.items():
            near = {name} | set(ex.after)
            if near & linked and not near <= linked:
                linked |= near
                grew = True
    return min(linked)


def _interleaved(mutants: list[Mutant]) -> list[Mutant]:
    """The mutants, each exercise's first before any exercise's second (and
    so on): a group's exercises take turns in its rounds, so that the first
    rounds grade some mutants of every exercise."""
    rank: dict[str, int] = {}
    keyed = []
    for i, m in enumerate(mutants):
        keyed.append((rank.get(m.file, 0), i, m))
        rank[m.file] = rank.get(m.file, 0) + 1
    return [m for _, _, m in sorted(keyed, key=lambda k: k[:2])]


def _rounds(mutants: list[Mutant]) -> list[list[Mutant]]:
    """The i-th mutant of each group in round i (a group's exercises taking
    turns: ``_interleaved``)."""
    rounds: list[list[Mutant]] = []
    position: dict[str, int] = {}
    for m in _interleaved(mutants):
        group = _group(m.file)
        i = position.get(group, 0)
        position[group] = i + 1
        if i == len(rounds):
            rounds.append([])
        rounds[i].append(m)
    return rounds


ROUNDS = _rounds(MUTANTS)
# The default run grades the first rounds: a few mutants of every exercise,
# each round holding one of every group's.  The rest are the corpus tier
# (``--corpus``, run by CI); an author's loop grades all of its exercise's.
DEFAULT_ROUNDS = 3
# Those rounds' mutants, by (exercise, name): what the default run grades.
IN_DEFAULT_RUN = {(m.file, m.name) for r in ROUNDS[:DEFAULT_ROUNDS] for m in r}


def _keyword(round_: list[Mutant]) -> str | None:
    """One -k expression for the round: a mutant's ``only`` selects within its
    own exercise's suites (their files are named after the exercise), and its
    public tests are selected beside them (``public_keyword``: the public
    check is read from the same grading)."""
    if not any(m.only for m in round_):
        return None
    parts = []
    for m in round_:
        if not m.only:
            parts.append(m.file)
        elif m.file in PUBLIC_EXERCISES:
            parts.append(f"({m.file} and ({m.only})) or {public_keyword(m)}")
        else:
            parts.append(f"({m.file} and ({m.only}))")
    return " or ".join(parts)


def _unkeyed(mutant: Mutant, report) -> str | None:
    """The diagnoses of the mutant's failing tests that no table keys."""
    found = [f"{t.name}: {text!r}" for t in failures(report, mutant.file)
             for ident, text in insight.diagnoses(t.output) if ident.startswith("unkeyed-")]
    if found:
        return (f"{mutant.file}:{mutant.name}: diagnoses in words no MISTAKES table holds "
                "(add them to a MISTAKES table: grader.insight.tables finds it):\n" + "\n".join(found))
    return None


def _problem(mutant: Mutant, report) -> str | None:
    got, total = report.exercise_scores()[mutant.file]
    if got >= total:
        return f"{mutant.file}:{mutant.name} kept full marks ({got}/{total})"
    unkeyed = _unkeyed(mutant, report)
    if unkeyed:
        return unkeyed
    outputs = "\n".join(t.output for t in failures(report, mutant.file))
    named = diagnosis_lines(outputs) if mutant.diagnosis else outputs
    if mutant.expect.lower() not in named.lower():
        where = "diagnosis line" if mutant.diagnosis else "feedback"
        return (f"no {where} names {mutant.file}:{mutant.name} (looked for "
                f"{mutant.expect!r}):\n{outputs}")
    return None


def pytest_generate_tests(metafunc):
    """The rounds of every mutant; in an author's loop (``--exercise``, see
    tests/conftest.py) only the chosen exercises' mutants, each round grading
    one of them: no round then grades another exercise's mutant."""
    if "round_" not in metafunc.fixturenames:
        return
    chosen = metafunc.config.getoption("exercise")
    rounds = _rounds([m for m in MUTANTS if m.file in chosen]) if chosen else ROUNDS
    metafunc.parametrize("round_", [
        pytest.param(r, id="+".join(f"{m.file}:{m.name}" for m in r),
                     marks=[pytest.mark.corpus] if i >= DEFAULT_ROUNDS else [])
        for i, r in enumerate(rounds)])


@pytest.fixture
def own_outputs(monkeypatch):
    """Each test's feedback as the test itself wrote it, kept on the result
    (``own_output``) before root causes are attributed across the grading: a
    public test's own words are what the public check shows, where the hidden
    grading may say "the mistake named above" of a hidden test."""
    from grader import core
    real = core.rootcause.attribute

    def attribute(report, *args, **kwargs):
        for t in report.tests:
            t.own_output = t.output
        return real(report, *args, **kwargs)

    monkeypatch.setattr(core.rootcause, "attribute", attribute)


@pytest.mark.slow
@pytest.mark.author
@pytest.mark.usefixtures("own_outputs")
def test_mutant_loses_points_and_is_named(round_, tmp_path):
    sub = tmp_path / "submission"
    sub.mkdir()
    for path in SOLUTIONS.glob("ex*.py"):
        (sub / path.name).write_text(path.read_text())
    for m in round_:
        (sub / f"{m.file}.py").write_text(m.apply((SOLUTIONS / f"{m.file}.py").read_text()))
    report = grade_dir(sub, [m.file for m in round_], keyword=_keyword(round_))
    assert not report.errors, report.errors
    problems = [p for p in (_problem(m, report) for m in round_) if p]
    assert not problems, "\n\n".join(problems)
    # The same grading's public tests: the public check (tests/test_public_catches.py)
    problems = public_problems(round_, report)
    assert not problems, "\n\n".join(problems)


def test_rounds_hold_every_mutant_once_and_never_two_of_a_group():
    seen = [m for r in ROUNDS for m in r]
    assert sorted(seen, key=id) == sorted(MUTANTS, key=id)
    assert _group("ex03_gqa") == _group("ex02_mha") != _group("ex01_by_hand")
    for r in ROUNDS:
        groups = [_group(m.file) for m in r]
        assert len(groups) == len(set(groups))
