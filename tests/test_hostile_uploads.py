"""Every bad upload is a sentence: exit status 2 from ``grade``, a zero row
in ``batch`` beside the others' grades, a results.json on Gradescope that
says what to fix; never a traceback, never a full disk.

The uploads are ``tests/hostile_uploads.py``'s; each holds exercise A's
reference, and only exercise A (no PyTorch) is graded where one is.
"""
from __future__ import annotations

import csv
import json
import os
import re
import subprocess
import sys
import tempfile
import zipfile

import pytest
from click.testing import CliRunner

from grader.cli import main
from grader.submission import (MAX_FILES, MAX_UNPACKED_BYTES, Budget, SubmissionError,
                               materialize)
from tests.conftest import REPO, copy_solutions, ex01_max
from tests.hostile_uploads import (HOSTILE, MODULE, SOLUTION, deep_notebook, file_and_folder,
                                   long_name, many_cells, old_notebook, runtime_named,
                                   zip_bomb)

MB = MAX_UNPACKED_BYTES >> 20


@pytest.fixture
def private_tmp(tmp_path, monkeypatch):
    """The intake's temporary folders go here, to be looked at afterwards."""
    folder = tmp_path / "tmp"
    folder.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(folder))
    return folder


def _sentence(result) -> str:
    """The one ``Error:`` line of an exit-2 run, and no traceback."""
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    lines = [ln for ln in result.output.strip().splitlines() if ln.startswith("Error")]
    assert len(lines) == 1, result.output
    return lines[0]


@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_each_hostile_upload_is_one_sentence_and_exit_2(name, tmp_path, private_tmp):
    build, phrase = HOSTILE[name]
    upload = build(tmp_path / "up")
    result = CliRunner().invoke(main, ["grade", str(upload), "-e", "ex01"],
                                catch_exceptions=False)
    line = _sentence(result)
    assert phrase in line
    assert ": " in line.removeprefix("Error: ") and line.endswith(".")   # what, then the fix
    assert not list(private_tmp.iterdir())          # nothing it unpacked is left behind


@pytest.mark.parametrize("build", [file_and_folder, long_name, deep_notebook])
def test_the_red_team_s_uploads_through_the_installed_command(build, tmp_path):
    """The three that ended in tracebacks (FileExistsError, OSError,
    RecursionError), run as the command itself."""
    upload = build(tmp_path)
    proc = subprocess.run([sys.executable, "-m", "grader.cli", "grade", str(upload),
                           "-e", "ex01"], capture_output=True, text=True, cwd=REPO, timeout=120)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr
    assert len([ln for ln in proc.stderr.splitlines() if ln.startswith("Error: ")]) == 1


def test_the_bytes_written_are_counted_when_the_declared_sizes_are_not(tmp_path, monkeypatch):
    """A declared size could lie (zipfile trusts it today; another reader
    might not): the bytes written stop at the cap all the same."""
    from grader import submission
    monkeypatch.setattr(Budget, "declare", lambda self, n, where: None)
    bomb = zip_bomb(tmp_path, mb=MB + 4)
    dest = tmp_path / "dest"
    dest.mkdir()
    with pytest.raises(SubmissionError, match=f"more than {MB} MB"):
        submission._unzip(bomb, dest, Budget())
    written = sum(p.stat().st_size for p in dest.rglob("*") if p.is_file())
    assert 0 < written <= MAX_UNPACKED_BYTES


def test_names_that_differ_in_case_clash_only_where_case_is_ignored(tmp_path, monkeypatch):
    from grader import submission
    upload = tmp_path / "case.zip"
    with zipfile.ZipFile(upload, "w") as z:
        z.writestr(MODULE, SOLUTION)
        z.writestr("Helper.py", "x = 1\n")
        z.writestr("helper.py", "x = 2\n")
    assert not submission._folds_case(tmp_path)     # Linux: both are kept, and graded
    with materialize(upload) as folder:
        assert {"Helper.py", "helper.py"} <= {p.name for p in folder.iterdir()}
    monkeypatch.setattr(submission, "_folds_case", lambda folder: True)   # macOS, Windows
    with pytest.raises(SubmissionError, match="Helper.py and helper.py, one name"):
        with materialize(upload):
            pass


def test_a_folder_graded_where_it_is_has_the_same_caps(tmp_path):
    """Every worker copies a folder's top-level modules: those count too (a
    sparse file: its size without its disk)."""
    big = copy_solutions(tmp_path / "big", ["ex01_by_hand"])
    with open(big / "helper.py", "wb") as f:
        f.truncate(MAX_UNPACKED_BYTES + 1)
    assert f"more than {MB} MB" in _sentence(CliRunner().invoke(main, ["grade", str(big),
                                                                       "-e", "ex01"]))
    many = copy_solutions(tmp_path / "many", ["ex01_by_hand"])
    for i in range(MAX_FILES):
        (many / f"h{i}.py").touch()
    assert f"more than {MAX_FILES} files" in _sentence(
        CliRunner().invoke(main, ["grade", str(many), "-e", "ex01"]))


def test_a_zip_in_a_zip_is_not_opened(tmp_path):
    inner = tmp_path / "inner.zip"
    with zipfile.ZipFile(inner, "w") as z:
        z.writestr(MODULE, SOLUTION)
    outer = tmp_path / "outer.zip"
    with zipfile.ZipFile(outer, "w") as z:
        z.write(inner, "inner.zip")
    line = _sentence(CliRunner().invoke(main, ["grade", str(outer), "-e", "ex01"]))
    assert "no exercise modules" in line


def test_a_zip_with_a_repository_s_leftovers_is_graded(tmp_path):
    """.git/ and __MACOSX/ are never unpacked, so they count in no cap."""
    upload = tmp_path / "repo.zip"
    with zipfile.ZipFile(upload, "w") as z:
        z.writestr(f"repo/exercises/{MODULE}", SOLUTION)
        for i in range(MAX_FILES + 1):
            z.writestr(f"repo/.git/objects/{i:04}", b"")
        z.writestr("__MACOSX/" + "d/" * 40 + "._x.py", b"")
    result = CliRunner().invoke(main, ["grade", str(upload), "-e", "ex01"])
    assert result.exit_code == 0, result.output
    assert re.search(r"Total: (\d+)/\1\b", result.output), result.output


def _rows(path):
    return {row["submission"]: row for row in csv.DictReader(path.open())}


def test_a_bad_upload_in_a_batch_is_a_zero_row_beside_the_graded_ones(tmp_path):
    cls = tmp_path / "class"
    copy_solutions(cls / "alice", ["ex01_by_hand"])
    file_and_folder(cls)                               # clash.zip
    deep_notebook(cls)                                 # deep.ipynb
    old_notebook(cls)                                  # old.ipynb: format 3, a huge heading
    runtime_named(cls)                                 # named.zip: runtime.kernels.flash.py
    with open(cls / "bob_1234_5678_ex01_by_hand.py", "wb") as f:   # Canvas, over the cap
        f.truncate(MAX_UNPACKED_BYTES + 1)
    out = tmp_path / "grades.csv"
    result = CliRunner().invoke(main, ["batch", str(cls), "--out", str(out), "-e", "ex01",
                                       "-j", "2"])
    assert result.exit_code == 3, result.output        # written, some not graded
    assert "Traceback" not in result.output
    rows = _rows(out)
    assert set(rows) == {"alice", "clash", "deep", "old", "named",
                         "bob_1234"}                   # a Canvas student: name_userid
    assert float(rows["alice"]["total"]) == ex01_max() and not rows["alice"]["error"]
    for name, phrase in [("clash", "a file and a folder both named ex01_by_hand.py"),
                         ("deep", "nests more than"), ("bob_1234", f"more than {MB} MB"),
                         ("old", "not in notebook format 4"),
                         ("named", "runtime.kernels.flash.py is not a name Python can import")]:
        assert float(rows[name]["total"]) == 0
        assert phrase in rows[name]["error"] and "\n" not in rows[name]["error"]
        data = json.loads((tmp_path / "results" / f"{name}.json").read_text())
        assert data["score"] == 0 and phrase in data["output"]


@pytest.mark.parametrize("build,phrase", [
    (file_and_folder, "clash.zip holds a file and a folder both named ex01_by_hand.py"),
    (deep_notebook, "deep.ipynb nests more than"),
])
def test_gradescope_says_what_to_fix_not_that_it_failed(build, phrase, tmp_path):
    from grader.gradescope import replay
    upload = tmp_path / "up"
    upload.mkdir()
    build(upload)
    result = replay(upload, env=dict(os.environ, ATTN_EXERCISES="ex01_by_hand"))
    assert result.returncode == 0 and result.problems == [], result.log
    data = result.results
    assert data["score"] == 0 and data["output"].startswith("Your submission could not be "
                                                            "graded: " + phrase)
    assert "autograder failed" not in data["output"] and str(upload) not in data["output"]
    assert "Traceback" not in result.log and "not graded: " in result.log


def test_gradescope_grades_a_module_the_parser_cannot_take(tmp_path, monkeypatch):
    """Too deep for Python's parser (a RecursionError in ``ast.parse``): the
    STUDENT_ID lookup (it runs with Gradescope's metadata) passes over it,
    and the import error costs exercise A only."""
    from grader.gradescope import run, validate_results
    monkeypatch.setenv("ATTN_EXERCISES", "ex01_by_hand")
    root = tmp_path / "autograder"
    (root / "submission").mkdir(parents=True)
    (root / "results").mkdir()
    (root / "submission_metadata.json").write_text(json.dumps(
        {"users": [{"email": "alice@uni.example", "sid": "S0001"}]}))
    (root / "submission" / MODULE).write_text("x = 1" + " + 1" * 200_000 + "\n")
    data = run(root, "auto")
    assert validate_results(data) == [] and "autograder failed" not in json.dumps(data)
    assert data["tests"] and data["score"] == 0


def test_a_notebook_is_read_within_a_time_and_a_memory_bound(tmp_path):
    """The one reader of a submission's notebooks reads in a child bounded in
    time and memory: a reading that would take longer, or more memory, ends
    as one sentence and leaves this process as it was."""
    from grader import submission
    assert submission._in_child(lambda: "read", 5.0, 1 << 30) == ("ok", "read")
    assert submission._in_child(lambda: len(bytearray(3 << 30)), 5.0, 1 << 30) is None
    assert submission._in_child(lambda: __import__("time").sleep(60), 0.5, 1 << 30) is None
    path = many_cells(tmp_path, 10)   # under the cap: read
    assert [c.cell_type for c in submission.read_notebook(path).cells][-2:] == \
        ["markdown", "code"]
    # the count before the parse can be dodged (an escaped key); the parsed count cannot
    big = many_cells(tmp_path / "big", submission.MAX_CELLS + 1)
    big.write_text(big.read_text().replace('"cell_type"', '"\\u0063ell_type"'))
    with pytest.raises(submission.NotebookError, match="more than 5000 cells"):
        submission.read_notebook(big)
    bound = submission.NOTEBOOK_READ_S
    try:
        submission.NOTEBOOK_READ_S = 0.001
        with pytest.raises(submission.NotebookError, match="could not be read within"):
            submission.read_notebook(path)
    finally:
        submission.NOTEBOOK_READ_S = bound


@pytest.mark.parametrize("linked", ["exercises", "notebooks"])
def test_a_repository_folder_that_is_a_link_is_not_followed(linked, tmp_path):
    """The red team's r_link_repo_*: an upload with a real notebooks/ (or
    exercises/) and the other a link to a folder elsewhere on the grading
    machine (here: the solutions) is graded on what it holds, which is nothing."""
    outside = copy_solutions(tmp_path / "outside", ["ex01_by_hand"])
    upload = tmp_path / "upload"
    (upload / ("notebooks" if linked == "exercises" else "exercises")).mkdir(parents=True)
    (upload / linked).symlink_to(outside, target_is_directory=True)
    result = CliRunner().invoke(main, ["grade", str(upload), "-e", "A"])
    assert result.exit_code == 2, result.output
    assert "no exercise modules" in result.output
