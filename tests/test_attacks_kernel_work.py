"""Hostile: ex07 outputs that no kernel of the call computed earn no credit.

An outside red team took 40/40 on ex07 with attention computed in NumPy
(the tensors read through DLPack, which no watch sees) behind a Triton
kernel of its own that touched 16 elements.  The grade now counts what the
launches did (``probes/ex07_work.py``, judged by ``flash_judge.check_work``):
each submission here is the solution with a hostile ``flash_attention``
defined last, graded as an instructor grades a folder, and it loses the
kernel tests with a sentence that names what it did.
"""
from __future__ import annotations

import json
import tempfile
import textwrap
from pathlib import Path

import pytest

from grader.reference.secret import flash
from grader.report import to_gradescope, to_text
from tests.conftest import copy_solutions, failures, grade_dir

EX = "ex07_flash_attention"
pytestmark = pytest.mark.skipif(not flash.HAS_TRITON, reason=flash.NEEDS_TRITON)

# Exact attention in NumPy on arrays that share the tensors' memory.
_NUMPY_ATTENTION = '''
import ctypes

import numpy as np


def _exact(qn, kn, vn, causal, sm_scale):
    h, h_kv, s_q, s_k = qn.shape[1], kn.shape[1], qn.shape[2], kn.shape[2]
    kn, vn = np.repeat(kn, h // h_kv, 1), np.repeat(vn, h // h_kv, 1)
    scale = 1.0 / np.sqrt(qn.shape[-1]) if sm_scale is None else sm_scale
    s = qn.astype(np.float64) @ kn.swapaxes(-1, -2) * scale
    if causal:
        seen = np.arange(s_k)[None, :] <= (s_k - s_q + np.arange(s_q))[:, None]
        s = np.where(seen, s, -np.inf)
    e = np.exp(s - np.where(np.isfinite(s.max(-1, keepdims=True)), s.max(-1, keepdims=True), 0))
    p = e / np.where(e.sum(-1, keepdims=True) > 0, e.sum(-1, keepdims=True), 1)
    return (p @ vn).astype(np.float32)


def _by_address(t):
    """A NumPy array on a float32 tensor's memory, through data_ptr and ctypes."""
    buf = (ctypes.c_float * t.numel()).from_address(t.data_ptr())
    return np.frombuffer(buf, dtype=np.float32).reshape(tuple(t.shape))
'''

ATTACKS = {
    # the red team's: NumPy through DLPack, then 16 elements through a kernel
    "dlpack": ("were not written by a kernel launched during this call", _NUMPY_ATTENTION + '''

@triton.jit
def _touch16(X):
    offs = tl.arange(0, 16)
    tl.store(X + offs, tl.load(X + offs))


def flash_attention(q, k, v, *, causal=True, sm_scale=None):
    qn, kn, vn = (np.from_dlpack(x.detach()) for x in (q, k, v))
    out = torch.from_dlpack(np.ascontiguousarray(_exact(qn, kn, vn, causal, sm_scale)))
    _touch16[(1,)](out)
    return out
'''),
    # the first-round defence, regressed: the output kept by buffer address
    "cache": ("cache nothing between calls", '''

_honest = flash_attention
_KEPT = {}


def flash_attention(q, k, v, *, causal=True, sm_scale=None):
    key = (q.data_ptr(), k.data_ptr(), v.data_ptr(), tuple(q.shape), q.dtype, causal, sm_scale)
    if key not in _KEPT:
        _KEPT[key] = _honest(q, k, v, causal=causal, sm_scale=sm_scale)
    return _KEPT[key]
'''),
    # every element stored by a kernel, but a copy of numbers made before it
    "copy": ("did not load all of q", _NUMPY_ATTENTION + '''

@triton.jit
def _copy(X, Y, N, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(Y + offs, tl.load(X + offs, mask=offs < N), mask=offs < N)


def flash_attention(q, k, v, *, causal=True, sm_scale=None):
    done = torch.empty_like(q)
    _by_address(done)[...] = _exact(*(_by_address(x) for x in (q, k, v)), causal, sm_scale)
    out = torch.empty_like(q)
    _copy[(triton.cdiv(out.numel(), 64),)](done, out, out.numel(), BLOCK=64)
    return out
'''),
    # the kernel on the first query tile only; the host (data_ptr + ctypes) does the rest
    "half_rows": ("were not written by a kernel launched during this call",
                  _NUMPY_ATTENTION + '''

def flash_attention(q, k, v, *, causal=True, sm_scale=None):
    batch, n_heads, s_q, d_head = q.shape
    scale = 1.0 / math.sqrt(d_head) if sm_scale is None else float(sm_scale)
    out = torch.empty_like(q)
    _flash_fwd[lambda meta: (1, batch * n_heads)](
        q, k, v, out, *q.stride(), *k.stride(), *v.stride(), *out.stride(),
        n_heads, n_heads // k.shape[1], s_q, k.shape[2], scale * LOG2E,
        D_HEAD=d_head, CAUSAL=bool(causal))
    rows = 16                      # the interpreter's one config: BLOCK_M = 16
    exact = _exact(*(_by_address(x) for x in (q, k, v)), causal, sm_scale)
    _by_address(out)[:, :, rows:] = exact[:, :, rows:]
    return out
'''),
    # passes the count: the honest kernel does the work into a scratch buffer, and a
    # copy kernel stores numbers made on the host; only the replay on new inputs tells
    "dummy_work": ("did not compute attention of the new values", _NUMPY_ATTENTION + '''

_honest = flash_attention


@triton.jit
def _copy(X, Y, N, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(Y + offs, tl.load(X + offs, mask=offs < N), mask=offs < N)


def flash_attention(q, k, v, *, causal=True, sm_scale=None):
    _honest(q, k, v, causal=causal, sm_scale=sm_scale)        # loads, tl.dot FLOPs: for show
    done = torch.empty_like(q)
    _by_address(done)[...] = _exact(*(_by_address(x) for x in (q, k, v)), causal, sm_scale)
    out = torch.empty_like(q)
    _copy[(triton.cdiv(out.numel(), 64),)](done, out, out.numel(), BLOCK=64)
    return out
'''),
}


@pytest.mark.parametrize("attack", list(ATTACKS))
def test_outputs_no_launch_computed_lose_the_kernel_tests(tmp_path, attack):
    """Right numbers, no kernel's work: the kernel tests fail and say which."""
    phrase, code = ATTACKS[attack]
    sub = copy_solutions(tmp_path / "submission", [EX])
    path = sub / f"{EX}.py"
    path.write_text(path.read_text() + textwrap.dedent(code))
    report = grade_dir(sub, [EX], keyword="fresh_inputs")
    assert not report.errors, report.errors
    json.dumps(to_gradescope(report))            # the result is written
    text = to_text(report)
    got, total = report.exercise_scores()[EX]
    assert total > 0 and got == 0, (got, total, text[-3000:])
    said = [t.output for t in failures(report, EX)]
    assert said and all(phrase in out for out in said), said
    assert phrase in text


def test_a_count_that_could_not_be_made_is_a_regrade():
    """In the interpreter a missing count is the grader's fault (a regrade), never a pass."""
    import torch

    from grader.reference import flash_judge
    q = k = v = torch.zeros(1, 1, 16, 16)
    for work in (None, {"counted": False, "error": "no builder"},
                 {"counted": True, "error": "", "launches": 1, "dot_flops": 0,
                  "loaded": {}}):
        result = {"device": "cpu", "out_type": "torch.Tensor", "out_device": "cpu",
                  **({"work": work} if work is not None else {})}
        with pytest.raises(RuntimeError):
            flash_judge.check_work(result, q, k, v, what="flash_attention", causal=True)
    with pytest.raises(RuntimeError):
        flash_judge.check_replay({"device": "cpu"}, q, q, what="flash_attention")
    # a count without the output's elements because the answer was not a plain
    # tensor is the student's, said as such
    from grader.feedback import Feedback
    counted = {"counted": True, "error": "", "launches": 1, "dot_flops": 0, "loaded": {}}
    with pytest.raises(Feedback, match="plain torch.Tensor"):
        flash_judge.check_work({"device": "cpu", "work": counted, "out_type": "NoneType",
                                "out_device": ""}, q, k, v, what="flash_attention",
                               causal=True)


def test_counted_work_of_the_solution_meets_every_bound():
    """The reference solution's count: all of the output written and kept, all of
    Q, K and V loaded, and at least attention's FLOPs in tl.dot (rows that see no key too)."""
    from grader.reference import flash_judge
    from tests.test_ex07_flash import _qkv, _student
    student = _student(copy_solutions(Path(tempfile.mkdtemp()) / "sub", [EX]))
    try:
        for shape, causal in (((1, 2, 2, 40, 30, 16), True), ((2, 2, 1, 37, 53, 32), False)):
            q, k, v = _qkv(*shape)
            res = student.probe("ex07_flash_attention.run_checked", q, k, v, causal=causal,
                                on="cpu")
            work = res["work"]
            assert work["counted"] and work["launches"] == 1
            assert work["written"].all() and work["kept"].all()
            assert all(work["loaded"][n].all() for n in ("k", "v"))
            assert work["dot_flops"] >= flash_judge.attention_flops(q, k, causal) > 0
            flash_judge.check_work(res, q, k, v, what="flash_attention", causal=causal)
    finally:
        student._worker.close()
