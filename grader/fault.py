"""Whose fault is an unexpected exception in a test: the student's or the grader's?

A test fails for the student with ``Feedback``, ``StudentError`` or an
``AssertionError``.  Any other exception was raised in the grader's own code
(a suite, a reference, a judge) and is one of two things:

* a malformed answer: the student's function returned ``None``, a tuple too
  short, an array where a number was expected, and the suite's expression
  that uses it raised (``TypeError: 'NoneType' object is not iterable``).
  That expression reads what the student returned, or calls the student: a
  failure, said as one sentence about the answer;
* the grader's own failure: the expression that raised touches no answer (a
  reference that crashed, a library that changed, a bug).  Never the
  student's loss: the test needs a regrade, and a person looks.

A call whose arguments do not fit the function a suite calls (``TypeError:
check_close() got an unexpected keyword argument 'wht'``, raised before the
function runs, in the grader's own frame) is the suite's slip, whatever
answers the call passes along: the grader's failure (``call_slip``).  A
student's function is never called there (its calls go to the worker).

"Reads an answer" is decided on the innermost frame of the grader's judging
code (the ``grader`` package, not its sandbox): a name in the expression
that raised there (from Python 3.11 on the call or operation itself, not the
rest of its line) is bound to a value that ``StudentModule`` handed to the
test (by identity: the value, an item of it, or a view of it), or to the
``StudentModule`` itself.  A value computed from an answer
(``np.asarray(got)``) is not traced: such a failure goes to a person, the
safe side.  Probes' results are the grader's own data, never answers; a
probe whose own code fails in the worker says so (``ProbeFailed``).
"""
from __future__ import annotations

import io
import linecache
import os
import re
import sys
import tokenize
from pathlib import Path

import numpy as np

from grader.paths import PACKAGE_DIR

SANDBOX_DIR = PACKAGE_DIR / "sandbox"
MAX_PARTS = 10_000     # items of nested answers looked at, at most


def _answer_ids(answers: list) -> set[int]:
    """The ids of the answers and of what they hold (lists, tuples, dicts)."""
    ids: set[int] = set()
    todo = list(answers)
    while todo and len(ids) < MAX_PARTS:
        value = todo.pop()
        # Small ints and bools are shared objects, the same in the grader's
        # own data: not told apart by identity.  None is kept (a function
        # that forgot to return is the commonest malformed answer).
        if id(value) in ids or type(value) is bool or type(value) is int and -5 <= value <= 256:
            continue
        ids.add(id(value))
        if isinstance(value, (list, tuple)):
            todo.extend(value)
        elif isinstance(value, dict):
            todo.extend(value.values())
    return ids


def _judging_frame(tb):
    """The innermost traceback frame in the grader's judging code, or None."""
    found = None
    while tb is not None:
        path = Path(os.path.abspath(tb.tb_frame.f_code.co_filename))
        if PACKAGE_DIR in path.parents and SANDBOX_DIR not in path.parents:
            found = tb
        tb = tb.tb_next
    return found


def _raising_source(tb) -> str:
    """The source of the expression that raised in this frame: from Python
    3.11 on, exactly that call or operation (``ref.softmax(x)`` in
    ``check_close(student.softmax(x), ref.softmax(x))``), else its line."""
    code = tb.tb_frame.f_code
    line = linecache.getline(code.co_filename, tb.tb_lineno)
    positions = list(getattr(code, "co_positions", lambda: [])())
    index = tb.tb_lasti // 2      # one entry per two-byte code unit
    if not 0 <= index < len(positions) or None in positions[index]:
        return line
    first, last, col, end_col = positions[index]
    lines = [linecache.getline(code.co_filename, n).encode() for n in range(first, last + 1)]
    if not lines or not lines[0]:
        return line
    lines[-1] = lines[-1][:end_col]      # offsets count UTF-8 bytes
    lines[0] = lines[0][col:]
    return b"".join(lines).decode(errors="replace")


def _names(source: str) -> set[str]:
    """The names an expression reads (not attributes, not strings)."""
    names, after_dot = set(), False
    try:
        for tok in tokenize.generate_tokens(io.StringIO(source).readline):
            if tok.type == tokenize.NAME and not after_dot:
                names.add(tok.string)
            after_dot = tok.type == tokenize.OP and tok.string == "."
    except (tokenize.TokenError, SyntaxError):
        pass     # an expression cut at a line's end: the names read so far
    return names


def _is_answer(value, ids: set[int]) -> bool:
    """``value`` is an answer, a part of one, or a view of one."""
    if id(value) in ids:
        return True
    torch = sys.modules.get("torch")
    if isinstance(value, np.ndarray):
        base = value.base
    elif torch is not None and isinstance(value, torch.Tensor):
        base = value._base
    else:
        return False
    return base is not None and id(base) in ids


def by_answer(excinfo, students: list) -> bool:
    """Was this exception raised by a malformed answer of the student?

    ``students``: the test's ``StudentModule`` s (their ``answers``)."""
    from grader.sandbox.client import StudentModule

    tb = _judging_frame(excinfo.tb)
    if tb is None:
        return False
    ids = _answer_ids([a for s in students for a in s.answers])
    frame, missing = tb.tb_frame, object()
    for name in _names(_raising_source(tb)):
        value = frame.f_locals.get(name, frame.f_globals.get(name, missing))
        if value is missing:     # a builtin, or a name bound later
            continue
        if isinstance(value, StudentModule) or _is_answer(value, ids):
            return True
    return False


# What Python says when a call's arguments do not fit the function called.
CALL_MISFIT = re.compile(r"^[\w.<>]+\(\) (got an unexpected keyword argument|missing \d+ required|"
                         r"takes \d+ positional|takes from \d+ to \d+ positional|"
                         r"got multiple values for argument|got some positional-only)")


def call_slip(excinfo) -> bool:
    """Did the grader's own code call a function with arguments that do not
    fit it?  Raised in a judging frame with nothing deeper on the stack: the
    function called never ran, so no answer was judged wrong."""
    if not isinstance(excinfo.value, TypeError) or not CALL_MISFIT.match(str(excinfo.value)):
        return False
    tb = excinfo.tb
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    return tb is not None and _judging_frame(tb) is tb


# What a probe raises when its own code fails in the worker
# (``runtime.probes.gpu_compile.ProbeFailed``); it arrives as a ``StudentRaised``.
PROBE_FAILED = "ProbeFailed"


def graders(excinfo, students: list) -> bool:
    """Is this exception the grader's own failure (a regrade, never the
    student's loss)?  A probe's own failure in the worker counts only with
    no frame of the submission on its stack (a student's code cannot pass
    its own exception off as the probe's)."""
    import pytest

    from grader.feedback import Feedback
    from grader.sandbox.client import StudentError, StudentRaised

    exc = excinfo.value
    if isinstance(exc, StudentRaised):
        return exc.raised.is_a(PROBE_FAILED) and not exc.raised.where
    if isinstance(exc, (Feedback, StudentError, AssertionError, pytest.fail.Exception)):
        return False
    return call_slip(excinfo) or not by_answer(excinfo, students)


def what(excinfo) -> str:
    """``Type: message`` of the grader's failure, and where it was."""
    from grader.sandbox.client import StudentRaised

    exc = excinfo.value
    if isinstance(exc, StudentRaised):
        return f"{exc.raised.type_name}: {exc.raised.message} (in the worker)"
    line = where(excinfo)
    return f"{type(exc).__name__}: {exc}" + (f" ({line})" if line else "")


def where(excinfo) -> str:
    """``file, line N`` of the grader's line that raised, for the report."""
    tb = _judging_frame(excinfo.tb)
    if tb is None:
        return ""
    path = Path(tb.tb_frame.f_code.co_filename)
    return f"{path.name}, line {tb.tb_lineno}"
