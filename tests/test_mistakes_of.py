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


# -- the precision rule's margin ------------------------------------------------
# The precision rule (grader.feedback.accuracy) lets a float64 answer be as far
# off as float32 arithmetic leaves it.  No known mistake may hide in that room:
# each mutant of the corpus (tests/data/mutants/), run on the cases below, is either
# exactly as right as the solution on a case (it does not apply there) or off
# by at least MARGIN times the tolerance the suites use for that function (the
# nearest, MLA's 1/sqrt(d_c) with d_c 12 against d_nope + d_rope 10, is 61
# times off), while the solution run in float32 stays within a tenth of it.
MARGIN = 50
FLOAT32_USES = 0.1
UNTOUCHED = 1e-3   # within float64 rounding of the solution: the case does not show it


def _rng(seed):
    return np.random.default_rng(seed)


def _numpy_mha_args(seed, b=2, s=6, d=16, h=4, h_kv=4, d_head=8):
    g = _rng(seed)
    x = g.standard_normal((b, s, d))
    w = [g.standard_normal((rows, d)) / d ** 0.5 for rows in (h * d_head, h_kv * d_head,
                                                               h_kv * d_head)]
    w_o = g.standard_normal((d, h * d_head)) / (h * d_head) ** 0.5
    return (x, *w, w_o)


def _torch(*arrays):
    import torch
    return tuple(torch.as_tensor(a) for a in arrays)


def _calls():
    """{exercise: [(label, function name, args builder, kwargs, tolerance factor)]}:
    the cases of the suites' fixed tests that show each mistake."""
    import torch

    from grader.feedback import LONG_CHAIN
    from grader.reference.ex08_checks import mla_inputs
    inf = np.inf
    g = _rng(1)
    q, k, v = (g.standard_normal((1, 2, 5, 8)) for _ in range(3))
    q3 = g.standard_normal((1, 1, 5, 4))
    k3, v3 = (g.standard_normal((1, 1, 3, 4)) for _ in range(2))
    big = q * (3000.0 * 4 / np.abs(q @ np.swapaxes(k, -1, -2)).max())
    mask55 = np.where(np.arange(5)[None] <= np.arange(5)[:, None], 0.0, -inf)
    mask53 = np.where(np.arange(3)[None] <= np.arange(5)[:, None] - 2, 0.0, -inf)
    mha = _numpy_mha_args(2)
    gqa = _numpy_mha_args(3, h=4, h_kv=2)
    one_attn = [
        ("causal 5x5", "attention", (q, k, v, mask55), {}, 1),
        ("5 queries, 3 keys", "attention", (q3, k3, v3, mask53), {}, 1),
        ("scores up to 3000", "attention", (big, k, v, None), {}, 1),
    ]
    ex02 = one_attn + [
        ("rows", "softmax", (g.standard_normal((3, 5)) * 3,), {}, 1),
        ("axis 0", "softmax", (g.standard_normal((2, 3, 4)) * 3,), {"axis": 0}, 1),
        ("axis 1", "softmax", (g.standard_normal((3, 4, 2)) * 3,), {"axis": 1}, 1),
        ("large logits", "softmax", (np.array([[1e4, 0.0, -1e4], [1e4, 1e4 - 1, 5.0],
                                               [0.0, -1.0, -2.0]]),), {}, 1),
        ("masked", "softmax", (np.array([[0.0, -inf, 1.0], [-inf, -inf, -inf]]),), {}, 1),
        *[(f"mask {a}", "causal_mask", a, {}, 1) for a in ((5, 5), (3, 8), (6, 4), (6,))],
        ("base 100", "rope", (g.standard_normal((1, 2, 5, 8)), np.array([0, 2, 3, 7, 11]),
                              100.0), {}, LONG_CHAIN),
        ("base 5e5", "rope", (g.standard_normal((2, 1, 4, 16)), np.array([5, 6, 9, 40]),
                              500000.0), {}, LONG_CHAIN),
        ("d_head 4", "rope", (g.standard_normal((1, 3, 6, 4)), np.arange(1, 7)), {}, LONG_CHAIN),
        ("split", "split_heads", (g.standard_normal((2, 5, 12)), 3), {}, 1),
        ("merge", "merge_heads", (g.standard_normal((2, 3, 5, 4)),), {}, 1),
        ("causal", "multi_head_attention", (*mha, 4), {}, LONG_CHAIN),
        ("not causal", "multi_head_attention", (*mha, 4), {"causal": False}, LONG_CHAIN),
        ("positions", "multi_head_attention", (*mha, 4),
         {"positions": np.array([3, 4, 7, 8, 12, 20]), "rope_base": 500000.0}, LONG_CHAIN),
    ]
    ex03 = [
        ("repeat", "repeat_kv", (g.standard_normal((2, 2, 5, 4)), 3), {}, 1),
        ("gqa causal", "grouped_query_attention", (*gqa, 4, 2), {}, LONG_CHAIN),
        ("gqa positions", "grouped_query_attention", (*gqa, 4, 2),
         {"positions": np.array([1, 2, 5, 6, 9, 11]), "causal": False}, LONG_CHAIN),
    ]
    tq, tk, tv = _torch(g.standard_normal((2, 3, 5, 8)), *(g.standard_normal((2, 3, 12, 8))
                                                           for _ in range(2)))
    ex04 = [("5 after 7 cached", "naive_attention", (tq, tk, tv, True), {}, 1),
            ("square", "naive_attention", (tk, tk, tv, True), {}, 1),
            ("no mask", "naive_attention", (tq, tk, tv, False), {}, 1)]
    pq, pk, pv = _torch(g.standard_normal((2, 4, 6, 8)), *(g.standard_normal((2, 2, 6, 8))
                                                           for _ in range(2)))
    dq = _torch(g.standard_normal((2, 4, 1, 8)))[0]
    x5 = _torch(*_numpy_mha_args(4, h=4, h_kv=2))
    ex05 = [("prefill", "prefill_attention", (pq, pk, pv), {}, 1),
            ("decode", "decode_attention", (dq, pk, pv), {}, 1),
            ("cache", "decode_with_cache", (*x5, 4, 2), {}, 1)]
    ex06 = [("decode", "gqa_decode_attention", (dq, pk, pv), {}, 1),
            ("decode MQA", "gqa_decode_attention", (dq, pk[:, :1], pv[:, :1]), {}, 1)]
    x, w_q, w_dkv, w_uk, w_uv, w_kr, w_o = mla_inputs(5, 2, 7, 16, 3, 12, 4, 6, 5)
    pos = torch.tensor([2, 3, 5, 8, 9, 13, 20])
    ex08 = [("cache", "mla_cache", (x, w_dkv, w_kr), {}, LONG_CHAIN),
            ("cache at positions", "mla_cache", (x, w_dkv, w_kr), {"positions": pos}, LONG_CHAIN),
            ("attention", "mla_attention", (x, w_q, w_dkv, w_uk, w_uv, w_kr, w_o, 3), {},
             LONG_CHAIN),
            ("attention at positions", "mla_attention", (x, w_q, w_dkv, w_uk, w_uv, w_kr, w_o, 3),
             {"positions": pos, "causal": False}, LONG_CHAIN)]
    c_kv, k_rope = mla.cache(x, w_dkv, w_kr, positions=pos)
    for label, kw in (("decode", {}), ("decode at 30", {"position": 30})):
        ex08.append((label, "mla_decode", (x[:, -1:], c_kv, k_rope, w_q, w_uk, w_uv, w_o, 3),
                     kw, LONG_CHAIN))
    return {"ex02_mha": ex02, "ex03_gqa": ex03, "ex04_quadratic": ex04,
            "ex05_decode_prefill": ex05, "ex06_gqa_intensity": ex06, "ex08_mla": ex08}


def _load(tmp, exercise, source):
    """The exercise's module from ``source``, its siblings the solutions'."""
    import importlib
    import shutil

    from tests.conftest import SOLUTIONS
    folder = tmp / f"m{len(list(tmp.iterdir()))}"
    shutil.copytree(SOLUTIONS, folder, ignore=shutil.ignore_patterns("__pycache__"))
    (folder / f"{exercise}.py").write_text(source)
    names = [p.stem for p in SOLUTIONS.glob("*.py")]
    saved = {n: sys.modules.pop(n) for n in names if n in sys.modules}
    sys.path.insert(0, str(folder))
    try:
        return importlib.import_module(exercise)
    finally:
        sys.path.remove(str(folder))
        for n in names:
            sys.modules.pop(n, None)
        sys.modules.update(saved)


def _answers(module, calls):
    out = []
    for _, name, args, kwargs, _ in calls:
        try:
            value = getattr(module, name)(*args, **kwargs)
        except Exception as exc:  # noqa: BLE001 - a mutant may fail where the solution does not
            value = exc
        out.append(value if isinstance(value, (tuple, list, Exception)) else (value,))
    return out


def _excess_over(got, want, factor) -> float:
    """How many of the rule's tolerances ``got`` is from ``want`` (inf for a
    raise or another shape)."""
    from grader.feedback import _excess, accuracy, to_numpy
    if isinstance(got, Exception) or len(got) != len(want):
        return np.inf
    worst = 0.0
    for g, w in zip(got, want):
        g, w = to_numpy(g, "mutant").astype(np.float64), to_numpy(w, "solution").astype(np.float64)
        if g.shape != w.shape:
            return np.inf
        worst = max(worst, _excess(g, w, *accuracy("float64", factor)))
    return worst


NUMERIC = ("ex02_mha", "ex03_gqa", "ex04_quadratic", "ex05_decode_prefill",
           "ex06_gqa_intensity", "ex08_mla")


@pytest.mark.parametrize("exercise", NUMERIC)
def test_no_known_mistake_hides_within_the_precision_rule(exercise, tmp_path):
    from tests.conftest import SOLUTIONS
    from tests.data.mutants import all_mutants
    calls = _calls()[exercise]
    source = (SOLUTIONS / f"{exercise}.py").read_text()
    right = _answers(_load(tmp_path, exercise, source), calls)
    hiding, shown = [], {}
    for m in (m for m in all_mutants() if m.file == exercise):
        wrong = _answers(_load(tmp_path, exercise, m.apply(source)), calls)
        for (label, name, *_, factor), got, want in zip(calls, wrong, right):
            ratio = _excess_over(got, want, factor)
            if UNTOUCHED < ratio < MARGIN:
                hiding.append(f"{m.name} on {name} ({label}): {ratio:.3g} tolerances off")
            if ratio >= MARGIN:
                shown[m.name] = min(shown.get(m.name, np.inf), ratio)
    assert not hiding, "\n".join(hiding)
    # The cases show the mistakes they were chosen for (a guard on this test).
    assert len(shown) >= {"ex02_mha": 25, "ex03_gqa": 5, "ex04_quadratic": 4,
                          "ex05_decode_prefill": 6, "ex06_gqa_intensity": 3,
                          "ex08_mla": 6}[exercise], sorted(shown)


def _in_float32(args):
    import torch
    return tuple(a.float() if isinstance(a, torch.Tensor) and a.is_floating_point() else
                 a.astype(np.float32) if isinstance(a, np.ndarray) and a.dtype == np.float64
                 else a for a in args)


@pytest.mark.parametrize("exercise", NUMERIC)
def test_float32_arithmetic_is_within_the_precision_rule(exercise, tmp_path):
    """The other side of the margin: the solution computing in float32 (its
    float64 inputs rounded to float32) stays well inside the tolerance."""
    from tests.conftest import SOLUTIONS
    calls = _calls()[exercise]
    module = _load(tmp_path, exercise, (SOLUTIONS / f"{exercise}.py").read_text())
    right = _answers(module, calls)
    in_f32 = _answers(module, [(label, name, _in_float32(args), kwargs, factor)
                               for label, name, args, kwargs, factor in calls])
    used = {f"{name} ({label})": _excess_over(got, want, factor)
            for (label, name, *_, factor), got, want in zip(calls, in_f32, right)}
    assert max(used.values()) <= FLOAT32_USES, used


# -- no diagnosis without a fit, on every mutant ----------------------------------
def _reference_of(exercise, function):
    """(reference function, every mistake its table names) for a graded
    function whose reference takes the student's arguments, else None."""
    pairs = {("ex02_mha", "softmax"): (attention, attention.softmax),
             ("ex02_mha", "rope"): (attention, attention.rope),
             ("ex02_mha", "multi_head_attention"): (attention, attention.gqa),
             ("ex03_gqa", "grouped_query_attention"): (attention, attention.gqa),
             ("ex08_mla", "mla_cache"): (mla, mla.cache),
             ("ex08_mla", "mla_attention"): (mla, mla.attention),
             ("ex08_mla", "mla_decode"): (mla, mla.decode)}
    found = pairs.get((exercise, function))
    return (found[1], list(found[0].MISTAKES)) if found else None


@pytest.mark.parametrize("exercise", ["ex02_mha", "ex03_gqa", "ex08_mla"])
def test_every_mistake_named_on_a_mutant_fits_its_answer(exercise, tmp_path):
    """Each mutant's wrong answer, checked as the suites check it with every
    known mistake of the reference offered: each mistake the feedback names
    gives that answer at the check's tolerance and is itself wrong there; an
    answer no mistake fits is told so.  (The issue's near-misses were told
    "RoPE was applied to the latent c_kv".)"""
    from grader.feedback import (NO_KNOWN_MISTAKE, OR, Feedback, accuracy, check_close,
                                 fits, named_mistake)
    from tests.conftest import SOLUTIONS
    from tests.data.mutants import all_mutants
    calls = [c for c in _calls()[exercise] if _reference_of(exercise, c[1])]
    source = (SOLUTIONS / f"{exercise}.py").read_text()
    checked, wrongs = 0, []
    for m in (m for m in all_mutants() if m.file == exercise):
        answers = _answers(_load(tmp_path, exercise, m.apply(source)), calls)
        for (label, name, args, kwargs, factor), got in zip(calls, answers):
            if isinstance(got, Exception):
                continue
            fn, names = _reference_of(exercise, name)
            kwargs = {("dim" if k == "axis" else k): v for k, v in kwargs.items()}  # softmax
            right = fn(*args, **kwargs)
            atol, rtol = accuracy("float64", factor)
            for j, part in enumerate(got):
                want = right[j] if isinstance(right, tuple) else right
                if _excess_over((part,), (want,), factor) <= 1:
                    continue      # a case this mutant gets right
                wrong = mistakes.mistakes_of(fn, names, *args, **kwargs)
                offered = {k: (v[j] if isinstance(v, tuple) else v) for k, v in wrong.items()}
                try:
                    check_close(part, want, what=name, atol=atol, rtol=rtol, mistakes=offered)
                    raise AssertionError(f"{m.name} on {name} ({label}) passed the check")
                except Feedback as exc:
                    text = str(exc)
                checked += 1
                named = named_mistake(text)
                if named is None:
                    assert NO_KNOWN_MISTAKE in text, text
                    continue
                said = named.split(OR)
                if len(said) == 2:
                    said[1] = said[1].removesuffix(")")
                answer = np.asarray(part, dtype=np.float64)
                wrongs += [f"{m.name} on {name} ({label}): named {d!r}" for d in said
                           if not fits(answer, offered[d], want, atol, rtol)]
    assert not wrongs, "\n".join(wrongs)
    assert checked >= 5, checked
