"""ex07: the references, the probes, the speed path, and installs without Triton or CUDA.

The reference kernel and the benchmark probe run here under Triton's
interpreter (CPU, float32, tiny shapes): what a GPU would time is tested
for plumbing only, the numbers mean nothing on a CPU.
"""
from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
import torch
from click.testing import CliRunner

from grader.gpu import calibrate as cal
from grader.cli import main
from grader.core import Options, maximum
from grader.registry import EXERCISES
from grader.feedback import Feedback
from grader.paths import KERNELS_DIR
from grader.reference.secret import attention as att
from grader.reference import flash_speed
from grader.reference.secret import flash
from grader.sandbox.client import StudentModule
from grader.sandbox.runtime.kernels import flash as kernel
from tests.conftest import REPO, copy_solutions, grade_dir, launch, launcher
from tests.data.mutants import mutant

EX = "ex07_flash_attention"
needs_triton = pytest.mark.skipif(not flash.HAS_TRITON, reason=flash.NEEDS_TRITON)
SOURCE = Path(flash.__file__).read_text()


def _student(folder: Path) -> StudentModule:
    return StudentModule(launch(folder, EX, call_timeout=120, env={"TRITON_INTERPRET": "1"}))


@pytest.fixture(scope="module")
def reference():
    """The reference kernel in a trusted worker of its own (as the speed grade runs it)."""
    launch_worker = launcher().binder(REPO / "no-submission")
    with flash_speed.reference_side(
            lambda module, **kw: launch_worker(module, **kw, env={"TRITON_INTERPRET": "1"}),
            120) as side:
        yield side


@pytest.fixture(scope="module")
def solution(tmp_path_factory):
    student = _student(copy_solutions(tmp_path_factory.mktemp("ex07") / "sub", [EX]))
    yield student
    student._worker.close()


def _qkv(b, h, h_kv, s_q, s_k, d, seed=0):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(b, h, s_q, d, generator=g), torch.randn(b, h_kv, s_k, d, generator=g),
            torch.randn(b, h_kv, s_k, d, generator=g))


# -- the float64 reference --------------------------------------------------------------
@pytest.mark.parametrize("shape", [(1, 4, 2, 9, 13, 8, True), (2, 2, 1, 7, 3, 4, True),
                                   (1, 3, 3, 5, 5, 4, False), (1, 2, 1, 1, 6, 4, True)])
def test_reference_agrees_with_attention_module(shape):
    b, h, h_kv, s_q, s_k, d, causal = shape
    q, k, v = _qkv(b, h, h_kv, s_q, s_k, d)
    rep = h // h_kv
    want = att.attention(q, att.repeat_kv(k, rep), att.repeat_kv(v, rep), causal=causal)
    got = flash.reference(q, k, v, causal)
    assert torch.allclose(got, want, atol=1e-12)
    assert torch.allclose(flash.reference(q, k, v, causal, chunk=2), got, atol=1e-12)
    assert torch.isfinite(got).all()


def test_mistakes_differ_from_the_truth():
    """Every mistake the hidden suite names changes its answer on such a case."""
    q, k, v = _qkv(1, 4, 2, 20, 45, 16)
    truth = flash.reference(q, k, v, True, 0.3)
    names = ["no_scale", "scale_by_d", "top_left_mask", "diagonal_masked",
             "mask_wrong_triangle", "no_mask", "kv_tile", "no_rescale", "sm_scale_ignored"]
    mistakes = flash.flash_mistakes(q, k, v, True, 0.3, names=names)
    assert len(mistakes) >= len(names)
    for description, wrong in mistakes.items():
        assert not torch.allclose(wrong, truth, atol=1e-3), description
    rows = flash.reference(*_qkv(1, 1, 1, 6, 3, 16), True, None, "nan_masked_tile")
    assert torch.isnan(rows[0, 0, :3]).all() and torch.isfinite(rows[0, 0, 3:]).all()


def test_step_reference_masked_tile_and_rescale():
    m, l, acc = np.full(2, -np.inf), np.zeros(2), np.zeros((2, 3))
    masked = np.full((2, 4), -np.inf)
    out = flash.step_reference(m, l, acc, masked, np.ones((4, 3)))
    assert np.isneginf(out[0]).all() and not np.isnan(out[1]).any() and (out[2] == 0).all()
    assert np.isnan(flash.step_reference(m, l, acc, masked, np.ones((4, 3)),
                                         mistake="nan_masked_tile")[2]).all()


def test_flops_formula():
    assert flash.attention_flops(4, 32, 1024, 1024, 128, False) == 4 * 4 * 32 * 1024**2 * 128
    assert flash.attention_flops(1, 1, 8, 8, 16, True) == 0.5 * 4 * 64 * 16


# -- the reference kernel, in the interpreter ------------------------------------------
@needs_triton
@pytest.mark.parametrize("variant", ["pointers", "descriptors"])
@pytest.mark.parametrize("shape", [(1, 2, 1, 37, 53, 32, True), (2, 4, 2, 1, 70, 16, True),
                                   (1, 2, 2, 48, 64, 64, False), (2, 2, 1, 40, 30, 16, True),
                                   (1, 1, 1, 19, 19, 128, True), (1, 2, 2, 32, 64, 16, False)])
def test_reference_kernel(reference, shape, variant):
    b, h, h_kv, s_q, s_k, d, causal = shape
    q, k, v = _qkv(b, h, h_kv, s_q, s_k, d, seed=1)
    got = reference.probe("ex07_flash_attention.run_kernel", q, k, v, causal=causal, sm_scale=0.4,
                          variant=variant)
    atol, rtol = flash.tolerance("float32", "cpu")
    assert torch.allclose(got.double(), flash.reference(q, k, v, causal, 0.4),
                          atol=atol, rtol=rtol)


@needs_triton
def test_reference_kernel_fixed_config(reference):
    q, k, v = _qkv(1, 2, 1, 70, 50, 32, seed=2)
    got = reference.probe("ex07_flash_attention.run_kernel", q, k, v, causal=True,
                          config={"BLOCK_M": 32, "BLOCK_N": 16, "num_warps": 4,
                                 "num_stages": 2})
    assert torch.allclose(got.double(), flash.reference(q, k, v, True), atol=2e-5, rtol=2e-4)


# -- the probe's watch --------------------------------------------------------------------
@needs_triton
def test_trace_of_the_solution_is_clean(solution):
    q, k, v = _qkv(1, 4, 1, 16, 96, 32)
    res = solution.probe("ex07_flash_attention.run_checked", q, k, v, causal=True, on="cpu")
    assert res["launches"] and all(x["in_submission"] for x in res["launches"])
    assert res["forbidden"] == {} and sum(res["compute_ops"].values()) <= 2
    assert [b[1] for b in res["buffers"]] == [q.numel()]          # the output only
    assert res["numpy_conversions"] == [] and res["out_type"] == "torch.Tensor"
    flash.check_authentic(res, q, k, v, what="flash_attention")
    flash.check_no_kv_copy(res, q, k, what="flash_attention")
    assert res["elsewhere"] == {"threads_started": 0, "python_threads": 0, "forks": 0,
                                "children": 0, "other_cpu_s": res["elsewhere"]["other_cpu_s"]}
    from grader.reference.flash_judge import OTHER_CPU_S
    assert res["elsewhere"]["other_cpu_s"] < OTHER_CPU_S


CHEATS = {
    # a kernel of its own launched for show, the attention done in NumPy
    "numpy": ("copied to the host or to NumPy", """
        @triton.jit
        def _touch(X):
            pass

        def flash_attention(q, k, v, *, causal=True, sm_scale=None):
            _touch[(1,)](q)
            qn, kn, vn = q.numpy(), k.numpy(), v.numpy()
            s = qn @ kn.swapaxes(-1, -2) / np.sqrt(qn.shape[-1])
            p = np.exp(s - s.max(-1, keepdims=True))
            return torch.from_numpy(((p / p.sum(-1, keepdims=True)) @ vn).astype(np.float32))
        """),
    # the right numbers in a tensor subclass (lazy values, custom comparisons)
    "subclass": ("not a plain torch.Tensor", """
        class Lazy(torch.Tensor):
            pass

        def flash_attention(q, k, v, *, causal=True, sm_scale=None):
            s = torch.einsum("bhqd,bhkd->bhqk", q, k) / q.shape[-1] ** 0.5
            return torch.einsum("bhqk,bhkd->bhqd", s.softmax(-1), v).as_subclass(Lazy)
        """),
    # no kernel at all: row by row in PyTorch, without matmul or softmax ops
    "no_kernel": ("no Triton kernel of your own", """
        def flash_attention(q, k, v, *, causal=True, sm_scale=None):
            out = q.clone()
            for i in range(q.shape[2]):
                w = (k * q[:, :, i:i + 1]).sum(-1) / q.shape[-1] ** 0.5
                e = (w - w.amax(-1, keepdim=True)).exp()
                out[:, :, i] = ((e / e.sum(-1, keepdim=True))[..., None] * v).sum(-2)
            return out
        """),
    # a kernel of its own launched for show, the attention done row by row in PyTorch
    "torch_loop": ("PyTorch arithmetic ops ran during the call", """
        @triton.jit
        def _touch(X):
            pass

        def flash_attention(q, k, v, *, causal=True, sm_scale=None):
            _touch[(1,)](q)
            out = torch.empty_like(q)
            for i in range(q.shape[2]):
                w = (k * q[:, :, i:i + 1]).sum(-1) / q.shape[-1] ** 0.5
                e = (w - w.amax(-1, keepdim=True)).exp()
                out[:, :, i] = ((e / e.sum(-1, keepdim=True))[..., None] * v).sum(-2)
            return out
        """),
}
# The attention computed with PyTorch out of the traced thread's sight, then
# copied out by a kernel of its own (found by an outside red team: 40/40).
_EXACT_THEN_COPY = """
    @triton.jit
    def _copy(X, Y, N, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        tl.store(Y + offs, tl.load(X + offs, mask=offs < N), mask=offs < N)

    def _exact(q, k, v, causal):
        return torch.softmax(q @ k.transpose(-1, -2) / q.shape[-1] ** 0.5, -1) @ v

    def flash_attention(q, k, v, *, causal=True, sm_scale=None):
        o = ELSEWHERE
        out = torch.empty_like(q)
        _copy[(triton.cdiv(out.numel(), 64),)](o, out, out.numel(), BLOCK=64)
        return out
    """
ELSEWHERE = {
    "thread": ("started 1 thread", "", """_in_thread(q, k, v, causal)"""),
    "pool": ("other Python thread", """
        import concurrent.futures
        POOL = concurrent.futures.ThreadPoolExecutor(1)
        POOL.submit(int).result()             # its thread started at import
        """, "POOL.submit(_exact, q, k, v, causal).result()"),
    "fork": ("ran a child process", "", "_in_child(q, k, v, causal)"),
}
_ELSEWHERE_HELPERS = """
    import threading

    def _in_thread(*args):
        box = []
        t = threading.Thread(target=lambda: box.append(_exact(*args)))
        t.start()
        t.join()
        return box[0]

    def _in_child(*args):
        import os
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:
            os.write(w, _exact(*args).numpy().tobytes())
            os._exit(0)
        data = b""
        while len(data) < args[0].numel() * 4:
            data += os.read(r, 1 << 16)
        os.waitpid(pid, 0)
        return torch.frombuffer(bytearray(data), dtype=torch.float32).view(args[0].shape)
    """
for _name, (_said, _setup, _call) in ELSEWHERE.items():
    CHEATS[f"elsewhere_{_name}"] = (_said, textwrap.dedent(_ELSEWHERE_HELPERS)
                                    + textwrap.dedent(_setup)
                                    + textwrap.dedent(_EXACT_THEN_COPY).replace("ELSEWHERE",
                                                                                _call))


@needs_triton
@pytest.mark.parametrize("cheat", list(CHEATS))
def test_cheats_are_named(tmp_path, cheat):
    expect, body = CHEATS[cheat]
    header = "import numpy as np\nimport torch\nimport triton\nimport triton.language as tl\n"
    (tmp_path / f"{EX}.py").write_text(header + textwrap.dedent(body))
    student = _student(tmp_path)
    try:
        q, k, v = _qkv(1, 1, 1, 8, 8, 16)
        res = student.probe("ex07_flash_attention.run_checked", q, k, v, causal=False, on="cpu")
    finally:
        student._worker.close()
    with pytest.raises(Feedback, match=expect):
        flash.check_output(res, q, flash.reference(q, k, v, False), what="flash_attention")
        flash.check_authentic(res, q, k, v, what="flash_attention")
    if cheat.startswith("elsewhere_"):      # right numbers: only the watch tells
        flash.check_output(res, q, flash.reference(q, k, v, False), what="flash_attention")


# -- the speed path (plumbing only: CPU timings grade nothing) ------------------------------
TINY = [dict(batch=1, heads=2, kv_heads=1, s_q=20, s_k=20, d_head=16, causal=True,
             dtype="float32")]


def test_thresholds_file_and_tiers(tmp_path):
    data = json.loads(cal.DATA_PATH.read_text())
    for entry in [data["default"], *data["models"].values()]:
        tiers = entry["tiers"]
        assert len(tiers) == 3 and 0 < tiers[0] < tiers[1] < tiers[2] <= 1
    assert cal.tiers_for("a GPU nobody calibrated") == data["default"]["tiers"]
    assert cal.tiers_for("any", path=tmp_path / "missing.json") == cal.DEFAULT_TIERS
    rows = [{"plain_tflops": 300.0, "reference_tflops": 500.0},
            {"plain_tflops": 240.0, "reference_tflops": 400.0}]
    assert cal.tiers_from(rows) == [round(f * 0.6, 2) for f in cal.FRACTIONS]


_CALIBRATE_SMOKE = """
import json
from grader.gpu import calibrate
cases = [dict(batch=1, heads=2, kv_heads=2, s_q=32, s_k=32, d_head=16, causal=c,
              dtype="float32") for c in (False, True)]
rows = calibrate.measure(3, cases=cases, device="cpu")["cases"]
print(json.dumps({"rows": rows, "tiers": calibrate.tiers_from(rows)}))
"""
_BENCH = REPO / "benchmarks" / "bench_flash.py"


@pytest.mark.slow
@needs_triton
def test_calibrate_and_benchmark_run_on_the_cpu():
    """Plumbing only: the interpreter stands in for a GPU, the numbers mean nothing."""
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    done = subprocess.run([sys.executable, "-c", _CALIBRATE_SMOKE], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert len(out["rows"]) == 2 and all(r["reference_tflops"] > 0 for r in out["rows"])
    assert len(out["tiers"]) == 3
    done = subprocess.run([sys.executable, str(_BENCH), "--smoke", "--variants"], cwd=REPO,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "ref/best" in done.stdout and "descriptors" in done.stdout


def test_calibrate_without_cuda_is_a_usage_error(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    result = CliRunner().invoke(main, ["calibrate"])
    assert result.exit_code == 2 and "no CUDA device" in result.output


# -- grading ----------------------------------------------------------------------------------
def test_worker_env_interprets_without_cuda():
    env = dict(EXERCISES[EX].worker_env)
    assert env == ({} if torch.cuda.is_available() else {"TRITON_INTERPRET": "1"})
    assert all(not dict(e.worker_env) for name, e in EXERCISES.items() if name != EX)


@pytest.mark.slow
@needs_triton
def test_solution_full_marks_and_gpu_tests_not_run(tmp_path):
    report = grade_dir(copy_solutions(tmp_path / "sub", [EX]), [EX])
    assert not report.errors, report.errors
    got, total = report.exercise_scores()[EX]
    assert got == total == maximum(Options(exercises=[EX]))[EX] > 20   # tests/test_one_max.py
    # The GPU tier is not graded unless asked for (--gpu-tier), on any machine.
    gpu = [t for t in report.tests if "gpu" in t.name]
    assert len(gpu) == 6 and all(t.status == "not_run" and "GPU tier" in t.output
                                 and t.max_score == 0 for t in gpu)


@needs_triton
def test_stub_scores_nothing(tmp_path):
    sub = tmp_path / "sub"
    sub.mkdir()
    (sub / f"{EX}.py").write_text((REPO / "exercises" / f"{EX}.py").read_text())
    report = grade_dir(sub, [EX], suite="public")
    assert not report.errors, report.errors
    assert report.exercise_scores()[EX][0] == 0


_NO_TRITON = """
import sys
sys.modules["triton"] = None          # as on macOS and Windows: no Triton at all
import json
from pathlib import Path
from click.testing import CliRunner
from grader.cli import main
from grader.core import Options, grade
from grader.reference.secret import flash
assert not flash.HAS_TRITON
report = grade(Path(sys.argv[1]), Options(exercises=["ex02_mha", "ex07_flash_attention"]))
help_ok = CliRunner().invoke(main, ["--help"]).exit_code == 0
print(json.dumps({"errors": report.errors, "help": help_ok,
                  "tests": [[t.exercise, t.status, t.output] for t in report.tests]}))
"""


def test_everything_but_ex07_works_without_triton(tmp_path):
    sub = copy_solutions(tmp_path / "sub", ["ex02_mha", EX])
    done = subprocess.run([sys.executable, "-c", _NO_TRITON, str(sub)], cwd=REPO,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert out["help"] and not out["errors"], out["errors"]
    ex02 = [t for t in out["tests"] if t[0] == "ex02_mha"]
    ex07 = [t for t in out["tests"] if t[0] == EX]
    assert ex02 and all(status == "passed" for _, status, _ in ex02)
    # The public NumPy half runs and passes; the graded tests that need Triton
    # need a regrade (their points stay in the maximum) and say what they need;
    # the GPU tier is not graded here.
    ran = [t for t in ex07 if t[1] == "passed"]
    assert len(ran) == 2, ex07
    assert all(status == "passed" or status == "needs_regrade" and "needs Triton" in text
               and "Linux" in text or status == "not_run" and "GPU tier" in text
               for _, status, text in ex07), ex07
    assert any(status == "needs_regrade" for _, status, _ in ex07)


def _imports_triton(path: Path) -> bool:
    for node in ast.walk(ast.parse(path.read_text())):
        names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
            [node.module or ""] if isinstance(node, ast.ImportFrom) else []
        if any(n == "triton" or n.startswith("triton.") for n in names):
            return True
    return False


def test_only_ex07_imports_triton():
    """Triton has no macOS or Windows wheels: only the files of an exercise that
    needs it (the registry says: ex07) may import it.

    (PyTorch imports Triton by itself where it is installed; that is guarded.)"""
    triton = [ex for ex in EXERCISES.values() if "Triton" in ex.needs]
    assert [ex.name for ex in triton] == [EX]
    ours = {f"grader/reference/secret/{m}.py" for ex in triton for m in ex.secret} | \
        {f"grader/sandbox/runtime/probes/{p}.py" for ex in triton for p in ex.probes} | \
        {"grader/sandbox/runtime/probes/gpu_compile.py"} | \
        {p.relative_to(REPO).as_posix() for p in KERNELS_DIR.glob("*.py")}  # Triton kernels
    offenders = []
    for folder in ("grader", "solutions", "exercises"):
        for path in sorted((REPO / folder).rglob("*.py")):
            rel = path.relative_to(REPO).as_posix()
            if rel in ours or any(ex.name.split("_")[0] in path.name for ex in triton):
                continue
            if _imports_triton(path):
                offenders.append(rel)
    assert not offenders, offenders


# -- on a GPU (skipped here without CUDA) -----------------------------------------------------
needs_gpu = pytest.mark.skipif(not (torch.cuda.is_available() and flash.HAS_TRITON),
                               reason="needs a GPU and Triton")

@needs_gpu
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_gpu_reference_kernel(dtype):
    q, k, v = (x.to("cuda", dtype) for x in _qkv(2, 8, 2, 1000, 3000, 128))
    got = kernel.flash_attention(q, k, v, causal=True)
    atol, rtol = flash.tolerance(str(dtype).replace("torch.", ""), "cuda")
    want = flash.reference(q, k, v, True)
    assert torch.allclose(got.double().cpu(), want, atol=atol, rtol=rtol)
    if torch.cuda.get_device_capability()[0] >= 9:
        assert not kernel.DESCRIPTOR_FAILURE, kernel.DESCRIPTOR_FAILURE


@needs_gpu
def test_gpu_solution_earns_every_point(tmp_path):
    report = grade_dir(copy_solutions(tmp_path / "sub", [EX]), [EX], gpu_tier=True)
    assert not report.errors, report.errors
    got, total = report.exercise_scores()[EX]
    assert got == total, [t.output for t in report.tests if t.status != "passed"]


# A device check in the style the stub's docstring invites (CUDA, or the CPU
# under the interpreter): the compile check's inputs must pass it.
GUARD = '''
import os as _os
_checked = flash_attention


def flash_attention(q, k, v, *, causal=True, sm_scale=None):
    interpreting = _os.environ.get("TRITON_INTERPRET") == "1"
    if not q.is_cuda and not interpreting:
        raise RuntimeError("CPU tensors need Triton's interpreter (TRITON_INTERPRET=1)")
    if q.device.type == "cuda":
        import torch
        major, _ = torch.cuda.get_device_capability(q.device)
        assert major in (8, 9), major
        _ = torch.empty(1, device=q.device)   # allocated where the inputs are
    return _checked(q, k, v, causal=causal, sm_scale=sm_scale)
'''


@needs_triton
@pytest.mark.parametrize("global_read", [False, True], ids=["guarded", "guarded-global"])
def test_a_device_guard_passes_the_compile_check_and_a_global_is_named(tmp_path,
                                                                       global_read):
    """The compile check calls the student's code with inputs that are on a
    GPU as that code sees them: a correct kernel behind a device check
    compiles (1/1), and a kernel that reads a Python global is told about
    the global, not the guard."""
    sub = copy_solutions(tmp_path / "sub", [EX])
    path = sub / f"{EX}.py"
    source = path.read_text()
    if global_read:
        old = "s = tl.dot(q, k) * qk_scale "
        assert source.count(old) == 1
        source = source.replace(old, "s = tl.dot(q, k) * (qk_scale * LOG2E / LOG2E) ")
    path.write_text(source + GUARD)
    report = grade_dir(sub, [EX], suite="public", keyword="compiles", check_cache=None)
    (test,) = [t for t in report.tests if "compiles" in t.title]
    if global_read:
        assert test.score == 0 and "LOG2E" in test.output, test.output
        assert "before launching" not in test.output and "interpreter" not in \
            test.output.split("\n")[0], test.output
    else:
        assert test.score == test.max_score == 1, test.output


def _mutated(tmp_path, name, edit=lambda text: text) -> Path:
    """The solution's ex07 as a submission: ``edit`` applied to its text, then
    the corpus's mutant ``name``."""
    sub = copy_solutions(tmp_path / "sub", [EX])
    path = sub / f"{EX}.py"
    path.write_text(mutant(EX, name).apply(edit(path.read_text())))
    return sub


# -- `check` compiles the likeliest failures first; the grading compiles every config --
@needs_triton
@pytest.mark.slow
@pytest.mark.parametrize("name", ["kernel_global_read", "kernel_dot_8_wide"])
def test_check_catches_the_compile_mutants_with_its_first_launches(tmp_path, name):
    """The corpus's kernels that compile in the interpreter and not for a GPU
    fail `check` too, though it answers before compiling every config: a
    global read fails in any config, an 8-wide tile in the smallest."""
    report = grade_dir(_mutated(tmp_path, name), [EX], suite="public", keyword="compiles",
                       check_cache=tmp_path / "cache")
    (test,) = report.tests
    assert test.score == 0 and mutant(EX, name).expect in test.output, test.output


@needs_triton
@pytest.mark.slow
def test_a_tile_rule_broken_in_some_configs_fails_check_as_it_fails_grading(tmp_path):
    """A tile rule broken by the middle configs only (BLOCK_M=128 with
    BLOCK_N=32), which `check` does not compile fully before it answers:
    Triton's front end shows it, and `check` fails with the grading's words."""
    sub = copy_solutions(tmp_path / "sub", [EX])
    path = sub / f"{EX}.py"
    rule = "        tl.static_assert(BLOCK_N >= 16)\n"
    assert path.read_text().count(rule) == 1
    path.write_text(path.read_text().replace(
        rule, rule + "        tl.static_assert(BLOCK_M * BLOCK_N != 4096)\n", 1))
    bad = "BLOCK_M=128, BLOCK_N=32, num_warps=8, num_stages=2"
    said = []
    for cache in (tmp_path / "cache", None):
        report = grade_dir(sub, [EX], suite="public", keyword="compiles", check_cache=cache)
        (test,) = report.tests
        assert test.score == 0 and f"config {bad}" in test.output, test.output
        assert "sm_80" in test.output and "static_assert" in test.output, test.output
        said.append(test.output)
    assert said[0] == said[1]


# -- a loop-bound mistake in a kernel of other tiles than the reference's --------
INTERPRETED_TILES = '{"BLOCK_M": 16, "BLOCK_N": 16}, num_warps=1'


@needs_triton
@pytest.mark.slow
@pytest.mark.parametrize("name, tile, other", [
    ("kernel_loop_skips_diagonal", 32, "top-left"),
    ("kernel_loop_bound_top_left", 64, "before the query tile's diagonal")])
def test_a_loop_bound_mistake_is_named_with_the_kernels_own_tiles(tmp_path, name, tile, other):
    """A causal loop's bound, wrong, in a kernel of other tiles than the
    reference's 16.  Stopped before the diagonal tile in 32-row, 32-key
    tiles, where S_q < S_k it visits the keys the top-left bound visits
    (whole key tiles past the bound), so the first failing case fits both;
    the square cases rule the top-left bound out.  The top-left bound in
    64-row tiles fails the 512-key case too, which names it.  Every failure
    names the one mistake, with the kernel's own tiles, the public test of
    the kernel's own work too (its values are judged before its reads)."""
    def tiled(text):
        assert text.count(INTERPRETED_TILES) == 1
        return text.replace(INTERPRETED_TILES, INTERPRETED_TILES.replace("16", str(tile)))

    report = grade_dir(_mutated(tmp_path, name, tiled), [EX],
                       keyword="test_flash_attention and not gpu")
    failed = [t for t in report.tests if t.status == "failed"]
    assert len(failed) >= 3, [t.name for t in report.tests]
    said = [line for t in failed for line in t.output.splitlines()
            if line.strip().startswith("This looks like")]
    # every failure names it: the check of the kernel's own work comes after the
    # values (the loop that never reaches some keys reads only part of k)
    assert len(said) == len(failed), [t.output for t in failed]
    first = next(line for line in said if "same mistake as above" not in line)
    assert mutant(EX, name).expect in first and f"query tiles of {tile} rows)" in first, \
        first
    assert other not in "\n".join(said) and "(or:" not in first, said


@needs_triton
@pytest.mark.parametrize("name, keyword", [
    ("blockwise_top_left", "blockwise"),
    ("blockwise_wrong_triangle", "blockwise"),
    ("sm_scale_ignored", "custom_sm_scale or inputs_unchanged")])
def test_every_failing_case_of_a_known_mistake_names_it(tmp_path, name, keyword):
    """A mask mistake of blockwise_attention fails the split-heads case and the
    rows that see no key too, and an ignored sm_scale fails the test of
    unchanged inputs (sm_scale=0.5): each of those failures names the mistake,
    none says "no known mistake" (they tried too few mistakes before)."""
    report = grade_dir(_mutated(tmp_path, name), [EX], keyword=keyword)
    failed = [t for t in report.tests if t.status == "failed"]
    assert len(failed) >= 2, [(t.name, t.status) for t in report.tests]
    for t in failed:
        assert "This looks like" in t.output and "No known mistake" not in t.output, t.output
    assert mutant(EX, name).expect in failed[0].output, failed[0].output


# -- the compile check compiles the other paths a GPU would take -----------------------------
DECODE_ONLY_KERNEL = '''

_ONE = 1.0       # a plain global: the interpreter reads it, a GPU compile refuses it


@triton.jit
def _decode_touch(O):
    tl.store(O, tl.load(O) * _ONE)
'''


@needs_triton
@pytest.mark.slow
def test_a_kernel_launched_only_for_one_decode_query_is_compiled_too(tmp_path):
    """A kernel the host code launches only for S_q = 1 (a split-K reduce,
    in xFormers' style) is compiled for a GPU as the main case's kernels are:
    one that a GPU compiler refuses fails the compile check, named with the
    path it was launched for.  (Only the S = 1024 case was compiled: such a
    kernel passed.)"""
    sub = copy_solutions(tmp_path / "sub", [EX])
    path = sub / f"{EX}.py"
    text = path.read_text()
    end = "        D_HEAD=d_head, CAUSAL=bool(causal),\n    )\n    return out\n"
    assert text.count(end) == 1
    text = text.replace(end, end.replace(
        "    return out\n", "    if s_q == 1:\n        _decode_touch[(1,)](out)\n    return out\n"))
    path.write_text(text + DECODE_ONLY_KERNEL)
    report = grade_dir(sub, [EX], suite="public", keyword="compiles")
    (test,) = report.tests
    assert test.score == 0 and "_decode_touch" in test.output, test.output
    assert "launched for one decode query" in test.output, test.output
