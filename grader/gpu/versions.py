"""The Triton and NumPy versions this grader supports, and what it says on others.

One rule, in one place: ``pyproject.toml``'s floors and the CI job that tests
them (``.github/workflows/versions.yml``) are held to these numbers by
``tests/test_versions.py``.  Each number was found by grading the reference
solution on a CPU (the README's "Supported versions"):

* Triton before 3.5 lacks what exercise G's checks use: the compile check
  packs a launch's arguments with ``JITFunction._pack_args`` (3.5 on).
* Triton's CPU interpreter before 3.7 turns a one-element array into an
  index with ``int(array)``, which NumPy 2.4 refuses ("only 0-dimensional
  arrays can be converted to Python scalars"): every kernel with a loop bound
  computed in the kernel fails there.  Only without a GPU (with one, kernels
  are compiled, not interpreted), so no floor of the package can say it.

``problems()`` lists what is wrong with this machine's versions; ``check``
and ``grade`` refuse (exit 2) when every exercise asked for is affected, and
otherwise say it first and mark the affected exercise's tests as needing a
regrade (``mark_untrusted``): a grade that cannot be trusted is never given.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from importlib import metadata

TRITON_FLOOR = (3, 5)
NUMPY_FLOOR = (1, 24)
# The first Triton whose interpreter works with NumPy 2.4, and that NumPy.
INTERPRETER_FIXED = (3, 7)
INTERPRETER_NUMPY_LIMIT = (2, 4)


@dataclass(frozen=True)
class Problem:
    text: str                      # one sentence, with the command that fixes it
    exercises: tuple[str, ...]     # the exercises whose grade it makes untrustworthy


def parse(version: str) -> tuple[int, int]:
    """``"3.6.0"`` -> ``(3, 6)``; ``"2.4.0rc1+cu128"`` -> ``(2, 4)``."""
    match = re.match(r"(\d+)\.(\d+)", version)
    return (int(match[1]), int(match[2])) if match else (0, 0)


def text(version: tuple[int, int]) -> str:
    return f"{version[0]}.{version[1]}"


def installed(dist: str) -> str | None:
    """The installed version of ``dist`` (read from its metadata, not imported)."""
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def _interpreted() -> bool:
    """Will exercise G's kernels run in Triton's CPU interpreter (no CUDA)?"""
    from grader.registry import EXERCISES
    return "TRITON_INTERPRET" in EXERCISES["ex07_flash_attention"].worker_env


INSTALLED = "installed"


def problems(triton: str | None = INSTALLED, numpy: str | None = INSTALLED,
             interpreted=None, exercises=None) -> list[Problem]:
    """What is unsupported about these versions (default: the installed
    ones; None: not installed) for ``exercises`` (default: all).

    ``interpreted``: whether Triton's CPU interpreter runs the kernels (asked
    of PyTorch only when the versions and the exercises make it matter: a
    check of a NumPy exercise never imports PyTorch)."""
    from grader.registry import EXERCISES
    triton = installed("triton") if triton == INSTALLED else triton
    numpy = installed("numpy") if numpy == INSTALLED else numpy
    asked = set(EXERCISES if exercises is None else exercises)
    with_triton = tuple(e for e, ex in EXERCISES.items() if "Triton" in ex.needs)
    if not asked & set(with_triton):
        triton = None             # no exercise asked for runs Triton
    found = []
    if numpy is not None and parse(numpy) < NUMPY_FLOOR:
        found.append(Problem(
            f"NumPy {numpy} is older than the {text(NUMPY_FLOOR)} this grader supports: "
            f"pip install 'numpy>={text(NUMPY_FLOOR)}'", tuple(EXERCISES)))
    if triton is None:
        return found      # exercise G's tests say "not run: needs Triton" themselves
    if parse(triton) < TRITON_FLOOR:
        found.append(Problem(
            f"Triton {triton} is older than the {text(TRITON_FLOOR)} this grader supports: "
            f"pip install 'triton>={text(TRITON_FLOOR)}'", with_triton))
    elif numpy is not None and parse(triton) < INTERPRETER_FIXED \
            and parse(numpy) >= INTERPRETER_NUMPY_LIMIT \
            and (_interpreted() if interpreted is None else interpreted):
        found.append(Problem(
            f"Triton {triton}'s CPU interpreter fails with NumPy {numpy} (Triton "
            f"{text(INTERPRETER_FIXED)} fixed it): pip install "
            f"'triton>={text(INTERPRETER_FIXED)}' or 'numpy<{text(INTERPRETER_NUMPY_LIMIT)}'",
            with_triton))
    return found


def mark_untrusted(report, found: list[Problem]) -> None:
    """Say each problem first in ``report``, and turn every test of an
    exercise it affects into "needs regrade" (0 points, still in the
    maximum), with the sentence that says why."""
    from grader.report import NEEDS_REGRADE
    for problem in found:
        names = ", ".join(e for e in report.exercises if e in problem.exercises)
        report.notes.insert(0, f"Unsupported version: {problem.text}. Not graded here: "
                               f"{names} (its tests need a regrade).")
        for t in report.tests:
            if t.exercise in problem.exercises and t.max_score > 0:
                t.status, t.score = NEEDS_REGRADE, 0.0
                t.output = (f"not judged: {problem.text} "
                            f"(0/{t.max_score:g} until regraded on a supported version)")
