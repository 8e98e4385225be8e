"""Every Triton kernel of the package compiles for real GPUs, on this CPU machine.

Triton lowers a kernel to PTX and its bundled ``ptxas`` assembles it for a
target (sm_80: A100, sm_90a: H100/H200) without a GPU (``grader/aot.py``).
Each configuration an autotuner would try must compile, fit the
architecture's shared memory and spill no registers; on sm_90a the
reference must use warpgroup MMA, and its descriptor variant TMA.

The hardest case (``aot.HARDEST``: d_head 128, causal, bf16) is compiled for
every configuration of both reference variants, and the table printed.
Every kernel, the solution's too, is then compiled over
``aot.default_matrix()``: the first configuration in each case one step from
the hardest (fp16, d_head 64, not causal: each its own code path; the
solution's every configuration is compiled by its graded compile check, in
``tests/test_ex07_flash.py``).  ``--full-matrix`` compiles every
configuration in every case (224 compiles; CI runs it in its own job).
Compiles are cached for the session.
"""
from __future__ import annotations

import pytest

from grader.aot import HARDEST   # (dtype, d_head, causal)
from grader.reference.secret import flash

pytestmark = pytest.mark.skipif(not flash.HAS_TRITON, reason=flash.NEEDS_TRITON)


def _check(rows, capsys):
    from grader import aot
    with capsys.disabled():
        print("\n" + aot.table(rows))
    bad = [f"{r.kernel} {r.capability} {r.dtype} d={r.d_head} causal={r.causal} "
           f"[{r.config}]: {'; '.join(aot.problems(r))}" for r in rows if aot.problems(r)]
    assert not bad, "\n".join(bad)


@pytest.mark.slow
@pytest.mark.parametrize("kernel,capability", [("reference/pointers", 80),
                                               ("reference/pointers", 90),
                                               ("reference/descriptors", 90)])
def test_reference_configs_compile_hardest_case(kernel, capability, capsys):
    from grader import aot
    n = len(aot.launches(kernel, *HARDEST))
    assert n >= 2, f"{kernel}: the autotuner has {n} configs"
    _check([aot.compile_one(kernel, capability, *HARDEST, i) for i in range(n)], capsys)


@pytest.mark.slow
@pytest.mark.parametrize("kernel,capability", [("reference/pointers", 80),
                                               ("reference/pointers", 90),
                                               ("reference/descriptors", 90),
                                               ("solution", 80), ("solution", 90)])
def test_every_kernel_config_compiles(kernel, capability, capsys, request):
    from grader import aot
    full = request.config.getoption("full_matrix")
    keys = [key for key in (aot.full_matrix() if full else aot.default_matrix())
            if key[:2] == (kernel, capability)
            and not (kernel.startswith("reference") and key[2:5] == HARDEST)]   # compiled above
    assert keys, f"nothing to compile for {kernel} on sm_{capability}"
    cases = {key[2:5] for key in keys}
    if full:
        assert len(cases) == (8 if kernel == "solution" else 7), cases   # every case
    else:   # each step from the hardest case: dtype, d_head, causal
        steps = {tuple(a != b for a, b in zip(case, HARDEST)) for case in cases}
        assert steps >= {(True, False, False), (False, True, False), (False, False, True)}, \
            cases
    _check([aot.compile_one(*key) for key in keys], capsys)


def test_a_global_read_is_named_with_its_line(tmp_path):
    """The check itself: a plain global inside @triton.jit fails with the line."""
    from grader.sandbox.runtime.probes import gpu_compile
    src = tmp_path / "k.py"
    src.write_text(
        "import triton\nimport triton.language as tl\n\nSCALE = 2.0\n\n\n"
        "@triton.jit\ndef _k(X, N, BLOCK: tl.constexpr):\n"
        "    offs = tl.arange(0, BLOCK)\n"
        "    x = tl.load(X + offs, mask=offs < N)\n"
        "    tl.store(X + offs, x * SCALE, mask=offs < N)\n")
    mod = gpu_compile.load_for_gpu(str(src), "_k_global")
    import torch
    x = torch.empty(64)
    got = gpu_compile.compile_launch(mod._k, (x, 64), {"BLOCK": 64}, 80)
    assert not got["ok"] and "LOG2E" not in got["error"]
    assert "global variable SCALE" in got["error"], got
    assert (got["file"], got["line"]) == ("k.py", 11), got


def test_the_stub_holds_no_kernel_skeleton_left_uncompiled():
    """A kernel skeleton added to the student stub must join grader/aot.py's list."""
    import ast

    from grader import aot
    path = aot.REPO_DIR / "exercises" / "ex07_flash_attention.py"
    tree = ast.parse(path.read_text())
    jitted = [node.name for node in ast.walk(tree) if isinstance(node, ast.FunctionDef)
              and any("jit" in ast.unparse(d) for d in node.decorator_list)]
    listed = any(f == "exercises/ex07_flash_attention.py" for f, _ in aot.KERNEL_FILES.values())
    assert not jitted or listed, f"the stub defines kernels {jitted}: add it to aot.KERNEL_FILES"
