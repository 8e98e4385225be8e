"""Probes for ex07 (the fused attention kernel), run inside the worker.

They watch what the student's ``flash_attention`` does during one call and
return what they saw as data; the suites judge it in the grading process.

* ``run_checked``: one call on the device (CUDA if present, else the CPU
  under ``TRITON_INTERPRET=1``, where an autotuned kernel runs its first
  configuration: there is nothing to time), with an op-level trace (PyTorch's
  ``TorchDispatchMode``) that lists forbidden ops (matmul, bmm, softmax,
  ``scaled_dot_product_attention``...), other PyTorch arithmetic, every new
  buffer with its size, copies to the host or to NumPy, and the Triton
  kernels launched (by wrapping the launchers of ``triton.runtime``).  It
  returns the output, the inputs as they are after the call, and the trace;
  in the interpreter also the count of what the launches loaded, stored and
  multiplied (``ex07_work.py``: what the grade of authenticity rests on),
  and on request the launches made again on new inputs in the grader's
  own buffers (``ex07_replay.py``: the GPU's check of where the output came from).
* ``blockwise_traced``: ``blockwise_attention`` with the module's
  ``online_softmax_step`` wrapped to record each tile's width.
* ``speed_prepare`` / ``speed_run`` / ``speed_collect``: the two sides of
  the speed grade (see ``grader/reference/flash_speed.py``): run on the
  student's worker and, separately, on a trusted worker running the
  reference kernel (``runtime.kernels.flash``); the clock is in the grading process.
* ``compile_plan`` / ``compile_one``: the student's kernels compiled for sm_80 and
  sm_90a, one launch a call (the grading side: ``flash_judge.CompileEarly``).

Probes are trusted code, not secret ones; they import nothing from the
grader (``grader.sandbox.runtime.probes.ex07_flash_attention`` is also
imported by the benchmark script and ``attn-grade calibrate`` for
``time_call``).
"""
from __future__ import annotations

import contextlib
import os
import threading
import time
from collections import Counter

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from .offloaded_work import Elsewhere
from .ex07_work import KernelWork
from .ex07_replay import Replay

# Ops that do attention's work in PyTorch instead of the student's kernel.
FORBIDDEN = {
    "mm", "bmm", "addmm", "addbmm", "baddbmm", "matmul", "mv", "dot", "vdot", "einsum",
    "linear", "tensordot", "_scaled_mm", "addmv", "addr", "outer",
    "_softmax", "softmax", "_safe_softmax", "_log_softmax", "log_softmax",
    "scaled_dot_product_attention", "_fused_sdp_choice",
    "_scaled_dot_product_attention_math", "_scaled_dot_product_flash_attention",
    "_scaled_dot_product_flash_attention_for_cpu", "_scaled_dot_product_efficient_attention",
    "_scaled_dot_product_cudnn_attention", "_scaled_dot_product_fused_attention_overrideable",
    "_flash_attention_forward", "_efficient_attention_forward", "_cudnn_attention_forward",
}
# Bookkeeping ops a wrapper may use freely (allocation, views, copies, metadata).
BOOKKEEPING = {
    "empty", "empty_like", "empty_strided", "new_empty", "new_empty_strided", "zeros",
    "zeros_like", "new_zeros", "ones", "ones_like", "full", "full_like", "new_full", "fill_",
    "zero_", "copy_", "_to_copy", "to", "clone", "contiguous", "view", "_unsafe_view",
    "reshape", "as_strided", "expand", "permute", "transpose", "t", "select", "slice",
    "unsqueeze", "squeeze", "detach", "alias", "set_", "lift_fresh", "lift_fresh_copy",
    "resize_", "is_same_size", "_local_scalar_dense", "sym_size", "sym_stride", "size",
    "stride", "narrow", "split", "unbind", "_reshape_alias", "view_as_real", "record_stream",
    "is_pinned", "_has_compatible_shallow_copy_type", "arange", "scalar_tensor",
}
FLUSH_BYTES = 256 << 20  # larger than the L2 cache of current GPUs (H100/H200: 50-60 MB)


def device() -> torch.device:
    """CUDA when present; else the CPU, for Triton's interpreter."""
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def sync() -> None:
    """Wait for all work on the device, every stream included."""
    if torch.cuda.is_available():
        torch.cuda.synchronize()


def _storage_key(t: torch.Tensor):
    try:
        return t.untyped_storage().data_ptr(), t.device.type
    except (RuntimeError, NotImplementedError):
        return None


def _tensors(value):
    if isinstance(value, torch.Tensor):
        yield value
    elif isinstance(value, (list, tuple)):
        for v in value:
            yield from _tensors(v)
    elif isinstance(value, dict):
        for v in value.values():
            yield from _tensors(v)


class _Trace(TorchDispatchMode):
    """Records the PyTorch ops of one call (outside Triton's own launchers)."""

    def __init__(self, inputs, launcher):
        super().__init__()
        self.launcher = launcher
        self.known = {_storage_key(t) for t in inputs}
        self.forbidden: Counter = Counter()
        self.compute: Counter = Counter()
        self.buffers: list = []          # [op, elements, shape] of each new storage
        self.host_copies: list = []      # [op, elements] moved off the device

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        name = func.overloadpacket.__name__
        if name in FORBIDDEN:            # wherever it happens, Triton launchers included
            self.forbidden[name] += 1
        if self.launcher.depth:          # Triton's launcher and autotuner: their business
            return out
        if name not in BOOKKEEPING and name not in FORBIDDEN:
            self.compute[name] += 1
        devices = {t.device.type for t in _tensors(args)}
        for t in _tensors(out):
            key = _storage_key(t)
            if key is None or key in self.known:
                continue
            self.known.add(key)
            elements = t.untyped_storage().nbytes() // max(t.element_size(), 1)
            if elements:
                self.buffers.append([name, int(elements), list(t.shape)])
            if t.device.type == "cpu" and devices - {"cpu"} and t.numel() >= 1024:
                self.host_copies.append([name, int(t.numel())])
        return out


class _Launcher:
    """Wraps Triton's launch paths to record the kernels a call launches.

    ``replay=Replay(...)`` also keeps each launch (outside an autotuner's
    benchmarking) to be made again on the grader's buffers."""

    def __init__(self, root: str, replay=None):
        self.root = root
        self.depth = 0
        self.benching = 0
        self.launches: list = []
        self.replay = replay
        self._patched: list = []

    def _wrap(self, cls, attr, record: bool, bench: bool = False):
        original = cls.__dict__[attr]
        probe = self

        def run(this, *args, **kwargs):
            if record and not kwargs.get("warmup", False):
                fn = getattr(this, "fn", None)
                code = getattr(fn, "__code__", None)
                path = os.path.abspath(code.co_filename) if code else ""
                probe.launches.append({
                    "name": getattr(fn, "__name__", type(this).__name__),
                    "file": os.path.basename(path),
                    "in_submission": bool(path) and path.startswith(probe.root + os.sep),
                })
                if probe.replay is not None and not probe.benching:
                    probe.replay.keep(original, this, args, kwargs)
            probe.depth += 1
            probe.benching += bench
            try:
                return original(this, *args, **kwargs)
            finally:
                probe.depth -= 1
                probe.benching -= bench

        setattr(cls, attr, run)
        self._patched.append((cls, attr, original))

    def __enter__(self):
        try:
            from triton.runtime import autotuner, jit
        except ImportError:
            return self
        self._wrap(jit.JITFunction, "run", True)
        for name in ("Autotuner", "Heuristics"):
            cls = getattr(autotuner, name, None)
            if cls is not None and "run" in cls.__dict__:
                self._wrap(cls, "run", False)
        if "_bench" in autotuner.Autotuner.__dict__:     # its timing runs: not kept to replay
            self._wrap(autotuner.Autotuner, "_bench", False, bench=True)
        # Under the interpreter every launch ends in one ``GridExecutor`` call:
        # ``kernel[grid](...)`` calls one directly before Triton 3.6 (whose
        # ``InterpretedFunction.run`` was a per-instance closure, out of reach
        # of a class patch), and through ``run`` from 3.6 on.  Recorded there,
        # once, in every version the grader supports.
        try:
            from triton.runtime import interpreter
        except ImportError:
            return self
        if "__call__" in getattr(interpreter, "GridExecutor", object).__dict__:
            self._wrap(interpreter.GridExecutor, "__call__", True)
        if "run" in interpreter.InterpretedFunction.__dict__:
            self._wrap(interpreter.InterpretedFunction, "run", False)
        return self

    def __exit__(self, *exc):
        for cls, attr, original in reversed(self._patched):
            setattr(cls, attr, original)
        self._patched.clear()
        return False


class _NumpyWatch:
    """Records tensors turned into NumPy arrays (a host-side fallback)."""

    def __init__(self):
        self.conversions: list = []
        self._saved = {}

    def __enter__(self):
        watch = self
        for attr in ("numpy", "__array__", "tolist"):
            original = torch.Tensor.__dict__.get(attr) or getattr(torch.Tensor, attr)
            self._saved[attr] = (attr in torch.Tensor.__dict__, original)

            def wrapper(this, *a, _orig=original, _attr=attr, **k):
                watch.conversions.append([_attr, int(this.numel())])
                return _orig(this, *a, **k)

            setattr(torch.Tensor, attr, wrapper)
        return self

    def __exit__(self, *exc):
        for attr, (own, original) in self._saved.items():
            if own:
                setattr(torch.Tensor, attr, original)
            else:
                delattr(torch.Tensor, attr)
        return False


class _InterpretedAutotune:
    """Under the interpreter there is no GPU to time configurations on (Triton's
    autotuner would fail asking for a driver): every config ties and the
    autotuner keeps its first one."""

    def __enter__(self):
        self._saved = None
        if os.environ.get("TRITON_INTERPRET") != "1" or torch.cuda.is_available():
            return self
        try:
            from triton.runtime import autotuner
        except ImportError:
            return self
        cls = autotuner.Autotuner
        if "do_bench" in cls.__dict__:
            self._saved = (cls, cls.__dict__["do_bench"])

            def tie(fn, quantiles=None, **kwargs):
                return [0.0] * len(quantiles) if quantiles else 0.0

            cls.do_bench = property(lambda this: tie)
        return self

    def __exit__(self, *exc):
        if self._saved is not None:
            cls, original = self._saved
            cls.do_bench = original
        return False


def _type_name(value) -> str:
    t = type(value)
    return t.__name__ if t.__module__ == "builtins" else f"{t.__module__}.{t.__qualname__}"


def run_checked(module, q, k, v, causal=True, sm_scale=None, *, pass_sm_scale=True,
                pass_causal=True, on=None, entry="flash_attention", again=(), replay=None):
    """Call ``module.flash_attention`` once under watch; return what happened.

    ``q``, ``k``, ``v`` arrive as CPU tensors and are moved to ``on`` (default:
    CUDA if present, else the CPU).  ``pass_sm_scale=False`` / ``pass_causal=False``
    leave those arguments out so that the defaults are used.  ``entry`` names
    the module's function to call instead (``query_block_attention``: the
    given kernel around the student's ``tile_update`` and ``tile_finish``;
    the grader's copy of it, ``ex07_given``, where the module lacks it, and
    then ``"given"`` is True).
    ``again``: more ``(q, k, v)`` values, each copied *in place* into the same
    input buffers before one more call under the same watch (an output kept
    by buffer address is stale there); their records are ``"again"``.
    ``replay``: new ``(q, k, v)`` values; the first call's launches are made
    again on the grader's own buffers holding them (``ex07_replay.Replay``), and
    the output they leave is ``"replay"``.
    """
    dev = torch.device(on) if on else device()
    q, k, v = (x.to(dev) for x in (q, k, v))
    kwargs = {}
    if pass_causal:
        kwargs["causal"] = causal
    if pass_sm_scale:
        kwargs["sm_scale"] = sm_scale
    fn, given = _entry(module, entry)
    replayer = Replay(q, k, v) if replay is not None else None
    result = _watched(fn, q, k, v, kwargs, dev, replayer)
    result["given"] = given
    if replayer is not None:
        with _InterpretedAutotune():
            result["replay"] = replayer.run(*(x.to(dev) for x in replay), result.get("_out"))
    result.pop("_out", None)
    if again:
        result["again"] = []
    for values in again:
        for buffer, value in zip((q, k, v), values):
            buffer.copy_(value.to(dev))
        result["again"].append(_watched(fn, q, k, v, kwargs, dev))
    return result


# What Triton's interpreter says of a style its installed version no longer
# runs, and what the student is told then.  Triton 3.9 removed block pointers.
STYLES_REMOVED = {
    "Block pointers have been removed": (
        "block pointers (tl.make_block_ptr, tl.advance)",
        "older Triton releases run them; to be graded on any supported Triton, load "
        "your tiles with tl.make_tensor_descriptor or with pointer arithmetic and masks"),
}


def _cannot_run_here(exc: BaseException) -> None:
    """Raise ``ProbeFailed`` (a regrade: the grader cannot judge, the student
    did nothing wrong) where the installed Triton itself refused a kernel style
    that other supported Triton versions run; return otherwise.  Only Triton's
    own refusal counts: the innermost frame that raised is Triton's."""
    import triton

    from .gpu_compile import ProbeFailed
    cause = exc
    while cause is not None:
        text = str(cause)
        for marker, (style, advice) in STYLES_REMOVED.items():
            if marker in text and _raised_by_triton(cause):
                raise ProbeFailed(
                    f"your kernel uses {style}, which Triton {triton.__version__} (the "
                    f"version this grading ran) no longer supports: its interpreter cannot "
                    f"run your kernel, so this test could not be judged here and needs a "
                    f"regrade. {advice[0].upper()}{advice[1:]}.") from None
        cause = cause.__cause__ or cause.__context__


def _raised_by_triton(exc: BaseException) -> bool:
    tb = exc.__traceback__
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    path = tb.tb_frame.f_code.co_filename if tb is not None else ""
    return f"{os.sep}triton{os.sep}" in path


def _entry(module, entry: str):
    """The function to call, and whether it is the grader's copy of the given
    kernel (``ex07_given``: the module has no ``query_block_attention``)."""
    fn = getattr(module, entry, None)
    if fn is None and entry == "query_block_attention":
        from . import ex07_given
        return ex07_given.bound(module), True
    return getattr(module, entry), False


def _watched(fn, q, k, v, kwargs, dev, replay=None) -> dict:
    """One call of ``fn(q, k, v, **kwargs)`` under every watch and count."""
    root = os.path.abspath(os.getcwd())
    interpreted = dev.type == "cpu"
    work = KernelWork({"q": q, "k": k, "v": v}) if interpreted else None
    sync()
    counting = work or contextlib.nullcontext()
    with _Launcher(root, replay) as launcher, _NumpyWatch() as numpy_watch, \
            _InterpretedAutotune(), counting:
        trace = _Trace((q, k, v), launcher)
        start = time.perf_counter()
        with Elsewhere(cpu=interpreted) as elsewhere, trace:
            try:
                out = fn(q, k, v, **kwargs)
            except Exception as exc:
                _cannot_run_here(exc)
                raise
        sync()
        seconds = time.perf_counter() - start
    result = {
        "out_type": _type_name(out),
        "launches": launcher.launches,
        "elsewhere": elsewhere.result(),
        "forbidden": dict(trace.forbidden),
        "compute_ops": dict(trace.compute),
        "buffers": sorted(trace.buffers, key=lambda b: -b[1])[:8],
        "host_copies": trace.host_copies[:8],
        "numpy_conversions": numpy_watch.conversions[:8],
        "device": str(dev),
        "gpu": torch.cuda.get_device_name() if dev.type == "cuda" else "",
        "seconds": seconds,
        "inputs_after": {"q": q.cpu().clone(), "k": k.cpu().clone(), "v": v.cpu().clone()},
    }
    plain = out if type(out) is torch.Tensor else None
    if replay is not None:
        result["_out"] = plain           # the replay's, never sent back
    result["work"] = work.result(plain) if work is not None else \
        {"counted": False, "error": "", "device": str(dev)}
    if type(out) is torch.Tensor:
        result["out"] = out.detach().cpu().clone()
        result["out_device"] = str(out.device)
    elif isinstance(out, torch.Tensor):      # a subclass: look only at its plain data
        result["out"] = torch.Tensor(out.detach().cpu()) if out.dtype.is_floating_point \
            else None
        result["out_device"] = str(out.device)
    else:
        result["out"] = None
        result["out_device"] = ""
    return result


def run_kernel(module, q, k, v, **kwargs):
    """``module.flash_attention`` once on the device, output back on the CPU
    (to test the reference kernel in its own worker)."""
    dev = device()
    with _InterpretedAutotune():
        out = module.flash_attention(q.to(dev), k.to(dev), v.to(dev), **kwargs)
    sync()
    return out.cpu()


def blockwise_traced(module, q, k, v, block_size, causal=True):
    """``blockwise_attention`` with each ``online_softmax_step`` call's tile width."""
    original = getattr(module, "online_softmax_step", None)
    widths: list = []

    def step(m, l, acc, scores, v_tile, *args, **kwargs):
        widths.append(int(getattr(scores, "shape", (0,))[-1]))
        return original(m, l, acc, scores, v_tile, *args, **kwargs)

    if original is not None:
        module.online_softmax_step = step
    try:
        out = module.blockwise_attention(q, k, v, block_size, causal=causal)
    finally:
        if original is not None:
            module.online_softmax_step = original
    return {"out": out, "widths": widths}


# -- timing (GPU) ----------------------------------------------------------------
# The speed grade (grader/reference/flash_speed.py) keeps its clock in the
# grading process: it times the round trip of one ``speed_run`` request to
# the student's worker and to a trusted worker running the reference kernel,
# on the same inputs, alternating, and subtracts the same measured overhead
# (a request that only draws the inputs) from both.  These probes run on
# either side; nothing of the reference is ever loaded into a student's worker.

def time_call(fn, args, kwargs, flush) -> tuple:
    """Seconds of one ``fn(*args, **kwargs)``: L2 flushed, the device idle before and after.

    Host time between two full-device synchronizations, so work left on any
    stream is counted.  Returns ``(seconds, output)``.  Trusted callers only
    (``attn-grade calibrate``, the benchmarks): a student's process could
    replace this clock."""
    if flush is not None:
        flush.zero_()                    # overwrite L2 with unrelated data
    sync()
    start = time.perf_counter()
    out = fn(*args, **kwargs)
    sync()
    return time.perf_counter() - start, out


def fresh_inputs(shape_q, shape_kv, dtype, gen, dev):
    """Random q, k, v on the device (drawn in float32, then cast)."""
    def one(shape):
        return torch.randn(shape, generator=gen, device=dev, dtype=torch.float32).to(dtype)
    return one(shape_q), one(shape_kv), one(shape_kv)


_KEPT: dict = {}     # index -> output of the last speed_run (on the device)


def _case_inputs(case, seed, dev):
    dtype = getattr(torch, case["dtype"])
    shape_q = (case["batch"], case["heads"], case["s_q"], case["d_head"])
    shape_kv = (case["batch"], case["kv_heads"], case["s_k"], case["d_head"])
    gen = torch.Generator(device=dev)
    gen.manual_seed(int(seed))
    return lambda: fresh_inputs(shape_q, shape_kv, dtype, gen, dev)


def _variant(module, q) -> str:
    """Which kernel variant the (reference) module runs on ``q``, if it says."""
    pick = getattr(module, "variant_in_use", None)
    return pick(q) if pick is not None else ""


def speed_prepare(module, case, seed=0, warmup=2, on=None):
    """Warm-up calls (compilation, autotuning) outside any timing.

    Returns ``{"variant", "gpu", "device_id"}``: the reference's kernel
    variant (else ""), the device's name, and on a GPU its UUID (what the
    grading process's lock on the device is named by; "" on the CPU)."""
    dev = torch.device(on) if on else device()
    draw = _case_inputs(case, seed, dev)
    variant = ""
    with _InterpretedAutotune():
        for _ in range(warmup):
            q, k, v = draw()
            module.flash_attention(q, k, v, causal=bool(case["causal"]))
            variant = _variant(module, q)
    sync()
    gpu = torch.cuda.get_device_name() if dev.type == "cuda" else "cpu (interpreter)"
    return {"variant": variant, "gpu": gpu, "device_id": _device_id(dev)}


def _device_id(dev) -> str:
    """The GPU's UUID (the same for every process that uses it, whatever
    ``CUDA_VISIBLE_DEVICES`` numbers it), else its index; "" on the CPU."""
    if dev.type != "cuda":
        return ""
    index = dev.index if dev.index is not None else torch.cuda.current_device()
    uuid = getattr(torch.cuda.get_device_properties(index), "uuid", None)
    return str(uuid) if uuid else f"index-{index}"


def speed_run(module, case, n, seed, run_kernel=True, on=None):
    """``n`` calls on fresh inputs drawn from ``seed``, then a full synchronize.

    The grading process times this whole request.  ``run_kernel=False`` only
    draws the inputs (the overhead both sides share).  The outputs stay on
    the device for ``speed_collect``; what the calls launched is returned:
    the kernels (with whether each came from the module's own file) and any
    PyTorch op that does attention's work."""
    dev = torch.device(on) if on else device()
    draw = _case_inputs(case, seed, dev)
    _KEPT.clear()
    own = os.path.abspath(getattr(module, "__file__", "") or "")
    root = os.path.dirname(own)
    with _Launcher(root) as launcher, _InterpretedAutotune():
        trace = _Trace((), launcher)
        with Elsewhere(cpu=False) as elsewhere, trace:
            for i in range(int(n)):
                q, k, v = draw()
                if run_kernel:
                    _KEPT[i] = module.flash_attention(q, k, v, causal=bool(case["causal"]))
        sync()
    files = Counter(entry["file"] for entry in launcher.launches)
    return {"n": int(n), "own_file": os.path.basename(own),
            "launched_files": dict(files),
            "kernels": sorted({entry["name"] for entry in launcher.launches}),
            "forbidden": dict(trace.forbidden), "elsewhere": elsewhere.result()}


def speed_collect(module, picks, rows):
    """Rows ``rows`` of the outputs of calls ``picks`` of the last ``speed_run``,
    as float32 CPU tensors (or a note of what came back instead)."""
    out = []
    for i in picks:
        o = _KEPT.get(int(i))
        if type(o) is not torch.Tensor:
            out.append({"problem": f"returned {_type_name(o)}"})
            continue
        idx = torch.as_tensor([int(r) for r in rows], device=o.device)
        out.append({"rows": o.index_select(-2, idx).float().cpu(),
                    "shape": list(o.shape), "dtype": str(o.dtype).replace("torch.", "")})
    _KEPT.clear()
    return out


# -- compiling the student's kernel for real GPUs (no GPU needed) -------------------
# (capability, dtype, name): sm_80 in float16, sm_90a in bfloat16, so both
# dtypes are seen; d_head 128 is the hardest case for registers and memory.
COMPILE_TARGETS = ((80, "float16", "sm_80 (A100)"), (90, "bfloat16", "sm_90a (H100/H200)"))
MAX_COMPILES = 40          # per compile check (flash_judge): a long config list is cut, in order


def _launch_key(fn, args, kwargs, capability) -> str | None:
    """What one launch's compile depends on: the kernel's code without
    where it sits in its file (``source_key``), the launch's arguments as a
    compile specializes on them (``gpu_compile.specialization``: a tensor's
    dtype and alignment, an int's divisibility, a float's type, never its
    value), the constexprs and options, the target and Triton's version.
    A line added above the kernel, or an edit of the host code, keeps it.
    None where this Triton cannot tell (nothing is kept)."""
    import hashlib

    import triton

    from . import gpu_compile
    try:
        kernel = source_key(fn)
        spec = gpu_compile.specialization(fn, args, kwargs, capability)
    except Exception:  # noqa: BLE001 - a Triton without them: nothing is kept
        return None
    if kernel is None:
        return None
    text = repr((getattr(triton, "__version__", "?"), capability, kernel, spec,
                 sorted((k, repr(v)) for k, v in kwargs.items())))
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def source_key(fn) -> str | None:
    """Triton's own key of a kernel's code (its source from ``def`` on, the
    ``@triton.jit`` functions it calls and the constexpr globals it reads,
    each as Triton finds them) with every line number left out: Triton adds
    each function's first line to its key, so a line added above a kernel
    would make it another kernel.  A compile's answer that is kept (registers,
    shared memory: never a line, failures are not kept) does not depend on
    where the code sits.  None where this Triton keys its kernels otherwise."""
    with _SOURCE_KEY_LOCK:     # the class is patched while it runs: one thread at a time
        return _source_key(fn)


_SOURCE_KEY_LOCK = threading.Lock()


def _source_key(fn) -> str | None:
    owner = next((c for c in type(fn).__mro__ if "cache_key" in c.__dict__), None)
    original = owner.__dict__["cache_key"] if owner is not None else None
    if not isinstance(original, property) or not hasattr(fn, "starting_line_number"):
        return None
    keys: dict = {}

    def without_lines(this):
        if id(this) in keys:           # known, or being made (a recursive helper)
            return keys[id(this)]
        keys[id(this)] = f"recursion:{getattr(this, '__name__', '?')}"
        saved = (this.hash, this.starting_line_number, this.used_global_vals)
        this.hash, this.starting_line_number = None, 0
        try:
            keys[id(this)] = original.fget(this)
        finally:                       # Triton's own key and checks, as they were
            this.hash, this.starting_line_number, this.used_global_vals = saved
        return keys[id(this)]

    owner.cache_key = property(without_lines)
    try:
        return without_lines(fn)
    finally:
        owner.cache_key = original


# Launch options of a config, not tile sizes (``_tiles``).
LAUNCH_OPTIONS = {"num_warps", "num_stages", "num_ctas", "maxnreg"}
_CAPTURED: dict = {}   # (capability, d_head, causal) -> (module, its launches): compile_one


def _tiles(kwargs) -> int:
    """The product of a launch's integer constexprs (tile sizes, d_head):
    with ``num_stages``, what a launch's shared memory grows with, known
    before it is compiled (``flash_judge`` compiles first what is likeliest
    to fail)."""
    size = 1
    for name, value in kwargs.items():
        if name not in LAUNCH_OPTIONS and isinstance(value, int) and \
                not isinstance(value, bool) and value > 0:
            size *= value
    return size


# Besides the compiled case (S_q = S_k = 1024 in the target's dtype): the
# other paths a host function may take on a GPU, where the contract lets it
# be called: one decode query (a split-K kernel's reduce, say), and float32
# (tiles its host code picks for 4-byte elements).  Only the launches these
# add (a kernel, config or constexpr the compiled case did not launch) are
# compiled: the reference adds none.
OTHER_PATHS = ((1, None, "one decode query, S_q = 1"), (1024, "float32", "float32 inputs"))


def _launches(module, capability, dtype_name, d_head, causal) -> list:
    """The distinct launches ``module.flash_attention`` makes on a GPU of
    ``capability``: ``[(fn, args, kwargs, config, path)]``, in the order made,
    those of ``OTHER_PATHS`` after them (``path``: their words, else "").
    The inputs say they are on that GPU (``gpu_compile.looks_like_gpu``): the
    host code takes the path it would take there, device checks included.
    Raises what the student's host code raised in the compiled case (another
    path's error is its tests' to find)."""
    from . import gpu_compile
    seen, out = set(), []
    for n, (s_q, other_dtype, path) in enumerate(((1024, None, ""),) + OTHER_PATHS):
        try:
            launches = _capture(module, capability, other_dtype or dtype_name, d_head, causal,
                                s_q)
        except gpu_compile.ProbeFailed:
            raise
        except Exception:  # noqa: BLE001 - the student's host code failed
            if n == 0:
                raise
            continue
        for fn, args, kwargs, config in launches:
            key = (getattr(fn, "__name__", "?"), config, tuple(sorted(
                (k_, repr(v_)) for k_, v_ in kwargs.items())))
            if key not in seen:
                seen.add(key)
                out.append((fn, args, kwargs, config, path))
    return out


def _capture(module, capability, dtype_name, d_head, causal, s_q) -> list:
    from . import gpu_compile
    dtype = getattr(torch, dtype_name)
    # (B, h, S_q, d) and (B, h_kv, S_k, d): GQA; in host memory, but on
    # the GPU as the student's code sees them (its device checks pass)
    q = gpu_compile.as_gpu(torch.zeros(1, 4, s_q, d_head, dtype=dtype))
    k = gpu_compile.as_gpu(torch.zeros(1, 2, 1024, d_head, dtype=dtype))
    v = gpu_compile.as_gpu(torch.zeros(1, 2, 1024, d_head, dtype=dtype))
    with gpu_compile.looks_like_gpu(capability):
        return gpu_compile.capture_launches(module.flash_attention, q, k, v, causal=causal)


def compile_plan(module, d_head=128, causal=True):
    """What ``compile_one`` can compile: per target of ``COMPILE_TARGETS``,
    the kernels ``module.flash_attention`` launches there, compiling nothing.

    Must run in a worker whose module was imported *without*
    ``TRITON_INTERPRET`` (its kernels are then ``JITFunction`` s, its configs
    those of a GPU).  Nothing is launched: Triton's launch paths are
    replaced by a recorder (``gpu_compile.capture_launches``), and each
    autotuned kernel is expanded into every config it would try.  Returns
    ``{"targets": [...]}``: per target ``capability``, ``target``, ``dtype``
    and ``rows``, one per distinct launch in the order made, each with
    ``kernel``, ``config``, ``in_submission`` (a kernel of another file is
    ``ok`` and ``skipped``: not the student's to fix), ``key``
    (``_launch_key``), ``tiles`` (``_tiles``) and ``num_stages``; or
    ``error`` and ``error_type`` where the host code failed before launching."""
    from . import gpu_compile
    root = os.path.abspath(os.getcwd())
    targets = []
    for capability, dtype_name, label in COMPILE_TARGETS:
        entry = {"capability": capability, "target": label, "dtype": dtype_name, "rows": []}
        targets.append(entry)
        try:
            launches = _launches(module, capability, dtype_name, d_head, causal)
        except gpu_compile.ProbeFailed:
            raise                 # the grader's, not the student's: a regrade
        except Exception as exc:  # noqa: BLE001 - the student's host code failed
            entry["error"] = f"{type(exc).__name__}: {str(exc)[:400]}"
            entry["error_type"] = type(exc).__name__
            continue
        _CAPTURED[(capability, d_head, bool(causal))] = (module, launches)
        for fn, args, kwargs, config, launched_for in launches:
            code = getattr(getattr(fn, "fn", None), "__code__", None)
            path = os.path.abspath(code.co_filename) if code else ""
            row = {"kernel": getattr(fn, "__name__", "?"), "config": config,
                   "launched_for": launched_for,
                   "in_submission": bool(path) and path.startswith(root + os.sep)}
            if not row["in_submission"]:
                row.update(ok=True, skipped=True)
            else:
                row.update(key=_launch_key(fn, args, kwargs, capability),
                           tiles=_tiles(kwargs), num_stages=kwargs.get("num_stages"))
            entry["rows"].append(row)
    return {"targets": targets}


def compile_one(module, target, index, key=None, d_head=128, causal=True,
                front_end_only=False):
    """Compile launch ``index`` of target ``target`` of ``compile_plan``'s
    answer (the same launches, made again in this worker unless it made the
    plan): ``gpu_compile.compile_launch``'s row, without its trace
    (``front_end_only``: Triton's front end alone).  ``key``: the plan's key
    of that launch; a launch that is not the same when the host code runs
    again is the answer's error, never another launch compiled in its place."""
    from . import gpu_compile
    capability, dtype_name, _ = COMPILE_TARGETS[int(target)]
    made, launches = _CAPTURED.get((capability, d_head, bool(causal)), (None, None))
    again = "when it was called again with the same inputs"
    if made is not module:     # not made in this worker yet (or of another module: tests)
        try:
            launches = _launches(module, capability, dtype_name, d_head, causal)
        except gpu_compile.ProbeFailed:
            raise
        except Exception as exc:  # noqa: BLE001 - the student's host code failed
            return {"ok": False, "error": f"flash_attention raised {type(exc).__name__}: "
                    f"{str(exc)[:300]} {again}", "file": None, "line": None}
        _CAPTURED[(capability, d_head, bool(causal))] = (module, launches)
    index = int(index)
    if index >= len(launches) or (key is not None and _launch_key(
            *launches[index][:3], capability) != key):
        return {"ok": False, "error": f"flash_attention launched other kernels or configs "
                f"{again}: launch the same kernels every time (no random or changing "
                "configs)", "file": None, "line": None}
    fn, args, kwargs = launches[index][:3]
    row = gpu_compile.compile_launch(fn, args, kwargs, capability,
                                     front_end_only=bool(front_end_only))
    row.pop("trace", None)
    return row
