"""A submission that names the worker's runtime is not judged on what the
in-worker probes measured: those tests need a person's look."""
from __future__ import annotations

import pytest

from grader.report import NEEDS_REGRADE, PASSED
from grader.sandbox.reach import runtime_reach
from tests.conftest import copy_solutions, grade_dir


@pytest.mark.parametrize("line", [
    "import runtime.probes.ex06_gqa_intensity",
    "from runtime.probes import ex06_gqa_intensity",
    "from runtime import codec",
    "import runtime",
    "import importlib; importlib.import_module('runtime.probes.ex06_gqa_intensity')",
    "import sys; t = sys.modules['runtime.probes.ex06_gqa_intensity']",
    "import sys; t = sys.modules['runtime']",
    "import sys; t = sys.modules.get('runtime')",
    "__import__('runtime')",
])
def test_reaching_into_the_runtime_is_found(tmp_path, line):
    (tmp_path / "ex06_gqa_intensity.py").write_text(f"x = 1\n{line}\n")
    assert runtime_reach(tmp_path) == "ex06_gqa_intensity.py, line 2"


def test_ordinary_modules_are_not_flagged(tmp_path):
    (tmp_path / "ex02_mha.py").write_text(
        '"""Runs on a worker; the codec of the probes is not ours."""\n'
        'import numpy as np\nmode = "worker"\nname = "codec"\n'
        'times = {"runtime": 1.0}\nt = times["runtime"] + times.get("runtime")\n')
    (tmp_path / "broken.py").write_text("def f(:\n")
    assert runtime_reach(tmp_path) is None


@pytest.mark.slow
def test_a_forging_submission_needs_review_where_probes_measured(tmp_path):
    sub = copy_solutions(tmp_path / "sub", ["ex06_gqa_intensity"])
    path = sub / "ex06_gqa_intensity.py"
    path.write_text(path.read_text()
                    + "\nimport runtime.probes.ex06_gqa_intensity as _tracer  # could patch it\n")
    report = grade_dir(sub, ["ex06_gqa_intensity"])
    review = [t for t in report.tests if t.status == NEEDS_REGRADE]
    assert review and all("under review" in t.output and "line" in t.output for t in review)
    assert all(t.score == 0 and t.max_score > 0 for t in review)
    # the answers themselves are still graded as usual
    assert any(t.status == PASSED and t.score > 0 for t in report.tests)
    assert report.ungraded


def test_a_fake_grading_only_stub_cannot_shrink_the_maximum(tmp_path):
    """The student edition skips checks whose probe it ships as a stub (it
    raises GradingOnly); in the instructors' grader a student's own class of
    that name, raised from inside a probed call, is a failure."""
    sub = copy_solutions(tmp_path / "sub", ["ex06_gqa_intensity"])
    path = sub / "ex06_gqa_intensity.py"
    path.write_text(path.read_text().replace(
        "def gqa_decode_attention(", "class GradingOnly(Exception):\n    pass\n\n\n"
        "def _real_gqa_decode_attention(", 1) + """

def gqa_decode_attention(*args, **kwargs):
    import inspect
    if any(''.join(['pro', 'bes']) in (f.filename or '') for f in inspect.stack()[1:]):
        raise GradingOnly('not checked in the student edition')
    return _real_gqa_decode_attention(*args, **kwargs)
""")
    report = grade_dir(sub, ["ex06_gqa_intensity"])
    total = sum(t.max_score for t in report.tests)
    reference = grade_dir(copy_solutions(tmp_path / "ref", ["ex06_gqa_intensity"]),
                          ["ex06_gqa_intensity"])
    assert total == sum(t.max_score for t in reference.tests)
    assert report.score < reference.score
