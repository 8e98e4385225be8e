"""Who may import whom: intake without a cycle, and suites that reach the
grader only through their fixtures and shipped modules."""
from __future__ import annotations

import ast
import json
import subprocess
import sys

import pytest

from grader.paths import PACKAGE_DIR, SUITES_DIR
from tests.conftest import REPO

# The quick tier (tests/conftest.py): no PyTorch import, no grading.
pytestmark = pytest.mark.quick

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


def test_the_command_line_starts_without_the_graders_core():
    """`attn-grade` imports neither pytest nor NumPy (nor the core that needs
    them) before it has begun the grading's fork server: those imports are a
    third of a `check` of one exercise, and they run beside the fork
    server's own instead of before it (``cli._begin_fork_server``)."""
    loaded = _imported("grader.cli")
    assert not {"numpy", "pytest", "grader.core", "torch"} & loaded, \
        sorted({"numpy", "pytest", "grader.core", "torch"} & loaded)


def _suite_files():
    return sorted(SUITES_DIR.rglob("*.py"))


# What a suite must not reach for: the plugin's module and its stash (use the
# fixtures of suites/conftest.py), pytest's configuration, and another suite
# loaded by its file path (shared checks live in shipped modules instead).
FORBIDDEN_NAMES = {"PLUGIN_KEY", "GradingPlugin", "spec_from_file_location",
                   "module_from_spec", "exec_module", "getoption"}


def _problems(path) -> list[str]:
    tree = ast.parse(path.read_text())
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            module = node.module or ""
            if module == "grader.core" or module == "grader" and any(
                    a.name == "core" for a in node.names):
                out.append(f"line {node.lineno}: imports grader.core")
            if module.startswith(("importlib", "runpy")) or "suites" in module:
                out.append(f"line {node.lineno}: imports from {module}")
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name == "grader.core" or alias.name.startswith(
                        ("importlib", "runpy")) or "suites" in alias.name:
                    out.append(f"line {node.lineno}: imports {alias.name}")
        elif isinstance(node, ast.Attribute):
            if node.attr in FORBIDDEN_NAMES or node.attr == "stash" or (
                    node.attr == "config" and isinstance(node.value, ast.Name)
                    and node.value.id == "request"):
                out.append(f"line {node.lineno}: reads .{node.attr}")
        elif isinstance(node, ast.Name) and node.id in FORBIDDEN_NAMES | {"exec", "__file__"}:
            out.append(f"line {node.lineno}: uses {node.id}")
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and \
                node.value.endswith(".py"):
            out.append(f"line {node.lineno}: names a file ({node.value!r})")
    return out


def test_suites_use_fixtures_not_grader_internals():
    """No suite imports grader.core, reads the pytest config or the plugin's
    stash, or loads another suite by its path; conftest.py is where the
    plugin is reached, and only it."""
    files = [p for p in _suite_files() if p.name != "conftest.py"]
    assert len(files) >= 18
    found = {str(p.relative_to(SUITES_DIR)): _problems(p) for p in files}
    assert not {k: v for k, v in found.items() if v}


def test_suite_helpers_use_fixtures_not_grader_internals():
    """The modules suites import (grader/reference, the shipped checks among
    them) take what they need of the run as arguments, from the fixtures."""
    internals = ("imports grader.core", ".stash", ".config", "PLUGIN_KEY", "GradingPlugin")
    found = {}
    for path in sorted((PACKAGE_DIR / "reference").rglob("*.py")):
        bad = [p for p in _problems(path) if any(word in p for word in internals)]
        if bad:
            found[str(path.relative_to(PACKAGE_DIR))] = bad
    assert not found


def test_the_scan_catches_what_it_forbids(tmp_path):
    bad = tmp_path / "test_bad.py"
    bad.write_text(
        "import importlib.util\nfrom grader.core import PLUGIN_KEY\n\n"
        "def helper(request):\n"
        "    path = Path(__file__).parent.parent / 'public' / 'test_ex04_quadratic.py'\n"
        "    return request.config.stash[PLUGIN_KEY]\n")
    text = "\n".join(_problems(bad))
    for expected in ("imports grader.core", "imports importlib.util", "reads .config",
                     "reads .stash", "uses PLUGIN_KEY", "uses __file__", "names a file"):
        assert expected in text
