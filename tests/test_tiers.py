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


def _config(markexpr="", exercise=()):
    options = {"markexpr": markexpr, "exercise": list(exercise)}
    return SimpleNamespace(getoption=options.__getitem__)


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

