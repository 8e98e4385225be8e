"""What is given is given: ex07's ``query_block_attention`` where a module lacks it.

The step before the kernel grades the student's ``tile_update`` and
``tile_finish`` inside a kernel the exercise gives whole.  A module without
that given code is graded through the grader's copy
(``runtime/probes/ex07_given.py``) instead of losing every tile test; the
copy must stay the exercise's text.
"""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

from grader.reference.secret import flash
from tests.conftest import copy_solutions, failures, grade_dir

EX = "ex07_flash_attention"
REPO = Path(__file__).resolve().parents[1]
COPY = REPO / "grader" / "sandbox" / "runtime" / "probes" / "ex07_given.py"
GIVEN = ("_query_block_kernel", "query_block_attention")


def _functions(path: Path) -> dict:
    """The given functions of a file, as ASTs without the exercise's Triton guard."""
    found = {}
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.FunctionDef) and node.name in GIVEN:
            # the exercise's "no Triton on this machine" raise: the copy is imported
            # only where Triton is installed
            node.body = [s for s in node.body if not (
                isinstance(s, ast.If) and "triton is None" in ast.unparse(s.test))]
            found[node.name] = ast.dump(node)
    return found


def test_the_grader_copy_is_the_exercise_text():
    """The copy of the given kernel is the exercise's, statement for statement."""
    exercise = _functions(REPO / "exercises" / f"{EX}.py")
    assert set(exercise) == set(GIVEN)
    assert _functions(COPY) == exercise


@pytest.mark.skipif(not flash.HAS_TRITON, reason=flash.NEEDS_TRITON)
def test_a_module_without_the_given_kernel_keeps_its_tile_tests(tmp_path):
    """The solution with the given code deleted: every tile test still passes."""
    sub = copy_solutions(tmp_path / "submission", [EX])
    path = sub / f"{EX}.py"
    text = path.read_text()
    start = text.index("QUERY_BLOCK = 16")
    end = text.index("# BEGIN SOLUTION", start)
    path.write_text(text[:start] + text[end:])
    assert "query_block_attention" not in path.read_text().split("def tile_finish")[1][:2000]
    report = grade_dir(sub, [EX], keyword="query_block")
    assert not report.errors, report.errors
    tile = [t for t in report.tests if "query_block" in t.name]
    assert len(tile) >= 6, [t.name for t in report.tests]
    assert not failures(report, EX), [t.output for t in failures(report, EX)]
    got, total = report.exercise_scores()[EX]
    assert got == total > 0
