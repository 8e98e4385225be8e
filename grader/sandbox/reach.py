"""Does a submission reach into the worker's own runtime?

The probes that time and trace student code run in the student's process
(the package ``runtime``: ``runtime.probes``, beside ``runtime.codec`` and
``runtime.worker``; ``grader/sandbox/runtime/``): a module that imports them
can replace what they measure (docs/THREAT_MODEL.md).  No honest solution
needs them, so a submission that names them is not judged on what they
measured: those tests need a person's look ("needs regrade").

Read here, in the grading process, as text (parsed, never run).

Parsed on the grading's main thread only (``parse_all``, before any worker
starts in the background): CPython 3.11 keeps one AST-construction depth per
interpreter, and two threads building ASTs at once (pytest rewriting a suite's
asserts while a worker's start reads the submission's imports) fail with
"SystemError: AST constructor recursion depth mismatch".  What is parsed is
kept by content, so the background threads find it parsed.
"""
from __future__ import annotations

import ast
import functools
import io
import json
import threading
import tokenize
from pathlib import Path

from grader.paths import RUNTIME_DIR, RUNTIME_PACKAGE

# Our own threads parse one at a time (pytest's main thread is kept apart by
# ``parse_all``); kept parses: more than any grading's files.
_PARSE = threading.Lock()
KEPT = 256

# Calls that import, or find, a module by its name as a string.
BY_NAME = frozenset({"__import__", "import_module", "find_spec"})


def _name(node) -> str:
    return getattr(node, "attr", None) or getattr(node, "id", None) or ""


def _is_runtime(name: str) -> bool:
    return name.split(".")[0] == RUNTIME_PACKAGE


def _is_package(node) -> bool:
    return isinstance(node, ast.Constant) and node.value == RUNTIME_PACKAGE


def _names_runtime(node: ast.AST) -> bool:
    if isinstance(node, ast.Import):
        return any(_is_runtime(a.name) for a in node.names)
    if isinstance(node, ast.ImportFrom):
        return node.level == 0 and _is_runtime(node.module or "")
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        # importlib.import_module("runtime.probes.ex06_gqa_intensity"),
        # sys.modules["runtime.codec"]: a dotted name inside the runtime
        return "." in node.value and _is_runtime(node.value) and \
            node.value.replace(".", "").replace("_", "").isalnum()
    # "runtime" alone is an everyday word as a string: it counts only where a
    # module is looked up by its name (__import__("runtime"), sys.modules["runtime"],
    # sys.modules.get("runtime"))
    if isinstance(node, ast.Call) and node.args and _is_package(node.args[0]):
        return _name(node.func) in BY_NAME or _name(getattr(node.func, "value", None)) == "modules"
    if isinstance(node, ast.Subscript) and _name(node.value) == "modules":
        return _is_package(node.slice)
    return False


def runtime_reach(folder: Path) -> str | None:
    """``"file.py, line N"`` of the first place a submission's module names the
    worker's runtime, or None.  Links are not followed (never copied either)."""
    for path, source in _modules(folder):
        line = _first_reach(source)
        if line is not None:
            return f"{path.name}, line {line}"
    return None


def _modules(folder: Path):
    """(path, bytes) of each top-level module of ``folder``, links left out."""
    for path in sorted(Path(folder).glob("*.py")):
        if path.is_symlink() or not path.is_file():
            continue
        try:
            yield path, path.read_bytes()
        except OSError:
            continue


def parse_all(folder: Path) -> None:
    """Parse each top-level module of ``folder`` now, on this thread, for what
    ``runtime_reach`` and ``imported_modules`` read: the workers started in
    the background then parse nothing."""
    for _, source in _modules(folder):
        _first_reach(source)
        _imports(source)


def _parse(text: str) -> ast.AST:
    with _PARSE:
        return ast.parse(text)


@functools.lru_cache(maxsize=KEPT)
def _first_reach(source: bytes):
    """The line where ``source`` first names the runtime, "?" where the node
    has none, None where it never does.  Kept by content: every worker of a
    grading asks about the same files."""
    try:
        tree = _parse(source.decode("utf-8", errors="replace"))
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None   # the import error is reported where it belongs
    for node in ast.walk(tree):
        if _names_runtime(node):
            return getattr(node, "lineno", "?")
    return None


# Words that import a module whose name a parse cannot see.
DYNAMIC = ("importlib", "__import__", "exec(", "eval(")


def imported_modules(folder: Path, module: str) -> list[Path] | None:
    """The submission's top-level modules that ``module`` can import: its own,
    the modules of the submission it imports, and theirs (a worker sees the
    top-level ``.py`` files only).  None when an import cannot be read from
    the source (``importlib``, ``__import__``, ``exec``, a relative import):
    then every module counts.  A module that does not parse imports nothing
    (its own error is what the student sees).  Links are never counted."""
    folder = Path(folder)
    local = {p.stem: p for p in folder.glob("*.py") if p.is_file() and not p.is_symlink()}
    todo, seen = [module], []
    while todo:
        name = todo.pop()
        if name in seen or name not in local:
            continue
        seen.append(name)
        try:
            source = local[name].read_bytes()
        except OSError:
            continue
        found = _imports(source)
        if found is None:
            return None
        todo += found
    return [local[n] for n in sorted(seen)]


@functools.lru_cache(maxsize=KEPT)
def _imports(source: bytes) -> tuple[str, ...] | None:
    """The top-level names ``source`` imports; None where it imports by a
    name no parse can see.  Kept by content, as ``_first_reach``."""
    text = source.decode("utf-8", errors="replace")
    if any(word in text for word in DYNAMIC):
        return None
    try:
        tree = _parse(text)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return ()
    names = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names += [a.name.split(".")[0] for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level:
            return None   # a relative import: not a worker's layout, count all
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.append(node.module.split(".")[0])
    return tuple(names)


# What the worker's runtime and the exercises import besides the standard
# library (whose names ``sys.stdlib_module_names`` gives).
LIBRARIES = ("numpy", "torch", "triton", "matplotlib", "PIL", "nbformat", "pytest")


@functools.lru_cache(maxsize=1)
def reserved_module_names() -> frozenset[str]:
    """Top-level module names a submission's file may not take: the worker
    runtime's package, every name a file of the runtime imports, the
    standard library's and the libraries the exercises use.  A worker puts
    the submission's folder on ``sys.path``, so a file of such a name would
    stand in for the module wherever it is imported after the folder is
    there (a probe's late ``import statistics``, say)."""
    import sys
    names = {RUNTIME_PACKAGE, *LIBRARIES, *sys.stdlib_module_names}
    for path in sorted(RUNTIME_DIR.rglob("*.py")):
        try:
            tree = _parse(path.read_text(encoding="utf-8"))
        except (OSError, SyntaxError, ValueError):
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                names.update(a.name.split(".")[0] for a in node.names)
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names.add(node.module.split(".")[0])
    return frozenset(names)


def code_tokens(source: bytes) -> list | None:
    """The code's tokens without its comments and layout (blank lines, the
    breaks inside brackets, indentation's width), each with where it starts
    (line, column); None where the source does not tokenize.  Two sources
    with the same tokens differ in comments and layout only: they run alike,
    and where the places match too, every line and column Python reports of
    them (a traceback's) matches."""
    skip = {tokenize.COMMENT, tokenize.NL, tokenize.ENCODING}
    try:
        return [(tok.type, "" if tok.type in (tokenize.INDENT, tokenize.DEDENT) else tok.string,
                 # a line's end sits after its comment: its line alone
                 (tok.start[0], -1) if tok.type == tokenize.NEWLINE else tok.start)
                for tok in tokenize.tokenize(io.BytesIO(source).readline) if tok.type not in skip]
    except (tokenize.TokenError, SyntaxError, ValueError):
        return None


def code_key(source: bytes, *, places: bool) -> bytes:
    """What a module's code is, as bytes to hash: its tokens without comments
    or layout (``code_tokens``), with where each one sits when ``places``,
    else its bytes where it does not tokenize."""
    tokens = code_tokens(source)
    if tokens is None:
        return b"bytes\0" + source
    if not places:
        tokens = [(kind, text) for kind, text, _ in tokens]
    return b"tokens\0" + json.dumps(tokens, ensure_ascii=False).encode(
        "utf-8", "surrogateescape")
