"""Notebooks per exercise, and notebook and zip submissions."""
from __future__ import annotations

import json
import subprocess
import sys
import zipfile

import nbformat
import pytest
from click.testing import CliRunner

from grader.cli import main
from grader.exercises import EXERCISES
from grader.notebooks import TAG_PREFIX, WRITEFILE
from tests.conftest import REPO, SOLUTIONS, copy_solutions


def run(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


@pytest.fixture(scope="module")
def notebooks(tmp_path_factory):
    out = tmp_path_factory.mktemp("notebooks")
    result = run("notebooks", out)
    assert result.exit_code == 0, result.output
    return out


def test_one_valid_notebook_per_exercise(notebooks):
    solved = {p.stem for p in SOLUTIONS.glob("*.py")}   # the questions have one too
    assert {p.stem for p in notebooks.glob("*.ipynb")} == solved
    for path in notebooks.glob("*.ipynb"):
        nb = nbformat.read(str(path), as_version=4)
        nbformat.validate(nb)
        tagged = [c for c in nb.cells if f"{TAG_PREFIX}{path.stem}" in c.metadata.get("tags", [])]
        assert len(tagged) == 1 and tagged[0].source.startswith(f"{WRITEFILE} {path.stem}.py")
        assert "NotImplementedError" in tagged[0].source or "None" in tagged[0].source
        assert nb.cells[0].cell_type == "markdown" and EXERCISES[path.stem].title in \
            nb.cells[0].source
        assert any("self_check" in c.source for c in nb.cells)


def _with_solution(notebooks, exercise, dest):
    nb = nbformat.read(str(notebooks / f"{exercise}.ipynb"), as_version=4)
    for cell in nb.cells:
        if f"{TAG_PREFIX}{exercise}" in cell.metadata.get("tags", []):
            cell.source = f"{WRITEFILE} {exercise}.py\n" + (SOLUTIONS / f"{exercise}.py").read_text()
    nbformat.write(nb, str(dest))
    return dest


def test_notebook_runs_end_to_end_with_the_reference(notebooks, tmp_path):
    work = tmp_path / "work"
    work.mkdir()
    nb = _with_solution(notebooks, "ex02_mha", work / "ex02_mha.ipynb")
    code = ("import json, sys; from pathlib import Path; from grader.notebooks import run_notebook; "
            "print(json.dumps(run_notebook(Path(sys.argv[1]), Path(sys.argv[2]))))")
    proc = subprocess.run([sys.executable, "-c", code, str(nb), str(work)], capture_output=True,
                          text=True, cwd=REPO, timeout=600)
    assert proc.returncode == 0, proc.stderr
    outputs = json.loads(proc.stdout.strip().splitlines()[-1])
    table = outputs[-1]
    assert "ex02_mha  6/6" in table and "Total: 6/6" in table
    assert (work / "ex02_mha.py").exists()


def test_grade_a_notebook_and_a_zip(notebooks, tmp_path):
    nb = _with_solution(notebooks, "ex03_gqa", tmp_path / "mine.ipynb")
    # ex03 imports ex02: a notebook with both tagged cells grades both.
    two = nbformat.read(str(nb), as_version=4)
    ex02 = nbformat.read(str(_with_solution(notebooks, "ex02_mha", tmp_path / "b.ipynb")),
                         as_version=4)
    two.cells += [c for c in ex02.cells if c.metadata.get("tags")]
    nbformat.write(two, str(nb))
    result = run("grade", nb, "-e", "ex03", "--format", "json", "--out", tmp_path / "r.json")
    assert result.exit_code == 0, result.output
    data = json.loads((tmp_path / "r.json").read_text())
    assert data["score"] == sum(t["max_score"] for t in data["tests"]) > 0

    sub = copy_solutions(tmp_path / "sub", ["ex01_by_hand"])
    archive = tmp_path / "sub.zip"
    with zipfile.ZipFile(archive, "w") as z:
        z.write(sub / "ex01_by_hand.py", "student/ex01_by_hand.py")  # nested is fine
    result = run("grade", archive, "-e", "ex01")
    assert result.exit_code == 0, result.output
    assert "Total: 7/7" in result.output


@pytest.mark.parametrize("make,phrase", [
    (lambda p: p.write_text("{ not json"), "is not a valid notebook"),
    (lambda p: nbformat.write(nbformat.v4.new_notebook(cells=[
        nbformat.v4.new_code_cell("x = 1")]), str(p)), "has no code cell tagged"),
])
def test_bad_notebooks_are_one_sentence(tmp_path, make, phrase):
    path = tmp_path / "bad.ipynb"
    make(path)
    result = run("grade", path)
    assert result.exit_code == 2 and phrase in result.output, result.output
    assert "Traceback" not in result.output


@pytest.mark.parametrize("members,phrase", [
    ({"../evil.py": "x = 1"}, "unsafe path"),
    ({"notes.txt": "hello"}, "no exercise modules"),
])
def test_bad_zips_are_one_sentence(tmp_path, members, phrase):
    archive = tmp_path / "s.zip"
    with zipfile.ZipFile(archive, "w") as z:
        for name, text in members.items():
            z.writestr(name, text)
    result = run("grade", archive)
    assert result.exit_code == 2 and phrase in result.output, result.output


def test_not_a_zip_and_wrong_kind(tmp_path):
    fake = tmp_path / "s.zip"
    fake.write_text("not a zip")
    assert "not a readable zip" in run("grade", fake).output
    other = tmp_path / "s.txt"
    other.write_text("x")
    result = run("grade", other)
    assert result.exit_code == 2 and "not a folder, a notebook" in result.output


def test_links_in_a_folder_submission_are_not_followed(tmp_path):
    """A folder read file by file (it holds a notebook or a zip) never follows a
    link, to a file or to a folder: copied as root it could bring in hidden files."""
    from grader.exercises import PACKAGE_DIR
    from grader.submission import _flatten

    hidden = PACKAGE_DIR / "suites" / "hidden"
    sub = copy_solutions(tmp_path / "sub", ["ex01_by_hand"])
    (sub / "more").symlink_to(hidden, target_is_directory=True)
    (sub / "ex03_gqa.py").symlink_to(hidden / "test_ex03_gqa_hidden.py")
    dest = tmp_path / "dest"
    dest.mkdir()
    _flatten(sub, dest)
    assert sorted(p.name for p in dest.iterdir()) == ["ex01_by_hand.py"]


def test_exercise_a_notebook_prints_the_student_s_variant_and_questions_run(notebooks,
                                                                           tmp_path):
    from grader.variants import inputs_for

    work = tmp_path / "work"
    work.mkdir()
    nb = nbformat.read(str(notebooks / "ex01_by_hand.ipynb"), as_version=4)
    cell = next(c for c in nb.cells if c.cell_type == "code" and "inputs_for" in c.source)
    cell.source = cell.source.replace("YOUR_ID", "alice")
    nbformat.write(nb, str(work / "ex01_by_hand.ipynb"))
    _with_solution(notebooks, "questions", work / "questions.ipynb")
    code = ("import json, sys; from pathlib import Path; from grader.notebooks import run_notebook; "
            "print(json.dumps([run_notebook(Path(p), Path(sys.argv[3])) for p in sys.argv[1:3]]))")
    proc = subprocess.run([sys.executable, "-c", code, str(work / "ex01_by_hand.ipynb"),
                           str(work / "questions.ipynb"), str(work)], capture_output=True,
                          text=True, cwd=REPO, timeout=600)
    assert proc.returncode == 0, proc.stderr
    ex01, questions = json.loads(proc.stdout.strip().splitlines()[-1])
    assert any(inputs_for("alice").text() in out for out in ex01)
    assert "STUDENT_ID" in (work / "ex01_by_hand.py").read_text()
    assert "Total: 0/0" in questions[-1] and "FAIL" not in questions[-1]
