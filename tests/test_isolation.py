"""Isolation as the user meets it: the line at the top of every output, the
doctor, --isolation strict, fixed totals with "needs regrade", exit status 3."""
from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from grader.cli import EXIT_UNGRADED, main
from grader.core import Options, maximum
from grader.report import NEEDS_REGRADE, to_gradescope, to_junit, to_text
from grader.sandbox import bwrap
from tests.conftest import copy_solutions, grade_dir, ex01_max

NAMESPACES, WHY = bwrap.usable()


@pytest.fixture
def no_bwrap(monkeypatch):
    """This process believes bubblewrap cannot run (as on Ubuntu 24.04 without root)."""
    monkeypatch.setattr(bwrap, "_probe", (False, "bubblewrap cannot make a sandbox here: "
                                                 "setting up uid map: Permission denied"))


def test_strict_refuses_without_namespaces(tmp_path, no_bwrap):
    sub = copy_solutions(tmp_path / "sub", ["ex01_by_hand"])
    result = CliRunner().invoke(main, ["grade", str(sub), "-e", "ex01", "--isolation",
                                       "strict"])
    assert result.exit_code == 2
    assert "--isolation strict" in result.output and "attn-grade doctor" in result.output
    assert "Traceback" not in result.output


def test_the_fallback_says_so_first_in_every_format(tmp_path, no_bwrap):
    sub = copy_solutions(tmp_path / "sub", ["ex01_by_hand"])
    report = grade_dir(sub, ["ex01_by_hand"], fresh=True)
    assert report.isolation != "namespaces"
    first = to_text(report).splitlines()[0]
    assert first.startswith("Isolation: ") and ("WEAK" in first or "NO ISOLATION" in first)
    data = to_gradescope(report)
    assert data["output"].splitlines()[0] == first
    assert data["extra_data"]["isolation"] == report.isolation
    assert report.exercise_scores()["ex01_by_hand"] == (ex01_max(), ex01_max())   # still graded


@pytest.mark.skipif(not NAMESPACES, reason=f"bubblewrap cannot run here: {WHY}")
def test_namespaces_are_said_too(tmp_path):
    sub = copy_solutions(tmp_path / "sub", ["ex01_by_hand"])
    out = tmp_path / "r.json"
    result = CliRunner().invoke(main, ["grade", str(sub), "-e", "ex01", "--isolation",
                                       "strict", "--format", "json", "--out", str(out)])
    assert result.exit_code == 0, result.output
    data = json.loads(out.read_text())
    assert data["extra_data"]["isolation"] == "namespaces"
    assert data["output"].startswith("Isolation: namespaces (bubblewrap)")
    assert data["score"] == ex01_max()


def test_doctor_names_each_need(no_bwrap):
    result = CliRunner().invoke(main, ["doctor"])
    assert result.exit_code == 0, result.output
    for what in ("bubblewrap", "namespaces", "memory cgroup", "root", "GPU"):
        assert what in result.output
    assert "NO  namespaces" in result.output and "strict would refuse" in result.output


SLOW_TIMER = '''
def time_fn(fn, *args, warmup=2, repeats=5, **kwargs):
    """Honest, but on a machine that stalls 0.3 s in every call."""
    import statistics, time
    for _ in range(warmup):
        fn(*args, **kwargs)
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn(*args, **kwargs)
        time.sleep(0.3)
        times.append(time.perf_counter() - start)
    return statistics.median(times)
'''


@pytest.mark.slow
def test_what_cannot_be_judged_needs_a_regrade_and_keeps_its_points(tmp_path, monkeypatch):
    """A timer test the machine's noise leaves undecided: its point stays in the
    maximum, the text, JSON and JUnit say "needs regrade", and grade exits 3.
    One grading (a dozen seconds of an honest but stalling timer): the command
    line then writes and exits on that same report."""
    from grader import cli
    sub = copy_solutions(tmp_path / "sub", ["ex04_quadratic"])
    path = sub / "ex04_quadratic.py"
    path.write_text(path.read_text() + SLOW_TIMER)
    report = grade_dir(sub, ["ex04_quadratic"], suite="public", keyword="times_a_slow_function",
                       fresh=True)
    assert [t.status for t in report.tests] == [NEEDS_REGRADE]
    assert report.max_score == 1 and "REGR" in to_text(report)
    assert "NEEDS REGRADE" in to_text(report) and "<skipped" in to_junit(report)

    monkeypatch.setattr(cli, "_run", lambda path, options: (report, []))
    out = tmp_path / "r.json"
    result = CliRunner().invoke(main, ["grade", str(sub), "-e", "ex04", "--suite", "public",
                                       "-k", "times_a_slow_function", "--format", "json",
                                       "--out", str(out)])
    assert result.exit_code == EXIT_UNGRADED == 3, result.output
    data = json.loads(out.read_text())
    [test] = data["tests"]
    assert test["max_score"] == 1 and test["score"] == 0
    assert test["output"].startswith("NEEDS REGRADE") and test["extra_data"]["needs_regrade"]
    assert data["extra_data"]["needs_regrade"] == 1


def test_a_missing_module_keeps_the_maximum_and_the_import_error_is_kept(tmp_path):
    # What a complete submission is out of, without grading one more
    # (tests/test_grading.py holds each solution's grading to this plan).
    full = sum(maximum(Options(exercises=["ex01_by_hand", "ex03_gqa"])).values())
    broken = copy_solutions(tmp_path / "broken", ["ex01_by_hand"])
    (broken / "ex03_gqa.py").write_text("import numpy\nraise RuntimeError('boom')\n")
    report = grade_dir(broken, ["ex01_by_hand", "ex03_gqa"], fresh=True)
    missing = grade_dir(copy_solutions(tmp_path / "missing", ["ex01_by_hand"]),
                        ["ex01_by_hand", "ex03_gqa"], fresh=True)
    assert full == report.max_score == missing.max_score > 0
    assert "RuntimeError" in report.import_errors["ex03_gqa"]
    assert to_gradescope(report)["extra_data"]["import_errors"]["ex03_gqa"]


def test_cgroups_of_a_killed_grader_are_removed_by_the_next(monkeypatch):
    """A grader killed with kill -9 leaves its workers' empty cgroups; the next
    grader on the machine removes them (and nothing of a living grader's)."""
    import subprocess
    import sys

    from grader.sandbox import memcg
    parent = memcg.base()[0]
    if parent is None:
        pytest.skip("no writable memory cgroup here")
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True).stdout.strip()
    stale = parent / f"attn-grade-{dead}-0"
    mine = memcg.MemoryCgroup(64 << 20)
    stale.mkdir()
    try:
        monkeypatch.setattr(memcg, "_base", None)
        assert memcg.base()[0] == parent
        assert not stale.exists() and mine.path.exists()
    finally:
        mine.remove()
        if stale.exists():
            stale.rmdir()


def test_grading_protects_the_secret_folders_as_a_step_of_its_own(tmp_path, monkeypatch,
                                                                   no_bwrap):
    """Deciding the isolation (as the doctor does) changes nothing; grading
    protects the secret folders itself, before any worker starts, wherever
    the workers see this machine's files."""
    from grader import core
    from grader.sandbox import confine, isolation

    calls = []
    monkeypatch.setattr(confine, "protect_secrets", lambda: calls.append("protect") or [])
    iso = isolation.decide("auto", 8192)
    assert not iso.namespaces and calls == []
    assert CliRunner().invoke(main, ["doctor"]).exit_code == 0 and calls == []
    sub = copy_solutions(tmp_path / "sub", ["ex01_by_hand"])
    report = grade_dir(sub, ["ex01_by_hand"], fresh=True)
    assert calls == ["protect"] and report.exercise_scores()["ex01_by_hand"] == (ex01_max(), ex01_max())
    calls.clear()
    core.protect_secret_folders(isolation.Isolation(isolation.NAMESPACES, "", True))
    assert calls == []   # in namespaces nothing of the package is mounted


def test_stale_staging_folders_of_dead_graders_are_removed_and_no_others(tmp_path, monkeypatch):
    """A grader killed with kill -9 leaves its workers' folders in /tmp; the
    next grader removes those of graders that are gone, once they are ten
    minutes old, and never a running grader's or its own."""
    import os
    import subprocess
    import sys
    import time

    from grader.sandbox import process
    monkeypatch.setattr(process.tempfile, "gettempdir", lambda: str(tmp_path))
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True).stdout.strip()
    old = time.time() - 3600
    folders = {}
    for name, pid in (("dead_old", dead), ("dead_new", dead), ("alive", str(os.getppid())),
                      ("mine", str(os.getpid()))):
        folder = tmp_path / f"{process.STAGING_PREFIX}{pid}-{name}"
        (folder / "submission").mkdir(parents=True)
        if name != "dead_new":
            os.utime(folder, (old, old))
        folders[name] = folder
    other = tmp_path / "attn-grade-notapid"
    other.mkdir()
    os.utime(other, (old, old))
    assert process.remove_stale_staging() == [folders["dead_old"]]
    assert not folders["dead_old"].exists()
    assert all(folders[n].exists() for n in ("dead_new", "alive", "mine")) and other.exists()
