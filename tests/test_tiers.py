"""The tiers of tests/conftest.py hold what they promise: the quick tier
(``-m quick``) collects only the files that hold quick tests, imports no
PyTorch and starts no worker; an author's loop (``--exercise``) collects only
the files that hold its tests (tests/test_author.py checks what it selects)."""
from __future__ import annotations

from types import SimpleNamespace

import pytest

from tests import conftest
from tests.conftest import REPO

pytestmark = pytest.mark.quick


def _config(markexpr="", exercise=(), corpus=False):
    options = {"markexpr": markexpr, "exercise": list(exercise), "corpus": corpus}
    return SimpleNamespace(getoption=options.__getitem__)


def _item(*markers):
    return SimpleNamespace(get_closest_marker=lambda name: name if name in markers else None)


def test_the_tiers_collect_only_the_files_that_hold_their_tests():
    quick, loop, full = _config("quick"), _config(exercise=["ex02_mha"]), _config()
    mutants, safetext = REPO / "tests" / "test_mutants.py", REPO / "tests" / "test_safetext.py"
    torch_file = REPO / "tests" / "test_codec.py"       # imports PyTorch, holds no quick test
    assert conftest.pytest_ignore_collect(torch_file, quick) is True
    assert conftest.pytest_ignore_collect(safetext, quick) is None
    assert conftest.pytest_ignore_collect(mutants, quick) is True
    assert conftest.pytest_ignore_collect(mutants, loop) is None
    assert conftest.pytest_ignore_collect(safetext, loop) is True
    assert conftest.pytest_ignore_collect(torch_file, full) is None
    assert conftest._tier(_config("not slow")) is None      # only -m quick is the tier


def test_the_quick_tier_refuses_pytorch_and_workers():
    with pytest.raises(ImportError, match="quick tier"):
        conftest._NoTorch().find_spec("torch.nn")
    assert conftest._NoTorch().find_spec("numpy") is None
    with pytest.raises(RuntimeError, match="grades nothing"):
        conftest._no_worker()


def test_the_default_run_leaves_the_corpus_tier_out_and_corpus_or_a_loop_runs_it():
    corpus, plain, loop_only = _item("corpus", "slow"), _item("slow"), _item("loop_only")
    default, full, loop = _config(), _config(corpus=True), _config(exercise=["ex02_mha"])
    assert conftest._left_out(default, corpus) and not conftest._left_out(default, plain)
    assert not conftest._left_out(full, corpus) and not conftest._left_out(full, plain)
    assert not conftest._left_out(loop, corpus)          # a loop grades all its mutants
    assert conftest._left_out(default, loop_only) and conftest._left_out(full, loop_only)
    assert not conftest._left_out(loop, loop_only)
    assert not conftest._left_out(_config("not slow"), plain)


def test_the_corpus_tier_is_a_few_of_each_promise_and_ci_runs_the_rest():
    """The default run keeps some of every corpus: the first rounds of the
    mutants, some independent submissions; CI's corpus job runs the rest."""
    from tests import test_independent, test_mutants
    assert 0 < test_mutants.DEFAULT_ROUNDS < len(test_mutants.ROUNDS)
    assert {file for file, _ in test_mutants.IN_DEFAULT_RUN} \
        == {m.file for m in test_mutants.MUTANTS}     # every exercise has a mutant graded
    variants = {p.name for p in test_independent.HERE.iterdir() if p.is_dir()}
    assert test_independent.DEFAULT_VARIANTS < variants
    workflow = (REPO / ".github" / "workflows" / "ci.yml").read_text()
    assert "python -m pytest -q --corpus -m corpus" in workflow
