"""Mutants: copies of a solution with one realistic mistake each.

Each ``tests/data/mutants/<exercise>.py`` defines ``MUTANTS``, a list of
``Mutant``.  ``tests/test_mutants.py`` grades each with the hidden suite and
checks that it loses points and that some failing test's feedback contains
``expect`` (case-insensitive): the grader must name the mistake.  By default
``expect`` must sit in a diagnosis line ("This looks like: ...", see
``DIAGNOSIS``); a mutant with ``diagnosis=False`` is named by a check's own
message instead (a missing ValueError, a cheat caught), and
``tests/test_mutant_corpus.py`` keeps those under 5 % of the corpus.

A module may also define ``ONLY``, mapping a mutant's name to a pytest
``-k`` expression that selects the tests which must catch it (by default
the exercise's whole hidden suite).  It keeps the package's own tests fast:
a mistake in a formula need not wait for a timing run.
"""
from __future__ import annotations

import ast
import importlib
import pkgutil
from dataclasses import dataclass


# Lines of feedback that name a mistake: grader.feedback's and grader.rootcause's.
DIAGNOSIS = ("This looks like:", "This follows from")


def diagnosis_lines(text: str) -> str:
    return "\n".join(line for line in text.splitlines() if line.startswith(DIAGNOSIS))


@dataclass(frozen=True)
class Mutant:
    name: str        # the mistake, e.g. "softmax_over_queries"
    find: str        # an exact snippet of the solution, found exactly once
    replace: str     # what the mistaken code has instead
    expect: str      # a phrase the feedback must contain
    file: str = ""   # the exercise module; filled in by all_mutants()
    only: str = ""   # a pytest -k expression; filled in from the module's ONLY
    diagnosis: bool = True   # named in a "This looks like:" line (see above)

    def apply(self, source: str) -> str:
        count = source.count(self.find)
        if count != 1:
            raise AssertionError(f"mutant {self.name}: snippet found {count} times in "
                                 f"{self.file}.py (must be exactly once)")
        return source.replace(self.find, self.replace)


def all_mutants() -> list[Mutant]:
    out = []
    for info in pkgutil.iter_modules(__path__):
        mod = importlib.import_module(f"{__name__}.{info.name}")
        only = getattr(mod, "ONLY", {})
        unknown = set(only) - {m.name for m in getattr(mod, "MUTANTS", [])}
        if unknown:
            raise AssertionError(f"{info.name}.ONLY names no mutant: {sorted(unknown)}")
        for m in getattr(mod, "MUTANTS", []):
            out.append(Mutant(m.name, m.find, m.replace, m.expect, file=info.name,
                              only=only.get(m.name, ""), diagnosis=m.diagnosis))
    return out


def mutant(file: str, name: str) -> Mutant:
    """The corpus's mutant ``name`` of exercise ``file``."""
    return next(m for m in all_mutants() if m.file == file and m.name == name)


def _top_level_spans(source: str) -> list[tuple[str, int, int]]:
    """(name, first offset, end offset) of each top-level function and constant."""
    tree = ast.parse(source)
    starts = [0]
    for line in source.splitlines(keepends=True):
        starts.append(starts[-1] + len(line))
    spans = []
    for node in tree.body:
        names = []
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            names = [node.name]
        elif isinstance(node, ast.Assign):
            names = [t.id for t in node.targets if isinstance(t, ast.Name)]
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names = [node.target.id]
        first = node.decorator_list[0].lineno if getattr(node, "decorator_list", None) \
            else node.lineno
        for name in names:
            spans.append((name, starts[first - 1], starts[node.end_lineno]))
    return spans


def covered(mutant: Mutant, source: str) -> set[str]:
    """The solution's top-level functions and constants the mutant's snippet
    touches: what the mutant covers of the contract.  A snippet in a private
    helper (``_attend``) covers the functions that call that helper."""
    at = source.index(mutant.find)
    end = at + len(mutant.find)
    spans = _top_level_spans(source)
    hit = {name for name, lo, hi in spans if lo < end and at < hi}
    uses = {}
    for node in ast.parse(source).body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            uses[node.name] = {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}
    private = {n for n in hit if n.startswith("_")}
    while private:
        callers = {f for f, names in uses.items() if names & private} - hit
        hit |= callers
        private = {f for f in callers if f.startswith("_")}
    return hit
