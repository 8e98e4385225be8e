"""`attn-grade check` keeps exercise G's compile check for unchanged files.

Compiling every config of a kernel for two GPUs takes most of a check of all
exercises; the answer depends only on the files, so a student's second check
reuses it.  Grading never does.
"""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from grader.reference import flash_judge
from tests.conftest import copy_solutions
from tests.mutants.ex07_flash_attention import MUTANTS

triton = pytest.importorskip("triton")


class _FakeCompiler:
    """Stands in for the compile worker: counts the probes it answers."""
    calls = 0

    def __init__(self, *args):
        self._worker = self

    def close(self):
        pass

    kill = close

    def probe(self, name):
        type(self).calls += 1
        return {"targets": [{"target": "sm_80 (A100)", "rows": [], "n": type(self).calls}]}


def test_cache_reused_while_files_unchanged(tmp_path, monkeypatch):
    monkeypatch.setattr(flash_judge, "compile_worker", _FakeCompiler)
    _FakeCompiler.calls = 0
    sub = copy_solutions(tmp_path / "sub", ["ex07_flash_attention"])
    cache = tmp_path / "cache"
    first, cached = flash_judge.compile_results(sub, None, cache)
    assert not cached and _FakeCompiler.calls == 1
    again, cached = flash_judge.compile_results(sub, None, cache)
    assert cached and again == first and _FakeCompiler.calls == 1
    # Another exercise, or a file ex07 does not import, changes nothing.
    (sub / "ex02_mha.py").write_text("def softmax(x):\n    return x\n")
    (sub / "notes.py").write_text("X = 1\n")
    _, cached = flash_judge.compile_results(sub, None, cache)
    assert cached and _FakeCompiler.calls == 1
    # A change to ex07, or to a module it imports (and that one's imports), compiles again.
    path = sub / "ex07_flash_attention.py"
    path.write_text("import helpers\n" + path.read_text())
    (sub / "helpers.py").write_text("from deeper import Y\n")
    (sub / "deeper.py").write_text("Y = 1\n")
    _, cached = flash_judge.compile_results(sub, None, cache)
    assert not cached and _FakeCompiler.calls == 2
    (sub / "deeper.py").write_text("Y = 2\n")
    _, cached = flash_judge.compile_results(sub, None, cache)
    assert not cached and _FakeCompiler.calls == 3


def test_imports_that_cannot_be_read_count_every_file(tmp_path):
    sub = copy_solutions(tmp_path / "sub", ["ex07_flash_attention", "ex02_mha"])
    path = sub / "ex07_flash_attention.py"
    assert [p.name for p in flash_judge.compile_inputs(sub)] == ["ex07_flash_attention.py"]
    path.write_text("import importlib\nhelp = importlib.import_module('ex02_mha')\n"
                    + path.read_text())
    assert flash_judge.compile_inputs(sub) is None
    # A module that does not parse imports nothing: its own bytes are the key
    # (and its syntax error is what the student sees).
    path.write_text("def broken(:\n")
    assert [p.name for p in flash_judge.compile_inputs(sub)] == ["ex07_flash_attention.py"]


def test_grading_never_uses_a_cache(tmp_path, monkeypatch):
    monkeypatch.setattr(flash_judge, "compile_worker", _FakeCompiler)
    _FakeCompiler.calls = 0
    sub = copy_solutions(tmp_path / "sub", ["ex07_flash_attention"])
    for _ in range(2):
        _, cached = flash_judge.compile_results(sub, None, None)
        assert not cached
    assert _FakeCompiler.calls == 2


def test_unwritable_cache_only_costs_time(tmp_path, monkeypatch):
    monkeypatch.setattr(flash_judge, "compile_worker", _FakeCompiler)
    sub = copy_solutions(tmp_path / "sub", ["ex07_flash_attention"])
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    res, cached = flash_judge.compile_results(sub, None, blocker / "cache")
    assert not cached and res["targets"]


@pytest.mark.slow
def test_check_twice_reuses_the_compile_answer(tmp_path, monkeypatch):
    """As a student runs it: the second check of the same files says the
    answer was kept (no compile the second time); a failing kernel stays failing."""
    sub = copy_solutions(tmp_path / "sub", ["ex07_flash_attention"])
    mutant = next(m for m in MUTANTS if m.name == "kernel_global_read")
    path = sub / "ex07_flash_attention.py"
    path.write_text(path.read_text().replace(mutant.find, mutant.replace, 1))
    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path / "xdg")}
    cmd = [sys.executable, "-m", "grader.cli", "check", "ex07", "--path", str(sub),
           "--artifacts", str(tmp_path / "out")]
    runs = []
    for _ in range(2):
        done = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=600)
        runs.append((None, done))
    for _, done in runs:
        assert done.returncode == 1, done.stdout + done.stderr
        assert "global variable LOG2E" in done.stdout
    assert list((tmp_path / "xdg" / "attn-grade").glob("compile-*.json"))
    assert "kept from an earlier check" not in runs[0][1].stdout
    assert "kept from an earlier check" in runs[1][1].stdout
    # The second answer costs no compile: no compile worker is started for it
    # (how much faster that is depends on the machine: a benchmark, not a test).
    from tests.conftest import launcher
    started = []
    real = flash_judge.compile_worker

    def counting(launch_worker):
        started.append(1)
        return real(launch_worker)
    monkeypatch.setattr(flash_judge, "compile_worker", counting)
    answers = [flash_judge.compile_results(sub, launcher().binder(sub), tmp_path / "direct")
               for _ in range(2)]
    assert [cached for _, cached in answers] == [False, True] and started == [1]
    assert answers[0][0] == answers[1][0]


def test_no_cache_checks_without_the_user_cache(tmp_path, monkeypatch):
    """``check --no-cache`` grades with no cache (then every check compiles:
    ``test_grading_never_uses_a_cache``); plain ``check`` uses the user's."""
    from click.testing import CliRunner

    from grader import cli
    seen = []

    def fake_run(path, options):
        seen.append(options.check_cache)
        raise SystemExit(0)

    monkeypatch.setattr(cli, "_run", fake_run)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    sub = copy_solutions(tmp_path / "sub", ["ex07_flash_attention"])
    for flags in ([], ["--no-cache"], ["--cache"]):
        result = CliRunner().invoke(cli.main, ["check", "G", "--path", str(sub), *flags])
        assert result.exit_code == 0, result.output
    assert seen == [tmp_path / "xdg" / "attn-grade", None, tmp_path / "xdg" / "attn-grade"]
