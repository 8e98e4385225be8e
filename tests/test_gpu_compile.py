"""Every Triton kernel of the package compiles for real GPUs, on this CPU machine.

Triton lowers a kernel to PTX and its bundled ``ptxas`` assembles it for a
target (sm_80: A100, sm_90a: H100/H200) without a GPU (``grader/gpu/aot.py``).
Each configuration an autotuner would try must compile, fit the
architecture's shared memory and spill no registers; on sm_90a the
reference must use warpgroup MMA, and its descriptor variant TMA.

The hardest case (``aot.HARDEST``: d_head 128, causal, bf16) is compiled for
every configuration of both reference variants and of the solution, and the
table printed; a configuration within ``aot``'s margin of a limit (shared
memory within 8 KB, registers at 255) fails unless it is pruned or its
reason is in ``aot.EDGE_REASONS``.
Every kernel, the solution's too, is then compiled over
``aot.default_matrix()``: the first configuration in each case one step from
the hardest (fp16, d_head 64, not causal: each its own code path; the
solution's every configuration is compiled by its graded compile check, in
``tests/test_ex07_flash.py``).  ``--full-matrix`` compiles every
configuration in every case (192 compiles; CI runs it in its own job).
Compiles are cached for the session.
"""
from __future__ import annotations

import pytest

from grader.gpu.aot import HARDEST   # (dtype, d_head, causal)
from grader.reference.secret import flash

pytestmark = pytest.mark.skipif(not flash.HAS_TRITON, reason=flash.NEEDS_TRITON)


def _check(rows, capsys):
    from grader.gpu import aot
    with capsys.disabled():
        print("\n" + aot.table(rows))
    bad = [f"{r.kernel} {r.capability} {r.dtype} d={r.d_head} causal={r.causal} "
           f"[{r.config}]: {'; '.join(aot.problems(r))}" for r in rows if aot.problems(r)]
    assert not bad, "\n".join(bad)


# The kernels and targets compiled: the solution on both, the reference's TMA
# form on sm_90; its pointer form (what the solution's kernel is built like)
# is the corpus tier's (``--corpus``).
KERNELS = [pytest.param("reference/pointers", 80, marks=pytest.mark.corpus),
           pytest.param("reference/pointers", 90, marks=pytest.mark.corpus),
           ("reference/descriptors", 90), ("solution", 80), ("solution", 90)]


@pytest.mark.slow
@pytest.mark.parametrize("kernel,capability", KERNELS)
def test_reference_configs_compile_hardest_case(kernel, capability, capsys):
    from grader.gpu import aot
    n = len(aot.launches(kernel, *HARDEST))
    assert n >= 2, f"{kernel}: the autotuner has {n} configs"
    _check([aot.compile_one(kernel, capability, *HARDEST, i) for i in range(n)], capsys)


@pytest.mark.slow
@pytest.mark.parametrize("kernel,capability", KERNELS)
def test_every_kernel_config_compiles(kernel, capability, capsys, request):
    from grader.gpu import aot
    full = request.config.getoption("full_matrix")
    keys = [key for key in (aot.full_matrix() if full else aot.default_matrix())
            if key[:2] == (kernel, capability) and key[2:5] != HARDEST]   # compiled above
    assert keys, f"nothing to compile for {kernel} on sm_{capability}"
    cases = {key[2:5] for key in keys}
    if full:
        assert len(cases) == 7, cases   # every case but the hardest
    else:   # each step from the hardest case: dtype, d_head, causal
        steps = {tuple(a != b for a, b in zip(case, HARDEST)) for case in cases}
        assert steps >= {(True, False, False), (False, True, False), (False, False, True)}, \
            cases
    _check([aot.compile_one(*key) for key in keys], capsys)


def _row(kernel, capability, config, **measured):
    from grader.gpu import aot
    r = {"ok": True, "registers": 128, "spill_bytes": 0, "shared_bytes": 64 * 1024,
         "fits": True, "wgmma": True, "tma": True, **measured}
    return aot.Row(kernel, capability, *HARDEST, config, tuple(sorted(r.items())))


def test_a_config_at_the_edge_of_a_limit_needs_a_reason():
    """Shared memory within 8 KB of the per-block limit, or registers at 255, is
    a problem unless grader/gpu/aot.py's EDGE_REASONS says why the config stays."""
    from grader.gpu import aot
    config = "BLOCK_M=64, BLOCK_N=64, num_warps=4, num_stages=2"
    assert not aot.problems(_row("solution", 80, config, shared_bytes=155 * 1024,
                                 registers=254))
    for cap, shared in ((80, 156 * 1024), (90, 220 * 1024 + 1), (90, 227 * 1024)):
        found = aot.problems(_row("solution", cap, config, shared_bytes=shared))
        assert any("EDGE_REASONS" in p and "shared memory" in p for p in found), found
    found = aot.problems(_row("solution", 80, config, registers=255))
    assert any("EDGE_REASONS" in p and "255 registers" in p for p in found), found
    kernel, cap, kept = next(iter(aot.EDGE_REASONS))
    assert not aot.problems(_row(kernel, cap, kept, shared_bytes=225 * 1024))


def test_every_edge_reason_names_a_config_still_tried():
    """A reason left behind by a pruned config is stale: remove it."""
    from grader.gpu import aot
    for kernel, cap, config in aot.EDGE_REASONS:
        tried = {launch[3] for launch in aot.launches(kernel, *HARDEST)}
        assert config in tried, f"{kernel} sm_{cap}: no config {config!r} any more ({tried})"


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


FRONT_END_KERNEL = (
    "import triton\nimport triton.language as tl\n\nSCALE = 2.0\n\n\n"
    "@triton.jit\ndef _k(X, N, BLOCK: tl.constexpr, GLOBAL: tl.constexpr):\n"
    "    tl.static_assert(BLOCK >= 16)\n"
    "    offs = tl.arange(0, BLOCK)\n"
    "    x = tl.load(X + offs, mask=offs < N)\n"
    "    if GLOBAL:\n"
    "        x = x * SCALE\n"
    "    tl.store(X + offs, x, mask=offs < N)\n")


@pytest.mark.parametrize("block,global_read,words", [
    (64, False, None), (64, True, "global variable SCALE"),
    (8, False, "AssertionFailure"), (48, False, "power of 2")])
def test_the_front_end_fails_as_the_full_compile_does(tmp_path, block, global_read, words):
    """`check`'s front end only (gpu_compile.front_end): what a config
    breaks in the kernel's code fails there with the full compile's words
    and line; a kernel that compiles passes it, telling no shared memory."""
    import torch

    from grader.sandbox.runtime.probes import gpu_compile
    src = tmp_path / "k.py"
    src.write_text(FRONT_END_KERNEL)
    mod = gpu_compile.load_for_gpu(str(src), "_k_front_end")
    args, kwargs = (torch.empty(64), 64), {"BLOCK": block, "GLOBAL": global_read}
    front = gpu_compile.compile_launch(mod._k, args, kwargs, 80, front_end_only=True)
    full = gpu_compile.compile_launch(mod._k, args, kwargs, 80)
    if words is None:
        assert front == {"ok": True, "front_end": True, "num_warps": 4, "num_stages": 3}
        assert full["ok"] and full["fits"] and "shared_bytes" in full
        return
    assert not front["ok"] and not full["ok"] and words in front["error"], front
    front.pop("trace"), full.pop("trace")
    assert front == full


def test_the_front_end_blames_itself_when_triton_lacks_what_it_uses(tmp_path, monkeypatch):
    import torch
    from triton.compiler import ASTSource

    from grader.sandbox.runtime.probes import gpu_compile
    src = tmp_path / "k.py"
    src.write_text(FRONT_END_KERNEL)
    mod = gpu_compile.load_for_gpu(str(src), "_k_front_end_gone")
    monkeypatch.delattr(ASTSource, "make_ir")
    with pytest.raises(gpu_compile.ProbeFailed, match="AttributeError: .*make_ir"):
        gpu_compile.compile_launch(mod._k, (torch.empty(64), 64), {"BLOCK": 64, "GLOBAL": 0},
                                   80, front_end_only=True)


def test_launches_alike_to_the_compiler_share_a_key(tmp_path):
    """`check` keeps a launch's answer by what its compile depends on: a
    float argument's value is not (a host edit of a scale compiles nothing
    again), a dtype, an int's divisibility, a constexpr and a config are."""
    import torch

    from grader.sandbox.runtime.probes import ex07_flash_attention as probe
    from grader.sandbox.runtime.probes import gpu_compile
    src = tmp_path / "k.py"
    src.write_text(FRONT_END_KERNEL.replace("def _k(X, N,", "def _k(X, N, S,"))
    mod = gpu_compile.load_for_gpu(str(src), "_k_keys")
    x = torch.empty(64)

    def key(x=x, n=64, s=0.5, **kwargs):
        return probe._launch_key(mod._k, (x, n, s), {"BLOCK": 64, "GLOBAL": False, **kwargs},
                                 80)
    assert key() == key(s=0.25) == key(n=128) == key(x=torch.ones(64))
    others = [key(x=x.half()), key(n=63), key(n=1), key(BLOCK=128), key(num_warps=8),
              probe._launch_key(mod._k, (x, 64, 0.5), {"BLOCK": 64, "GLOBAL": False}, 90)]
    assert len({key(), *others}) == 1 + len(others)


def test_the_stub_holds_no_kernel_skeleton_left_uncompiled():
    """A kernel skeleton added to the student stub must join grader/gpu/aot.py's list."""
    import ast

    from grader.gpu import aot
    path = aot.REPO_DIR / "exercises" / "ex07_flash_attention.py"
    tree = ast.parse(path.read_text())
    jitted = [node.name for node in ast.walk(tree) if isinstance(node, ast.FunctionDef)
              and any("jit" in ast.unparse(d) for d in node.decorator_list)]
    # The step before the kernel (issue 29): the student writes tile_update and
    # tile_finish inside the given _query_block_kernel; unwritten, they cannot
    # compile, and the interpreter checks them (the public and hidden suites).
    step = {"tile_update", "tile_finish", "_query_block_kernel"}
    jitted = [name for name in jitted if name not in step]
    listed = any(f == "exercises/ex07_flash_attention.py" for f, _ in aot.KERNEL_FILES.values())
    assert not jitted or listed, f"the stub defines kernels {jitted}: add it to aot.KERNEL_FILES"


def test_a_module_that_changes_tritons_settings_is_told_in_its_compile_answer(monkeypatch):
    """A compile made under settings the module changed (the knob Triton's own
    error suggests for a global read) says so, so that it is never shared with
    another student (grader/reference/compile_cache.py)."""
    pytest.importorskip("triton")
    from grader.sandbox.runtime.probes import gpu_compile
    assert gpu_compile.changed_settings(80) == []
    monkeypatch.setenv("TRITON_ALLOW_NON_CONSTEXPR_GLOBALS", "1")
    assert "TRITON_ALLOW_NON_CONSTEXPR_GLOBALS" in gpu_compile.changed_settings(80)
    monkeypatch.delenv("TRITON_ALLOW_NON_CONSTEXPR_GLOBALS")
    from triton import knobs
    monkeypatch.setattr(knobs.compilation, "allow_non_constexpr_globals", True)
    assert "knobs.compilation.allow_non_constexpr_globals" in gpu_compile.changed_settings(90)


def test_the_graders_own_compiles_change_no_setting():
    """A real compile, twice in one process (a compile worker compiles many):
    the settings the compile itself touches (its ptxas log) are not the
    module's, so the answers are shareable (``settings == []``): a class's
    compile cache that kept nothing went unnoticed by faked compiles."""
    pytest.importorskip("triton")
    from grader.gpu import aot
    rows = [aot.compile_one("solution", 80, "float16", 64, True, i) for i in (0, 1)]
    assert [r.r.get("settings") for r in rows] == [[], []], [r.r for r in rows]
