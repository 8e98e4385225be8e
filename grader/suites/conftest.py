"""Fixtures for the grading suites.

``student``: the submission's module for the test's exercise (declared on
the suite module with ``pytestmark = [pytest.mark.exercise("ex02_mha")]``),
run in a sandboxed worker.  ``machine``: facts about the grading machine
measured once per run and shown at the top of the report.  ``run_seed``
(automatic): the run's secret seed, from which every random hidden case is
drawn (``grader.reference.cases``).
"""
from __future__ import annotations

import pytest

from grader.core import PLUGIN_KEY
from grader.reference import cases


def _plugin(config):
    plugin = config.stash.get(PLUGIN_KEY, None)
    if plugin is None:
        pytest.exit("the grading suites run through `attn-grade`, not plain pytest", 2)
    return plugin


@pytest.fixture
def student(request):
    mark = request.node.get_closest_marker("exercise")
    if mark is None:
        raise RuntimeError(f"{request.node.nodeid}: the suite declares no exercise marker")
    timeout = request.node.get_closest_marker("timeout_s")
    return _plugin(request.config).student(mark.args[0],
                                           timeout.args[0] if timeout else None)


@pytest.fixture(scope="session")
def machine(request):
    """A dict shown at the top of the report; suites add measured facts."""
    return _plugin(request.config).report.machine


@pytest.fixture
def grading_options(request):
    return _plugin(request.config).options


@pytest.fixture
def for_staff(request):
    """``for_staff(entry)`` keeps a free-text answer for staff grading
    (``Report.manual``): a dict with exercise, question, points (the staff's),
    answer and rubric."""
    return _plugin(request.config).report.manual.append


@pytest.fixture(scope="session", autouse=True)
def run_seed(request):
    """The seed of this grading's random cases (recorded in the report)."""
    seed = _plugin(request.config).report.seed
    with cases.run_seed(cases.DEFAULT_SEED if seed is None else seed) as value:
        yield value
