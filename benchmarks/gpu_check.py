"""One prepared check of the GPU tier, to run once on a GPU (time on one is short).

    python benchmarks/gpu_check.py                      # on a GPU: ~8 minutes at most
    python benchmarks/gpu_check.py --smoke --out x.json # on the CPU: the plumbing only

Run from the repository root.  Sections, each recorded in the JSON result
(``--out``, default ``gpu_check.json``) with its status and seconds; a
section not reached within ``--budget`` seconds is "skipped: time budget":

1. ``environment``: Python, torch, Triton, CUDA, the GPU, its capability and
   driver, a C compiler (Triton builds its launcher with one).
2. ``worker_launch``: a Triton kernel launched inside a grading worker, under
   its resource limits (memory, processes, files): a spawned worker, and one
   forked by a grading's zygote (``forked``: proves CUDA in a forked worker).
3. ``correctness``: every kernel (reference pointers and descriptors, the
   solution) in fp16 and bf16 on the hidden GPU suite's shapes plus edge
   cases (ragged S, S_q = 1, GQA, causal end-aligned), against float64.
4. ``reference_configs``: TFLOP/s of the reference's pointer kernel per
   autotune config, and of the autotuned kernel (which variant ran).
5. ``speed``: bf16, d_head 128, B=4, h=32, S = 2048, 4096, 8192, causal and
   not: the reference, the solution, and SDPA's flash, memory-efficient and
   cuDNN backends, timed by CUDA events (medians); the reference's ratio to
   SDPA's flash (target >= 1.2) and to the best backend (target >= 0.9).
6. ``grader_verdict``: the grader's own speed measurement
   (``grader/reference/flash_speed.py``) on the solution and on two cheats
   (calling another file's kernel; returning before the work is done).

``--smoke`` runs every section on the CPU under Triton's interpreter with
tiny float32 shapes (no bf16 ``tl.dot`` there): it proves the script, not
the GPU.  Exit status 1 when a section failed.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
EX = "ex07_flash_attention"

# Shapes of the hidden GPU suite's correctness test, plus edge cases.
# (B, h, h_kv, S_q, S_k, d_head, causal)
GPU_SHAPES = {
    "S = 8192, causal, GQA h_kv = 2": (1, 4, 2, 8192, 8192, 128, True),
    "S = 4096, not causal, d_head 64": (1, 4, 4, 4096, 4096, 64, False),
    "decode against 8192 keys, h_kv = 1": (2, 8, 1, 1, 8192, 128, True),
    "S_q = 1000 < S_k = 3000, causal": (1, 4, 2, 1000, 3000, 64, True),
    "ragged 777, d_head 32": (2, 2, 2, 777, 777, 32, True),
    "d_head 16, S_q > S_k": (1, 2, 2, 300, 250, 16, True),
    "ragged 1023, GQA 8:1, not causal": (1, 8, 1, 1023, 1023, 128, False),
}
SMOKE_SHAPES = {
    "ragged 37, GQA": (1, 2, 1, 37, 37, 16, True),
    "S_q = 1": (1, 2, 2, 1, 40, 16, True),
    "S_q > S_k, causal": (1, 2, 2, 24, 18, 32, True),
}
SPEED_SEQ, SMOKE_SEQ = (2048, 4096, 8192), (32,)


def _section(results, name, budget_end, fn):
    """Run one section; record status, seconds and its data."""
    if time.monotonic() > budget_end:
        results[name] = {"status": "skipped: time budget"}
        return
    start = time.monotonic()
    try:
        data = fn()
        results[name] = {"status": "ok", **data}
    except Exception as exc:  # noqa: BLE001 - a failed section is recorded, the rest run
        results[name] = {"status": "failed", "error": f"{type(exc).__name__}: {exc}",
                         "trace": traceback.format_exc()[-3000:]}
    results[name]["seconds"] = round(time.monotonic() - start, 2)
    print(f"[{results[name]['status']:>6s}] {name} ({results[name]['seconds']} s)", flush=True)


# -- 1 -----------------------------------------------------------------------------------
def environment() -> dict:
    import torch
    import triton
    out = {"python": platform.python_version(), "torch": torch.__version__,
           "triton": triton.__version__, "cuda_available": torch.cuda.is_available(),
           "torch_cuda": torch.version.cuda, "c_compiler": shutil.which("cc")
           or shutil.which("gcc") or shutil.which("clang") or ""}
    if torch.cuda.is_available():
        out["gpu"] = torch.cuda.get_device_name()
        out["capability"] = list(torch.cuda.get_device_capability())
        try:
            out["driver"] = subprocess.run(
                ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                capture_output=True, text=True, timeout=30).stdout.strip()
        except (OSError, subprocess.TimeoutExpired):
            out["driver"] = "unknown (no nvidia-smi)"
    return out


# -- 2 -----------------------------------------------------------------------------------
LAUNCH_MODULE = '''
import torch
import triton
import triton.language as tl


@triton.jit
def _add_one(X, N, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(X + offs, tl.load(X + offs, mask=offs < N) + 1.0, mask=offs < N)


def launch(n):
    dev = "cuda" if torch.cuda.is_available() else "cpu"
    x = torch.zeros(n, device=dev)
    _add_one[(triton.cdiv(n, 256),)](x, n, BLOCK=256)
    return float(x.sum().item())
'''


def worker_launch(smoke: bool) -> dict:
    """Spawned, and forked by a grading's zygote (which imported PyTorch but
    never touched CUDA): a GPU exercise's workers are spawned on a GPU
    machine until this proves the fork there (grader.core's _zygote_for)."""
    from grader.sandbox import zygote
    from grader.sandbox.client import StudentModule
    from grader.sandbox.launch import Launcher
    folder = Path(tempfile.mkdtemp(prefix="gpu-check-"))
    out = {}
    launcher = Launcher.here("auto")     # as a grading on this machine would
    out["isolation"] = launcher.isolation.text
    zyg = launcher.zygote({"NumPy", "PyTorch"})
    try:
        (folder / "launch_check.py").write_text(LAUNCH_MODULE)
        env = {"TRITON_INTERPRET": "1"} if smoke else {}
        if zyg is not None:
            zyg.start()
        for how, z in (("spawned", None), ("forked", zyg)):
            if how == "forked" and (zyg is None or not zyg.alive):
                out["forked"] = f"no zygote: {zyg.failed if zyg else 'not used here'}"
                continue
            worker = launcher.worker(folder, "launch_check", call_timeout=300, env=env,
                                     fork_from=z)
            try:
                worker.start()
                if how == "forked" and not isinstance(worker.proc, zygote.ForkedProcess):
                    raise AssertionError("the worker was not forked by the zygote")
                total = StudentModule(worker).launch(1000)
            finally:
                worker.close()
            if total != 1000.0:
                raise AssertionError(f"{how}: the kernel's output sums to {total}, not 1000")
            out[how] = total
    finally:
        if zyg is not None:
            zyg.close()
        shutil.rmtree(folder, ignore_errors=True)
    return out


# -- 3 -----------------------------------------------------------------------------------
def _kernels(smoke: bool) -> dict:
    """name -> flash_attention-like callable (trusted code, loaded here)."""
    from grader.sandbox.runtime.kernels import flash as kernel
    from grader.sandbox.runtime.probes.gpu_compile import load_for_gpu
    import torch
    if smoke:
        import importlib.util
        spec = importlib.util.spec_from_file_location("_check_solution",
                                                      REPO / "solutions" / f"{EX}.py")
        solution = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(solution)
    else:
        solution = load_for_gpu(str(REPO / "solutions" / f"{EX}.py"), "_check_solution")
    out = {"reference/pointers": lambda q, k, v, causal: kernel.flash_attention(
               q, k, v, causal=causal, variant="pointers"),
           "solution": lambda q, k, v, causal: solution.flash_attention(q, k, v, causal=causal)}
    if smoke or (torch.cuda.is_available() and torch.cuda.get_device_capability()[0] >= 9):
        out["reference/descriptors"] = lambda q, k, v, causal: kernel.flash_attention(
            q, k, v, causal=causal, variant="descriptors")
    return out


def _autotune_quietly(smoke):
    import contextlib
    if not smoke:
        return contextlib.nullcontext()
    from grader.sandbox.runtime.probes.ex07_flash_attention import _InterpretedAutotune
    return _InterpretedAutotune()


def correctness(smoke: bool) -> dict:
    import torch

    from grader.reference.secret import flash
    dev = "cpu" if smoke else "cuda"
    shapes = SMOKE_SHAPES if smoke else GPU_SHAPES
    dtypes = ["float32"] if smoke else ["float16", "bfloat16"]
    rows, failures = [], []
    gen = torch.Generator().manual_seed(0)
    for name, fn in _kernels(smoke).items():
        for dtype in dtypes:
            dt = getattr(torch, dtype)
            atol, rtol = flash.tolerance(dtype, dev)
            for label, (b, h, h_kv, s_q, s_k, d, causal) in shapes.items():
                q = torch.randn(b, h, s_q, d, generator=gen).to(dev, dt)
                k = torch.randn(b, h_kv, s_k, d, generator=gen).to(dev, dt)
                v = torch.randn(b, h_kv, s_k, d, generator=gen).to(dev, dt)
                with _autotune_quietly(smoke):
                    got = fn(q, k, v, causal)
                want = flash.reference(q, k, v, causal, device=dev)
                err = (got.double().cpu() - want).abs().max().item()
                ok = math.isfinite(err) and torch.allclose(got.double().cpu(), want,
                                                           atol=atol, rtol=rtol)
                rows.append({"kernel": name, "dtype": dtype, "case": label,
                             "max_err": err, "ok": ok})
                if not ok:
                    failures.append(f"{name} {dtype} {label}: max error {err:.3g}")
    if failures:
        raise AssertionError("; ".join(failures))
    return {"rows": rows}


# -- 4 and 5: timing by CUDA events (perf_counter on the CPU) ------------------------------
def _time(fn, args, repeats, smoke) -> float:
    """Median seconds of ``fn(*args)`` (fresh inputs are the caller's business)."""
    import torch
    times = []
    for _ in range(repeats):
        if smoke:
            start = time.perf_counter()
            with _autotune_quietly(smoke):
                fn(*args)
            times.append(time.perf_counter() - start)
        else:
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            torch.cuda.synchronize()
            a.record()
            fn(*args)
            b.record()
            torch.cuda.synchronize()
            times.append(a.elapsed_time(b) / 1e3)
    return statistics.median(times)


def _inputs(b, h, s, d, dtype, dev, seed=0):
    import torch
    g = torch.Generator(device=dev).manual_seed(seed)
    return [torch.randn(b, h, s, d, generator=g, device=dev).to(dtype) for _ in range(3)]


def reference_configs(smoke: bool) -> dict:
    import torch

    from grader.reference.secret import flash
    from grader.sandbox.runtime.kernels import flash as kernel
    dev = "cpu" if smoke else "cuda"
    b, h, s, d = (1, 2, 32, 16) if smoke else (4, 32, 4096, 128)
    dtype = torch.float32 if smoke else torch.bfloat16
    q, k, v = _inputs(b, h, s, d, dtype, dev)
    rows = []
    configs = [dict(c.kwargs, num_warps=c.num_warps, num_stages=c.num_stages)
               for c in kernel._CONFIGS]
    for causal in (False, True):
        flops = flash.attention_flops(b, h, s, s, d, causal)
        for config in configs:
            fn = lambda q, k, v: kernel.flash_attention(q, k, v, causal=causal,  # noqa: E731
                                                        config=config, variant="pointers")
            fn(q, k, v)
            rows.append({"config": config, "causal": causal,
                         "tflops": flops / _time(fn, (q, k, v), 3 if smoke else 20, smoke)
                         / 1e12})
        fn = lambda q, k, v: kernel.flash_attention(q, k, v, causal=causal)  # noqa: E731
        with _autotune_quietly(smoke):
            fn(q, k, v)
        rows.append({"config": "autotuned", "variant": kernel.variant_in_use(q),
                     "causal": causal,
                     "tflops": flops / _time(fn, (q, k, v), 3 if smoke else 20, smoke) / 1e12})
    return {"shape": [b, h, s, d], "rows": rows}


def speed(smoke: bool) -> dict:
    import torch
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from torch.nn.functional import scaled_dot_product_attention as sdpa

    from grader.reference.secret import flash
    from grader.sandbox.runtime.kernels import flash as kernel
    dev = "cpu" if smoke else "cuda"
    b, h, d = (1, 2, 16) if smoke else (4, 32, 128)
    dtype = torch.float32 if smoke else torch.bfloat16
    kernels = _kernels(smoke)
    contenders = {"reference": lambda q, k, v, c: kernel.flash_attention(q, k, v, causal=c),
                  "solution": kernels["solution"]}
    backends = {"sdpa_flash": SDPBackend.FLASH_ATTENTION,
                "sdpa_efficient": SDPBackend.EFFICIENT_ATTENTION,
                "sdpa_cudnn": SDPBackend.CUDNN_ATTENTION}
    if smoke:
        backends = {"sdpa_math": SDPBackend.MATH}
    for name, backend in backends.items():
        def run(q, k, v, c, _b=backend):
            with sdpa_kernel([_b]):
                return sdpa(q, k, v, is_causal=c)
        contenders[name] = run
    rows, verdicts = [], []
    for s in (SMOKE_SEQ if smoke else SPEED_SEQ):
        for causal in (False, True):
            q, k, v = _inputs(b, h, s, d, dtype, dev, seed=s)
            flops = flash.attention_flops(b, h, s, s, d, causal)
            row = {"s": s, "causal": causal}
            for name, fn in contenders.items():
                try:
                    with _autotune_quietly(smoke):
                        fn(q, k, v, causal)                 # warm-up, autotuning
                    row[name] = flops / _time(fn, (q, k, v, causal), 3 if smoke else 20,
                                              smoke) / 1e12
                except RuntimeError as exc:                 # a backend that refuses these inputs
                    row[name] = None
                    row[f"{name}_error"] = str(exc)[:200]
            sdpa_rates = [row[n] for n in backends if row.get(n)]
            if row.get("sdpa_flash"):
                row["ref_over_sdpa_flash"] = row["reference"] / row["sdpa_flash"]
            if sdpa_rates:
                row["ref_over_best_sdpa"] = row["reference"] / max(sdpa_rates)
            rows.append(row)
            if not smoke and s >= 4096:
                ok = row.get("ref_over_sdpa_flash", 0) >= 1.2 and \
                    row.get("ref_over_best_sdpa", 0) >= 0.9
                verdicts.append({"s": s, "causal": causal, "meets_targets": ok})
    for row in rows:
        print("  " + "  ".join(f"{k}={v:.3g}" if isinstance(v, float) else f"{k}={v}"
                               for k, v in row.items() if not k.endswith("_error")))
    return {"dtype": str(dtype), "shape": [b, h, d], "rows": rows, "targets": verdicts}


# -- 6 -----------------------------------------------------------------------------------
# A submission that also runs the reference kernel, copied into its folder.
OTHER_KERNEL_CHEAT = '''
_own_attention = flash_attention


def flash_attention(q, k, v, *, causal=True, sm_scale=None):
    import ex07_reference_copy
    return ex07_reference_copy.flash_attention(q, k, v, causal=causal, sm_scale=sm_scale)
'''
# A submission that returns before its kernel is done (no synchronize at all).
NO_SYNC_CHEAT = '''
_own_attention = flash_attention
torch.cuda.synchronize = lambda *a, **k: None


def flash_attention(q, k, v, *, causal=True, sm_scale=None):
    return _own_attention(q, k, v, causal=causal, sm_scale=sm_scale)
'''


def grader_verdict(smoke: bool) -> dict:
    from grader.reference import flash_speed
    from grader.reference.secret import flash
    from grader.sandbox.client import StudentModule
    from grader.sandbox.launch import Launcher
    from grader.sandbox.runtime.kernels import flash as kernel
    env = {"TRITON_INTERPRET": "1"} if smoke else {}
    launcher = Launcher.here("auto")
    cases = ([dict(batch=1, heads=2, kv_heads=1, s_q=20, s_k=20, d_head=16, causal=True,
                   dtype="float32")] if smoke else
             [dict(batch=4, heads=32, kv_heads=32, s_q=4096, s_k=4096, d_head=128,
                   causal=True, dtype="bfloat16")])
    out = {}
    trusted = launcher.binder(Path(tempfile.gettempdir()))
    with flash_speed.reference_side(lambda module, **kw: trusted(module, **kw, env=env),
                                    600) as reference:
        subs = [("solution", ""), ("calls another kernel", OTHER_KERNEL_CHEAT)]
        if not smoke:                      # nothing runs asynchronously on the CPU
            subs.append(("skips synchronization", NO_SYNC_CHEAT))
        for name, extra in subs:
            folder = Path(tempfile.mkdtemp(prefix="gpu-check-sub-"))
            try:
                source = (REPO / "solutions" / f"{EX}.py").read_text() + extra
                (folder / f"{EX}.py").write_text(source)
                shutil.copyfile(kernel.__file__, folder / "ex07_reference_copy.py")
                worker = launcher.worker(folder, EX, call_timeout=600, env=env, locked=True)
                try:
                    result = flash_speed.measure(
                        StudentModule(worker, 600), reference, cases,
                        calls=2 if smoke else 4, rounds=2 if smoke else 7,
                        on="cpu" if smoke else None)
                finally:
                    worker.close()
            finally:
                shutil.rmtree(folder, ignore_errors=True)
            try:
                judged = flash.judge_speed(result)
                out[name] = {"verdict": "credited", "ratio": judged["ratio"],
                             "table": judged["table"]}
            except Exception as exc:  # noqa: BLE001 - Feedback: the grader refused credit
                out[name] = {"verdict": "refused", "feedback": str(exc)[:800]}
            print(f"  {name}: {out[name]['verdict']}", flush=True)
    if not smoke:
        wrong = [n for n in ("calls another kernel", "skips synchronization")
                 if out[n]["verdict"] != "refused"]
        if out["solution"]["verdict"] != "credited" or wrong:
            raise AssertionError(f"unexpected verdicts: {json.dumps(out)[:1500]}")
    elif out["calls another kernel"]["verdict"] != "refused":
        raise AssertionError("the other-kernel cheat was credited")
    return {"verdicts": out}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--smoke", action="store_true",
                        help="CPU, Triton's interpreter, tiny shapes: the plumbing only.")
    parser.add_argument("--budget", type=float, default=480.0,
                        help="Seconds; sections not reached in time are skipped.")
    parser.add_argument("--out", type=Path, default=Path("gpu_check.json"))
    args = parser.parse_args(argv)
    if args.smoke:
        os.environ["TRITON_INTERPRET"] = "1"     # before Triton kernels are defined
    sys.path.insert(0, str(REPO))
    import torch
    if not args.smoke and not torch.cuda.is_available():
        parser.error("no CUDA device: run on a GPU, or use --smoke on the CPU")
    end = time.monotonic() + args.budget
    results: dict = {"smoke": args.smoke, "budget_s": args.budget}
    _section(results, "environment", end, environment)
    _section(results, "worker_launch", end, lambda: worker_launch(args.smoke))
    _section(results, "correctness", end, lambda: correctness(args.smoke))
    _section(results, "reference_configs", end, lambda: reference_configs(args.smoke))
    _section(results, "speed", end, lambda: speed(args.smoke))
    _section(results, "grader_verdict", end, lambda: grader_verdict(args.smoke))
    args.out.write_text(json.dumps(results, indent=1, default=str) + "\n")
    print(f"wrote {args.out}")
    return 1 if any(isinstance(v, dict) and v.get("status") == "failed"
                    for v in results.values()) else 0


if __name__ == "__main__":
    sys.exit(main())
