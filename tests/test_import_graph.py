"""The grader's modules import one another without a circle, even through an
import made inside a function (which would only hide one)."""
from __future__ import annotations

import importlib.util

import pytest

from tests.conftest import REPO

spec = importlib.util.spec_from_file_location("import_graph", REPO / "benchmarks" / "import_graph.py")
graph = importlib.util.module_from_spec(spec)
spec.loader.exec_module(graph)


@pytest.mark.quick
def test_no_circle_anywhere_in_the_grader():
    found = graph.edges()
    assert len(found) > 100          # the scan reads the package (a broken scan finds nothing)
    assert graph.circles(found) == []


@pytest.mark.quick
def test_the_scan_finds_a_circle_through_a_function(tmp_path):
    planted = [("a", "b", False), ("b", "a", True), ("c", "a", False)]
    assert graph.circles(planted) == [["a", "b"]]


@pytest.mark.quick
def test_the_class_wing_and_the_engine_are_apart():
    """The engine (grading one submission) never imports the class wing."""
    wrong = [(a, b) for a, b, _ in graph.edges()
             if b.startswith("grader.classroom") and not a.startswith("grader.classroom")
             and a != "grader.cli"]
    assert wrong == []
