"""The CI workflows call commands and options that exist."""
from __future__ import annotations

import re
import shlex

import pytest
from click.testing import CliRunner

from grader.cli import main
from tests.conftest import REPO

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
