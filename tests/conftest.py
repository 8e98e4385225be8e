"""Shared helpers for the package's own tests."""
from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from grader.core import Options, grade

REPO = Path(__file__).resolve().parent.parent
SOLUTIONS = REPO / "solutions"
EXERCISES_DIR = REPO / "exercises"


def copy_solutions(dest: Path, only: list[str] | None = None) -> Path:
    dest.mkdir(parents=True, exist_ok=True)
    for path in SOLUTIONS.glob("*.py"):   # the exercises and the questions
        if only is None or path.stem in only:
            shutil.copy(path, dest / path.name)
    return dest


def grade_dir(path: Path, exercises=None, suite="hidden", **kwargs):
    return grade(path, Options(suite=suite, exercises=exercises, **kwargs))


def failures(report, exercise=None) -> list:
    return [t for t in report.tests if t.status == "failed"
            and (exercise is None or t.exercise == exercise)]


@pytest.fixture
def solutions_copy(tmp_path):
    return copy_solutions(tmp_path / "submission")
