"""The Triton and NumPy versions the grader supports (grader.gpu.versions): what
check and grade say on others, and one set of numbers in pyproject.toml, the
CI matrix that tests them and the grader's rule."""
from __future__ import annotations

import re

import pytest
from click.testing import CliRunner

from grader.gpu import versions
from grader.cli import main
from grader.report import FAILED, NEEDS_REGRADE, NOT_RUN, PASSED, Report, to_text
from grader.report import TestResult as Result   # (not a test class)
from tests.conftest import REPO, copy_solutions

# The quick tier (tests/conftest.py): no PyTorch import, no grading.
pytestmark = pytest.mark.quick

G = "ex07_flash_attention"


def _installed(monkeypatch, triton, numpy, interpreted=True):
    got = {"triton": triton, "numpy": numpy}
    monkeypatch.setattr(versions, "installed", lambda dist: got[dist])
    monkeypatch.setattr(versions, "_interpreted", lambda: interpreted)


# -- the rule -------------------------------------------------------------------
@pytest.mark.parametrize("triton,numpy,interpreted,says", [
    ("3.4.0", "2.3.5", True, "Triton 3.4.0 is older than the 3.5 this grader supports: "
                             "pip install 'triton>=3.5'"),
    ("3.6.0", "2.4.6", True, "Triton 3.6.0's CPU interpreter fails with NumPy 2.4.6 "
                             "(Triton 3.7 fixed it): pip install 'triton>=3.7' or 'numpy<2.4'"),
    ("3.9.0", "1.23.5", True, "NumPy 1.23.5 is older than the 1.24 this grader supports: "
                              "pip install 'numpy>=1.24'"),
])
def test_an_unsupported_version_is_one_sentence_with_its_fix(triton, numpy, interpreted, says):
    [problem] = versions.problems(triton, numpy, interpreted)
    assert problem.text == says
    assert G in problem.exercises


@pytest.mark.parametrize("triton,numpy,interpreted", [
    ("3.5.0", "1.24.0", True), ("3.6.0", "2.3.5", True), ("3.6.0", "2.4.6", False),
    ("3.7.1", "2.4.6", True), ("3.9.0", "2.4.6", True), ("3.10.0+git1", "2.5.0rc1", True),
])
def test_supported_versions_say_nothing(triton, numpy, interpreted):
    assert versions.problems(triton, numpy, interpreted) == []


def test_without_triton_the_tests_say_so_themselves():
    assert versions.problems(None, "2.4.6", True) == []


def test_an_old_triton_touches_only_the_triton_exercise():
    [problem] = versions.problems("3.4.0", "2.3.5", True)
    assert problem.exercises == (G,)
    assert versions.problems("3.4.0", "2.3.5", True, exercises=["ex02_mha"]) == []


def test_a_numpy_exercise_never_asks_pytorch_about_the_interpreter(monkeypatch):
    def asked():
        raise AssertionError("imported PyTorch to check a NumPy exercise")
    monkeypatch.setattr(versions, "_interpreted", asked)
    assert versions.problems("3.6.0", "2.4.6", exercises=["ex02_mha", "ex03_gqa"]) == []


# -- what check and grade do ------------------------------------------------------
def _report():
    report = Report(submission="sub", suite="public", exercises=["ex02_mha", G])
    report.tests = [
        Result("ex02_mha", "t1", "softmax", 1, 1, PASSED),
        Result(G, "t2", "flash small", 1, 0, FAILED, output="no kernel launched"),
        Result(G, "t3", "step", 1, 1, PASSED),
        Result(G, "t4", "on a GPU", 0, 0, NOT_RUN, output="not run: needs a GPU"),
    ]
    return report


def test_an_untrusted_exercise_needs_a_regrade_and_the_report_says_why_first():
    report = _report()
    versions.mark_untrusted(report, versions.problems("3.4.0", "2.3.5", True))
    by_name = {t.name: t for t in report.tests}
    assert by_name["t1"].status == PASSED and by_name["t1"].score == 1
    for name in ("t2", "t3"):     # passed or failed: neither can be trusted
        t = by_name[name]
        assert t.status == NEEDS_REGRADE and t.score == 0 and t.max_score == 1
        assert t.output.startswith("not judged: Triton 3.4.0 is older than the 3.5")
    assert by_name["t4"].status == NOT_RUN            # worth nothing here anyway
    assert report.max_score == 3 and report.score == 1 and report.ungraded
    text = to_text(report, public_only=True)
    first = text.splitlines()[1]
    assert first.startswith("Unsupported version: Triton 3.4.0 is older")
    assert f"Not graded here: {G}" in first


def test_grade_refuses_when_every_exercise_asked_for_is_affected(tmp_path, monkeypatch):
    _installed(monkeypatch, "3.4.0", "2.3.5")
    sub = copy_solutions(tmp_path / "sub", [G])
    result = CliRunner().invoke(main, ["grade", str(sub), "-e", "G"])
    assert result.exit_code == 2, result.output
    assert "Error: Triton 3.4.0 is older than the 3.5 this grader supports: " \
           "pip install 'triton>=3.5'." in result.output
    assert "Traceback" not in result.output


def test_check_refuses_the_kernel_exercise_on_a_numpy_its_interpreter_fails_with(
        tmp_path, monkeypatch):
    _installed(monkeypatch, "3.6.0", "2.4.6")
    sub = copy_solutions(tmp_path / "sub", [G])
    result = CliRunner().invoke(main, ["check", "--path", str(sub), "G"])
    assert result.exit_code == 2, result.output
    assert "CPU interpreter fails with NumPy 2.4.6" in result.output


def test_check_marks_the_affected_exercise_and_exits_1(tmp_path, monkeypatch):
    """Asked for B and G: B is checked, G is marked, and the check fails (a
    student's CI must not pass on a kernel nobody checked)."""
    import grader.cli as cli
    _installed(monkeypatch, "3.4.0", "2.3.5")
    monkeypatch.setattr(cli, "grade", lambda folder, options: _report())
    sub = copy_solutions(tmp_path / "sub", ["ex02_mha", G])
    result = CliRunner().invoke(main, ["check", "--path", str(sub), "B", "G"])
    assert result.exit_code == 1, result.output
    assert "Unsupported version: Triton 3.4.0" in result.output
    assert "WAIT" in result.output and "not judged: Triton 3.4.0" in result.output
    assert "not checked: Triton 3.4.0 is older" in result.output   # stderr, last


def test_grade_marks_the_affected_exercise_and_exits_3(tmp_path, monkeypatch):
    import grader.cli as cli
    _installed(monkeypatch, "3.4.0", "2.3.5")
    monkeypatch.setattr(cli, "grade", lambda folder, options: _report())
    sub = copy_solutions(tmp_path / "sub", ["ex02_mha", G])
    result = CliRunner().invoke(main, ["grade", str(sub), "-e", "B", "-e", "G"])
    assert result.exit_code == 3, result.output
    assert "1/3" in result.output and "REGR" in result.output


# -- one set of numbers ------------------------------------------------------------
def _floor(requirement_name: str, text: str | None = None) -> str:
    """The ``name>=X`` floor of a pyproject's dependencies (default: the package's)."""
    text = text if text is not None else (REPO / "pyproject.toml").read_text()
    deps = re.search(r"^dependencies = \[(.*?)^\]", text, re.S | re.M).group(1)
    found = re.findall(rf'"{requirement_name}>=([\d.]+)[;"]', deps)
    assert len(found) == 1, f"pyproject.toml: one {requirement_name}>= floor, got {found}"
    return found[0]


def _matrix() -> dict[str, dict[str, str]]:
    text = (REPO / ".github" / "workflows" / "versions.yml").read_text()
    entries = re.findall(r'- name: ([\w-]+)\n\s+triton: "?([\w.]+)"?\n\s+numpy: "?([\w.]+)"?',
                         text)
    return {name: {"triton": t, "numpy": n} for name, t, n in entries}


def test_pyproject_floors_are_the_graders():
    assert versions.parse(_floor("triton")) == versions.TRITON_FLOOR
    assert versions.parse(_floor("numpy")) == versions.NUMPY_FLOOR


def test_the_student_editions_floors_are_the_same():
    """Students install the edition's pyproject (grader.release), not this one."""
    from grader.release import STUDENT_PYPROJECT
    for name in ("triton", "numpy", "torch"):
        assert _floor(name, STUDENT_PYPROJECT) == _floor(name), name


def test_ci_tests_the_oldest_versions_pyproject_allows():
    matrix = _matrix()
    assert set(matrix) >= {"oldest", "gpu-machine", "newest"}, matrix
    oldest = matrix["oldest"]
    # A floor of 3.5 admits 3.5.0: that release, exactly, is what CI installs.
    assert oldest["triton"] == f"{_floor('triton')}.0"
    assert oldest["numpy"] == f"{_floor('numpy')}.0"
    assert matrix["newest"] == {"triton": "latest", "numpy": "latest"}


def test_every_pinned_ci_job_is_a_supported_combination():
    for name, pins in _matrix().items():
        if "latest" not in pins.values():
            assert versions.problems(pins["triton"], pins["numpy"], interpreted=True) == [], \
                name


def test_the_readme_states_the_floors():
    readme = (REPO / "README.md").read_text()
    assert f"triton>={_floor('triton')}" in readme and f"numpy>={_floor('numpy')}" in readme
