"""Feedback text: expected vs got, first mismatch, max error, the named mistake."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from grader.feedback import Feedback, check_close, check_equal, to_numpy


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
    assert "got nan at index (1,) where a finite value was expected" in text


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
