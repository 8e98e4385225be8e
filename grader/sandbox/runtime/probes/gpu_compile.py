"""Compile Triton kernels for real NVIDIA GPUs on a machine that has none.

Triton's CPU interpreter runs a kernel as Python and accepts things the GPU
compiler rejects (a plain Python global read inside ``@triton.jit``, a
``tl.dot`` on 8-wide tiles, a tile too big for shared memory).  Compiling
ahead of time for a target (``GPUTarget("cuda", 80 | 90, 32)``) needs no GPU
and no driver: Triton lowers to PTX and its bundled ``ptxas`` assembles it.

* ``compile_launch``: one kernel, with the arguments of one launch (tensors
  give their dtype and alignment, ints their specialization, exactly as a
  real launch would), for one target; returns registers, spills, shared
  memory, whether Hopper's warpgroup MMA (``wgmma``) and TMA are used, and
  the compiler's complaint with the line in the kernel's file if it failed.
  ``front_end_only``: Triton's front end alone (``front_end``), for what a
  kernel's code and a config's constexprs break, in a twentieth of the time.
* ``capture_launches``: runs a host function (e.g. a student's
  ``flash_attention``) with Triton's launch paths replaced by a recorder, so
  nothing launches and no GPU is needed; autotuned kernels are expanded into
  every configuration the autotuner would try.

Imports nothing of the grader: it runs in a worker (``probes.ex07_flash_attention``) as well
as in tests and benchmarks.  Needs Triton, and its kernels must be real
``JITFunction`` s: import the kernel's module without ``TRITON_INTERPRET=1``.
"""
from __future__ import annotations

import contextlib
import copy
import io
import os
import re
import subprocess
import sys
import tempfile
import traceback

# Per-block shared memory a kernel may use (opt-in maximum), in bytes.
SHARED_LIMIT = {80: 163 * 1024,     # A100: 164 KB per SM, 163 KB per block
                90: 227 * 1024}     # H100/H200: 228 KB per SM, 227 KB per block
ARCH_NAME = {80: "sm_80", 90: "sm_90a"}
_PTXAS_USAGE = re.compile(r"Used (\d+) registers")
_PTXAS_SPILL = re.compile(r"(\d+) bytes spill stores, (\d+) bytes spill loads")


# Triton's own settings a module may change at import (an environment variable
# or a knob), which make a compile accept what a default one refuses: Triton's
# error for a global read suggests one.  A compile made under any of them is
# this submission's only: never shared with another's (``compile_cache``).
OWN_SETTINGS_KEPT = {"TRITON_CACHE_DIR", "TRITON_CACHE_MANAGER", "TRITON_HOME",
                     "TRITON_INTERPRET",
                     "TRITON_DUMP_PTXAS_LOG"}   # set by compile_launch itself: a log only


def changed_settings(capability: int) -> list[str]:
    """The Triton settings this process changed from their defaults: its
    ``TRITON_*`` environment (the grader sets only the cache's), a knob that
    allows non-constexpr globals, a ``ptxas`` that is not Triton's own."""
    import triton
    out = sorted(k for k in os.environ if k.startswith("TRITON_") and k not in OWN_SETTINGS_KEPT)
    try:
        from triton import knobs
        if getattr(knobs.compilation, "allow_non_constexpr_globals", False):
            out.append("knobs.compilation.allow_non_constexpr_globals")
    except ImportError:
        pass
    try:
        from triton.backends.nvidia.compiler import get_ptxas
        bundled = os.path.dirname(os.path.dirname(os.path.abspath(triton.__file__)))
        if not os.path.abspath(get_ptxas(capability).path).startswith(bundled + os.sep):
            out.append("ptxas")
    except Exception:  # noqa: BLE001 - a Triton without it: nothing to compare
        pass
    return out


def _ptxas_usage(ptx: str, capability: int) -> dict:
    """Registers and spill bytes as ``ptxas -v`` reports them (Triton drops its log)."""
    from triton.backends.nvidia.compiler import get_ptxas
    ptxas = get_ptxas(capability).path
    with tempfile.TemporaryDirectory(prefix="ptxas-") as tmp:
        src = os.path.join(tmp, "k.ptx")
        with open(src, "w") as f:
            f.write(ptx)
        done = subprocess.run([ptxas, "-v", f"--gpu-name={ARCH_NAME[capability]}", src,
                               "-o", os.path.join(tmp, "k.cubin")],
                              capture_output=True, text=True, timeout=300)
    return _parse_usage(done.stdout + done.stderr)


def _parse_usage(log: str) -> dict:
    regs = _PTXAS_USAGE.search(log)
    spill = _PTXAS_SPILL.search(log)
    return {"registers": int(regs.group(1)) if regs else -1,
            "spill_bytes": (int(spill.group(1)) + int(spill.group(2))) if spill else -1}


def _where(exc: BaseException, fn) -> tuple:
    """``(file, line)`` of a compile error in the kernel's own file, if known."""
    code = getattr(getattr(fn, "fn", None), "__code__", None)
    path = code.co_filename if code else ""
    src, node = getattr(exc, "src", None), getattr(exc, "node", None)
    lineno = getattr(node, "lineno", None)
    if lineno is None or src is None:
        return os.path.basename(path), None
    # The error names a line of the function Triton parsed (the kernel or a
    # helper it calls): find that line's text in the file, else count from
    # the kernel's `def`.
    wanted = src.split("\n")[lineno - 1].strip() if lineno <= len(src.split("\n")) else ""
    try:
        with open(path) as f:
            lines = [ln.strip() for ln in f.read().splitlines()]
    except OSError:
        lines = []
    hits = [i + 1 for i, ln in enumerate(lines) if wanted and ln == wanted]
    if len(hits) == 1:
        return os.path.basename(path), hits[0]
    start = getattr(fn, "def_file_line_number", None)
    return os.path.basename(path), (start + lineno - 1) if start else None


def _complaint(exc: BaseException) -> str:
    """The compiler's own words, without Triton's source excerpt."""
    text = str(exc).strip()
    cause = exc.__cause__ or exc.__context__
    lines = [ln for ln in text.splitlines() if ln.strip()]
    # CompilationError: "at L:C:\n<source lines>\n^\n<message>": keep the message.
    if lines and lines[0].startswith("at ") and "^" in text:
        after = text.rsplit("^", 1)[1].strip()
        # No message (a failed tl.static_assert): the offending line says it.
        text = after or f"{type(exc).__name__} at `{lines[-2].strip()}`" if len(lines) > 1 \
            else after or text
    if not text and cause is not None:
        text = f"{type(cause).__name__}: {cause}"
    return " ".join(text.split())[:600]


class ProbeFailed(Exception):
    """This probe's own code failed (the installed Triton lacks an API it
    uses), not the student's kernel: the grading side makes the test a
    regrade, never a failure (``grader.fault``)."""


def _own_failure(exc: BaseException) -> bool:
    """Did a line of this file raise ``exc`` (an attribute or import of
    Triton's that is not there, a call of Triton's whose signature changed),
    rather than Triton on the student's kernel or launch arguments?"""
    tb = exc.__traceback__
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    return isinstance(exc, (AttributeError, ImportError, NameError, TypeError)) \
        and tb is not None \
        and os.path.abspath(tb.tb_frame.f_code.co_filename) == os.path.abspath(__file__)


def _probe_failed(exc: BaseException) -> ProbeFailed:
    import triton
    return ProbeFailed(f"the GPU compile check does not work with Triton "
                       f"{getattr(triton, '__version__', '?')}: {type(exc).__name__}: {exc}")


def compile_launch(fn, args, kwargs, capability: int, *, front_end_only: bool = False) -> dict:
    """Compile ``fn`` (a ``JITFunction``) for ``sm_<capability>`` with one launch's arguments.

    ``kwargs`` holds the constexprs and the launch options (``num_warps``,
    ``num_stages``) as an autotuner config would pass them.  Returns a dict
    with ``ok``, and either ``registers``, ``spill_bytes``, ``shared_bytes``,
    ``fits`` (shared memory within the architecture's limit), ``wgmma``,
    ``tma``, or ``error`` (the compiler's complaint), ``file`` and ``line``.
    ``front_end_only``: only Triton's front end (the kernel's Python to
    Triton IR, ``front_end``): ``ok`` and ``front_end`` on success.
    Raises ``ProbeFailed`` where this Triton lacks what it uses.
    """
    import triton
    try:
        from triton import knobs
        from triton.backends.compiler import GPUTarget
        from triton.compiler import ASTSource, make_backend
        from triton.runtime.jit import create_function_from_signature
    except ImportError as exc:
        raise _probe_failed(exc) from None

    settings = changed_settings(capability)    # as the module left them
    target = GPUTarget("cuda", capability, 32)
    backend = make_backend(target)
    try:
        binder = create_function_from_signature(fn.signature, fn.params, backend)
        bound, spec, opts = binder(*args, **kwargs)
        options, signature, constexprs, attrs = fn._pack_args(backend, kwargs, bound, spec,
                                                             opts)
        source = ASTSource(fn, signature, constexprs, attrs)
        if front_end_only:
            front_end(source, target, backend, options.__dict__)
            return {"ok": True, "front_end": True, "num_warps": options.num_warps,
                    "num_stages": options.num_stages}
        # Triton runs `ptxas -v` and drops its log unless asked to print it:
        # catch the print (a cache hit prints nothing; ptxas is then rerun).
        log = io.StringIO()
        saved_knob = knobs.nvidia.dump_ptxas_log
        knobs.nvidia.dump_ptxas_log = True
        try:
            with contextlib.redirect_stdout(log):
                kernel = triton.compile(source, target=target, options=options.__dict__)
        finally:
            knobs.nvidia.dump_ptxas_log = saved_knob
    except ProbeFailed:
        raise
    except Exception as exc:  # noqa: BLE001 - any compiler failure is the answer
        if _own_failure(exc):      # e.g. fn._pack_args, which Triton 3.4 lacks
            raise _probe_failed(exc) from None
        while getattr(exc.__cause__, "src", None) is not None:
            exc = exc.__cause__          # the innermost: a helper's line, not its call
        file, line = _where(exc, fn)
        return {"ok": False, "error": f"{type(exc).__name__}: {_complaint(exc)}",
                "file": file, "line": line,
                "trace": "".join(traceback.format_exception_only(type(exc), exc))[-800:]}
    ptx = kernel.asm["ptx"]
    usage = _parse_usage(log.getvalue())
    if usage["registers"] < 0:
        usage = _ptxas_usage(ptx, capability)
    shared = int(kernel.metadata.shared)
    return {"ok": True, "registers": usage["registers"], "spill_bytes": usage["spill_bytes"],
            "shared_bytes": shared, "fits": shared <= SHARED_LIMIT[capability],
            "wgmma": "wgmma.mma_async" in ptx, "tma": "cp.async.bulk.tensor" in ptx,
            "num_warps": options.num_warps, "num_stages": options.num_stages,
            "settings": settings}


def specialization(fn, args, kwargs, capability: int) -> tuple:
    """How a compile of ``fn`` for ``sm_<capability>`` sees one launch's
    arguments, as Triton's binder gives it: per argument its type and what
    the compile specializes on (a pointer's 16-byte alignment, an int's
    divisibility by 16 or being 1, a constexpr's value), and the launch
    options.  Two launches alike here compile alike."""
    from triton.backends.compiler import GPUTarget
    from triton.compiler import make_backend
    from triton.runtime.jit import create_function_from_signature
    backend = make_backend(GPUTarget("cuda", capability, 32))
    binder = create_function_from_signature(fn.signature, fn.params, backend)
    _, spec, opts = binder(*args, **kwargs)
    return tuple(map(tuple, spec)), tuple(sorted(opts.items()))


def front_end(source, target, backend, options: dict):
    """Triton's front end alone, as ``triton.compile`` begins: the kernel's
    Python turned into Triton IR for ``target``.  What a kernel's code and a
    config's constexprs break shows here (a global read, a tile shape that is
    not a constexpr or a power of 2, ``tl.dot`` under 16 wide, a failed
    ``tl.static_assert``), in a twentieth of a full compile; what only the
    GPU's code shows (shared memory, registers) does not.  Raises what
    ``triton.compile`` would raise there."""
    try:
        from triton._C.libtriton import ir
    except ImportError as exc:
        raise _probe_failed(exc) from None
    options = backend.parse_options(dict(options, **source.parse_options()))
    context = ir.context()
    ir.load_dialects(context)
    backend.load_dialects(context)
    return source.make_ir(target, options, backend.get_codegen_implementation(options),
                          backend.get_module_map(), context)


# -- launches of a host function, recorded instead of run ----------------------------
class _Recorded(Exception):
    pass


def capture_launches(host, *args, **kwargs) -> list:
    """Call ``host(*args, **kwargs)`` with Triton launches recorded, not run.

    Returns ``[(jit_fn, launch_args, launch_kwargs, config_text)]``: one entry
    per kernel launch and, for an autotuned kernel, per configuration it
    would try (its ``prune_configs_by`` is not applied: every config must
    compile).  The host function's own return value is ignored (no kernel
    ran, so its output is garbage)."""
    try:
        from triton.runtime import autotuner, jit
        originals = [(jit.JITFunction, jit.JITFunction.__dict__["run"]),
                     (autotuner.Autotuner, autotuner.Autotuner.__dict__["run"])]
    except (ImportError, KeyError) as exc:    # launch paths this recorder does not know
        raise _probe_failed(exc) from None
    launches: list = []

    def jit_run(this, *a, grid=None, warmup=False, **k):
        launches.append((this, a, dict(k), ""))
        return None

    def tuner_run(this, *a, **k):
        for config in this.configs:
            full = {**k, **config.all_kwargs()}
            args = a
            if config.pre_hook:          # e.g. a descriptor's block shape per config
                config.pre_hook({**dict(zip(this.arg_names, a)), **full})
                # Each config keeps its own copy of what the hook set.
                args = tuple(copy.copy(x) if hasattr(x, "block_shape") else x for x in a)
            before = len(launches)
            this.fn.run(*args, **full)
            for i in range(before, len(launches)):
                fn_, a_, k_, _ = launches[i]
                launches[i] = (fn_, a_, k_, _config_text(config))
        return None

    jit.JITFunction.run = jit_run
    autotuner.Autotuner.run = tuner_run
    try:
        host(*args, **kwargs)
    finally:
        for cls, original in reversed(originals):
            cls.run = original
    return launches


def load_for_gpu(path: str, name: str):
    """Import the module at ``path`` as a GPU would see it (``TRITON_INTERPRET``
    unset while it is executed: its kernels are real ``JITFunction`` s and its
    configs those of a GPU).  Trusted code only: this executes the file."""
    import importlib.util
    saved = os.environ.pop("TRITON_INTERPRET", None)
    try:
        spec = importlib.util.spec_from_file_location(name, path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module     # as an import would (dataclasses look it up)
        spec.loader.exec_module(module)
    finally:
        if saved is not None:
            os.environ["TRITON_INTERPRET"] = saved
    return module


def _config_text(config) -> str:
    parts = [f"{k}={v}" for k, v in config.kwargs.items()]
    parts += [f"num_warps={config.num_warps}", f"num_stages={config.num_stages}"]
    return ", ".join(parts)


# -- inputs as a GPU path sees them -------------------------------------------------
def _cuda(device) -> bool:
    try:
        import torch
        return torch.device(device).type == "cuda"
    except (TypeError, RuntimeError, ValueError):
        return False


@contextlib.contextmanager
def looks_like_gpu(capability: int):
    """While it is active, tensors and PyTorch's ``torch.cuda`` say they are
    on a GPU of ``sm_<capability>`` (on a machine that may have none): so a
    host function that checks its inputs' device, asks for the device's
    capability or allocates its output ``on q.device`` takes its GPU path,
    whose launches ``capture_launches`` records.  ``as_gpu(t)`` gives such a
    tensor.  Nothing runs on a GPU: the data stay in host memory."""
    import torch
    from torch.overrides import TorchFunctionMode
    from torch.utils._pytree import tree_map

    def wrap(x):
        return x.as_subclass(OnGPU) if isinstance(x, torch.Tensor) and \
            type(x) is torch.Tensor else x

    def to_host(x):
        return "cpu" if isinstance(x, (str, torch.device)) and _cuda(x) else x

    class Mode(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            kwargs = {k: to_host(v) for k, v in (kwargs or {}).items()}
            if func in (torch.Tensor.cuda,):
                return wrap(args[0])
            if func is torch.Tensor.to:
                args = tuple(to_host(a) for a in args)
            return tree_map(wrap, func(*args, **kwargs))

    props = _Props(capability)
    patched = {"is_available": lambda: True, "device_count": lambda: 1,
               "current_device": lambda: 0, "is_initialized": lambda: True,
               "get_device_capability": lambda *a, **k: (capability // 10, capability % 10),
               "get_device_properties": lambda *a, **k: props,
               "get_device_name": lambda *a, **k: props.name,
               "synchronize": lambda *a, **k: None,
               # A launch may sit under any of PyTorch's device and stream guards
               # (``with torch.cuda.device(q.device):``, Triton's tutorials):
               # here each is a guard that guards nothing, as on one GPU.
               "device": _NoGuard, "device_of": _NoGuard, "set_device": lambda *a, **k: None,
               "Stream": _StandInStream, "stream": _NoGuard,
               "current_stream": lambda *a, **k: _StandInStream(),
               "default_stream": lambda *a, **k: _StandInStream()}
    saved = {name: getattr(torch.cuda, name) for name in patched}
    for name, fn in patched.items():
        setattr(torch.cuda, name, fn)
    try:
        with Mode():
            yield
    finally:
        for name, fn in saved.items():
            setattr(torch.cuda, name, fn)


class _NoGuard:
    """``torch.cuda.device(...)``, ``device_of(...)`` or ``stream(...)`` on the
    stand-in GPU: a context that changes nothing (there is one device, and
    nothing runs on it)."""

    def __init__(self, *args, **kwargs):
        pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


class _StandInStream(_NoGuard):
    """A CUDA stream of the stand-in GPU: nothing is queued on it, so every
    wait returns at once."""
    cuda_stream = 0
    device = property(lambda self: __import__("torch").device("cuda", 0))

    def synchronize(self):
        return None

    def wait_stream(self, stream):
        return None

    def wait_event(self, event):
        return None

    def record_event(self, event=None):
        return event

    def query(self):
        return True


def as_gpu(tensor):
    """``tensor`` (in host memory) as a GPU path sees it (``looks_like_gpu``)."""
    return tensor.as_subclass(OnGPU)


class _Props:
    """What ``torch.cuda.get_device_properties`` says of the target."""

    def __init__(self, capability: int):
        hopper = capability >= 90
        self.name = "NVIDIA H100" if hopper else "NVIDIA A100"
        self.major, self.minor = capability // 10, capability % 10
        self.multi_processor_count = 132 if hopper else 108
        self.total_memory = 80 << 30
        self.shared_memory_per_block_optin = SHARED_LIMIT[capability]
        self.warp_size = 32


def _make_on_gpu():
    try:
        import torch
    except ImportError:   # pragma: no cover - the kernel exercise needs PyTorch
        return None

    class OnGPU(torch.Tensor):
        """A tensor in host memory that says it is on the GPU."""

        @property
        def is_cuda(self):
            return True

        @property
        def device(self):
            return torch.device("cuda", 0)
    return OnGPU


OnGPU = _make_on_gpu()
