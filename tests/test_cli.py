"""The attn-grade command: wiring, output formats, and one-sentence errors."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest
from click.testing import CliRunner

from grader.cli import main
from tests.conftest import REPO, copy_solutions


def run(*args):
    return CliRunner().invoke(main, [str(a) for a in args], catch_exceptions=False)


def one_sentence_error(result):
    assert result.exit_code == 2, result.output
    lines = [ln for ln in result.output.strip().splitlines() if ln.startswith("Error")]
    assert len(lines) == 1, result.output
    assert "Traceback" not in result.output
    return lines[0]


def test_grade_writes_gradescope_json(tmp_path):
    sub = copy_solutions(tmp_path / "sub", ["ex02_mha"])
    out = tmp_path / "results" / "results.json"
    result = run("grade", sub, "-e", "ex02", "--format", "json", "--out", out)
    assert result.exit_code == 0, result.output
    data = json.loads(out.read_text())
    assert data["score"] == sum(t["max_score"] for t in data["tests"]) > 0
    assert f"json result written to {out}" in result.output


def test_grade_text_table(tmp_path):
    sub = copy_solutions(tmp_path / "sub", ["ex03_gqa", "ex02_mha"])
    result = run("grade", sub, "--exercise", "ex03_gqa")
    assert result.exit_code == 0
    assert "ex03_gqa" in result.output and "Total:" in result.output
    assert "ex02_mha " not in result.output


def test_check_reports_public_tests_without_claiming_success(tmp_path):
    sub = copy_solutions(tmp_path / "sub", ["ex02_mha"])
    result = run("check", "ex02", "--path", sub)
    assert result.exit_code == 0, result.output
    assert "public suites" in result.output
    assert "hidden tests decide the grade" in result.output
    assert "after_published" not in result.output


@pytest.mark.parametrize("args,phrase", [
    (["grade", "no/such/folder"], "does not exist"),
    (["grade", "{empty}"], "no exercise modules"),
    (["grade", "{file}"], "is not a folder"),
    (["grade", "{sub}", "-e", "ex99"], "unknown exercise"),
    (["grade", "{sub}", "--suite", "secret"], "'secret' is not one of"),
    (["grade", "{sub}", "--format", "xml"], "'xml' is not one of"),
    (["grade", "{sub}", "--timeout", "-1"], "--timeout"),
    (["grade", "{sub}", "--bogus"], "No such option"),
    (["check", "--path", "no/such/folder"], "does not exist"),
    (["check", "nope", "--path", "{sub}"], "unknown exercise"),
    (["check", "--path", "{file}"], "is not a folder"),
    (["check", "--path", "{empty}"], "no exercise modules"),
    (["stubs", "--bogus"], "No such option"),
    (["frobnicate"], "No such command"),
])
def test_bad_input_is_one_sentence_and_exit_2(tmp_path, args, phrase):
    sub = copy_solutions(tmp_path / "sub", ["ex02_mha"])
    empty = tmp_path / "empty"
    empty.mkdir()
    file = tmp_path / "file.py"
    file.write_text("x = 1\n")
    args = [a.format(sub=sub, empty=empty, file=file) for a in args]
    line = one_sentence_error(run(*args))
    assert phrase in line


def test_installed_command_runs(tmp_path):
    sub = copy_solutions(tmp_path / "sub", ["ex01_by_hand"])
    proc = subprocess.run([sys.executable, "-m", "grader.cli", "grade", str(sub), "-e", "ex01"],
                          capture_output=True, text=True, cwd=REPO, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert "ex01_by_hand" in proc.stdout


def test_results_to_a_pipe_or_device_are_written_not_replaced(tmp_path):
    import os
    import stat
    import threading

    from grader.artifacts import write_private

    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    got = []
    reader = threading.Thread(target=lambda: got.append(open(fifo).read()))
    reader.start()
    write_private(fifo, "result")
    reader.join(5)
    assert got == ["result"] and stat.S_ISFIFO(os.stat(fifo).st_mode)
    planted = tmp_path / "link.json"
    planted.symlink_to(tmp_path / "elsewhere.json")
    write_private(planted, "x")        # a planted link is replaced, not followed
    assert not planted.is_symlink() and not (tmp_path / "elsewhere.json").exists()


def test_check_exit_code_names_and_version(tmp_path):
    sub = copy_solutions(tmp_path / "sub", ["ex02_mha"])
    (sub / "ex01_by_hand.py").write_text("SCORES = None\n")
    assert run("check", "B", "--path", sub).exit_code == 0
    assert run("check", sub / "ex02_mha.py").exit_code == 0        # a file: its folder
    failing = run("check", "A", "ex02_mha.py", "--path", sub)
    assert failing.exit_code == 1 and "ex01_by_hand" in failing.output
    assert run("check", "A", "--path", sub, "--no-fail").exit_code == 0
    version = run("--version")
    assert version.exit_code == 0 and version.output.startswith("attn-grade ")
    assert "student edition" not in version.output
