"""Every known mistake loses points, and the feedback names it.

Mutants of exercises that import no other exercise and are imported by none
are graded together: one submission holds one mutant of each such exercise
(a round), the rest of it correct.  A grading runs each exercise in its own
worker, so a mistake costs only its own exercise (``test_grading`` and
``test_attacks`` hold the grader to that), and each mutant is judged on its
own exercise's results alone; what the round saves is a grading's start (the
zygote's PyTorch, pytest's session) per mutant.  Exercises that import
others (ex03 imports ex02) are graded one mutant at a time, so that no
mistake reaches them from a sibling.
"""
from __future__ import annotations

import pytest

from grader.exercises import EXERCISES
from tests.conftest import SOLUTIONS, failures, grade_dir
from tests.mutants import Mutant, all_mutants, diagnosis_lines

MUTANTS = all_mutants()


def _linked(exercise: str) -> bool:
    """Does it import an exercise, or is it imported by one?"""
    return bool(EXERCISES[exercise].after) or any(
        exercise in ex.after for ex in EXERCISES.values())


def _rounds(mutants: list[Mutant]) -> list[list[Mutant]]:
    """The i-th mutant of each unlinked exercise in round i; every mutant of
    a linked exercise in a round of its own."""
    rounds: list[list[Mutant]] = []
    position: dict[str, int] = {}
    for m in mutants:
        if _linked(m.file):
            rounds.append([m])
            continue
        i = position.get(m.file, 0)
        position[m.file] = i + 1
        shared = [r for r in rounds if not _linked(r[0].file)]
        if i < len(shared):
            shared[i].append(m)
        else:
            rounds.append([m])
    return rounds


ROUNDS = _rounds(MUTANTS)


def _keyword(round_: list[Mutant]) -> str | None:
    """One -k expression for the round: a mutant's ``only`` selects within its
    own exercise's suites (their files are named after the exercise)."""
    if not any(m.only for m in round_):
        return None
    return " or ".join(f"({m.file} and ({m.only}))" if m.only else m.file for m in round_)


def _problem(mutant: Mutant, report) -> str | None:
    got, total = report.exercise_scores()[mutant.file]
    if got >= total:
        return f"{mutant.file}:{mutant.name} kept full marks ({got}/{total})"
    outputs = "\n".join(t.output for t in failures(report, mutant.file))
    named = diagnosis_lines(outputs) if mutant.diagnosis else outputs
    if mutant.expect.lower() not in named.lower():
        where = "diagnosis line" if mutant.diagnosis else "feedback"
        return (f"no {where} names {mutant.file}:{mutant.name} (looked for "
                f"{mutant.expect!r}):\n{outputs}")
    return None


@pytest.mark.slow
@pytest.mark.parametrize("round_", ROUNDS,
                         ids=["+".join(f"{m.file}:{m.name}" for m in r) for r in ROUNDS])
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


def test_rounds_hold_every_mutant_once_and_never_two_of_an_exercise():
    seen = [m for r in ROUNDS for m in r]
    assert sorted(seen, key=id) == sorted(MUTANTS, key=id)
    for r in ROUNDS:
        files = [m.file for m in r]
        assert len(files) == len(set(files))
        assert len(r) == 1 or not any(_linked(f) for f in files)
