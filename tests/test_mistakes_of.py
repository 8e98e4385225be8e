"""One ``mistakes_of`` (grader/reference/mistakes.py) for every secret
reference: each describes a mistake with its own module's ``MISTAKES``."""
from __future__ import annotations

import ast
import sys
import types

import numpy as np
import pytest

from grader.paths import PACKAGE_DIR
from grader.reference import mistakes
from grader.reference.secret import attention, mla, roofline


def test_there_is_one_definition_and_every_secret_reference_uses_it():
    defined = [str(p.relative_to(PACKAGE_DIR)) for p in PACKAGE_DIR.rglob("*.py")
               if "__pycache__" not in p.parts
               and any(isinstance(n, ast.FunctionDef) and n.name == "mistakes_of"
                       for n in ast.walk(ast.parse(p.read_text())))]
    assert defined == ["reference/mistakes.py"], defined
    for module in (attention, mla, roofline):
        assert module.mistakes_of is mistakes.mistakes_of, module.__name__


def test_each_mistake_is_described_by_its_functions_own_module():
    x = np.arange(12.0).reshape(3, 4)
    got = attention.mistakes_of(attention.softmax, ["softmax_over_queries"], x)
    assert list(got) == [attention.MISTAKES["softmax_over_queries"]]
    flops = roofline.mistakes_of(roofline.causal_pairs, ["causal_half"], 4, 6)
    assert flops == {roofline.MISTAKES["causal_half"]: 12}


def _module_with(fn) -> types.ModuleType:
    module = types.ModuleType("fake_reference")
    module.MISTAKES = {"ok": "an answer", "cannot": "a mistake of other shapes",
                       "unrecorded": "a mistake the edition never recorded"}
    fn.__module__ = module.__name__
    module.fn = fn
    return module


def test_a_mistake_that_cannot_apply_or_was_never_recorded_is_left_out(monkeypatch):
    def fn(value, mistake=None):
        if mistake == "cannot":
            raise ValueError("not for these shapes")
        if mistake == "unrecorded":   # what a replay module does in the edition
            pytest.skip("not checked in the student edition")
        return value + 1
    monkeypatch.setitem(sys.modules, "fake_reference", _module_with(fn))
    assert mistakes.mistakes_of(fn, ["ok", "cannot", "unrecorded"], 1) == {"an answer": 2}
    with pytest.raises(KeyError):   # a name its module does not describe is the suite's slip
        mistakes.mistakes_of(fn, ["no_such_mistake"], 1)
