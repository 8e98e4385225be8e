"""Derive the student stub of an exercise from its reference solution.

Each solution marks the student's work between two comment lines::

    # BEGIN SOLUTION
    ...reference code...
    # END SOLUTION

Inside a function the region becomes ``raise NotImplementedError(...)``
naming the function.  At module level, each ``NAME = ...`` assignment in the
region becomes ``NAME = None`` and any other code (a helper, a Triton kernel)
is dropped; the student writes it.  A region may instead carry its stub
explicitly, on lines starting ``# STUB: `` right after ``# BEGIN SOLUTION``:
those lines, uncommented, replace the region.  ``exercises/`` is generated
with ``attn-grade stubs``, and a test fails when a committed stub differs.
"""
from __future__ import annotations

import ast
import re
from pathlib import Path

BEGIN = re.compile(r"^(?P<indent>\s*)# BEGIN SOLUTION\s*$")
END = re.compile(r"^\s*# END SOLUTION\s*$")
STUB = re.compile(r"^\s*# STUB: ?(?P<code>.*)$")
DEF = re.compile(r"^(?P<indent>\s*)(?:async\s+)?def\s+(?P<name>\w+)")
ASSIGN = re.compile(r"^(?P<name>[A-Za-z_]\w*)\s*(?::[^=]+)?=")


class StubError(ValueError):
    pass


def _enclosing_function(lines: list[str], index: int, indent: str) -> str | None:
    for line in reversed(lines[:index]):
        m = DEF.match(line)
        if m and len(m.group("indent")) < len(indent):
            return m.group("name")
    return None


def derive_stub(source: str, module: str) -> str:
    """The student's version of a solution module's source."""
    lines = source.splitlines()
    out: list[str] = []
    i = 0
    while i < len(lines):
        m = BEGIN.match(lines[i])
        if not m:
            if END.match(lines[i]):
                raise StubError(f"{module}: line {i + 1}: END SOLUTION without BEGIN")
            out.append(lines[i])
            i += 1
            continue
        indent = m.group("indent")
        start = i
        i += 1
        explicit: list[str] = []
        while i < len(lines) and STUB.match(lines[i]):
            explicit.append(indent + STUB.match(lines[i]).group("code"))
            i += 1
        body: list[str] = []
        while i < len(lines) and not END.match(lines[i]):
            if BEGIN.match(lines[i]):
                raise StubError(f"{module}: line {i + 1}: nested BEGIN SOLUTION")
            body.append(lines[i])
            i += 1
        if i == len(lines):
            raise StubError(f"{module}: line {start + 1}: BEGIN SOLUTION is never ended")
        i += 1  # skip END
        if explicit:
            out.extend(explicit)
        elif indent:
            fn = _enclosing_function(lines, start, indent)
            label = f"{module}.{fn}" if fn else module
            out.append(f'{indent}raise NotImplementedError("{label}: your code here")')
        else:
            for line in body:
                a = ASSIGN.match(line)
                if a:
                    out.append(f"{a.group('name')} = None  # TODO: your answer")
    text = "\n".join(out) + "\n"
    ast.parse(text, filename=f"exercises/{module}.py")  # a stub must at least parse
    return text


def derive_all(solutions: Path) -> dict[str, str]:
    """Every registered exercise's stub (``questions`` included), course order."""
    from grader.registry import EXERCISES

    return {name: derive_stub((Path(solutions) / f"{name}.py").read_text(), name)
            for name in EXERCISES if (Path(solutions) / f"{name}.py").is_file()}


def write_stubs(solutions: Path, exercises: Path) -> list[Path]:
    exercises.mkdir(parents=True, exist_ok=True)
    written = []
    for name, text in derive_all(solutions).items():
        path = exercises / f"{name}.py"
        if not path.exists() or path.read_text() != text:
            path.write_text(text)
            written.append(path)
    return written
