"""Every known mistake loses points, and the feedback names it."""
from __future__ import annotations

import pytest

from tests.conftest import SOLUTIONS, failures, grade_dir
from tests.mutants import all_mutants, diagnosis_lines

MUTANTS = all_mutants()


@pytest.mark.slow
@pytest.mark.parametrize("mutant", MUTANTS, ids=[f"{m.file}:{m.name}" for m in MUTANTS])
def test_mutant_loses_points_and_is_named(mutant, tmp_path):
    source = (SOLUTIONS / f"{mutant.file}.py").read_text()
    sub = tmp_path / "submission"
    sub.mkdir()
    # Sibling modules stay correct: a mistake costs only its own exercise.
    for path in SOLUTIONS.glob("ex*.py"):
        (sub / path.name).write_text(path.read_text())
    (sub / f"{mutant.file}.py").write_text(mutant.apply(source))
    report = grade_dir(sub, [mutant.file], keyword=mutant.only or None)
    got, total = report.exercise_scores()[mutant.file]
    assert not report.errors, report.errors
    assert got < total, f"{mutant.name} kept full marks ({got}/{total})"
    outputs = "\n".join(t.output for t in failures(report, mutant.file))
    named = diagnosis_lines(outputs) if mutant.diagnosis else outputs
    where = "diagnosis line" if mutant.diagnosis else "feedback"
    assert mutant.expect.lower() in named.lower(), (
        f"no {where} names {mutant.name!r} (looked for {mutant.expect!r}):\n{outputs}")
