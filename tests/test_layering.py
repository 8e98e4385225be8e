"""Who may import whom: intake without a cycle."""
from __future__ import annotations

import ast
import json
import subprocess
import sys

import pytest

from tests.conftest import REPO

IMPORTS = """\
import json, sys
before = set(sys.modules)
for name in sys.argv[1:]:
    __import__(name)
print(json.dumps(sorted(set(sys.modules) - before)))
"""


def _imported(*names: str) -> set[str]:
    """The modules a fresh interpreter has loaded after importing ``names`` in order."""
    proc = subprocess.run([sys.executable, "-c", IMPORTS, *names], cwd=REPO,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return set(json.loads(proc.stdout.strip().splitlines()[-1]))


@pytest.mark.parametrize("order", [("grader.submission", "grader.notebooks"),
                                   ("grader.notebooks", "grader.submission")],
                         ids=["submission-first", "notebooks-first"])
def test_intake_and_notebooks_import_in_either_order(order):
    assert {"grader.submission", "grader.notebooks"} <= _imported(*order)


def test_intake_does_not_import_notebook_building():
    """Notebook building imports intake (the cells it reads), never the reverse,
    not even lazily: the text holds no import of it."""
    loaded = _imported("grader.submission")
    assert "grader.notebooks" not in loaded and "nbformat" not in loaded
    source = (REPO / "grader" / "submission.py").read_text()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom):
            assert node.module != "grader.notebooks" and not (
                node.module == "grader" and any(a.name == "notebooks" for a in node.names))
        elif isinstance(node, ast.Import):
            assert all(a.name != "grader.notebooks" for a in node.names)
