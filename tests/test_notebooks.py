"""Notebooks per exercise, and notebook and zip submissions."""
from __future__ import annotations

import json
import re
import subprocess
import sys
import zipfile
from pathlib import Path

import nbformat
import pytest
from click.testing import CliRunner

from grader.cli import main
from grader.notebooks import ARTIFACTS, PICTURES, TAG_PREFIX, WRITEFILE, build_notebook
from grader.registry import EXERCISES
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
    assert re.search(r"ex02_mha  (\d+)/\1\b", table) and re.search(r"Total: (\d+)/\1\b", table)
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
    assert re.search(r"Total: (\d+)/\1\b", result.output), result.output


@pytest.mark.parametrize("make,phrase", [
    (lambda p: p.write_text("{ not json"), "is not a valid notebook"),
    (lambda p: nbformat.write(nbformat.v4.new_notebook(cells=[
        nbformat.v4.new_code_cell("x = 1")]), str(p)), "has no code cell tagged"),
    (lambda p: nbformat.write(nbformat.v4.new_notebook(cells=[
        nbformat.v4.new_code_cell("%%writefile notes.py\nx = 1")]), str(p)),
     "has no code cell tagged"),
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
    from grader.paths import PACKAGE_DIR
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
    assert "Total: 40 of 40 checks pass (no points here)" in questions[-1], questions[-1]
    assert "FAIL" not in questions[-1] and "0/0" not in questions[-1]


def test_notebooks_never_overwrite_without_force(tmp_path):
    out = tmp_path / "nbs"
    assert run("notebooks", out, "--install", "git+https://x/y").exit_code == 0
    mine = out / "ex02_mha.ipynb"
    mine.write_text(mine.read_text().replace("NotImplementedError", "MyWork", 1))
    again = run("notebooks", out)
    assert again.exit_code == 2 and "--force" in again.output
    assert "MyWork" in mine.read_text()                        # the student's work kept
    forced = run("notebooks", out, "--force")
    assert forced.exit_code == 0 and "MyWork" not in mine.read_text()


def test_untagged_writefile_cells_are_graded(notebooks, tmp_path):
    """An editor that drops cell tags leaves the %%writefile line: it is enough."""
    nb = nbformat.read(str(_with_solution(notebooks, "ex01_by_hand", tmp_path / "a.ipynb")),
                       as_version=4)
    for cell in nb.cells:
        cell.metadata.pop("tags", None)
    nbformat.write(nb, str(tmp_path / "a.ipynb"))
    result = run("grade", tmp_path / "a.ipynb", "-e", "A")
    assert result.exit_code == 0, result.output
    assert re.search(r"Total: (\d+)/\1\b", result.output), result.output


def test_the_self_check_is_one_rich_table(tmp_path):
    """HTML in Jupyter, the text table as repr (shown once, as lines)."""
    from grader.notebooks import self_check

    copy_solutions(tmp_path, ["ex02_mha"])
    result = self_check("ex02_mha", tmp_path)
    assert repr(result) == str(result) and repr(result).count("\n") > 5
    assert re.search(r"ex02_mha  (\d+)/\1\b", repr(result)) and "\\n" not in repr(result)
    html = result._repr_html_()
    assert html.startswith("<table>") and re.search(r"(\d+)/\1\b", html) and "<pre" in html


def _execute(path: Path, cwd: Path):
    """Run a notebook top to bottom in a real Jupyter kernel (as Colab would)."""
    from nbclient import NotebookClient

    nb = nbformat.read(str(path), as_version=4)
    NotebookClient(nb, timeout=600, kernel_name="python3",
                   resources={"metadata": {"path": str(cwd)}}).execute()
    return nb


def _outputs(cell, kind):
    out = []
    for o in cell.get("outputs", []):
        if o.output_type == "stream":
            out.append(o.text) if kind == "text" else None
        elif kind in o.get("data", {}):
            out.append(o.data[kind])
    return out


def test_a_notebook_that_needs_an_earlier_one_works_alone(notebooks, tmp_path):
    """Exercise C's notebook in a fresh folder: beside B's notebook (not run)
    it loads ex02_mha from there and passes; alone it runs to the end and
    says what it misses."""
    work = tmp_path / "colab"
    work.mkdir()
    nb = _with_solution(notebooks, "ex03_gqa", work / "ex03_gqa.ipynb")
    _with_solution(notebooks, "ex02_mha", work / "ex02_mha.ipynb")
    done = _execute(nb, work)
    load = [c for c in done.cells if "load-earlier" in c.metadata.get("tags", [])]
    assert load and "written from the cell tagged attn:ex02_mha" in "".join(
        _outputs(load[0], "text"))
    check = done.cells[-1]
    html = "".join(_outputs(check, "text/html"))
    assert "ex03_gqa" in html and re.search(r"(\d+)/\1\b", html), check.outputs
    plain = "".join(_outputs(check, "text/plain"))
    assert re.search(r"ex03_gqa  (\d+)/\1\b", plain) and "\\n" not in plain

    alone = tmp_path / "alone"
    alone.mkdir()
    nb = _with_solution(notebooks, "ex03_gqa", alone / "ex03_gqa.ipynb")
    done = _execute(nb, alone)           # no error: it runs top to bottom
    text = "".join(t for c in done.cells for t in _outputs(c, "text") + _outputs(c, "text/plain"))
    assert "ex02_mha.py is missing" in text and "ModuleNotFoundError" not in text


@pytest.mark.slow
@pytest.mark.parametrize("exercise", [   # one in the default run, the others the corpus tier's
    pytest.param("ex01_by_hand", marks=pytest.mark.corpus), "ex02_mha",
    pytest.param("ex08_mla", marks=pytest.mark.corpus)])
def test_the_heatmap_is_shown_inline(notebooks, tmp_path, exercise):
    """The self-check's public test draws the exercise's heatmap with the saved
    module (in its sandbox) and the notebook shows it (A from the student's
    constants, B and H on the test's inputs)."""
    work = tmp_path / "d"
    work.mkdir()
    done = _execute(_with_solution(notebooks, exercise, work / f"{exercise}.ipynb"), work)
    assert _outputs(done.cells[-1], "image/png"), done.cells[-1].outputs
    assert (work / ARTIFACTS / PICTURES[exercise][0]).is_file()


def test_the_title_is_said_once():
    """The notebook's title comes from the docstring's first line, which is
    not repeated below it (issue 29)."""
    for exercise in ["ex02_mha", "questions"]:
        stub = (REPO / "exercises" / f"{exercise}.py").read_text()
        first = build_notebook(exercise, stub).cells[0].source
        heading, _, body = first.partition("\n")
        assert heading.startswith("# Exercise ") and EXERCISES[exercise].title in heading
        assert EXERCISES[exercise].title.lower() not in body.lower().split("\n\n")[0]


@pytest.mark.slow
def test_the_ex04_plot_is_shown_inline(notebooks, tmp_path):
    work = tmp_path / "d"
    work.mkdir()
    done = _execute(_with_solution(notebooks, "ex04_quadratic", work / "ex04.ipynb"), work)
    assert _outputs(done.cells[-1], "image/png"), done.cells[-1].outputs


def test_the_notebook_shows_only_a_picture_this_check_drew(tmp_path):
    """A plot left from an earlier check is never shown as the new code's; a
    plot the check wrote (renamed into place by grader.artifacts) is."""
    from grader import artifacts
    from grader.notebooks import ARTIFACTS, _show_pictures, _stamps

    art = tmp_path / ARTIFACTS
    artifacts.save(art, "ex04_scaling.png", b"\x89PNG old")
    before = _stamps("ex04_quadratic", tmp_path)
    assert _show_pictures("ex04_quadratic", tmp_path, before) == []        # stale
    artifacts.save(art, "ex04_scaling.png", b"\x89PNG new")
    assert _show_pictures("ex04_quadratic", tmp_path, before) == [art / "ex04_scaling.png"]
    assert _show_pictures("ex02_mha", tmp_path, _stamps("ex02_mha", tmp_path)) == []


@pytest.mark.slow
def test_the_self_check_of_d_draws_the_students_own_plot(tmp_path):
    """The notebook's self-check measures D in the sandbox, as check does, and
    writes the student's plot beside the notebook (shown inline in Jupyter)."""
    from grader.notebooks import ARTIFACTS, self_check

    copy_solutions(tmp_path, ["ex04_quadratic"])
    plot = tmp_path / ARTIFACTS / "ex04_scaling.png"
    result = self_check("ex04_quadratic", tmp_path)
    text = str(result)
    if "machine too noisy" not in text:
        assert "your log-log plot: ex04_scaling.png" in text, text
    assert plot.read_bytes().startswith(b"\x89PNG"), text
    assert "log-log slope: yours" in text and "your loglog_slope" in text, text
