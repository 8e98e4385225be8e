"""A kernel style the installed Triton cannot run is a regrade, said as such.

Triton 3.9 removed block pointers (``tl.make_block_ptr``); older supported
releases run them.  A block-pointer kernel graded on a Triton that refuses
it cannot be judged there: its kernel tests need a regrade, and the
feedback names the style and the version, instead of failing the student
(or saying that the interpreter accepted what it refused).
"""
from __future__ import annotations

import os
import textwrap

import pytest

from grader.reference import flash_judge
from grader.reference.secret import flash
from grader.report import NEEDS_REGRADE, to_text
from tests.conftest import copy_solutions, grade_dir

EX = "ex07_flash_attention"
pytestmark = pytest.mark.skipif(not flash.HAS_TRITON, reason=flash.NEEDS_TRITON)

BLOCK_POINTERS = '''

@triton.jit
def _tiles_by_block_pointer(X, Y, N, BLOCK: tl.constexpr):
    src = tl.make_block_ptr(X, shape=(N,), strides=(1,), offsets=(0,), block_shape=(BLOCK,),
                            order=(0,))
    dst = tl.make_block_ptr(Y, shape=(N,), strides=(1,), offsets=(0,), block_shape=(BLOCK,),
                            order=(0,))
    tl.store(dst, tl.load(src, boundary_check=(0,)), boundary_check=(0,))


_honest = flash_attention


def flash_attention(q, k, v, *, causal=True, sm_scale=None):
    scratch = torch.empty(16, device=q.device)
    _tiles_by_block_pointer[(1,)](q, scratch, 16, BLOCK=16)
    return _honest(q, k, v, causal=causal, sm_scale=sm_scale)
'''


def _interpreter_runs_block_pointers() -> bool:
    import subprocess
    import sys
    code = textwrap.dedent("""
        import torch, triton, triton.language as tl
        @triton.jit
        def k(X, BLOCK: tl.constexpr):
            p = tl.make_block_ptr(X, shape=(16,), strides=(1,), offsets=(0,),
                                  block_shape=(BLOCK,), order=(0,))
            tl.store(p, tl.load(p))
        k[(1,)](torch.zeros(16), BLOCK=16)
        """)
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, timeout=120,
                         env={**os.environ, "TRITON_INTERPRET": "1"})
    return run.returncode == 0


def test_block_pointers_refused_by_the_installed_triton_are_a_regrade(tmp_path):
    if _interpreter_runs_block_pointers():
        pytest.skip("this Triton's interpreter runs block pointers: graded on results")
    sub = copy_solutions(tmp_path / "submission", [EX])
    path = sub / f"{EX}.py"
    path.write_text(path.read_text() + textwrap.dedent(BLOCK_POINTERS))
    report = grade_dir(sub, [EX], keyword="fresh_inputs")
    # a grader's failure to judge: listed for instructors, and the test is a regrade
    assert report.errors and all("block pointers" in e for e in report.errors), report.errors
    kernel = [t for t in report.tests if t.exercise == EX]
    assert kernel and all(t.status == NEEDS_REGRADE for t in kernel), \
        [(t.status, t.output) for t in kernel]
    assert all("block pointers" in t.output and "could not be judged" in t.output
               for t in kernel), [t.output for t in kernel]
    assert "NEEDS REGRADE" in to_text(report)


def test_the_compile_check_does_not_claim_the_interpreter_ran_a_removed_style():
    row = {"ok": False, "kernel": "_fwd", "config": "", "line": 3, "file": "ex07.py",
           "error": "NotImplementedError: Block pointers have been removed in favor of the "
                    "tensor descriptor API"}
    target = {"target": "sm_80 (A100)", "dtype": "float16", "capability": 80}
    with pytest.raises(RuntimeError, match="block pointers") as caught:
        flash_judge._judge_row(target, row)
    assert "interpreter accepts" not in str(caught.value)
