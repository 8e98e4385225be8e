"""Correct submissions written from the contract alone get full marks.

``tests/independent/<variant>/`` holds complete submissions written from
CURRICULUM.md, contract.json and the stubs, by authors who never read
``solutions/``, ``grader/reference/`` or the suites, each in a style unlike
the reference:

* ``einsum``: einsum everywhere, log-sum-exp softmax, float32 kept float32,
  positions as lists, whole-number scores written as ints;
* ``plain``: matmul, loops over heads, float64 results, unrounded floats in
  ex01, shapes validated, numpy scalars returned;
* ``guards``: input validation everywhere, a device check in ex07's wrapper
  (CUDA, or the CPU under the interpreter), a 64x32 two-phase kernel;
* ``broadcast``: broadcasting and einsum, GQA by reshaping the queries, the
  MLA latent broadcast over heads, a kernel whose program loops over a KV
  head's query group;
* ``loops``: explicit Python loops, float64 inside, a 16x16 kernel on a 3-D
  grid with every stride passed;
* ``torchy``: PyTorch inside the NumPy exercises, dataclasses and
  lru_cache, a 1-D grid kernel, a dataclass in ex04's timer module.

``einsum`` and ``plain`` have no Triton kernel in ex07 (only the NumPy
functions), so their flash_attention tests are the only ones allowed to
fail, and only because the function is missing; the other four are complete
and must lose nothing.  Each grading draws a fresh secret seed, as a real
one does (the seed is in the failure message): full marks under every seed.
A grader that takes points from these takes them from a student who followed
the contract.
"""
from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from grader.registry import EXERCISES as REGISTRY
from tests.conftest import grade_dir

HERE = Path(__file__).parent / "independent"
# The contract's exercises (the variants are written against the contract alone).
EXERCISES = [name for name, ex in REGISTRY.items() if ex.in_contract]

# Where the stub asks for more than the contract says. The contract
# (CURRICULUM.md, ex08) never asks mla_attention for a ValueError; the stub's
# docstring does, so those checks are advice worth 0 points: the ``einsum``
# variant (contract only) fails them and loses nothing. A stale entry here is
# reported too.
CONTRACT_GAPS = {
    ("einsum", "ex08_mla"): "mla_attention rejects weights whose shapes do not fit",
    # ex04's written answer on the slope (issue 29) is the stub's, not the
    # contract's: staff grade it, the autograder gives it 0 points.
    **{(variant, "ex04_quadratic"): "WHERE_THE_SLOPE_COMES_FROM"
       for variant in ("broadcast", "einsum", "guards", "loops", "plain", "torchy")},
}


# The variants the default run grades: the two least like the reference
# (PyTorch inside the NumPy exercises, dataclasses, a 1-D grid kernel; einsum
# everywhere, no kernel); the others are the corpus tier (``--corpus``).
DEFAULT_VARIANTS = {"torchy", "einsum"}

# The variants written without ex07's kernel.
NO_KERNEL = {"einsum", "plain"}


def missing_kernel(test) -> bool:
    return "has no attribute 'flash_attention'" in (test.output or "")


@pytest.mark.slow
@pytest.mark.parametrize("variant", [
    pytest.param(name, marks=[] if name in DEFAULT_VARIANTS else [pytest.mark.corpus])
    for name in sorted(p.name for p in HERE.iterdir() if p.is_dir()
                       and not p.name.startswith(("_", ".")))])
def test_independent_submission_gets_full_marks(variant, tmp_path):
    sub = tmp_path / "submission"
    # A copy: grading writes the ex04 plot beside the modules.
    shutil.copytree(HERE / variant, sub, ignore=shutil.ignore_patterns("__pycache__", "*.png"))
    report = grade_dir(sub, EXERCISES)
    assert not report.errors, report.errors
    lost = []
    gap_seen = set()
    for t in report.tests:
        if t.score >= t.max_score and t.status != "failed":
            continue
        if variant in NO_KERNEL and t.exercise == "ex07_flash_attention" \
                and missing_kernel(t):
            continue
        gap = CONTRACT_GAPS.get((variant, t.exercise))
        if gap and t.title.startswith(gap) and t.max_score == 0:
            gap_seen.add((variant, t.exercise))
            continue
        lost.append(f"{t.exercise}: {t.title} ({t.score}/{t.max_score})\n{t.output}")
    assert not lost, f"seed {report.seed}:\n" + "\n\n".join(lost)
    stale = {k for k in CONTRACT_GAPS if k[0] == variant} - gap_seen
    assert not stale, f"the grader now agrees with the contract here: drop {stale}"
    # Every exercise was graded (a suite that silently dropped out would pass above).
    assert set(report.exercise_scores()) == set(EXERCISES)
