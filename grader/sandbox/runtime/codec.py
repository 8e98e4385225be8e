"""Plain-data wire format between the grading process and the worker.

The grader never unpickles anything that comes from student code.  A message
is a JSON header plus raw byte buffers; the only values that cross the pipe
are None, bools, ints, floats, strings, lists, tuples, str-keyed dicts, NumPy
arrays and PyTorch tensors (sent as dtype + shape + bytes), and two marker
types defined here (``Func``, ``Raised``).  Decoding builds fresh
base-class arrays from bytes, so an ndarray subclass or an object with a
custom ``__eq__`` can never reach a comparison on the grader side.

Part of the worker runtime: imported by the grader
(``grader.sandbox.runtime.codec``) and by the worker (``runtime.codec``), the
same file; it must not import anything from the ``grader`` package.
"""
from __future__ import annotations

import json
import math
import struct
from decimal import Decimal
from fractions import Fraction

MAX_DEPTH = 32
_HEADER = struct.Struct("<QQ")  # (json length, total buffer length)

# NumPy dtypes that may cross the boundary, by name.
_NP_DTYPES = {
    "bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32",
    "uint64", "float16", "float32", "float64", "complex64", "complex128",
}
# torch dtype name -> (numpy dtype used on the wire, reinterpret bits?)
_TORCH_WIRE = {
    "bfloat16": ("uint16", True),
}


class CodecError(ValueError):
    """A value that is not plain data (or a malformed message)."""


class Func:
    """A callable named by reference, resolved inside the worker.

    ``Func("student:naive_attention")`` is an attribute of the student's
    module; ``Func("probe:sleep")`` is a function of the worker's trusted
    ``probes`` module.  Extra ``args``/``kwargs`` are bound (like
    ``functools.partial``)."""

    def __init__(self, ref: str, *args, **kwargs):
        if not isinstance(ref, str) or ":" not in ref:
            raise CodecError(f"bad function reference {ref!r}")
        self.ref, self.args, self.kwargs = ref, args, kwargs

    def __repr__(self):
        return f"Func({self.ref!r})"


class Raised:
    """An exception raised by student code, carried as text.

    ``bases`` lists the names of its classes (the MRO), so that a test can
    accept a subclass of ``ValueError`` without ever seeing the object."""

    def __init__(self, type_name: str, message: str, where: str, traceback: str,
                 bases=()):
        self.type_name, self.message = type_name, message
        self.where, self.traceback = where, traceback
        self.bases = tuple(bases)

    def is_a(self, name: str) -> bool:
        return name == self.type_name or name in self.bases


def _torch():
    import sys
    return sys.modules.get("torch")


def _numpy():
    """NumPy where it is imported: no value can be an array before it is, and
    the grading process's command line need not import it to start a worker
    (``grader.cli``)."""
    import sys
    return sys.modules.get("numpy")


def encode(value, buffers: list, depth: int = 0):
    """Turn ``value`` into a JSON-able tree, appending raw bytes to ``buffers``."""
    if depth > MAX_DEPTH:
        raise CodecError("value is nested too deeply")
    # Exact type checks: subclasses of int/float/str are not plain data.
    t = type(value)
    if value is None or t is bool or t is str:
        return value
    if t is int:
        return value if abs(value) < 2**53 else {"$int": str(value)}
    if t is float:
        if math.isfinite(value):
            return value
        return {"$float": repr(value)}
    if t in (list, tuple):
        items = [encode(v, buffers, depth + 1) for v in value]
        return items if t is list else {"$tuple": items}
    if t is dict:
        if not all(type(k) is str for k in value):
            raise CodecError("dict keys must be strings")
        if any(k.startswith("$") for k in value):
            return {"$dict": [[k, encode(v, buffers, depth + 1)] for k, v in value.items()]}
        return {k: encode(v, buffers, depth + 1) for k, v in value.items()}
    if t is Func:
        return {"$func": value.ref, "args": encode(list(value.args), buffers, depth + 1),
                "kwargs": encode(dict(value.kwargs), buffers, depth + 1)}
    if t is Raised:
        return {"$raised": value.type_name, "message": value.message,
                "where": value.where, "traceback": value.traceback,
                "bases": list(value.bases)}
    if t is Fraction or t is Decimal:  # exact numbers a student may return -> float
        return encode(float(value), buffers, depth + 1)
    np = _numpy()
    if np is not None and isinstance(value, np.generic):  # numpy scalars -> python numbers
        return encode(value.item(), buffers, depth + 1)
    if np is not None and isinstance(value, np.ndarray):
        arr = np.ascontiguousarray(value)
        if arr.dtype.name not in _NP_DTYPES:
            raise CodecError(f"arrays of dtype {arr.dtype} cannot be returned")
        buffers.append(arr.tobytes())
        return {"$ndarray": arr.dtype.name, "shape": list(arr.shape), "buf": len(buffers) - 1}
    torch = _torch()
    if torch is not None and isinstance(value, torch.Tensor):
        return _encode_tensor(torch, value, buffers)
    if torch is not None and isinstance(value, (torch.dtype, torch.device)):
        return {"$torch_attr": str(value)}
    raise CodecError(f"a value of type {t.__name__} is not plain data")


def _encode_tensor(torch, value, buffers):
    if value.is_sparse or value.layout != torch.strided:
        raise CodecError("only dense tensors can be returned")
    import numpy as np
    t = value.detach().to("cpu").contiguous()
    name = str(t.dtype).replace("torch.", "")
    wire, reinterpret = _TORCH_WIRE.get(name, (name, False))
    if reinterpret:  # NumPy has no bfloat16: send the raw 16-bit patterns
        arr = t.view(torch.int16).numpy().view(np.uint16)
    else:
        if wire not in _NP_DTYPES:
            raise CodecError(f"tensors of dtype {t.dtype} cannot be returned")
        arr = t.numpy()
    buffers.append(np.ascontiguousarray(arr).tobytes())
    return {"$tensor": name, "shape": list(t.shape), "buf": len(buffers) - 1,
            "device": str(value.device), "tensor_type": type(value).__name__}


def decode(tree, buffers: list, depth: int = 0, tensors: str = "torch"):
    """Rebuild a value from ``encode``'s output; never runs code from the data.

    ``tensors="numpy-unless-loaded"``: tensors come back as NumPy arrays while
    PyTorch is not imported (a replayed NumPy exercise need not pay its
    second-long import), as torch tensors once it is."""
    if depth > MAX_DEPTH:
        raise CodecError("value is nested too deeply")
    if tree is None or isinstance(tree, (bool, int, float, str)):
        return tree
    if isinstance(tree, list):
        return [decode(v, buffers, depth + 1, tensors) for v in tree]
    if not isinstance(tree, dict):
        raise CodecError("malformed message")
    if "$int" in tree:
        return int(tree["$int"])
    if "$float" in tree:
        return float(tree["$float"])
    if "$tuple" in tree:
        return tuple(decode(v, buffers, depth + 1, tensors) for v in tree["$tuple"])
    if "$dict" in tree:
        return {str(k): decode(v, buffers, depth + 1, tensors) for k, v in tree["$dict"]}
    if "$func" in tree:
        return Func(str(tree["$func"]), *decode(tree["args"], buffers, depth + 1, tensors),
                    **decode(tree["kwargs"], buffers, depth + 1, tensors))
    if "$raised" in tree:
        return Raised(str(tree["$raised"]), str(tree["message"]), str(tree["where"]),
                      str(tree["traceback"]), [str(b) for b in tree.get("bases", [])])
    if "$ndarray" in tree:
        return _array(tree["$ndarray"], tree["shape"], buffers[tree["buf"]])
    if "$tensor" in tree:
        wire, reinterpret = _TORCH_WIRE.get(str(tree["$tensor"]), (str(tree["$tensor"]), False))
        if tensors != "torch" and _torch() is None and not reinterpret:
            return _array(wire, tree["shape"], buffers[tree["buf"]])
        return _decode_tensor(tree, buffers)
    if "$torch_attr" in tree:
        import torch
        text = str(tree["$torch_attr"])
        if text.startswith("torch."):
            return getattr(torch, text[len("torch."):])
        return torch.device(text)
    return {str(k): decode(v, buffers, depth + 1, tensors) for k, v in tree.items()}


def _array(dtype: str, shape, raw: bytes):
    import numpy as np
    if dtype not in _NP_DTYPES:
        raise CodecError(f"unexpected dtype {dtype!r}")
    shape = tuple(int(s) for s in shape)
    arr = np.frombuffer(raw, dtype=np.dtype(dtype))
    if arr.size != math.prod(shape):
        raise CodecError("array size does not match its shape")
    return arr.reshape(shape).copy()  # a fresh, writable, base-class array


def _decode_tensor(tree, buffers):
    import torch
    name = str(tree["$tensor"])
    wire, reinterpret = _TORCH_WIRE.get(name, (name, False))
    arr = _array(wire, tree["shape"], buffers[tree["buf"]])
    if reinterpret:
        t = torch.from_numpy(arr.view("int16")).view(getattr(torch, name))
    else:
        t = torch.from_numpy(arr)
    return t.clone()


def pack(obj) -> bytes:
    buffers: list = []
    header = json.dumps(encode(obj, buffers), allow_nan=False).encode()
    lengths = json.dumps([len(b) for b in buffers]).encode()
    body = b"".join([struct.pack("<Q", len(lengths)), lengths, header] + buffers)
    return _HEADER.pack(len(header), len(body)) + body


def read_message(read_exact, max_bytes: int, tensors: str = "torch"):
    """Read one framed message with ``read_exact(n) -> bytes`` and decode it
    (``tensors``: see ``decode``)."""
    head_len, body_len = _HEADER.unpack(read_exact(_HEADER.size))
    if body_len > max_bytes or head_len > body_len:
        raise CodecError(f"message of {body_len} bytes is over the limit of {max_bytes}")
    body = read_exact(body_len)
    (n_len,) = struct.unpack_from("<Q", body, 0)
    lengths = json.loads(body[8:8 + n_len])
    start = 8 + n_len
    tree = json.loads(body[start:start + head_len])
    pos, buffers = start + head_len, []
    for n in lengths:
        buffers.append(body[pos:pos + int(n)])
        pos += int(n)
    return decode(tree, buffers, tensors=tensors)


def unpack(data: bytes, max_bytes: int | None = None, tensors: str = "torch"):
    """Decode one message held in memory (the inverse of ``pack``)."""
    pos = 0

    def read_exact(n: int) -> bytes:
        nonlocal pos
        chunk = data[pos:pos + n]
        pos += n
        return chunk

    return read_message(read_exact, len(data) if max_bytes is None else max_bytes, tensors)
