"""The wire format carries plain data only, and rebuilds it faithfully."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from grader.sandbox.runtime import codec


def roundtrip(value):
    return codec.unpack(codec.pack(value))


@pytest.mark.parametrize("value", [None, True, 3, -2**70, 1.5, float("inf"), float("nan"),
                                   "text", [1, "a"], (1, 2.0), {"a": [1, 2]},
                                   {"$odd": 1}])
def test_scalars_and_containers(value):
    got = roundtrip(value)
    if isinstance(value, float) and value != value:
        assert got != got
    else:
        assert got == value and type(got) is type(value)


@pytest.mark.parametrize("dtype", ["float32", "float64", "int64", "bool", "float16"])
def test_arrays_are_fresh_base_class_copies(dtype):
    arr = (np.arange(12).reshape(3, 4) % 3).astype(dtype)
    got = roundtrip(arr)
    assert type(got) is np.ndarray and got.dtype == arr.dtype
    np.testing.assert_array_equal(got, arr)
    got[0, 0] = 1  # writable
    non_contig = roundtrip(np.arange(12.0).reshape(3, 4).T)
    np.testing.assert_array_equal(non_contig, np.arange(12.0).reshape(3, 4).T)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16, torch.int64])
def test_tensors_keep_their_dtype(dtype):
    t = (torch.arange(6).reshape(2, 3) / 4).to(dtype)
    got = roundtrip(t)
    assert type(got) is torch.Tensor and got.dtype == dtype
    assert torch.equal(got, t)


def test_array_subclasses_arrive_as_plain_arrays():
    class Liar(np.ndarray):
        def __eq__(self, other):  # claims equality with anything
            return True

    got = roundtrip(np.zeros(3).view(Liar))
    assert type(got) is np.ndarray


@pytest.mark.parametrize("value", [object(), {1: 2}, lambda: 1, np.array([object()]),
                                   type("Int", (int,), {})(3)])
def test_non_plain_values_are_refused(value):
    with pytest.raises(codec.CodecError):
        codec.pack(value)


def test_function_references_and_errors_roundtrip():
    f = roundtrip(codec.Func("probe:common.sleep", 0.1, key=2))
    assert isinstance(f, codec.Func) and f.ref == "probe:common.sleep"
    assert f.args == (0.1,) and f.kwargs == {"key": 2}
    r = roundtrip(codec.Raised("ValueError", "bad", "m.py, line 3", "tb", ["ValueError"]))
    assert r.is_a("ValueError") and r.where == "m.py, line 3"


def test_oversized_message_is_refused():
    with pytest.raises(codec.CodecError, match="over the limit"):
        codec.unpack(codec.pack(np.zeros(1000)), max_bytes=100)


def test_exact_numbers_arrive_as_floats():
    """A Fraction or Decimal answer (kv_cache_saving as Fraction(64, 8)) is a number."""
    from decimal import Decimal
    from fractions import Fraction
    for value, want in [(Fraction(64, 8), 8.0), (Decimal("2.5"), 2.5), ([Fraction(1, 4)], [0.25])]:
        got = codec.unpack(codec.pack(value))
        assert got == want and type(got) is type(want)
