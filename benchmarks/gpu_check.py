"""One prepared check of the GPU tier, to run once on a GPU (time on one is short).

    python benchmarks/gpu_check.py --budget 360 --out gpu_check.json   # on a GPU
    python benchmarks/gpu_check.py --smoke --out x.json                # on the CPU

``docs/GPU.md`` is the guide: what to run (no install: the script puts its
repository on ``sys.path``), what to read in the JSON, and how it becomes
this GPU's entry in ``grader/data/gpu_thresholds.json`` (``--thresholds``).

Sections, most valuable first; each starts only when its estimated cost
(``ESTIMATES``) is left of ``--budget``, else it is "skipped: needs N s, M s
left", and those that are lists (the correctness matrix, the speed table,
the verdicts) start each part only when its own estimate fits:

1. ``environment``: versions, ``Python.h``, the C compiler, bubblewrap, the
   GPU and driver; ``blocks_launch``: what would stop a launch, in one line.
2. ``worker_launch``: a Triton kernel inside a grading worker, spawned and
   forked by a fork server.
3. ``correctness``: every kernel on the hidden GPU suite's shapes, bf16 then
   fp16, against float64.
4. ``calibration``: ``attn-grade calibrate``'s measurement, its clock's
   overhead and spread kept, and the thresholds entry it gives.
5. ``speed``: the reference, the solution and SDPA's flash, memory-efficient
   and cuDNN backends (bf16, d_head 128, S 2048-8192, causal and not), timed
   as the calibration times; the autotuner's time for every config.
6. ``grader_verdict``: the grader's own speed measurement on the solution and
   two cheats, its overhead and per-round times kept.

The JSON (``--out``) is written whole (a temporary file, then a rename)
before and after each section: a run cut at any moment keeps every section
it finished.  One Triton cache (``--cache``) serves the check: a pool of
processes compiles the main-process sections' launches (and the verdicts')
for this GPU's target while the first sections run, and every worker
finds them: through the launcher's ``env`` (``TRITON_CACHE_DIR``) where it
sees host folders, and inside a bubblewrap sandbox (which shows none but
the Python's and the worker runtime's) from a copy in the runtime's folder
for the verdicts' run, read first by a cache manager of its own
(``shared_cache``); what a worker compiles beyond it stays in its own /tmp.  ``--smoke`` runs every section on the CPU under
Triton's interpreter with tiny float32 shapes and warms one launch for
sm_90a: it proves the script, not the GPU.  Exit status 1 when a section
failed, 124 when a SIGTERM cut the run.
"""
from __future__ import annotations

import argparse
import contextlib
import datetime
import functools
import json
import math
import os
import platform
import shutil
import signal
import statistics
import subprocess
import sys
import sysconfig
import tempfile
import time
import traceback
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:        # the check needs no install: the package is here
    sys.path.insert(0, str(REPO))
EX = "ex07_flash_attention"
SOLUTION = REPO / "solutions" / f"{EX}.py"
KERNEL = REPO / "grader" / "sandbox" / "runtime" / "kernels" / "flash.py"
DEFAULT_CACHE = Path(tempfile.gettempdir()) / "attn-gpu-check-triton"

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
SPEED_SHAPE, SMOKE_SPEED_SHAPE = (4, 32, 128), (1, 2, 16)       # (B, h, d_head)
SMOKE_CASE = dict(batch=1, heads=2, kv_heads=1, s_q=20, s_k=20, d_head=16, causal=True,
                  dtype="float32")
VERDICT_CASE = dict(batch=4, heads=32, kv_heads=32, s_q=4096, s_k=4096, d_head=128,
                    causal=True, dtype="bfloat16")


# -- the budget ----------------------------------------------------------------------
@dataclass(frozen=True)
class Estimate:
    """Seconds a section (or one part of it) needs: on a GPU machine, with
    ``--smoke``.  Guesses until a GPU run records the real ``seconds``; each
    says what it counts."""
    gpu: float
    smoke: float

    def of(self, smoke: bool) -> float:
        return self.smoke if smoke else self.gpu


ESTIMATES = {
    # nvidia-smi, the compiler's version, one bubblewrap probe.
    "environment": Estimate(10, 5),
    # Two workers: each starts Python and PyTorch (5 s), initializes CUDA
    # (2 s), compiles one tiny kernel and builds Triton's C launcher (5 s).
    "worker_launch": Estimate(40, 25),
    # Waiting for the warm-up's compiles (218 distinct launches on sm_90a,
    # 162 on sm_80, over 15 processes at 0.3-2 s each), then 42 cells
    # (3 kernels x 2 dtypes x 7 shapes), each autotuning 4 or 6 configs at
    # about 0.15 s each, and a float64 reference per cell.
    "correctness": Estimate(75, 10),
    # 3 shapes x 17 rounds x (2 kernels + 3 SDPA backends), tuning included.
    "calibration": Estimate(30, 10),
    # 6 rows x 5 contenders, 4 + 6 configs tuned per row.
    "speed": Estimate(40, 8),
    # Copying the check's cache where sandboxed workers see it (a few s);
    # a trusted reference worker and one student worker per submission
    # (three): each starts (5-10 s), finds its kernel's configs in the
    # check's cache (every worker, sandboxed or not: ``shared_cache``) and
    # is timed 7 rounds.  Was 90 with 35 s a worker compiling alone.
    "grader_verdict": Estimate(70, 40),
}
PART = {"correctness": Estimate(4, 0.5), "speed": Estimate(5, 1),
        # one student worker, its compiles found in the check's cache
        "grader_verdict": Estimate(20, 12)}
SECTION_SLACK = 1.5     # a list's parts run until 1.5 times its section's estimate
FINAL_S = 5.0           # kept back at the end: the last write, closing workers


def skip_reason(need: float, left: float) -> str:
    """Empty when ``need`` seconds fit in ``left``, else why the section is skipped."""
    return "" if need <= left else f"skipped: needs {need:.0f} s, {max(left, 0):.0f} s left"


def plain(value):
    """``value`` as strict JSON takes it: a float that is not finite becomes None."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    return value


def write_json(path: Path, data: dict) -> None:
    """Write ``data`` whole or not at all: a temporary file beside it, then a rename."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{time.monotonic_ns()}.tmp")
    tmp.write_text(json.dumps(plain(data), indent=1, default=str, allow_nan=False) + "\n")
    os.replace(tmp, path)


class Check:
    """The run: its results (written after every change of a section), its
    clock against ``--budget``, its Triton cache and its warm-up."""

    def __init__(self, args):
        self.smoke, self.out = args.smoke, args.out
        self.t0 = time.monotonic()
        self.end = self.t0 + args.budget
        self.cache, self.thresholds = args.cache, args.thresholds
        self.warm = None
        self.current = None
        self.section_end = math.inf
        self.results: dict = {"smoke": args.smoke, "budget_s": args.budget,
                              "started": datetime.datetime.now().isoformat(timespec="seconds"),
                              "argv": sys.argv[1:], "triton_cache": str(args.cache),
                              "finished": False,
                              "estimates_s": {n: e.of(args.smoke) for n, e in ESTIMATES.items()}}

    def left(self) -> float:
        return self.end - FINAL_S - time.monotonic()

    def save(self) -> None:
        self.results["left_s"] = round(self.left(), 1)
        write_json(self.out, self.results)

    def run(self, name: str, fn) -> None:
        """Run one section if its estimate fits; record it before and after."""
        need = ESTIMATES[name].of(self.smoke)
        why = skip_reason(need, self.left())
        if why:
            self.results[name] = {"status": why, "estimate_s": need}
            self.save()
            print(f"[  skip] {name}: {why}", flush=True)
            return
        self.current = name
        self.results[name] = {"status": "running", "estimate_s": need}
        self.save()
        start = time.monotonic()
        self.section_end = start + SECTION_SLACK * need      # its parts stop there
        try:
            data = fn(self)
            self.results[name] = {"status": "ok", "estimate_s": need, **data}
        except Exception as exc:  # noqa: BLE001 - a failed section is recorded, the rest run
            partial = {k: v for k, v in self.results[name].items() if k != "status"}
            self.results[name] = {**partial, "status": "failed",
                                  "error": f"{type(exc).__name__}: {exc}"[:2000],
                                  "trace": traceback.format_exc()[-3000:]}
        self.current = None
        self.results[name]["seconds"] = round(time.monotonic() - start, 2)
        self.results[name]["cache_entries"] = _entries(self.cache)
        self.save()
        print(f"[{self.results[name]['status']:>6s}] {name} "
              f"({self.results[name]['seconds']} s, estimated {need:.0f} s)", flush=True)

    def parts(self, section: str, items, extra_need=None):
        """Yield the items a section has time for: each needs its part's
        estimate, within the budget and within ``SECTION_SLACK`` times the
        section's own estimate (the sections after it keep their share);
        record the ones left out in ``self.left_out``."""
        self.left_out = []
        for item in items:
            need = extra_need(item) if extra_need else PART[section].of(self.smoke)
            left = min(self.left(), self.section_end - time.monotonic())
            why = skip_reason(need, left)
            if why:
                self.left_out.append(f"{item}: {why}")
                continue
            yield item


def _entries(folder: Path) -> int:
    try:
        return sum(1 for _ in folder.iterdir())
    except OSError:
        return 0


# -- 1 -----------------------------------------------------------------------------------
def _first_line(cmd: list) -> str:
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError) as exc:
        return f"unknown ({type(exc).__name__})"
    lines = (done.stdout or done.stderr).strip().splitlines()
    return lines[0].strip() if lines else f"unknown (exit status {done.returncode})"


def c_compiler() -> dict:
    """The compiler Triton's launcher build picks: $CC, else gcc, else clang."""
    path = os.environ.get("CC") or shutil.which("gcc") or shutil.which("clang") or ""
    return {"path": path, "version": _first_line([path, "--version"]) if path else ""}


def python_header() -> dict:
    """``Python.h`` where Triton's launcher build looks for it (sysconfig's include)."""
    scheme = sysconfig.get_default_scheme()
    scheme = "posix_prefix" if scheme == "posix_local" else scheme   # as Triton does
    include = Path(sysconfig.get_paths(scheme=scheme)["include"])
    return {"path": str(include / "Python.h"), "exists": (include / "Python.h").is_file()}


def _versions() -> dict:
    import numpy
    import torch
    out = {"python": platform.python_version(), "python_executable": sys.executable,
           "torch": torch.__version__, "cuda": torch.version.cuda,
           "cuda_available": torch.cuda.is_available(), "numpy": numpy.__version__,
           "cudnn": torch.backends.cudnn.version() if torch.backends.cudnn.is_available()
           else None}
    try:
        torch.from_numpy(numpy.zeros(2)).sum().item()     # the ABI PyTorch was built for
        out["numpy_with_torch"] = "works"
    except Exception as exc:  # noqa: BLE001 - a NumPy PyTorch was not built against
        out["numpy_with_torch"] = f"fails: {type(exc).__name__}: {exc}"[:300]
    try:
        import triton
        from triton.backends.nvidia.compiler import get_ptxas
        out["triton"] = triton.__version__
        out["ptxas"] = _ptxas_version(get_ptxas(90).path)       # the one sm_90a kernels get
    except ImportError as exc:
        out.setdefault("triton", f"missing ({exc})")
        out.setdefault("ptxas", "")
    return out


def _ptxas_version(path: str) -> str:
    """``release 12.8, V12.8.93 (path)``: the line of ``ptxas --version`` that says it."""
    try:
        text = subprocess.run([path, "--version"], capture_output=True, text=True,
                              timeout=30).stdout
    except (OSError, subprocess.SubprocessError) as exc:
        return f"unknown ({type(exc).__name__}: {path})"
    line = next((ln for ln in text.splitlines() if "release" in ln), text.strip()[-80:])
    return f"{line.split('tools, ')[-1].strip()} ({path})"


def _gpu() -> dict:
    import torch
    if not torch.cuda.is_available():
        return {"gpu": None, "capability": None, "driver": None}
    driver = _first_line(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"])
    return {"gpu": torch.cuda.get_device_name(),
            "capability": list(torch.cuda.get_device_capability()), "driver": driver}


def _sandbox() -> dict:
    from grader.sandbox import bwrap, isolation
    ok, why = bwrap.usable()
    return {"bubblewrap": bwrap.executable() or "", "sandbox_works": ok, "sandbox_why_not": why,
            "isolation": isolation.decide("auto", 8192).text}


def launch_blockers(env: dict, smoke: bool) -> list:
    """What in ``env`` would stop a Triton launch in a grading worker."""
    out = []
    if not smoke and not env["cuda_available"]:
        out.append("no CUDA device visible to PyTorch")
    if not str(env["triton"])[:1].isdigit():
        out.append(f"Triton is {env['triton']}")
    if not env["c_compiler"]["path"]:
        out.append("no C compiler ($CC, gcc or clang): Triton builds each kernel's launcher "
                   "with one")
    if not env["python_h"]["exists"]:
        out.append(f"no {env['python_h']['path']}: Triton's launcher is C built against it "
                   f"(install python{sys.version_info[0]}.{sys.version_info[1]}-dev)")
    if env["numpy_with_torch"] != "works":
        out.append(f"NumPy {env['numpy']} with this PyTorch {env['numpy_with_torch']}")
    if not env["click"]:
        out.append("click is missing (the grader's command line and calibrate need it)")
    return out


def environment(check: Check) -> dict:
    import importlib.util
    env = {**_versions(), **_gpu(), "c_compiler": c_compiler(), "python_h": python_header(),
           "click": importlib.util.find_spec("click") is not None, **_sandbox()}
    blockers = launch_blockers(env, check.smoke)
    env["blocks_launch"] = "; ".join(blockers) if blockers else "nothing found"
    print(f"  {env['gpu'] or 'no GPU'}; Python {env['python']}, torch {env['torch']}, "
          f"Triton {env['triton']}; blocks a launch: {env['blocks_launch']}", flush=True)
    return env


# -- the shared Triton cache and the warm-up --------------------------------------------
def worker_env(check: Check, namespaces: bool) -> dict:
    """The environment every worker of the check gets through the launcher:
    the interpreter under ``--smoke``; the check's Triton cache where a
    worker can see it (no namespaces: a bubblewrap sandbox shows no host
    folder but the Python runtime's and its submission's, so there each
    worker keeps the private cache in its own /tmp that the launcher gives)."""
    env = {"TRITON_INTERPRET": "1"} if check.smoke else {}
    if not namespaces:
        env["TRITON_CACHE_DIR"] = str(check.cache)
    return env


def cache_note(namespaces: bool) -> str:
    return ("private: each worker compiles into its own /tmp (a bubblewrap sandbox shows "
            "no host folder); counted in the estimates") if namespaces else \
        "shared: the check's --cache, given to each worker as TRITON_CACHE_DIR"


# Inside a bubblewrap sandbox a worker sees the worker runtime's folder
# (read-only) and no other of the host's: for the verdicts' run, a copy of
# the check's Triton cache and a cache manager that reads it first are put
# there, and removed after.  What a worker compiles beyond it goes to its
# own private cache.
SHARED_FOLDER = "_gpu_check_triton"
MANAGER_MODULE = "_gpu_check_cache"
MANAGER_SOURCE = '''"""Triton's cache for benchmarks/gpu_check.py's workers (written by it, removed after).

Reads the check's compiles first, from the copy beside this file (read-only
in a sandbox); writes what it compiles itself to the worker's own cache."""
import json
import os

from triton.runtime.cache import FileCacheManager

SHARED = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_gpu_check_triton")


class SharedFirst(FileCacheManager):
    def __init__(self, key, override=False, dump=False):
        super().__init__(key, override=override, dump=dump)
        self.shared = None if override or dump else os.path.join(SHARED, key)

    def get_file(self, filename):
        path = os.path.join(self.shared, filename) if self.shared else ""
        return path if path and os.path.exists(path) else super().get_file(filename)

    def get_group(self, filename):
        # a group names its files by the absolute paths they were written at:
        # here they are beside it
        try:
            with open(os.path.join(self.shared, "__grp__" + filename)) as f:
                children = json.load(f)["child_paths"]
            paths = {c: os.path.join(self.shared, os.path.basename(p))
                     for c, p in children.items()}
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            return super().get_group(filename)
        if all(os.path.exists(p) for p in paths.values()):
            return paths
        return super().get_group(filename)
'''


@contextlib.contextmanager
def shared_cache(check: Check, namespaces: bool, runtime: Path | None = None):
    """``(env, note)`` for every worker of the verdicts: the check's Triton
    cache given as ``TRITON_CACHE_DIR`` where workers see host folders, else
    copied into the worker runtime's folder (``runtime``) with
    ``MANAGER_SOURCE`` as ``TRITON_CACHE_MANAGER``, both removed after."""
    env = worker_env(check, namespaces)
    if not namespaces or check.smoke:        # the interpreter compiles nothing
        yield env, cache_note(namespaces)
        return
    from grader.paths import RUNTIME_DIR, RUNTIME_PACKAGE
    runtime = Path(runtime or RUNTIME_DIR)
    folder, module = runtime / SHARED_FOLDER, runtime / f"{MANAGER_MODULE}.py"
    try:
        shutil.rmtree(folder, ignore_errors=True)
        shutil.copytree(check.cache, folder, ignore=shutil.ignore_patterns("tmp.*", "lock"))
        for path in [folder, *folder.rglob("*")]:    # readable by workers of other uids
            os.chmod(path, 0o755 if path.is_dir() else 0o644)
        module.write_text(MANAGER_SOURCE)
        yield ({**env, "TRITON_CACHE_MANAGER": f"{RUNTIME_PACKAGE}.{MANAGER_MODULE}:SharedFirst"},
               "shared: a copy of the check's --cache in the worker runtime's folder, read "
               "first by every sandboxed worker (TRITON_CACHE_MANAGER)")
    finally:
        shutil.rmtree(folder, ignore_errors=True)
        module.unlink(missing_ok=True)


def prepare_cache(folder: Path) -> None:
    """The check's Triton cache; as root, workers switch to uids of their own
    and must add entries too (sticky, like /tmp: none can remove another's)."""
    folder.mkdir(parents=True, exist_ok=True)
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        os.chmod(folder, 0o1777)


class _Target:
    """What Triton's driver would say on the GPU being warmed for: no GPU is
    touched by the warm-up's processes (nor needed: the compile is ahead of
    time), and a launch then finds the same cache key."""

    def __init__(self, backend: str, arch: int, warp_size: int):
        self.target = (backend, arch, warp_size)

    def get_current_device(self):
        return 0

    def get_current_stream(self, device=None):
        return 0

    def get_current_target(self):
        from triton.backends.compiler import GPUTarget
        return GPUTarget(*self.target)


def _warm_init(target: tuple) -> None:
    """In each warm-up process: no interpreter, and the target's driver."""
    os.environ.pop("TRITON_INTERPRET", None)
    from triton.runtime import driver
    driver.set_active(_Target(*target))


@functools.lru_cache(maxsize=None)
def _host(name: str):
    """``flash_attention`` of the reference or the solution, loaded as a GPU sees it."""
    from grader.sandbox.runtime.probes.gpu_compile import load_for_gpu
    path = KERNEL if name == "reference" else SOLUTION
    return load_for_gpu(str(path), f"_warm_{name}").flash_attention


def launches_of(spec: tuple, capability: int) -> list:
    """The launches (one per autotune config) that one call would make on a
    GPU of ``capability``.  ``spec``: (host, extra kwargs, dtype, shape, causal)."""
    import torch

    from grader.sandbox.runtime.probes import gpu_compile
    host, extra, dtype, (b, h, h_kv, s_q, s_k, d), causal = spec
    dt = getattr(torch, dtype)
    q = gpu_compile.as_gpu(torch.empty(b, h, s_q, d, dtype=dt))     # never touched
    k, v = (gpu_compile.as_gpu(torch.empty(b, h_kv, s_k, d, dtype=dt)) for _ in range(2))
    with gpu_compile.looks_like_gpu(capability):
        return gpu_compile.capture_launches(_host(host), q, k, v, causal=causal, **dict(extra))


def _signature(launch) -> tuple:
    """What Triton's cache key depends on in one launch (as far as seen from
    here): two launches with one signature compile once."""
    fn, args, kwargs, _ = launch

    def one(a):
        if hasattr(a, "block_shape"):                          # a tensor descriptor
            return ("desc", str(a.base.dtype), tuple(a.block_shape),
                    tuple(one(x) for x in (*a.shape, *a.strides)))
        if hasattr(a, "data_ptr"):
            return ("tensor", str(a.dtype), a.data_ptr() % 16 == 0)
        if isinstance(a, bool) or not isinstance(a, int):
            return (type(a).__name__,)
        return ("int", a == 1, a % 16 == 0, -2**31 <= a < 2**31)
    code = fn.fn.__code__
    return (code.co_filename, code.co_firstlineno, fn.fn.__qualname__,
            tuple(one(a) for a in args), tuple(sorted((k, repr(v)) for k, v in kwargs.items())))


def warm_one(spec: tuple, index: int, capability: int) -> tuple:
    """Compile launch ``index`` of ``spec`` into the cache (``warmup=True``:
    Triton's own path to a launch, stopped before the launch).  Returns
    ``(seconds, error)``."""
    start = time.monotonic()
    try:
        fn, args, kwargs, _ = launches_of(spec, capability)[index]
        fn.run(*args, grid=(1,), warmup=True, **kwargs)
    except Exception as exc:  # noqa: BLE001 - recorded; the section compiles it itself
        return time.monotonic() - start, f"{type(exc).__name__}: {exc}"[:300]
    return time.monotonic() - start, ""


class Warmer:
    """A pool of processes compiling the later sections' launches, in the
    order the sections run, while the first sections run here."""

    def __init__(self, plan: list, target: tuple, procs: int, limit: int | None = None):
        import multiprocessing
        from concurrent.futures import ProcessPoolExecutor
        self.started = time.monotonic()
        # What the host functions see (the variant they pick): looks_like_gpu
        # knows sm_80 and sm_90; the compile is for the real target.
        capability = 90 if target[1] >= 90 else 80
        jobs, seen = [], set()
        for section, spec in plan:
            for i, launch in enumerate(launches_of(spec, capability)):
                sig = _signature(launch)
                if sig not in seen:
                    seen.add(sig)
                    jobs.append((section, spec, i))
        self.planned = len(jobs)
        jobs = jobs[:limit] if limit is not None else jobs
        self.pool = ProcessPoolExecutor(procs, mp_context=multiprocessing.get_context("spawn"),
                                        initializer=_warm_init, initargs=(target,))
        self.futures = [(section, self.pool.submit(warm_one, spec, i, capability))
                        for section, spec, i in jobs]
        self.procs, self.target = procs, target

    def wait(self, section: str, timeout: float) -> dict:
        """Wait (at most ``timeout`` s) for the compiles of ``section`` and
        those before it; what was compiled, failed or still running."""
        from concurrent.futures import wait
        order = [s for s, _ in self.futures]
        last = max((i for i, s in enumerate(order) if s == section), default=-1)
        mine = [f for _, f in self.futures[:last + 1]]
        start = time.monotonic()
        wait(mine, timeout=max(timeout, 0))
        done = [_outcome(f) for f in mine if f.done() and not f.cancelled()]
        return {"launches": sum(1 for s in order if s == section),
                "waited_s": round(time.monotonic() - start, 2),
                "not_done": sum(1 for f in mine if not f.done()),
                "errors": sorted({e for _, e in done if e})[:5]}

    def summary(self) -> dict:
        done = [_outcome(f) for _, f in self.futures if f.done() and not f.cancelled()]
        return {"target": list(self.target), "processes": self.procs,
                "planned": self.planned, "submitted": len(self.futures), "done": len(done),
                "failed": sum(1 for _, e in done if e),
                "compile_s": round(sum(t for t, _ in done), 1),
                "wall_s": round(time.monotonic() - self.started, 1)}

    def close(self) -> None:
        self.pool.shutdown(wait=False, cancel_futures=True)


def _outcome(future) -> tuple:
    """``(seconds, error)`` of a finished compile, a lost process included."""
    exc = future.exception()
    return (0.0, f"{type(exc).__name__}: {exc}"[:300]) if exc else future.result()


def warm_plan(smoke: bool, capability: int) -> list:
    """(section, spec) for every call the main-process sections will make."""
    from grader.gpu.calibrate import PLAIN
    from grader.reference.secret import flash
    plan = [("correctness", (name, tuple(extra.items()), dtype, shape[:6], shape[6]))
            for name, extra, dtype, _, shape in correctness_cells(smoke, capability)]
    for case in flash.SPEED_CASES if not smoke else [SMOKE_CASE]:
        shape = (case["batch"], case["heads"], case["kv_heads"], case["s_q"], case["s_k"],
                 case["d_head"])
        for extra in ((), (("config", PLAIN),)):
            plan.append(("calibration", ("reference", extra, case["dtype"], shape,
                                         case["causal"])))
    b, h, d = SMOKE_SPEED_SHAPE if smoke else SPEED_SHAPE
    for s in SMOKE_SEQ if smoke else SPEED_SEQ:
        for causal in (False, True):
            for host in ("reference", "solution"):
                plan.append(("speed", (host, (), "float32" if smoke else "bfloat16",
                                       (b, h, h, s, s, d), causal)))
    case = SMOKE_CASE if smoke else VERDICT_CASE    # what the verdicts' workers launch
    shape = tuple(case[k] for k in ("batch", "heads", "kv_heads", "s_q", "s_k", "d_head"))
    for host in ("reference", "solution"):
        plan.append(("grader_verdict", (host, (), case["dtype"], shape, case["causal"])))
    return plan


def start_warmup(check: Check) -> dict:
    """Start the warm-up pool (not a section: its figures go under ``warmup``)."""
    try:
        if check.smoke:
            target, procs, limit = ("cuda", 90, 32), 1, 1      # the plumbing: one launch
        else:
            from triton.runtime import driver
            t = driver.active.get_current_target()
            target, procs, limit = (t.backend, t.arch, t.warp_size), \
                max(1, min((os.cpu_count() or 2) - 1, 15)), None
        check.warm = Warmer(warm_plan(check.smoke, _device_capability(check.smoke)),
                            target, procs, limit)
        return {"status": "started", **check.warm.summary()}
    except Exception as exc:  # noqa: BLE001 - without it, the sections compile as they go
        return {"status": f"failed: {type(exc).__name__}: {exc}"[:500],
                "trace": traceback.format_exc()[-2000:]}


def wait_warm(check: Check, section: str, share: float = 0.5) -> dict:
    """Wait for ``section``'s compiles, at most ``share`` of its estimate."""
    if check.warm is None:
        return {"status": "no warm-up"}
    return check.warm.wait(section, share * ESTIMATES[section].of(check.smoke))


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


def _launch_in(launcher, folder, env, zyg) -> dict:
    from grader.sandbox import forkserver
    from grader.sandbox.client import StudentModule
    start = time.monotonic()
    worker = launcher.worker(folder, "launch_check", call_timeout=300, env=env, fork_from=zyg)
    try:
        worker.start()
        if zyg is not None and not isinstance(worker.proc, forkserver.ForkedProcess):
            raise AssertionError("the worker was not forked by the fork server")
        total = StudentModule(worker).launch(1000)
    finally:
        worker.close()
    if total != 1000.0:
        raise AssertionError(f"the kernel's output sums to {total}, not 1000")
    return {"sum": total, "seconds": round(time.monotonic() - start, 2)}


def worker_launch(check: Check) -> dict:
    """Spawned, and forked by a grading's fork server (which imported PyTorch but
    never touched CUDA): a GPU exercise's workers are spawned on a GPU
    machine until this proves the fork there (grader.core's _fork_server_for)."""
    from grader.sandbox.launch import Launcher
    folder = Path(tempfile.mkdtemp(prefix="gpu-check-"))
    launcher = Launcher.here("auto")     # as a grading on this machine would
    env = worker_env(check, launcher.namespaces)
    out = {"isolation": launcher.isolation.text, "triton_cache": cache_note(launcher.namespaces)}
    zyg = launcher.fork_server({"NumPy", "PyTorch"})
    try:
        (folder / "launch_check.py").write_text(LAUNCH_MODULE)
        out["spawned"] = _launch_in(launcher, folder, env, None)
        if zyg is not None:
            zyg.start()
        if zyg is None or not zyg.alive:
            out["forked"] = f"no fork server: {zyg.failed if zyg else 'not used here'}"
        else:
            out["forked"] = _launch_in(launcher, folder, env, zyg)
    finally:
        if zyg is not None:
            zyg.close()
        shutil.rmtree(folder, ignore_errors=True)
    return out


# -- 3 -----------------------------------------------------------------------------------
def correctness_cells(smoke: bool, capability: int):
    """(kernel, extra kwargs, dtype, label, shape) in the order of their value:
    bf16 (the speed grade's dtype) before fp16; in each, the reference
    kernels (the grade's yardstick) and the solution (held to full marks)."""
    names = [("reference/pointers", {"variant": "pointers"})]
    if smoke or capability >= 90:                  # TMA needs Hopper
        names.append(("reference/descriptors", {"variant": "descriptors"}))
    names.append(("solution", {}))
    shapes = SMOKE_SHAPES if smoke else GPU_SHAPES
    for dtype in (["float32"] if smoke else ["bfloat16", "float16"]):
        for name, extra in names:
            for label, shape in shapes.items():
                yield name.split("/")[0], extra, dtype, f"{name} {dtype} {label}", shape


@functools.lru_cache(maxsize=None)
def _solution(smoke: bool):
    """The solution module, as a GPU sees it (under --smoke, as the interpreter does)."""
    from grader.sandbox.runtime.probes.gpu_compile import load_for_gpu
    if not smoke:
        return load_for_gpu(str(SOLUTION), "_check_solution")
    import importlib.util
    spec = importlib.util.spec_from_file_location("_check_solution", SOLUTION)
    module = importlib.util.module_from_spec(spec)
    sys.modules["_check_solution"] = module
    spec.loader.exec_module(module)
    return module


def _call(host: str, smoke: bool):
    from grader.sandbox.runtime.kernels import flash as kernel
    return kernel.flash_attention if host == "reference" else _solution(smoke).flash_attention


def _autotune_quietly(smoke):
    import contextlib
    if not smoke:
        return contextlib.nullcontext()
    from grader.sandbox.runtime.probes.ex07_flash_attention import _InterpretedAutotune
    return _InterpretedAutotune()


def _device_capability(smoke: bool) -> int:
    import torch
    if smoke:
        return 90
    major, minor = torch.cuda.get_device_capability()
    return major * 10 + minor


def _one_cell(host, extra, dtype, shape, smoke, gen) -> dict:
    import torch

    from grader.reference.secret import flash
    dev = "cpu" if smoke else "cuda"
    b, h, h_kv, s_q, s_k, d, causal = shape
    dt = getattr(torch, dtype)
    atol, rtol = flash.tolerance(dtype, dev)
    q = torch.randn(b, h, s_q, d, generator=gen).to(dev, dt)
    k = torch.randn(b, h_kv, s_k, d, generator=gen).to(dev, dt)
    v = torch.randn(b, h_kv, s_k, d, generator=gen).to(dev, dt)
    with _autotune_quietly(smoke):
        got = _call(host, smoke)(q, k, v, causal=causal, **extra)
    want = flash.reference(q, k, v, causal, device=dev)
    err = (got.double().cpu() - want).abs().max().item()
    ok = math.isfinite(err) and torch.allclose(got.double().cpu(), want, atol=atol, rtol=rtol)
    return {"max_err": err, "ok": ok}


def correctness(check: Check) -> dict:
    import torch
    out = {"compile_cache": wait_warm(check, "correctness")}
    rows, failures = [], []
    gen = torch.Generator().manual_seed(0)
    cells = {c[3]: c for c in correctness_cells(check.smoke, _device_capability(check.smoke))}
    for label in check.parts("correctness", cells):
        host, extra, dtype, _, shape = cells[label]
        start = time.monotonic()
        row = {"cell": label, **_one_cell(host, extra, dtype, shape, check.smoke, gen),
               "seconds": round(time.monotonic() - start, 2)}
        rows.append(row)
        if not row["ok"]:
            failures.append(f"{label}: max error {row['max_err']:.3g}")
    if failures:
        raise AssertionError("; ".join(failures))
    return {**out, "rows": rows, "left_out": check.left_out}


# -- 4 -----------------------------------------------------------------------------------
def calibration(check: Check) -> dict:
    """``attn-grade calibrate``'s measurement, kept whole, and its entry."""
    import torch

    from grader.gpu import calibrate
    out = {"compile_cache": wait_warm(check, "calibration")}
    with _autotune_quietly(check.smoke):
        measured = calibrate.measure(3 if check.smoke else 15,
                                     cases=[SMOKE_CASE] if check.smoke else None,
                                     device="cpu" if check.smoke else "cuda")
    name = "CPU (--smoke, Triton's interpreter)" if check.smoke else torch.cuda.get_device_name()
    entry = calibrate.entry_from(measured)
    out.update(measured=measured, model=name, entry=entry)
    refusal = calibrate.fallback_refusal(name)
    if refusal:
        out["thresholds"] = f"not written: {refusal}"
    elif check.thresholds:
        calibrate.write_entry(check.thresholds, name, entry, start_from=calibrate.DATA_PATH)
        out["thresholds"] = f"wrote {check.thresholds} (model {name!r})"
    for r in measured["cases"]:
        print(f"  S={r['s']} causal={r['causal']}: reference {r['reference_tflops']} "
              f"plain {r['plain_tflops']} SDPA {r['sdpa_tflops']} TFLOP/s, spread "
              f"{r['spread']['tuned'] or 0:.1%}, clock overhead {r['overhead_share']:.1%}",
              flush=True)
    print(f"  tiers {entry['tiers']}", flush=True)
    return out


# -- 5 -----------------------------------------------------------------------------------
_REPORTED: dict = {}    # autotuner name -> the timings last reported (each tuning once)


def _config_timings(smoke: bool) -> dict:
    """The autotuner's timings (ms, median) per config from its latest tuning,
    of each autotuned kernel that tuned since the last call."""
    from grader.sandbox.runtime.kernels import flash as kernel
    out = {}
    tuners = {"reference/pointers": getattr(kernel, "_ref_fwd", None),
              "reference/descriptors": getattr(kernel, "_ref_fwd_desc", None),
              "solution": getattr(_solution(smoke), "_flash_fwd", None)}
    for name, tuner in tuners.items():
        timings = getattr(tuner, "configs_timings", None) or {}
        if timings and _REPORTED.get(name) is not timings:
            _REPORTED[name] = timings
            out[name] = {str(c): (t[0] if isinstance(t, (list, tuple)) else t)
                         for c, t in timings.items()}
    return out


def _contenders(smoke: bool) -> dict:
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from torch.nn.functional import scaled_dot_product_attention as sdpa

    from grader.sandbox.runtime.kernels import flash as kernel
    solution = _solution(smoke).flash_attention
    out = {"reference": lambda q, k, v, c: kernel.flash_attention(q, k, v, causal=c),
           "solution": lambda q, k, v, c: solution(q, k, v, causal=c)}
    backends = {"sdpa_math": SDPBackend.MATH} if smoke else {
        "sdpa_flash": SDPBackend.FLASH_ATTENTION,
        "sdpa_efficient": SDPBackend.EFFICIENT_ATTENTION,
        "sdpa_cudnn": SDPBackend.CUDNN_ATTENTION}
    for name, backend in backends.items():
        def run(q, k, v, c, _b=backend):
            with sdpa_kernel([_b]):
                return sdpa(q, k, v, is_causal=c)
        out[name] = run
    return out


def _timed(fn, args, repeats, flush, smoke) -> dict:
    """The calibration's timing (L2 flushed, the host synchronized): median, spread."""
    from grader.gpu import calibrate
    from grader.sandbox.runtime.probes import ex07_flash_attention as probe
    with _autotune_quietly(smoke):
        fn(*args)                                            # warm-up, autotuning
        times = [probe.time_call(fn, args, {}, flush)[0] for _ in range(repeats)]
    return {"median_s": statistics.median(times), "spread": calibrate.spread(times)}


def _speed_row(s, causal, contenders, check, flush) -> dict:
    import torch

    from grader.reference.secret import flash
    dev = "cpu" if check.smoke else "cuda"
    b, h, d = SMOKE_SPEED_SHAPE if check.smoke else SPEED_SHAPE
    dtype = torch.float32 if check.smoke else torch.bfloat16
    gen = torch.Generator(device=dev).manual_seed(s)
    q, k, v = (torch.randn(b, h, s, d, generator=gen, device=dev).to(dtype) for _ in range(3))
    flops = flash.attention_flops(b, h, s, s, d, causal)
    row = {"s": s, "causal": causal, "configs_ms": {}}
    for name, fn in contenders.items():
        try:
            t = _timed(fn, (q, k, v, causal), 3 if check.smoke else 10, flush, check.smoke)
            row[name] = flops / t["median_s"] / 1e12
            row[f"{name}_spread"] = t["spread"]
        except RuntimeError as exc:                 # a backend that refuses these inputs
            row[name] = None
            row[f"{name}_error"] = str(exc)[:200]
        row["configs_ms"].update(_config_timings(check.smoke))
    rates = [row[n] for n in contenders if n.startswith("sdpa") and row.get(n)]
    if row.get("sdpa_flash"):
        row["ref_over_sdpa_flash"] = row["reference"] / row["sdpa_flash"]
    if rates and row.get("reference"):
        row["ref_over_best_sdpa"] = row["reference"] / max(rates)
    return row


def speed(check: Check) -> dict:
    import torch

    from grader.sandbox.runtime.probes import ex07_flash_attention as probe
    out = {"compile_cache": wait_warm(check, "speed")}
    flush = None if check.smoke else torch.empty(probe.FLUSH_BYTES // 4, dtype=torch.int32,
                                                 device="cuda")
    contenders = _contenders(check.smoke)
    rows, targets = [], []
    items = [(s, c) for s in (SMOKE_SEQ if check.smoke else SPEED_SEQ) for c in (False, True)]
    for s, causal in check.parts("speed", items):
        row = _speed_row(s, causal, contenders, check, flush)
        rows.append(row)
        print("  " + "  ".join(f"{k}={v:.3g}" if isinstance(v, float) else f"{k}={v}"
                               for k, v in row.items()
                               if not k.endswith(("_error", "_spread", "configs_ms"))),
              flush=True)
        if not check.smoke and s >= 4096:
            targets.append({"s": s, "causal": causal, "meets_targets":
                            row.get("ref_over_sdpa_flash", 0) >= 1.2
                            and row.get("ref_over_best_sdpa", 0) >= 0.9})
    return {**out, "dtype": "float32" if check.smoke else "bfloat16",
            "shape_b_h_d": list(SMOKE_SPEED_SHAPE if check.smoke else SPEED_SHAPE),
            "rows": rows, "targets": targets, "left_out": check.left_out}


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


def _timing_of(result: dict, calls: int) -> dict:
    """The grader's own clock, per case: its overhead (a request that only
    draws the inputs, subtracted from both sides), the per-call times of
    every round, their spread, and the overhead's share of a timed request."""
    from grader.gpu import calibrate
    out = []
    for r in result["cases"]:
        request = r["overhead_s"] + calls * statistics.median(r["reference_s"])
        out.append({"s": r["case"]["s_q"], "calls": calls, "overhead_s": r["overhead_s"],
                    "reference_s": r["reference_s"], "student_s": r["student_s"],
                    "collect_s": r["collect_s"],
                    "spread_reference": calibrate.spread(r["reference_s"]),
                    "spread_student": calibrate.spread(r["student_s"]),
                    "overhead_share": r["overhead_s"] / request if request > 0 else None})
    return {"cases": out}


def _judge_one(launcher, reference, env, extra, smoke) -> dict:
    from grader.reference import flash_speed
    from grader.reference.secret import flash
    from grader.sandbox.client import StudentModule
    from grader.sandbox.runtime.kernels import flash as kernel
    folder = Path(tempfile.mkdtemp(prefix="gpu-check-sub-"))
    try:
        (folder / f"{EX}.py").write_text(SOLUTION.read_text() + extra)
        shutil.copyfile(kernel.__file__, folder / "ex07_reference_copy.py")
        worker = launcher.worker(folder, EX, call_timeout=600, env=env, locked=True)
        calls = 2 if smoke else flash_speed.CALLS
        try:
            result = flash_speed.measure(StudentModule(worker, 600), reference,
                                         [SMOKE_CASE if smoke else VERDICT_CASE],
                                         calls=calls, rounds=2 if smoke else 7,
                                         on="cpu" if smoke else None)
        finally:
            worker.close()
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    try:
        judged = flash.judge_speed(result)
        out = {"verdict": "credited", "ratio": judged["ratio"], "table": judged["table"]}
    except Exception as exc:  # noqa: BLE001 - Feedback: the grader refused credit
        out = {"verdict": "refused", "feedback": str(exc)[:800]}
    return {**out, "timing": _timing_of(result, calls)}


def grader_verdict(check: Check) -> dict:
    from grader.reference import flash_speed
    from grader.sandbox.launch import Launcher
    launcher = Launcher.here("auto")
    trusted = launcher.binder(Path(tempfile.gettempdir()))
    out = {"verdicts": {}}
    subs = {"solution": "", "calls another kernel": OTHER_KERNEL_CHEAT}
    if not check.smoke:                      # nothing runs asynchronously on the CPU
        subs["skips synchronization"] = NO_SYNC_CHEAT
    part = PART["grader_verdict"].of(check.smoke)
    out["compile_cache"] = wait_warm(check, "grader_verdict")
    with shared_cache(check, launcher.namespaces) as (env, note), \
            flash_speed.reference_side(lambda module, **kw: trusted(module, **kw, env=env),
                                       600) as reference:
        out["triton_cache"] = note
        for name in check.parts("grader_verdict", subs, lambda _: part):
            out["verdicts"][name] = _judge_one(launcher, reference, env, subs[name],
                                               check.smoke)
            print(f"  {name}: {out['verdicts'][name]['verdict']}", flush=True)
            check.results["grader_verdict"] = {"status": "running", **out}
            check.save()
    out["left_out"] = check.left_out
    _check_verdicts(out["verdicts"])
    return out


def _check_verdicts(verdicts: dict) -> None:
    expected = {"solution": "credited", "calls another kernel": "refused",
                "skips synchronization": "refused"}
    wrong = [f"{n}: {v['verdict']}" for n, v in verdicts.items() if v["verdict"] != expected[n]]
    if wrong:
        raise AssertionError(f"unexpected verdicts: {'; '.join(wrong)}; "
                             f"{json.dumps(verdicts, default=str)[:1500]}")


# -- the run -----------------------------------------------------------------------------
WARMED = ("correctness", "calibration", "speed", "grader_verdict")   # the warm-up serves
SECTIONS = {"environment": environment, "worker_launch": worker_launch,
            "correctness": correctness, "calibration": calibration, "speed": speed,
            "grader_verdict": grader_verdict}


def _parse(argv):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--smoke", action="store_true",
                        help="CPU, Triton's interpreter, tiny shapes: the plumbing only.")
    parser.add_argument("--budget", type=float, default=360.0,
                        help="Seconds for all sections; a section whose estimate does not fit "
                             "in what is left is skipped (default 360: a 10-minute command "
                             "with room for the start and the imports).")
    parser.add_argument("--out", type=Path, default=Path("gpu_check.json"),
                        help="The JSON result, rewritten whole before and after each section.")
    parser.add_argument("--cache", type=Path, default=DEFAULT_CACHE,
                        help="Triton's cache for the check and the workers that can see it "
                             f"(default {DEFAULT_CACHE}).")
    parser.add_argument("--thresholds", type=Path, default=None,
                        help="Also write this GPU model's speed tiers into this thresholds "
                             "file (a missing one starts as grader/data/gpu_thresholds.json).")
    parser.add_argument("--only", default="",
                        help="Comma-separated sections to run (the others are 'not selected'): "
                             + ", ".join(SECTIONS))
    args = parser.parse_args(argv)
    only = [s for s in args.only.split(",") if s]
    unknown = sorted(set(only) - set(SECTIONS))
    if unknown:
        parser.error(f"--only: no section {', '.join(unknown)}; choose from "
                     f"{', '.join(SECTIONS)}")
    args.only = only or list(SECTIONS)
    return parser, args


def _on_term(check: Check):
    """SIGTERM (``timeout`` at a command's limit): say where the run was cut."""
    def handler(signum, frame):
        if check.current:
            check.results[check.current]["status"] = \
                f"cut: signal {signum} at {time.monotonic() - check.t0:.0f} s"
        check.save()
        raise SystemExit(124)
    return handler


def main(argv=None) -> int:
    parser, args = _parse(argv)
    if args.smoke:
        os.environ["TRITON_INTERPRET"] = "1"     # before Triton kernels are defined
    os.environ["TRITON_CACHE_DIR"] = str(args.cache)   # before Triton reads it
    prepare_cache(args.cache)
    import torch
    if not args.smoke and not torch.cuda.is_available():
        parser.error("no CUDA device: run on a GPU, or use --smoke on the CPU")
    check = Check(args)
    signal.signal(signal.SIGTERM, _on_term(check))
    try:
        for name, fn in SECTIONS.items():
            if name not in args.only:
                check.results[name] = {"status": "not selected"}
                continue
            check.run(name, fn)
            served = [ESTIMATES[s].of(check.smoke) for s in WARMED if s in args.only]
            if name == "environment" and served and min(served) <= check.left():
                check.results["warmup"] = start_warmup(check)
                check.save()
    finally:
        if check.warm is not None:
            check.results["warmup"] = {"status": "closed", **check.warm.summary()}
            check.warm.close()
    check.results["finished"] = True
    check.save()
    print(f"wrote {args.out}")
    return 1 if any(isinstance(v, dict) and v.get("status") == "failed"
                    for v in check.results.values()) else 0


if __name__ == "__main__":
    sys.exit(main())
