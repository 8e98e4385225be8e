"""The Gradescope bundle, installed and run as Gradescope runs it.

Gradescope extracts the bundle into ``/autograder/source``, runs its
``setup.sh`` once, then ``run_autograder`` per upload (in
``/autograder/submission``) and reads ``/autograder/results/results.json``.
Here ``autograder`` is a temporary folder: ``setup.sh`` runs unchanged but
for its ``apt-get`` lines, into a fresh venv that sees this environment's
packages (torch is not downloaded again; pip runs offline), and
``run_autograder`` then grades uploads of every kind with that venv.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import nbformat
import pytest
from click.testing import CliRunner

from grader.cli import main
from grader.gradescope import autograder_tree, place_upload, run_autograder, validate_results
from grader.notebooks import TAG_PREFIX, WRITEFILE, build_notebook
from grader.report import to_gradescope
from grader.paths import SUITES_DIR
from tests.conftest import EXERCISES_DIR, SOLUTIONS, copy_solutions, grade_dir, package_dirs

QUICK = "ex01_by_hand ex03_gqa"      # staff's ATTN_EXERCISES: a quick run


@pytest.fixture(scope="module")
def bundle(tmp_path_factory):
    out = tmp_path_factory.mktemp("bundle") / "autograder.zip"
    result = CliRunner().invoke(main, ["gradescope", str(out)])
    assert result.exit_code == 0, result.output
    return out


@pytest.fixture(scope="module")
def installed(bundle, tmp_path_factory):
    """setup.sh run against an extracted bundle: (autograder root, venv python)."""
    root = autograder_tree(bundle, tmp_path_factory.mktemp("gs") / "autograder")
    venv = root.parent / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True,
                   env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"})
    # This environment's packages (torch, setuptools, matplotlib) seen from the
    # fresh venv, behind its own site-packages: nothing is downloaded again.
    purelib = Path(sysconfig.get_paths(vars={"base": str(venv), "platbase": str(venv)})
                   ["purelib"])
    ours = [p for p in package_dirs() if "site-packages" in p]
    (purelib / "_attn_test_env.pth").write_text("\n".join(ours) + "\n")
    setup = (root / "source" / "setup.sh").read_text()
    assert "apt-get" in setup and '"$SOURCE[plot]"' in setup   # the plot extra
    script = "\n".join(line for line in setup.splitlines() if "apt-get" not in line)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env.update(ATTN_VENV=str(venv), PIP_NO_INDEX="1", PIP_NO_BUILD_ISOLATION="false",
               PIP_DISABLE_PIP_VERSION_CHECK="1",
               PATH=f"{Path(sys.base_prefix) / 'bin'}{os.pathsep}{env['PATH']}")
    script_path = root / "source" / "setup-test.sh"
    script_path.write_text(script)
    proc = subprocess.run(["bash", str(script_path)], env=env, capture_output=True, text=True,
                          timeout=600, cwd=root)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "attn-grade setup: ok" in proc.stdout
    python = venv / "bin" / "python"
    where = subprocess.run([str(python), "-c", "import grader, matplotlib; print(grader.__file__)"],
                           capture_output=True, text=True, env=env, cwd=root)
    assert str(venv) in where.stdout, where.stdout + where.stderr   # installed, not a checkout
    return root, str(python)


def _grade_upload(installed, upload: Path, tmp_path, exercises=QUICK):
    """A fresh submission/ and results/ in the installed tree, then run_autograder."""
    root, python = installed
    for sub in ("submission", "results"):
        shutil.rmtree(root / sub, ignore_errors=True)
        (root / sub).mkdir()
    place_upload(upload, root)
    env = dict(os.environ, ATTN_EXERCISES=exercises)
    result = run_autograder(root, python, timeout=900, env=env)
    assert result.returncode == 0, result.log
    assert result.problems == [], result.problems
    return result


def _scores(data) -> dict:
    out: dict = {}
    for t in data["tests"]:
        if "staff" in t.get("tags", []):
            continue   # entries for staff (the isolation, free-text answers): no points
        ex = t["name"].split(":", 1)[0]
        got, most = out.get(ex, (0, 0))
        out[ex] = (got + t["score"], most + t["max_score"])
    return out


def _notebook(exercise, source, path, tags=True):
    nb = build_notebook(exercise, (EXERCISES_DIR / f"{exercise}.py").read_text())
    for cell in nb.cells:
        if f"{TAG_PREFIX}{exercise}" in cell.metadata.get("tags", []):
            cell.source = f"{WRITEFILE} {exercise}.py\n{source}"
        if not tags:
            cell.metadata.pop("tags", None)
    nbformat.write(nb, str(path))
    return path


def test_bundle_layout_is_gradescopes(bundle):
    names = set(zipfile.ZipFile(bundle).namelist())
    # setup.sh and run_autograder at the top, beside an installable project
    assert {"setup.sh", "run_autograder", "pyproject.toml", "grader/gradescope.py"} <= names
    assert any(n.startswith("grader/suites/hidden/") for n in names)
    assert not any(n.startswith(("source/", "solutions/", "tests/")) for n in names)
    modes = {i.filename: i.external_attr >> 16 for i in zipfile.ZipFile(bundle).infolist()}
    assert modes["setup.sh"] & 0o111 and modes["run_autograder"] & 0o111


@pytest.mark.slow
def test_loose_modules(installed, tmp_path):
    upload = copy_solutions(tmp_path / "up", ["ex01_by_hand", "ex02_mha", "ex03_gqa"])
    result = _grade_upload(installed, upload, tmp_path)
    scores = _scores(result.results)
    assert set(scores) == {"ex01_by_hand", "ex03_gqa"}
    assert all(got == most > 0 for got, most in scores.values()), scores
    # staff's log: progress, what was found, the isolation line; students see none of it
    assert "exercise modules found: ex01_by_hand.py, ex02_mha.py, ex03_gqa.py" in result.log
    assert "isolation: " in result.log and "score " in result.log and "seed " in result.log
    assert "as decided when the image was built" in result.log
    staff = [t for t in result.results["tests"] if t["name"] == "Isolation (staff only)"]
    assert len(staff) == 1 and staff[0]["visibility"] == "hidden"
    assert staff[0]["output"].startswith("Isolation: namespaces")
    students = [t for t in result.results["tests"] if t["visibility"] != "hidden"]
    assert "sandbox" not in json.dumps(students) + result.results.get("output", "")
    seen = {t["visibility"] for t in result.results["tests"]}
    assert {"visible", "after_published"} <= seen <= {"visible", "after_published", "hidden"}


@pytest.mark.slow
def test_a_zip_and_notebooks(installed, tmp_path):
    archive = tmp_path / "up" / "mine.zip"
    archive.parent.mkdir()
    with zipfile.ZipFile(archive, "w") as z:
        for name in ("ex01_by_hand", "ex02_mha", "ex03_gqa"):
            z.write(SOLUTIONS / f"{name}.py", f"work/{name}.py")
        z.writestr("__MACOSX/work/._ex01_by_hand.py", "garbage")
    scores = _scores(_grade_upload(installed, archive, tmp_path).results)
    assert all(got == most > 0 for got, most in scores.values()), scores

    books = tmp_path / "books"
    books.mkdir()
    for name in ("ex02_mha", "ex03_gqa"):
        _notebook(name, (SOLUTIONS / f"{name}.py").read_text(), books / f"{name}.ipynb",
                  tags=name != "ex02_mha")   # a notebook whose tags were lost
    scores = _scores(_grade_upload(installed, books, tmp_path, "ex03_gqa").results)
    assert scores["ex03_gqa"][0] == scores["ex03_gqa"][1] > 0, scores


def test_a_github_repository(installed, tmp_path):
    """A GitHub upload brings the student's whole repository: exercises/ (B
    done there, C still the stub), notebooks/ (C done there), the edition's
    grader/ and .github/ beside."""
    repo = tmp_path / "repo"
    copy_solutions(repo / "exercises", ["ex01_by_hand", "ex02_mha"])
    shutil.copy(EXERCISES_DIR / "ex03_gqa.py", repo / "exercises" / "ex03_gqa.py")
    (repo / "notebooks").mkdir()
    _notebook("ex03_gqa", (SOLUTIONS / "ex03_gqa.py").read_text(),
              repo / "notebooks" / "ex03_gqa.ipynb")
    _notebook("ex01_by_hand", (EXERCISES_DIR / "ex01_by_hand.py").read_text(),
              repo / "notebooks" / "ex01_by_hand.ipynb")      # untouched stub notebook
    (repo / ".github" / "workflows").mkdir(parents=True)
    (repo / ".github" / "workflows" / "check.yml").write_text("name: x\n")
    (repo / "grader").mkdir()
    (repo / "grader" / "cli.py").write_text("raise SystemExit\n")
    (repo / "README.md").write_text("# mine\n")
    scores = _scores(_grade_upload(installed, repo, tmp_path).results)
    assert all(got == most > 0 for got, most in scores.values()), scores


def test_an_upload_that_cannot_be_graded(installed, tmp_path):
    upload = tmp_path / "up"
    upload.mkdir()
    (upload / "notes.txt").write_text("I could not finish")
    result = _grade_upload(installed, upload, tmp_path)
    assert result.results["score"] == 0 and "could not be graded" in result.results["output"]
    assert "not graded:" in result.log


def test_gradescope_test_option_replays_locally(tmp_path, monkeypatch):
    upload = copy_solutions(tmp_path / "up", ["ex01_by_hand"])
    monkeypatch.setenv("ATTN_EXERCISES", "ex01_by_hand")
    result = CliRunner().invoke(main, ["gradescope", str(tmp_path / "b.zip"), "--test",
                                       str(upload)])
    assert result.exit_code == 0, result.output
    assert (tmp_path / "b.zip").is_file()
    assert "run_autograder's output" in result.output
    assert "exercise modules found: ex01_by_hand.py" in result.output
    assert "specification check: ok" in result.output


def test_the_specification_check_finds_what_breaks_it():
    """Our own results pass it: tests/test_grading.py checks the hidden
    grading of each foundation solution (one grading it makes anyway)."""
    assert validate_results({"tests": [{"name": "a", "visibility": "secret"}]})
    assert validate_results({"score": "high"})


def test_bundle_needs_a_zip_name(tmp_path):
    result = CliRunner().invoke(main, ["gradescope", str(tmp_path / "bundle.tar")])
    assert result.exit_code == 2 and "must end in .zip" in result.output
    result = CliRunner().invoke(main, ["gradescope"])
    assert result.exit_code == 2 and "--test" in result.output


def test_results_keep_to_gradescopes_format_with_ours_under_extra_data(tmp_path):
    """Each test has a number and tags; the seed, the student id and the
    free-text answers are under extra_data; ex07's speed ratio, where a GPU
    measured it, is the leaderboard."""
    import re

    from grader.gradescope import TOP_LEVEL_KEYS
    from grader.report import SPEED_RATIO
    sub = copy_solutions(tmp_path / "sub", ["ex01_by_hand", "questions"])
    report = grade_dir(sub, ["ex01_by_hand", "questions"], seed=5)
    data = to_gradescope(report)
    assert validate_results(data) == [] and set(data) <= TOP_LEVEL_KEYS
    assert data["extra_data"]["seed"] == 5 and data["extra_data"]["manual_grading"]
    numbers = [t["number"] for t in data["tests"]]
    assert len(set(numbers)) == len(numbers)
    assert all(re.fullmatch(r"\d+\.\d+", n) for n in numbers), numbers
    assert {n.split(".")[0] for n in numbers} == {"1", "9"}   # A first, the questions last
    for t in data["tests"]:
        assert t["tags"][0] == t["name"].split(":")[0]
        assert ("staff" in t["tags"]) == (t["visibility"] == "hidden" and t["max_score"] == 0)
    assert "leaderboard" not in data
    report.machine[SPEED_RATIO] = 1.2345
    board = to_gradescope(report)["leaderboard"]
    assert board == [{"name": "ex07 speed vs the reference kernel (x)", "value": 1.234,
                      "order": "desc"}]
    # the GPU suite is what sets it, once per grading
    gpu_suite = SUITES_DIR / "hidden" / "test_ex07_flash_attention_gpu.py"
    assert "machine.setdefault(SPEED_RATIO" in gpu_suite.read_text()
    assert validate_results({"score": 1, "seed": 3}) == [
        "keys outside the format (put them under extra_data): seed"]
    assert validate_results({"score": 1, "leaderboard": [{"name": "x", "order": "up"}]})
