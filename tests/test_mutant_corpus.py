"""The mutant corpus itself (fast: nothing is graded here).

``tests/test_mutants.py`` grades every mutant and checks that its feedback
names it, in a diagnosis line unless the mutant says otherwise; this file
counts: at least 95 % of the corpus is named by a diagnosis line, and the
corpus covers every function and constant of the contract
(``grader/contract.json``: an exercise added there needs its mutants), and
every registered exercise has its mutants file.
"""
from __future__ import annotations

from collections import Counter

import pytest

from grader.paths import TESTS_DIR
from grader.registry import EXERCISES, contract
from tests.conftest import SOLUTIONS
from tests.data.mutants import all_mutants, covered

# The quick tier (tests/conftest.py): no PyTorch import, no grading.
pytestmark = pytest.mark.quick

MUTANTS = all_mutants()
NAMED_SHARE = 0.95
# Registered modules without a mutants file, and why: each other exercise has
# tests/data/mutants/<exercise>.py, with at least one mutant (the questions have
# theirs: a slip's wrong answer each).
WITHOUT_MUTANTS: dict[str, str] = {}


def test_at_least_95_percent_of_the_corpus_is_named_by_a_diagnosis_line():
    named = [m for m in MUTANTS if m.diagnosis]
    share = len(named) / len(MUTANTS)
    others = sorted(f"{m.file}:{m.name}" for m in MUTANTS if not m.diagnosis)
    assert share >= NAMED_SHARE, (f"{len(named)} of {len(MUTANTS)} mutants ({share:.1%}) are "
                                  f"named by a diagnosis line; the others: {others}")


@pytest.mark.author
@pytest.mark.parametrize("name", list(EXERCISES))
def test_every_registered_exercise_has_its_mutants_file(name):
    path = TESTS_DIR / "data" / "mutants" / f"{name}.py"
    if name in WITHOUT_MUTANTS:
        assert not path.exists(), f"{path.name} exists: take {name} out of WITHOUT_MUTANTS"
        return
    assert path.is_file(), (f"{name} has no tests/data/mutants/{name}.py: one realistic mistake "
                            "per mutant, that its hidden suite must catch and name "
                            "(docs/AUTHORING.md, \"Mutants\")")
    assert any(m.file == name for m in MUTANTS), f"tests/data/mutants/{name}.py holds no MUTANTS"


def test_every_exception_is_registered():
    assert set(WITHOUT_MUTANTS) <= set(EXERCISES)


@pytest.mark.author
@pytest.mark.parametrize("module", sorted(contract()["modules"]))
def test_the_corpus_covers_every_function_of_the_contract(module):
    spec = contract()["modules"][module]
    wanted = set(spec.get("functions", {})) | set(spec.get("constants", []))
    path = SOLUTIONS / f"{module}.py"
    assert path.is_file(), f"the contract names {module}, but solutions/ has no {path.name}"
    source = path.read_text()
    seen = set()
    for m in MUTANTS:
        if m.file == module:
            seen |= covered(m, source)
    missing = sorted(wanted - seen)
    assert not missing, f"no mutant in tests/data/mutants/{module}.py touches {missing}"


@pytest.mark.author
def test_every_mutant_applies_once_and_compiles():
    names = Counter((m.file, m.name) for m in MUTANTS)
    assert not [k for k, n in names.items() if n > 1], "a mutant name is used twice"
    for m in MUTANTS:
        source = (SOLUTIONS / f"{m.file}.py").read_text()
        compile(m.apply(source), f"{m.file}:{m.name}", "exec")
        assert m.expect.strip(), f"{m.file}:{m.name} expects no words"
