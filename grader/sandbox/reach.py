"""Does a submission reach into the worker's own runtime?

The probes that time and trace student code run in the student's process
(``probes/``, beside ``codec.py`` and ``worker.py``): a module that imports
them can replace what they measure (docs/THREAT_MODEL.md).  No honest
solution needs them, so a submission that names them is not judged on what
they measured: those tests need a person's look ("needs regrade").

Read here, in the grading process, as text (parsed, never run).
"""
from __future__ import annotations

import ast
from pathlib import Path

RUNTIME_MODULES = frozenset({"probes", "codec", "worker"})


def _names_runtime(node: ast.AST) -> bool:
    if isinstance(node, ast.Import):
        return any(a.name.split(".")[0] in RUNTIME_MODULES for a in node.names)
    if isinstance(node, ast.ImportFrom):
        return node.level == 0 and (node.module or "").split(".")[0] in RUNTIME_MODULES
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        # importlib.import_module("probes.ex06_gqa_intensity"), sys.modules["probes"],
        # __import__(...);
        # "codec" and "worker" are everyday words as strings: only their imports count
        return node.value.split(".")[0] == "probes" and \
            node.value.replace(".", "").replace("_", "").isalnum()
    return False


def runtime_reach(folder: Path) -> str | None:
    """``"file.py, line N"`` of the first place a submission's module names the
    worker's runtime, or None.  Links are not followed (never copied either)."""
    for path in sorted(Path(folder).glob("*.py")):
        if path.is_symlink() or not path.is_file():
            continue
        try:
            tree = ast.parse(path.read_text(errors="replace"))
        except (SyntaxError, ValueError):
            continue   # the import error is reported where it belongs
        for node in ast.walk(tree):
            if _names_runtime(node):
                return f"{path.name}, line {getattr(node, 'lineno', '?')}"
    return None
