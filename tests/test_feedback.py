"""Feedback text: expected vs got, first mismatch, max error, the named mistake."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from grader.feedback import (LONG_CHAIN, NO_KNOWN_MISTAKE, OR, Feedback, accuracy,
                             check_close, check_equal, fits, matching_mistake, named_mistake,
                             to_numpy)
from grader.reference.secret import by_hand, flash
from grader.reference.secret import attention as ref


def feedback(fn) -> str:
    with pytest.raises(Feedback) as info:
        fn()
    return str(info.value)


def test_value_mismatch_names_first_index_max_error_and_mistake():
    want = np.array([[1.0, 2.0], [3.0, 4.0]])
    got = want.copy()
    got[1, 0] = 3.5
    text = feedback(lambda: check_close(got, want, what="f(x)", atol=1e-6, rtol=0,
                                        mistakes={"the thing was halved": want / 2,
                                                  "one entry moved": got.copy()}))
    assert "1 of 4 values differ" in text
    assert "first mismatch at index (1, 0): expected 3, got 3.5" in text
    assert "max abs error 0.5" in text
    assert text.endswith("This looks like: one entry moved.")


def test_mistakes_given_as_a_function_are_computed_for_a_wrong_answer_only():
    want = np.array([1.0, 2.0])
    calls = []

    def mistakes():
        calls.append(1)
        return {"the thing was halved": want / 2}
    check_close(want.copy(), want, what="f(x)", atol=0, rtol=0, mistakes=mistakes)
    check_equal(4, 4, what="n", mistakes=mistakes)
    assert calls == []
    text = feedback(lambda: check_close(want / 2, want, what="f(x)", atol=0, rtol=0,
                                        mistakes=mistakes))
    assert text.endswith("This looks like: the thing was halved.") and calls == [1]
    text = feedback(lambda: check_equal(2, 4, what="n",
                                        mistakes=lambda: {"halved": 2}))
    assert text.endswith("This looks like: halved.")
    # A function that fails names no mistake; the answer is still explained.
    text = feedback(lambda: check_close(want / 2, want, what="f(x)", atol=0, rtol=0,
                                        mistakes=lambda: 1 / 0, hint="Check the scale."))
    assert "first mismatch at index (0,)" in text and text.endswith("Check the scale.")


def test_public_suites_compute_their_mistakes_for_the_release_to_record():
    """The student edition replays the reference answers recorded while the
    solutions pass the public suites: a known mistake computed only for a
    wrong answer would never be recorded, and a student's wrong answer would
    then find no recorded answer.  So no public suite defers them."""
    import ast

    from grader.paths import SUITES_DIR
    deferred = []
    for path in sorted((SUITES_DIR / "public").glob("test_*.py")):
        tree = ast.parse(path.read_text())
        functions = {n.name for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)}
        for node in ast.walk(tree):
            for kw in node.keywords if isinstance(node, ast.Call) else []:
                value = kw.value
                lazy = (kw.arg == "mistakes" and (isinstance(value, ast.Lambda) or
                                                  isinstance(value, ast.Name)
                                                  and value.id in functions)
                        or kw.arg == "lazy" and not (isinstance(value, ast.Constant)
                                                     and value.value is False))
                if lazy:
                    deferred.append(f"{path.name}, line {node.lineno}")
    assert not deferred, deferred


def test_shape_mismatch_names_a_mistake_or_gives_the_hint():
    want = np.zeros((2, 3))
    text = feedback(lambda: check_close(np.zeros((3, 2)), want, what="g", atol=0, rtol=0,
                                        mistakes={"transposed": np.zeros((3, 2))}))
    assert "expected shape (2, 3), got shape (3, 2)" in text and "transposed" in text
    text = feedback(lambda: check_close(np.zeros(4), want, what="g", atol=0, rtol=0,
                                        hint="Check the reshape."))
    assert text.endswith("Check the reshape.")


def test_nan_where_finite_expected_is_pointed_out():
    text = feedback(lambda: check_close(np.array([1.0, np.nan]), np.array([1.0, 0.0]),
                                        what="softmax", atol=1e-9, rtol=0))
    assert "1 value is NaN where finite values were expected (the first at index (1,))" in text
    assert "max abs error" not in text


def test_nan_and_inf_answers_are_counted_never_max_error_zero():
    want = np.zeros((2, 3))
    got = want.copy()
    got[0, 1] = got[1, 2] = np.nan
    got[1, 0] = np.inf
    text = feedback(lambda: check_close(got, want, what="attention", atol=1e-9, rtol=0))
    assert "2 values are NaN where finite values were expected (the first at index (0, 1))" \
        in text
    assert "1 value is infinite where finite values were expected (the first at index (1, 0))" \
        in text
    assert "max abs error" not in text          # the finite entries are all right
    got[0, 0] = 0.5                                # a finite error is still measured
    text = feedback(lambda: check_close(got, want, what="attention", atol=1e-9, rtol=0))
    assert "max abs error 0.5" in text and "2 values are NaN" in text
    text = feedback(lambda: check_close(np.full(3, np.nan), np.zeros(3), what="x", atol=0,
                                        rtol=0))
    assert "3 values are NaN" in text and "max abs error" not in text
    assert "the answer is NaN" in feedback(lambda: check_equal(float("nan"), 3.0, what="n"))


def test_a_hint_appears_only_where_its_condition_holds():
    want = np.zeros((3, 2))
    rows_0_1 = (np.arange(3) < 2)[:, None]
    hint = "Rows 0 and 1 see no key."
    elsewhere = want.copy()
    elsewhere[2, 1] = 1.0
    text = feedback(lambda: check_close(elsewhere, want, what="out", atol=0, rtol=0, hint=hint,
                                        hint_where=rows_0_1))
    assert hint not in text
    there = want.copy()
    there[1, 0] = np.nan
    text = feedback(lambda: check_close(there, want, what="out", atol=0, rtol=0, hint=hint,
                                        hint_where=rows_0_1))
    assert text.endswith(hint)


def test_two_mistakes_with_one_answer_are_both_named():
    got = np.ones(3)
    assert matching_mistake(got, {"a": np.ones(3), "b": np.ones(3), "c": np.zeros(3)},
                            1e-9, 0) == "a (or: b)"
    text = feedback(lambda: check_close(got, np.zeros(3), what="x", atol=0, rtol=0,
                                        mistakes={"a": np.ones(3)}))
    assert named_mistake(text) == "a"
    assert named_mistake("on a case with x:\nThis looks like: a (or: b).") == "a (or: b)"
    assert named_mistake("x is wrong") is None


def test_column_softmax_is_described_in_the_exercise_layout():
    """Rows are queries (the docstring's layout): a column softmax runs over queries."""
    for step in ("WEIGHTS_FULL", "WEIGHTS_CAUSAL"):
        names = [d for d in by_hand.slips(step) if "column" in d]
        assert names == [by_hand.COLUMN_SOFTMAX]
    assert "down each column (over the queries)" in by_hand.COLUMN_SOFTMAX
    assert "rows are queries" in by_hand.COLUMN_SOFTMAX
    assert "(queries) instead of rows (keys)" not in by_hand.COLUMN_SOFTMAX


def test_new_reference_mistakes_differ_from_the_right_answer():
    """Each named slip gives a wrong answer on a case where it matters."""
    rng = np.random.default_rng(0)
    x = rng.standard_normal((2, 5, 8))
    pos = np.array([0, 1, 2, 5, 9])
    for name in ("rope_positions_off_by_one", "rope_inverse_frequency"):
        assert not torch.allclose(ref.rope(x, pos, mistake=name), ref.rope(x, pos))
    assert not torch.allclose(ref.rope(x, pos, 500.0, mistake="rope_base_ignored"),
                              ref.rope(x, pos, 500.0))
    assert float(ref.causal_mask(3, mistake="mask_neg_1e4")[0, 2]) == -1e4
    assert torch.isnan(ref.softmax(np.full((1, 3), -np.inf), mistake="empty_row_nan")).all()
    w = np.eye(8)
    assert not torch.allclose(ref.gqa(x, w, w, w, w, 4, mistake="scale_by_d_model"),
                              ref.gqa(x, w, w, w, w, 4))
    q, k, v = (rng.standard_normal((1, s, 4)) * 3 for s in (4, 9, 9))
    right = flash.blockwise_reference(q, k, v, 2, True)
    assert np.allclose(right, flash.reference(q[None], k[None], v[None], True)[0].numpy())
    for name in ("tile_local_cols", "ragged_tail_dropped", "no_rescale_l", "exp2_no_log2e"):
        assert not np.allclose(flash.blockwise_reference(q, k, v, 2, True, name), right), name


def test_none_and_wrong_types_are_explained():
    assert "forget to return" in feedback(lambda: check_close(None, np.zeros(2), what="h",
                                                              atol=0, rtol=0))
    assert "ragged or non-numeric" in feedback(lambda: to_numpy([[1], [1, 2]], "h"))
    assert to_numpy(torch.ones(2, dtype=torch.bfloat16), "t").dtype == np.float32


def test_check_equal_names_a_factor_of_two():
    text = feedback(lambda: check_equal(8, 16, what="flops", mistakes={"off by 2": 8}))
    assert "expected 16, got 8" in text and "This looks like: off by 2." in text
    check_equal(3, 3, what="same")
    with pytest.raises(Feedback):
        check_equal(True, 1, what="a bool is not a count")


def test_values_that_differ_never_print_alike():
    """Issue 26: `expected -0.0637178, got -0.0637178` hid the difference."""
    want, got = -0.06371782, -0.06371779
    with pytest.raises(Feedback) as info:
        check_equal(got, want, what="x")
    assert "expected -0.06371782, got -0.06371779" in str(info.value), str(info.value)
    with pytest.raises(Feedback) as info:
        check_close(np.array([1.0, got]), np.array([1.0, want]), what="y", atol=0, rtol=1e-9)
    assert "expected -0.06371782, got -0.06371779" in str(info.value), str(info.value)
    with pytest.raises(Feedback) as info:   # six digits when six show it
        check_equal(0.5, 0.25, what="z")
    assert "expected 0.25, got 0.5" in str(info.value)


# -- a diagnosis only where it is true (issue 50 item 2, issue 51 item 1) -------
def _mla_case():
    from grader.reference.ex08_checks import DECODE_MISTAKES, mla_inputs
    from grader.reference.secret import mla
    x, w_q, w_dkv, w_uk, w_uv, w_kr, w_o = mla_inputs(7, 2, 7, 16, 3, 12, 4, 6, 5)
    c_kv, k_rope = mla.cache(x, w_dkv, w_kr)
    args = (x[:, -1:], c_kv, k_rope, w_q, w_uk, w_uv, w_o, 3)
    return mla, args, mla.mistakes_of(mla.decode, DECODE_MISTAKES, *args)


def test_a_near_miss_is_told_no_known_mistake_and_where_it_differs():
    """A float32-rounded answer checked at float64's old tolerance: no mistake
    is told (it was "the query's default position was S"), and the feedback
    shows where the values first differ."""
    from grader.reference.ex08_checks import DECODE_MISTAKES
    mla, args, _ = _mla_case()
    # at a given position the default position's slip gives the right answer
    wrong = mla.mistakes_of(mla.decode, DECODE_MISTAKES, *args, position=30)
    want = mla.decode(*args, position=30)
    near = want.float().double()
    text = feedback(lambda: check_close(near, want, what="mla_decode", atol=1e-12, rtol=1e-12,
                                        mistakes=wrong))
    assert named_mistake(text) is None, text
    assert NO_KNOWN_MISTAKE in text
    assert "first mismatch at index" in text and "max abs error" in text


def test_each_named_mistake_gives_the_answer_it_is_named_for():
    """Each known mistake's own answer, checked with all of them offered, is
    named; every name given fits that answer at the check's tolerance."""
    mla, args, wrong = _mla_case()
    want = mla.decode(*args)
    atol, rtol = accuracy("float64", LONG_CHAIN)
    for description, answer in wrong.items():
        text = feedback(lambda: check_close(answer, want, what="mla_decode", atol=atol,
                                            rtol=rtol, mistakes=wrong))
        named = named_mistake(text)
        assert named and named.split(OR)[0] == description or description in named, text
        names = named.split(OR)
        if len(names) == 2:
            names[1] = names[1].removesuffix(")")
        for name in names:
            assert fits(answer.numpy(), wrong[name], want, atol, rtol), (description, name)


def test_a_mistake_that_gives_the_right_answer_here_is_never_named():
    """RoPE's positions unused change k_rope, not c_kv: a wrong c_kv is not
    told that slip, however close its c_kv is to the student's."""
    right = np.arange(6.0)
    got = right + 1.0
    text = feedback(lambda: check_close(got, right, what="c_kv", atol=1e-6, rtol=0,
                                        mistakes={"positions unused": right.copy(),
                                                  "a real slip": got.copy()}))
    assert named_mistake(text) == "a real slip"
    text = feedback(lambda: check_close(got, right, what="c_kv", atol=1e-6, rtol=0,
                                        mistakes={"positions unused": right.copy()}))
    assert named_mistake(text) is None and NO_KNOWN_MISTAKE in text
    text = feedback(lambda: check_equal(8, 16, what="n", mistakes={"right anyway": 16,
                                                                   "halved": 8, "half": 8}))
    assert named_mistake(text) == "halved (or: half)"


def test_a_mistake_is_matched_at_the_checks_own_tolerance():
    """Not at a looser one: an answer 1e-5 from a mistake's is not that mistake
    when the check allows 1e-9 (the old matcher allowed 1e-6 and 1e-4)."""
    want = np.ones(4)
    slip = want * 1.5
    got = slip + 1e-5
    text = feedback(lambda: check_close(got, want, what="y", atol=1e-9, rtol=1e-9,
                                        mistakes={"times 1.5": slip}))
    assert named_mistake(text) is None
    text = feedback(lambda: check_close(got, want, what="y", atol=1e-4, rtol=0,
                                        mistakes={"times 1.5": slip}))
    assert named_mistake(text) == "times 1.5"


def test_two_fitting_mistakes_are_named_the_nearer_first():
    want = np.zeros(3)
    got = np.full(3, 1.0)
    text = feedback(lambda: check_close(got, want, what="y", atol=0.1, rtol=0, mistakes={
        "farther": np.full(3, 1.08), "nearer": np.full(3, 0.99), "unfit": np.full(3, 2.0)}))
    assert named_mistake(text) == "nearer (or: farther)"


def test_a_timer_seen_to_return_one_call_is_not_told_it_returned_a_total():
    """measure_scaling's times several calls' worth name "the total of all
    repeats" only when the student's time_fn was not seen returning one
    call's time (its own test passed): no diagnosis contradicts a passed test."""
    from grader.reference import timing
    calls = [0.010, 0.011, 0.010, 0.012, 0.010, 0.010, 0.011]
    total = timing.MISTAKES["repeats_total"]
    assert total in timing._why_not_measured(0.052, calls, 5)
    said = timing._why_not_measured(0.052, calls, 5, one_call=True)
    assert total not in said and named_mistake(said) is None and "time_fn" in said
    assert timing.returns_one_call({"result": 0.0101, "calls": 7, "wall": 0.0715})
    assert not timing.returns_one_call({"result": 0.0505, "calls": 7, "wall": 0.0715})
    assert not timing.returns_one_call({"result": {"not_a_number": "str"}, "calls": 7,
                                        "wall": 0.07})


def test_outside_mistakes_are_named_by_their_own_words():
    """Two slips an outside author made that no known mistake gave (issue 51):
    ex05's query rotated at the cache's length, ex08's absorbed scale
    1/sqrt(d_c + d_rope); each is named for its own answer, and only it."""
    from grader.reference.ex05_checks import DWC_MISTAKES
    from grader.reference.secret import roofline as rl
    g = torch.Generator().manual_seed(3)
    x = torch.randn(1, 5, 8, generator=g, dtype=torch.float64)
    w = [torch.randn(rows, 8, generator=g, dtype=torch.float64) / 8 ** 0.5
         for rows in (8, 4, 4)]
    w_o = torch.randn(8, 8, generator=g, dtype=torch.float64) / 8 ** 0.5
    args = (x, *w, w_o, 2, 1)
    slip = rl.decode_with_cache(*args, mistake="decode_query_at_cache_length")[0]
    wrong = {k: v[0] for k, v in rl.mistakes_of(rl.decode_with_cache, DWC_MISTAKES,
                                                 *args).items()}
    text = feedback(lambda: check_close(slip, rl.decode_with_cache(*args)[0], what="out",
                                        atol=2e-5, rtol=2e-4, mistakes=wrong))
    assert named_mistake(text) == rl.MISTAKES["decode_query_at_cache_length"], text
    mla, dargs, dwrong = _mla_case()
    slip = mla.decode(*dargs, mistake="scale_d_c_rope")
    text = feedback(lambda: check_close(slip, mla.decode(*dargs), what="mla_decode",
                                        atol=2e-4, rtol=2e-3, mistakes=dwrong))
    assert named_mistake(text) == mla.MISTAKES["scale_d_c_rope"], text
