"""The values each line of the submission's own file gave, for the line pointer.

``trace(module, name, args, kwargs, budget)`` calls ``module.<name>`` again on
the failing case's inputs with ``sys.settrace`` watching only frames whose
code lies in the module's own file (or another module of the submission's
folder that it calls), and returns, in the order they were
made, the values each line assigned to a local (or returned) as data:
``{"line", "text", "name", "fn", "file", "shape", "values"}``, ``values`` the first
``MAX_ELEMENTS`` numbers of the value, flattened, in float64.  ``name=None``
runs the module's code again instead (exercise A's constants are lines of
the module itself).  ``grader.linepointer`` compares them with the
reference's steps in the grading process; nothing here decides anything.

Bounded: at most ``MAX_RECORDS`` values, and tracing stops (the call runs on
untraced) once ``budget`` seconds have passed, so the traced call stays
within the call's own time limit.  Part of the worker runtime: imports
nothing from ``grader``.
"""
from __future__ import annotations

import linecache
import math
import os
import sys
import time

MAX_ELEMENTS = 4096     # numbers kept of one value
MAX_RECORDS = 400       # values kept of one call (a kernel's tile loop makes many)
MAX_TEXT = 200          # characters kept of a line's text or a local's name


def _numbers(value):
    """``(shape, flat float64 array)`` of an array-like or real number, else
    None.  Only what the value is made of is read (never a student's
    ``__array__`` or ``__float__``): NumPy arrays, torch tensors, Triton's
    interpreter tensors, and Python numbers."""
    import numpy as np
    if isinstance(value, bool):
        return None
    if type(value) in (int, float):
        return (), np.array([float(value)])
    if type(value) in (list, tuple):
        # Nested lists of plain numbers (exercise A's constants), nothing else.
        flat, shape = _plain(value, 0)
        if flat is None:
            return None
        return shape, np.array(flat[:MAX_ELEMENTS], dtype=np.float64)
    if type(value) is np.ndarray or isinstance(value, np.generic) and type(value).__module__ == "numpy":
        arr = np.asarray(value)
        if arr.dtype.kind not in "biuf":
            return None
        return tuple(arr.shape), arr.reshape(-1)[:MAX_ELEMENTS].astype(np.float64)
    torch = sys.modules.get("torch")
    if torch is not None and type(value) in (torch.Tensor, torch.nn.Parameter):
        t = value.detach()
        if t.is_complex() or t.dtype not in _TORCH_REAL(torch):
            return None
        flat = t.reshape(-1)[:MAX_ELEMENTS].to("cpu", torch.float64)
        return tuple(t.shape), flat.numpy().copy()
    handle = getattr(type(value), "__module__", "") or ""
    if handle.startswith("triton.") and type(value).__name__ == "tensor":
        # Triton's interpreter: a block's numbers sit in ``handle.data``.
        data = getattr(getattr(value, "handle", None), "data", None)
        if type(data) is np.ndarray and data.dtype.kind in "biuf":
            return tuple(data.shape), data.reshape(-1)[:MAX_ELEMENTS].astype(np.float64)
    return None


def _plain(value, depth: int):
    """``(flat numbers, shape)`` of nested lists of ints and floats, every
    row as long as the first; ``(None, None)`` for anything else."""
    if type(value) in (int, float):
        return [float(value)], ()
    if type(value) not in (list, tuple) or depth > 4 or not value or len(value) > MAX_ELEMENTS:
        return None, None
    flat, shape = [], None
    for item in value:
        part, sub = _plain(item, depth + 1)
        if part is None or (shape is not None and sub != shape):
            return None, None
        shape = sub
        flat.extend(part)
        if len(flat) > 4 * MAX_ELEMENTS:
            return None, None
    return flat, (len(value),) + shape


def _TORCH_REAL(torch):  # noqa: N802 - a constant made once torch is imported
    return (torch.float16, torch.bfloat16, torch.float32, torch.float64, torch.bool,
            torch.int8, torch.int16, torch.int32, torch.int64, torch.uint8)


class _Tracer:
    """Records what each line of one file assigned, within a time budget."""

    def __init__(self, filenames, budget: float, folder: str | None = None):
        self.filenames = frozenset(filenames)
        # The submission's folder: its other modules (ex03 calls ex02's
        # attention) are the student's lines too.
        self.folder = folder + os.sep if folder else None
        self.deadline = time.monotonic() + budget
        self.records: list[dict] = []
        self.stopped = False
        self.seen: dict = {}     # id(frame) -> {local name: id(value)} after its last line
        self.last: dict = {}     # id(frame) -> the line it ran last (whose work a line event sees)

    def _over(self) -> bool:
        if self.stopped or len(self.records) >= MAX_RECORDS or time.monotonic() > self.deadline:
            self.stopped = True
            sys.settrace(None)
            return True
        return False

    def _ours(self, filename: str) -> bool:
        return filename in self.filenames or bool(
            self.folder and filename.startswith(self.folder) and filename.endswith(".py"))

    def global_trace(self, frame, event, arg):
        if self._over() or not self._ours(frame.f_code.co_filename):
            return None
        # The arguments a frame starts with are the inputs, not a line's work.
        self.seen[id(frame)] = {k: id(v) for k, v in frame.f_locals.items()}
        frame.f_trace_lines = True
        return self.local_trace

    def local_trace(self, frame, event, arg):
        if self._over():
            frame.f_trace = None
            return None
        before = self.seen.get(id(frame), {})
        now = frame.f_locals
        line = frame.f_lineno if event == "return" else self.last.get(id(frame))
        if line is not None:
            for key, value in now.items():
                if before.get(key) != id(value):
                    self._record(frame, line, key, value)
        if event == "return":
            self._record(frame, frame.f_lineno, "return", arg)
            self.seen.pop(id(frame), None)
            self.last.pop(id(frame), None)
            return None
        self.seen[id(frame)] = {k: id(v) for k, v in now.items()}
        self.last[id(frame)] = frame.f_lineno
        return self.local_trace

    def _record(self, frame, line: int, name: str, value) -> None:
        if len(self.records) >= MAX_RECORDS:
            return
        try:
            got = _numbers(value)
        except Exception:  # noqa: BLE001 - a value whose reading fails is not recorded
            got = None
        if got is None:
            return
        shape, values = got
        code = frame.f_code
        text = linecache.getline(code.co_filename, line).strip()[:MAX_TEXT]
        self.records.append({"line": int(line), "text": text, "name": str(name)[:MAX_TEXT],
                             "fn": str(code.co_name)[:MAX_TEXT],
                             "file": os.path.basename(code.co_filename)[:MAX_TEXT],
                             "shape": [int(n) for n in shape], "values": values})


def trace(module, name, args, kwargs, budget: float) -> dict:
    """The values the lines of ``module``'s file made while ``module.<name>(
    *args, **kwargs)`` ran (``name=None``: while the module's code ran again)."""
    filename = getattr(module, "__file__", None)
    if not filename or not math.isfinite(budget) or budget <= 0:
        return {"records": [], "stopped": True}
    tracer = _Tracer([filename], float(budget), os.path.dirname(os.path.abspath(filename)))
    linecache.checkcache(filename)
    previous = sys.gettrace()
    result = None
    try:
        if name is None:
            with open(filename, encoding="utf-8") as f:
                code = compile(f.read(), filename, "exec")
            namespace = {"__name__": module.__name__, "__file__": filename}
            sys.settrace(tracer.global_trace)
            exec(code, namespace)  # noqa: S102 - the module's own code, in its worker
        else:
            fn = getattr(module, name)
            sys.settrace(tracer.global_trace)
            result = fn(*args, **kwargs)
    except Exception:  # noqa: BLE001 - the values made before the exception still say where
        pass
    finally:
        sys.settrace(previous)
    out = {"records": tracer.records, "stopped": tracer.stopped}
    try:
        answer = _numbers(result)           # what the rerun returned: the grader checks
    except Exception:  # noqa: BLE001 - that it is the answer being explained
        answer = None
    if answer is not None:
        out["result"] = {"shape": [int(n) for n in answer[0]], "values": answer[1]}
    return out
