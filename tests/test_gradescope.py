"""The Gradescope bundle, run against a fake /autograder tree."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import zipfile

import pytest
from click.testing import CliRunner

from grader.cli import main
from grader.gradescope import validate_results
from grader.report import to_gradescope
from tests.conftest import copy_solutions, grade_dir


@pytest.fixture(scope="module")
def bundle(tmp_path_factory):
    out = tmp_path_factory.mktemp("bundle") / "autograder.zip"
    result = CliRunner().invoke(main, ["gradescope", str(out)])
    assert result.exit_code == 0, result.output
    return out


def _autograder_tree(tmp_path, bundle):
    root = tmp_path / "autograder"
    (root / "submission").mkdir(parents=True)
    with zipfile.ZipFile(bundle) as z:
        z.extractall(root / "bundle")
    run = root / "bundle" / "run_autograder"
    run.chmod(0o755)
    return root, run


def _run(root, run):
    env = dict(os.environ, AUTOGRADER_ROOT=str(root), ATTN_PYTHON=sys.executable)
    proc = subprocess.run(["bash", str(run)], env=env, capture_output=True, text=True,
                          timeout=900)
    assert proc.returncode == 0, proc.stderr
    return json.loads((root / "results" / "results.json").read_text())


def test_bundle_contents(bundle):
    names = set(zipfile.ZipFile(bundle).namelist())
    assert {"setup.sh", "run_autograder", "source/pyproject.toml"} <= names
    assert any(n.startswith("source/grader/suites/hidden/") for n in names)
    assert not any(n.startswith(("source/solutions", "source/tests")) for n in names)


def test_run_autograder_grades_the_submission(bundle, tmp_path):
    root, run = _autograder_tree(tmp_path, bundle)
    copy_solutions(root / "submission", ["ex01_by_hand", "ex02_mha"])
    data = _run(root, run)
    assert validate_results(data) == []
    ex01 = [t for t in data["tests"] if t["name"].startswith("ex01_by_hand: ")]
    assert ex01 and all(t["status"] == "passed" for t in ex01)
    missing = [t for t in data["tests"] if t["name"].startswith("ex03_gqa: ")]
    assert missing and all(t["score"] == 0 for t in missing)
    seen = {t["visibility"] for t in data["tests"]}
    assert {"visible", "after_published"} <= seen <= {"visible", "after_published", "hidden"}


def test_run_autograder_always_writes_a_result(bundle, tmp_path):
    root, run = _autograder_tree(tmp_path, bundle)
    (root / "submission" / "notes.txt").write_text("I could not finish")
    data = _run(root, run)
    assert validate_results(data) == []
    assert data["score"] == 0 and "could not be graded" in data["output"]


def test_our_results_follow_the_specification(tmp_path):
    sub = copy_solutions(tmp_path / "sub", ["ex02_mha"])
    assert validate_results(to_gradescope(grade_dir(sub, ["ex02_mha"]))) == []
    assert validate_results({"tests": [{"name": "a", "visibility": "secret"}]})
    assert validate_results({"score": "high"})


def test_bundle_needs_a_zip_name(tmp_path):
    result = CliRunner().invoke(main, ["gradescope", str(tmp_path / "bundle.tar")])
    assert result.exit_code == 2 and "must end in .zip" in result.output
