"""The grader's import graph, read from its source: modules, imports made at
a module's top and inside functions, and the circles.

    python benchmarks/import_graph.py [--list]

An import inside a function still makes an edge: a circle through one is a
circle (``tests/test_import_graph.py`` holds that there is none).
"""
from __future__ import annotations

import argparse
import ast
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "grader"
# The suites are pytest's to import, and the worker runtime runs in the sandbox
# (its own import root): neither is part of the grading process's graph.
SKIP = ("grader.suites", "grader.sandbox.runtime")


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def modules() -> dict[str, Path]:
    found = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        name = module_name(path)
        if "__pycache__" in path.parts or name.startswith(SKIP):
            continue
        found[name] = path
    return found


def _target(node, current: str, known: dict) -> list[str]:
    """The grader modules an import statement names."""
    out = []
    if isinstance(node, ast.Import):
        names = [a.name for a in node.names]
    else:
        base = node.module or ""
        if node.level:
            package = current.rsplit(".", node.level)[0] if current in known and \
                not str(known[current]).endswith("__init__.py") else current
            base = f"{package}.{base}".strip(".")
        names = [f"{base}.{a.name}" for a in node.names] + [base]
    for name in names:
        while name and name not in known:
            name = name.rpartition(".")[0]
        if name and name != current:
            out.append(name)
    return out


def edges() -> list[tuple[str, str, bool]]:
    """(importer, imported, inside a function) of every grader-to-grader import."""
    known = modules()
    out = []
    for name, path in known.items():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        inside = set()
        for fn in ast.walk(tree):
            if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
                inside |= {id(n) for n in ast.walk(fn) if isinstance(n, (ast.Import, ast.ImportFrom))}
        for node in ast.walk(tree):
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                if isinstance(node, ast.ImportFrom) and node.module == "__future__":
                    continue
                for target in set(_target(node, name, known)):
                    out.append((name, target, id(node) in inside))
    return sorted(set(out))


def circles(graph_edges) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    graph: dict[str, set] = {}
    for a, b, _ in graph_edges:
        graph.setdefault(a, set()).add(b)
        graph.setdefault(b, set())
    index, low, stack, on, out = {}, {}, [], set(), []
    counter = [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    sys.setrecursionlimit(10_000)
    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--list", action="store_true", help="list the imports made inside functions")
    args = parser.parse_args()
    found = edges()
    inner = [e for e in found if e[2]]
    print(f"modules: {len(modules())}; imports between them: {len(found)}, "
          f"{len(inner)} inside functions")
    for comp in circles(found):
        print("circle:", " -> ".join(comp))
    print(f"circles: {len(circles(found))}; through top-level imports only: "
          f"{len(circles([e for e in found if not e[2]]))}")
    if args.list:
        for a, b, _ in inner:
            print(f"  {a} -> {b}")


if __name__ == "__main__":
    main()
