"""One maximum: what a grading is out of depends on the suite and the declared
setup (the GPU tier, --gpu-tier), fixed before any test runs
(``grader.core.plan``), never on the submission or on what the machine lacks."""
from __future__ import annotations

import csv

import pytest
from click.testing import CliRunner

from grader.cli import main
from grader.core import Options, maximum
from grader.report import NEEDS_REGRADE, NOT_RUN
from tests.conftest import EXERCISES_DIR, SOLUTIONS, copy_solutions, grade_dir

EX7 = "ex07_flash_attention"


def test_the_maximum_is_the_suites_and_the_declared_gpu_tier():
    plain, tier = maximum(Options(exercises=[EX7])), maximum(Options(exercises=[EX7],
                                                                     gpu_tier=True))
    public = maximum(Options(suite="public", exercises=[EX7]))
    assert 0 < public[EX7] < plain[EX7] < tier[EX7]


def _ex07(folder, text):
    folder.mkdir()
    if text is not None:
        (folder / f"{EX7}.py").write_text(text)
    (folder / "ex01_by_hand.py").write_text((SOLUTIONS / "ex01_by_hand.py").read_text())
    return folder


BROKEN_EX07 = {
    "missing": None,
    "import error": "import numpy\nraise ImportError('no such thing')\n",
    "syntax error": "def flash_attention(q, k, v\n",
    "crash at import": "import ctypes\nctypes.string_at(0)\n",
    "exit at import": "import os\nos._exit(3)\n",
    "stub": (EXERCISES_DIR / f"{EX7}.py").read_text(),
}


@pytest.mark.slow
@pytest.mark.parametrize("gpu_tier", [False, True], ids=["default", "gpu-tier"])
def test_ex07_is_out_of_one_maximum_whatever_the_submission(tmp_path, gpu_tier):
    """Missing, failing to import, crashing at import or in a call, or a stub:
    the same maximum, the plan's, in the hidden suite with and without the GPU
    tier (on this machine, GPU or not).  (The solution's: test_ex07_flash.)"""
    want = maximum(Options(exercises=[EX7], gpu_tier=gpu_tier))[EX7]
    cases = dict(BROKEN_EX07)
    solution = (SOLUTIONS / f"{EX7}.py").read_text()
    cases["crash in a call"] = solution + (
        "\n\ndef flash_attention(q, k, v, *, causal=True, sm_scale=None):\n"
        "    import os\n    os._exit(9)\n")
    if gpu_tier:   # the case that moved the maximum (40, not 32), and one more
        cases = {name: cases[name] for name in ("missing", "exit at import")}
    for name, text in cases.items():
        sub = _ex07(tmp_path / name.replace(" ", "-"), text)
        report = grade_dir(sub, [EX7], gpu_tier=gpu_tier, call_timeout=5, import_timeout=10)
        got, total = report.exercise_scores()[EX7]
        assert total == want == report.max_score, (name, total, want)
        assert got == 0 or name == "crash in a call", (name, got)
        gpu = [t for t in report.tests if "gpu" in t.name]
        assert gpu and all((t.max_score > 0) == gpu_tier for t in gpu), name


def test_a_grading_machine_without_matplotlib_keeps_the_maximum(tmp_path, monkeypatch):
    """ex04's plot tests need matplotlib on the grading machine (a dependency of
    the package).  Without it they need a regrade, and are still in the maximum."""
    from grader.sandbox.client import StudentModule

    sub = copy_solutions(tmp_path / "sub", ["ex04_quadratic"])
    have = grade_dir(sub, ["ex04_quadratic"], keyword="plot")
    probe = StudentModule.probe

    def without_matplotlib(self, name, *args, **kwargs):
        if name == "ex04_quadratic.plot":
            return {"no_matplotlib": True}   # what the probe answers without it
        return probe(self, name, *args, **kwargs)
    monkeypatch.setattr(StudentModule, "probe", without_matplotlib)
    lacking = grade_dir(sub, ["ex04_quadratic"], keyword="plot")
    assert have.score == have.max_score == lacking.max_score >= 2
    assert have.max_score == maximum(Options(exercises=["ex04_quadratic"], keyword="plot"))[
        "ex04_quadratic"]
    plots = [t for t in lacking.tests if t.name.startswith("test_plot")]
    assert len(plots) == 2 and all(t.status == NEEDS_REGRADE and t.max_score == 1
                                   and "needs matplotlib" in t.output for t in plots)
    assert lacking.score == lacking.max_score - 2 and lacking.ungraded


def test_the_gpu_tier_off_is_not_run_and_counts_nowhere(tmp_path):
    report = grade_dir(_ex07(tmp_path / "sub", None), [EX7], keyword="gpu")
    assert report.tests and all(t.status == NOT_RUN and t.max_score == 0
                                and "--gpu-tier" in t.output for t in report.tests)
    assert report.max_score == 0 and not report.ungraded


def test_a_batch_row_that_could_not_be_graded_is_out_of_the_class_maximum(tmp_path):
    folder = tmp_path / "class"
    copy_solutions(folder / "alice", ["ex01_by_hand", "questions"])
    (folder / "dave").mkdir()                      # nothing at all: not graded
    out = tmp_path / "grades.csv"
    result = CliRunner().invoke(main, ["batch", str(folder), "--out", str(out),
                                       "-e", "ex01", "-e", "questions"])
    assert result.exit_code == 3, result.output    # dave could not be graded
    rows = {row["submission"]: row for row in csv.DictReader(out.open())}
    assert "no exercise modules" in rows["dave"]["error"]
    assert float(rows["dave"]["total"]) == 0
    most = sum(maximum(Options(exercises=["ex01_by_hand", "questions"])).values())
    assert float(rows["dave"]["max_total"]) == float(rows["alice"]["max_total"]) == most > 0
    assert float(rows["alice"]["total"]) == most
