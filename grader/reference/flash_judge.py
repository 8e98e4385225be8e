"""Judging a traced call of ex07's ``flash_attention`` (grading process only).

The probe in the worker (``probes/ex07_flash_attention.py``) records what happened during
the call; these checks turn that record into feedback.  Judging code, not an
answer: it ships with the student edition.
"""
from __future__ import annotations

import json
import math
import os
import threading
import time
from pathlib import Path

import torch

from grader.sandbox.reach import code_key, code_tokens

# Named tolerances beyond grader.feedback.TOLERANCES: on a GPU, float32 tl.dot
# runs in TF32 (10-bit mantissa) by default; float16/bfloat16 kernels round
# the probabilities to the input's precision before the second matmul.
GPU_TOLERANCES = {
    "tf32": (5e-3, 5e-3),
    "float16": (5e-3, 5e-3),
    "bfloat16": (4e-2, 4e-2),
}
# The grader's copy of the kernel ex07 gives (probes/ex07_given.py).
GIVEN_FILE = "ex07_given.py"
# More PyTorch arithmetic than a wrapper needs (a scale, a cast): the
# attention itself was computed with PyTorch ops.
MAX_COMPUTE_OPS = 16


def tolerance(dtype: str, device: str) -> tuple:
    """``(atol, rtol)`` for an output of ``dtype`` computed on ``device``."""
    from grader.feedback import TOLERANCES
    if device.startswith("cuda"):
        return GPU_TOLERANCES["tf32" if dtype == "float32" else dtype]
    return TOLERANCES[dtype]


def _dtype_name(x) -> str:
    return str(x.dtype).replace("torch.", "")


def check_output(result: dict, q, expected, *, what: str, mistakes=None, hint=None) -> None:
    """The output of a traced call: a plain tensor like ``q``, close to ``expected``."""
    from grader.feedback import Feedback, check_close
    if result["out_type"] != "torch.Tensor":
        kind = result["out_type"]
        raise Feedback(f"{what} returned a {kind}, not a plain torch.Tensor: return the "
                       "tensor your kernel wrote (no subclasses, no arrays, no lazy values)")
    if result["out_device"] != result["device"]:
        raise Feedback(f"{what} returned a tensor on {result['out_device']}; the inputs were "
                       f"on {result['device']} (keep the output on the inputs' device)")
    out = result["out"]
    if out.dtype != q.dtype:
        raise Feedback(f"{what} returned {_dtype_name(out)} for {_dtype_name(q)} inputs "
                       "(keep the dtype of the inputs: allocate the output like q)")
    atol, rtol = tolerance(_dtype_name(q), result["device"])
    check_close(out, expected, what=what, atol=atol, rtol=rtol, mistakes=mistakes, hint=hint)


# CPU time other threads may spend during a call in the interpreter, where
# honest kernel work runs in the calling thread alone (BLAS pinned to one
# thread): well above clock noise, well below attention on the smallest case.
OTHER_CPU_S = 0.002


def elsewhere_problems(seen) -> list[str]:
    """What the probe's ``Elsewhere`` watch saw of work moved out of the
    traced thread (into a thread, a pool or a process), in words; [] when
    nothing was."""
    if seen is None:        # a record from before the watch (the tests' hand-made runs)
        return []
    if not isinstance(seen, dict):
        return ["sent back no record of its threads and processes"]
    said = []
    if seen.get("threads_started"):
        said.append(f"started {seen['threads_started']} thread(s)")
    if seen.get("python_threads"):
        said.append(f"had {seen['python_threads']} other Python thread(s) running")
    if seen.get("forks") or seen.get("children"):
        said.append("ran a child process")
    if (seen.get("other_cpu_s") or 0) > OTHER_CPU_S:
        said.append(f"spent {seen['other_cpu_s'] * 1e3:.1f} ms of CPU in other threads")
    return said


def check_authentic(result: dict, q, k, v, *, what: str, causal: bool = True) -> None:
    """The work of a traced call happened in the student's own Triton kernel.

    The watch's findings come first (they name the escape); the grade rests
    on ``check_work``, which counts what the launches did and fails every
    escape, the ones no watch sees included."""
    from grader.feedback import Feedback
    moved = elsewhere_problems(result.get("elsewhere"))
    if moved:
        raise Feedback(f"{what}: during the call your code {', '.join(moved)}. The grader "
                       "watches the thread that calls flash_attention, and the attention must "
                       "be computed by your kernel, launched from that thread: no threads, "
                       "thread pools, torch.jit.fork or child processes in the call.")
    ops = result["forbidden"]
    if ops:
        listed = ", ".join(f"{n} x{c}" for n, c in sorted(ops.items()))
        raise Feedback(f"{what}: PyTorch did attention's work during the call ({listed}). "
                       "The matmuls and the softmax belong inside your Triton kernel: no "
                       "torch.matmul, @, bmm, softmax or scaled_dot_product_attention.")
    # the grader's copy of the given kernel, run where the module lacks it, is theirs
    given = GIVEN_FILE if result.get("given") else None
    own = [x for x in result["launches"] if x["in_submission"] or x["file"] == given]
    if not own:
        others = ", ".join(sorted({f"{x['name']} ({x['file']})" for x in result["launches"]}))
        raise Feedback(f"{what}: no Triton kernel of your own was launched during the call"
                       + (f" (launched: {others})" if others else "") +
                       ". Write an @triton.jit kernel in your file and launch it with "
                       "kernel[grid](...).")
    compute = result["compute_ops"]
    if sum(compute.values()) > MAX_COMPUTE_OPS:
        listed = ", ".join(f"{n} x{c}" for n, c in sorted(compute.items(), key=lambda x: -x[1])[:6])
        raise Feedback(f"{what}: {sum(compute.values())} PyTorch arithmetic ops ran during the "
                       f"call ({listed}); the attention must be computed by your kernel, the "
                       "wrapper only allocates the output and launches it.")
    small = min(q.numel(), k.numel())
    moved = [c for c in result["host_copies"] + result["numpy_conversions"] if c[1] >= small]
    if moved:
        raise Feedback(f"{what}: tensors were copied to the host or to NumPy during the call "
                       f"({moved[0][0]} of {moved[0][1]} elements); compute on the device, in "
                       "your kernel.")
    s_q, s_k = q.shape[-2], k.shape[-2]
    if s_q * s_k > max(q.numel(), k.numel(), v.numel()):
        big = [b for b in result["buffers"] if b[1] >= s_q * s_k]
        if big:
            raise Feedback(f"{what}: a buffer of {big[0][1]} elements (shape {tuple(big[0][2])}, "
                           f"made by {big[0][0]}) was allocated during the call, at least "
                           f"S_q*S_k = {s_q}*{s_k} = {s_q * s_k}: flash attention never "
                           "materializes the scores; keep one tile of them in the kernel.")
    check_inputs_unchanged(result, q, k, v, what=what)
    check_work(result, q, k, v, what=what, causal=causal)


def visible_pairs(s_q: int, s_k: int, causal: bool) -> int:
    """(query, key) pairs one head's softmax covers: all of them, or under the
    end-aligned causal mask those with key <= S_k - S_q + query."""
    if not causal:
        return s_q * s_k
    return sum(min(s_k, max(0, s_k - s_q + i + 1)) for i in range(s_q))


def attention_flops(q, k, causal: bool) -> int:
    """The two matmuls' FLOPs, 4 * B * h * d_head per visible (query, key) pair."""
    heads = math.prod(q.shape[:-2])
    return 4 * heads * q.shape[-1] * visible_pairs(q.shape[-2], k.shape[-2], causal)


def _rows(mask) -> str:
    """Where a bool tensor of shape (..., S, d) is False, said by its first row."""
    bad = (~mask).reshape(-1, mask.shape[-1]).any(-1).nonzero().flatten()
    s = mask.shape[-2] if mask.dim() >= 2 else 1
    first = int(bad[0]) if len(bad) else 0
    lead = f"head {first // s}, " if mask.dim() > 2 else ""
    return f"{len(bad)} of {mask.numel() // mask.shape[-1]} rows, the first {lead}row {first % s}"


def _copied(result: dict, q, x) -> str:
    """What the call's buffers say of an input the kernels did not read: a
    copy of it (per query head, for K or V), read instead; "" if none."""
    repeated = math.prod(q.shape[:-2]) * x.shape[-2] * x.shape[-1]
    big = [b for b in result.get("buffers", []) if b[1] >= x.numel()
           and not b[0].startswith(("empty", "new_", "zeros", "ones", "full"))]
    if not big:
        return ""
    kind = ": K or V copied for every query head" if big[0][1] >= repeated and x is not q \
        else ""
    return f"; a copy of {big[0][1]} elements was made during the call (by {big[0][0]}{kind})"


def check_work(result: dict, q, k, v, *, what: str, causal: bool) -> None:
    """The output is the work of the call's own launches (``probes/ex07_work.py``):
    every element written by a launch of this call and left as it wrote it,
    Q (every row that sees a key), K and V loaded, and at least attention's
    FLOPs done in ``tl.dot``.  Where the count could not be made in the
    interpreter, a grader fault (a regrade), never a pass."""
    from grader.feedback import Feedback
    work = result.get("work")
    if not isinstance(work, dict):
        raise RuntimeError(f"{what}: the worker sent back no count of the kernel's work")
    if not work.get("counted"):
        if str(result.get("device", "")).startswith("cuda") and not work.get("error"):
            return             # a GPU: not countable here; test_gpu_* replays the launches
        raise RuntimeError(f"{what}: the kernel's work could not be counted: "
                           f"{work.get('error') or 'no count'}")
    if not work.get("launches"):
        raise Feedback(f"{what}: no Triton kernel ran during this call, so no output of "
                       "this call came from one. Launch your kernel on every call and "
                       "return the tensor it stored into: cache nothing between calls.")
    written, kept = work.get("written"), work.get("kept")
    if written is None or kept is None:
        if result.get("out_type") != "torch.Tensor" or \
                result.get("out_device") != result.get("device"):
            raise Feedback(f"{what} returned a {result.get('out_type')} on "
                           f"{result.get('out_device') or 'no device'}: return the plain "
                           f"torch.Tensor your kernel stored into, on {result.get('device')}")
        raise RuntimeError(f"{what}: the count of the output's elements is missing")
    if not bool(written.all()):
        raise Feedback(f"{what}: {_rows(written)}, of the returned output were not written "
                       "by a kernel launched during this call (computed on the host, kept "
                       "from an earlier call, or never computed). Every element must be "
                       "stored by your kernel, into the tensor you return.")
    if not bool(kept.all()):
        raise Feedback(f"{what}: {_rows(kept)}, of the returned output were changed after "
                       "your kernel stored them (host code wrote over the kernel's "
                       "output). Return the tensor your kernel stored into, as it left it.")
    s_q, s_k = q.shape[-2], k.shape[-2]
    sees = torch.tensor([not causal or s_k - s_q + i >= 0 for i in range(s_q)]) \
        if s_k else torch.zeros(s_q, dtype=torch.bool)
    for name, tensor, rows in (("q", q, sees), ("k", k, None), ("v", v, None)):
        loaded = work["loaded"][name]
        need = loaded if rows is None else loaded[..., rows, :]
        if not bool(sees.any()) or bool(need.all()):
            continue
        raise Feedback(f"{what}: your kernels did not load all of {name} during this call "
                       f"({_rows(need)}, were never read){_copied(result, q, tensor)}. "
                       "Attention reads every row of q that sees a key and all of k and v: "
                       "pass them to your kernel as they are, no copies made on the host.")
    need, done = attention_flops(q, k, causal), work.get("dot_flops", 0)
    if done < need:
        raise Feedback(f"{what}: your kernels did {done:,} FLOPs in tl.dot during this "
                       f"call, less than attention's {need:,} (4 * B * h * d_head per "
                       f"visible (query, key) pair{', causal' if causal else ''}): compute "
                       "Q K^T and P V with tl.dot in your kernel, for every query row.")


def check_replay(result: dict, q, expected, *, what: str) -> None:
    """The call's launches, made again by the grader on new ``q``, ``k``, ``v``
    in buffers of its own (``probes/ex07_replay.py``), computed ``expected``: the
    output came from the kernel's work on the inputs, on a GPU as in the
    interpreter.  ``q``: the new q (its dtype); ``expected``: attention of
    the new values."""
    from grader.feedback import Feedback, check_close
    replay = result.get("replay")
    if not isinstance(replay, dict):
        raise RuntimeError(f"{what}: the worker sent back no replay of the launches")
    said = (f"{what}: the grader made this call's kernel launches again, on new values of "
            "q, k and v in buffers of its own, and ")
    if "problem" in replay:
        raise Feedback(said + f"{replay['problem']}. The output must be what your kernel "
                       "stores, computed from q, k and v.")
    atol, rtol = tolerance(_dtype_name(q), result["device"])
    try:
        check_close(replay["out"].to(q.dtype), expected, what="the output they left",
                    atol=atol, rtol=rtol)
    except Feedback as exc:
        raise Feedback(said + f"they did not compute attention of the new values: {exc}\n"
                       "So the output you returned was not your kernel's work on q, k and v "
                       "(numbers made on the host or before the kernel ran, or a copy of "
                       "the inputs made on the host, do not change with them).") from None


def check_inputs_unchanged(result: dict, q, k, v, *, what: str) -> None:
    from grader.feedback import Feedback
    after = result["inputs_after"]
    for name, before in (("q", q), ("k", k), ("v", v)):
        now = after[name]
        if now.shape != before.shape or not torch.equal(now, before.to(now.dtype)):
            raise Feedback(f"{what} changed its input {name} (it must be left as it was: "
                           "compute into a new output tensor, scale the scores, not q, "
                           "in the kernel).")


def check_no_kv_copy(result: dict, q, k, *, what: str) -> None:
    """GQA: no buffer as large as K or V repeated for every query head."""
    from grader.feedback import Feedback
    batch, n_heads, _, d_head = q.shape
    repeated = batch * n_heads * k.shape[-2] * d_head
    if repeated <= max(q.numel(), k.numel()):
        raise ValueError("check_no_kv_copy needs S_k > S_q and h > h_kv to tell a copy apart")
    big = [b for b in result["buffers"] if b[1] >= repeated]
    if big:
        raise Feedback(f"{what}: a buffer of {big[0][1]} elements (shape {tuple(big[0][2])}, "
                       f"made by {big[0][0]}) was allocated during the call: K or V copied for "
                       f"every query head (B*h*S_k*d_head = {repeated}). Index the shared head "
                       "in the kernel instead: query head i reads K/V head i // (h // h_kv).")




# -- the student's kernel, compiled for real GPUs ---------------------------------
# Hints by the compiler's words: the usual reasons a kernel that runs in the
# interpreter does not compile for a GPU.
COMPILE_HINTS = (
    ("global variable", "a @triton.jit kernel may read only its arguments and globals made "
                        "with tl.constexpr(...): compute the constant on the host and pass it "
                        "in (e.g. sm_scale * 1.4426950408889634), or write "
                        "NAME = tl.constexpr(value)"),
    ("AssertionFailure", "a tl.static_assert in your kernel fails for this config: the "
                         "config list the GPU uses breaks your kernel's own rule"),
    ("K >= 16", "tl.dot needs tiles of at least 16 in every dimension: make BLOCK_N (and "
                "BLOCK_M, d_head) at least 16 in every config"),
    ("must be of type `tl.constexpr`", "tile shapes (tl.arange, tl.zeros) must be "
                                       "tl.constexpr parameters, not runtime values"),
    ("constexpr", "this value must be known at compile time: declare the parameter "
                  "`NAME: tl.constexpr`"),
    ("power of 2", "tile sizes must be powers of 2"),
)


def compile_worker(launch_worker):
    """A second worker for the student's ex07 module, imported as on a GPU
    (no ``TRITON_INTERPRET``): the student's code runs only there, in the
    grading's sandbox like every worker.  Takes the suites'
    ``launch_worker`` fixture."""
    from grader.sandbox.client import StudentModule
    # no env: nothing of the exercise's TRITON_INTERPRET
    return StudentModule(launch_worker("ex07_flash_attention", call_timeout=600), 600)


def compile_inputs(submission_dir) -> list[Path] | None:
    """The submission's modules a compile of ex07 can depend on
    (``reach.imported_modules``): its own, and the modules of the submission
    it imports, and theirs; None when an import cannot be read from the
    source (then every file counts).  So a student who edits ex02 keeps the
    answer."""
    from grader.sandbox.reach import imported_modules
    return imported_modules(Path(submission_dir), "ex07_flash_attention")


def _meaning(path: Path) -> bytes:
    """What a module's code means to a compiler: its tokens without comments
    or layout (``reach.code_key``), else its bytes.  A comment-only edit keeps it."""
    return code_key(path.read_bytes(), places=False)


def _code_lines(submission_dir) -> dict:
    """Each compile input's line of every token (``reach.code_tokens``): what a kept
    answer's line numbers are moved by when comments or blank lines moved
    the code (``_relocated``)."""
    out = {}
    for path in compile_inputs(submission_dir) or []:
        tokens = code_tokens(path.read_bytes())
        if tokens is not None:
            out[path.name] = [line for _, _, (line, _col) in tokens]
    return out


def _relocated(kept: dict, submission_dir) -> dict:
    """A kept answer with each row's line moved to where the same code is now
    (a comment or blank line above it shifts it, and changes nothing else)."""
    result, old = kept["result"], kept["lines"]
    new = _code_lines(submission_dir)
    for target in result.get("targets", []):
        for row in target.get("rows", []):
            name, line = row.get("file"), row.get("line")
            if name in old and name in new and isinstance(line, int) and line in old[name]:
                row["line"] = new[name][old[name].index(line)]
    return result


def _compile_key(submission_dir) -> str:
    """What a compile check's answer depends on: the modules of the
    submission it can depend on (``compile_inputs``; names and what their
    code means, ``_meaning``), the Triton and PyTorch versions, and the
    probes that compile.  Computed here, from the files, never asked of the
    worker."""
    import hashlib
    from importlib import metadata

    from grader.digest import content_hash
    from grader.paths import PROBES_DIR
    h = hashlib.sha256(b"attn-grade compile check 3\0")
    for dist in ("triton", "torch"):
        try:
            h.update(f"{dist}={metadata.version(dist)}\0".encode())
        except metadata.PackageNotFoundError:
            h.update(f"{dist}=none\0".encode())
    for probe in ("gpu_compile.py", "ex07_flash_attention.py"):
        h.update((PROBES_DIR / probe).read_bytes())
    inputs = compile_inputs(submission_dir)
    if inputs is None:
        h.update(content_hash(submission_dir).encode())   # every file, links not followed
    else:
        for path in inputs:
            h.update(b"file\0" + path.name.encode("utf-8", "surrogateescape") + b"\0"
                     + _meaning(path) + b"\0")
    return h.hexdigest()[:32]


KNOWN_FILE = "compile-launches.json"   # in check's cache: {launch key: its answer}
KNOWN_LIMIT = 500                      # the latest answers kept
ROW_ANSWER = ("ok", "registers", "spill_bytes", "shared_bytes", "fits", "wgmma", "tma",
              "num_warps", "num_stages")
_KNOWN_LOCK = threading.Lock()         # the compile workers' threads keep answers at once


def _known(cache_dir) -> dict:
    """`check`'s answers of single launches that compiled, by the probe's
    launch key (``probes/ex07_flash_attention._launch_key``): what a student
    keeps from the checks of their own code on their own machine.  A
    failure is never kept (its line would move with the code)."""
    if cache_dir is None:
        return {}
    try:
        known = json.loads((Path(cache_dir) / KNOWN_FILE).read_text())
    except (OSError, ValueError):
        return {}
    return known if isinstance(known, dict) else {}


def _keep_known(cache_dir, rows) -> None:
    """Keep each row that compiled (with its target, kernel and config: what
    ``_history`` ranks the next check's launches by)."""
    if cache_dir is None:
        return
    with _KNOWN_LOCK:
        known = _known(cache_dir)
        for capability, row in rows:
            if isinstance(row, dict) and row.get("ok") and not row.get("skipped") \
                    and isinstance(row.get("key"), str):
                known.pop(row["key"], None)
                known[row["key"]] = {**{k: row[k] for k in ROW_ANSWER if k in row},
                                     "of": [capability, row.get("kernel"), row.get("config")]}
        known = dict(list(known.items())[-KNOWN_LIMIT:])
        path = Path(cache_dir) / KNOWN_FILE
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_suffix(f".{os.getpid()}.{threading.get_ident()}.tmp")
            tmp.write_text(json.dumps(known))
            os.replace(tmp, path)
        except (OSError, TypeError, ValueError):
            pass


def _history(known: dict) -> dict:
    """The shared memory each (capability, kernel, config) needed when it
    last compiled in `check`, whatever the kernel's code was then."""
    out = {}
    for answer in known.values():
        of = answer.get("of") if isinstance(answer, dict) else None
        if isinstance(of, list) and len(of) == 3 and isinstance(answer.get("shared_bytes"), int):
            out[tuple(of)] = answer["shared_bytes"]
    return out


# -- what `check` compiles before it answers ----------------------------------------
# `check` compiles fully, first, for each GPU the launch likeliest to need too
# much shared memory (the limit a config list meets), and takes every other
# launch through Triton's front end only (gpu_compile.front_end: a twentieth
# of the time), which sees what a kernel's code or a config's constexprs
# break: a global read, tl.dot under 16 wide, a failed tl.static_assert.  The
# full compiles of the others follow, into its cache, until the check ends.
CHECK_FIRST_TEXT = ("`check` compiles fully first, for each GPU, the config likeliest to need "
                    "the most shared memory")
FRONT_END_TEXT = ("their tile shapes, constexprs, globals and static asserts are checked, "
                  "not yet their shared memory or registers")


def _needs_compile(row) -> bool:
    return bool(row.get("in_submission")) and not row.get("skipped")


def _by_kernel(rows: list) -> dict:
    """Kernel name -> the indices of its launches to compile, in order."""
    out: dict = {}
    for i, row in enumerate(rows):
        if _needs_compile(row):
            out.setdefault(row.get("kernel"), []).append(i)
    return out


def _shared_guess(plan_target: dict, history: dict) -> dict:
    """Launch index -> what its shared memory is ranked by: the bytes it
    needed at the last check where every launch of its kernel has them
    (``_history``), else its tile sizes times its pipeline stages."""
    rows = plan_target.get("rows", [])
    out = {}
    for kernel, mine in _by_kernel(rows).items():
        seen = [history.get((plan_target.get("capability"), kernel, rows[i].get("config")))
                for i in mine]
        for i, last in zip(mine, seen):
            out[i] = last if None not in seen else \
                _int(rows[i].get("tiles")) * max(_int(rows[i].get("num_stages")), 1)
    return out


def _int(value) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 1


def first_launches(plan: dict, history: dict) -> list[tuple[int, int]]:
    """`check`'s launches compiled fully before it answers: per target and
    kernel of ``plan``, the one likeliest to need the most shared memory
    (``_shared_guess``; the first in order on a tie), as ``(target, launch)``."""
    out = []
    for t, target in enumerate(plan.get("targets", [])):
        guess = _shared_guess(target, history)
        for mine in _by_kernel(target.get("rows", [])).values():
            out.append((t, max(mine, key=lambda i: (guess[i], -i))))
    return out


# -- the compile, in workers of its own ---------------------------------------------
# Workers compiling at once in `check` (never more than this machine's CPUs);
# a grading keeps one, as its compile overlaps the other exercises' tests and
# a batch sizes its parallel gradings (--jobs) by their workers.
COMPILE_WORKERS = 2
FULL, FRONT = "full", "front"   # a job: a launch compiled fully, or by the front end only


def _n_workers(quick: bool = True) -> int:
    return max(1, min(COMPILE_WORKERS, os.cpu_count() or 1)) if quick else 1


def _failed(row) -> bool:
    return not row.get("ok", True) or not row.get("fits", True)


class CompileEarly:
    """Exercise G's compile check, begun in the background when a grading
    starts (``compile_early``), so that its compiling overlaps the other
    exercises' tests instead of following them.

    One worker asks the probe for the launches (``compile_plan``); then it
    (a grading) or ``COMPILE_WORKERS`` workers (`check`) compile one launch a
    call (``compile_one``), each made by the same ``launch_worker`` (confined
    as every worker, on ex07's budget).  A grading compiles every launch fully (up to
    ``MAX_COMPILES``) and waits for all; a launch after a failure of its
    target, in the order made, is not compiled (the first failure is the
    answer, whatever the timing).  ``quick`` (`check`, with its cache):
    ``result`` waits for ``first_launches`` compiled fully and every other
    launch through the front end; their full compiles follow, each answer
    given to ``keep`` (check's cache), until the check ends (``close``).
    ``known``: `check`'s kept answers, never compiled again.  ``shared``: the
    grading run's ``compile_cache.SharedCompiles``, read where ``known`` has
    no answer and given every launch that compiled.  The thread that
    starts a worker lives until it is closed (a worker's parent-death signal
    follows the thread that started it)."""

    def __init__(self, launch_worker, known=None, *, quick=False, keep=None, shared=None):
        self.quick, self._keep, self._shared = quick, keep, shared
        self._known = known or {}
        self._cond = threading.Condition()
        self._plan = self._error = None
        self._answers: dict = {}          # (target, launch) -> its full compile's row
        self._fronts: dict = {}           # (target, launch) -> its front end's row
        self._taken: set = set()
        self._order: list = []            # jobs (kind, target, launch), in the order to start
        self._first: set = set()          # the jobs ``result`` waits for
        self._capped: set = set()         # launches beyond MAX_COMPILES
        self._workers: list = []
        self._closing = False
        self._began = time.perf_counter()
        self.seconds = None
        self._threads = [threading.Thread(target=self._run, args=(launch_worker, i == 0),
                                          name=f"attn-grade-compile-{i}", daemon=True)
                         for i in range(_n_workers(quick))]
        self._live = len(self._threads)
        for thread in self._threads:
            thread.start()

    # -- the workers' side
    def _run(self, launch_worker, plans: bool) -> None:
        try:
            try:
                compiler = compile_worker(launch_worker)
                if not plans:   # started while the first one plans (a worker starts lazily)
                    compiler._worker._ensure()
            except BaseException:
                if plans:
                    raise
                return        # the planning worker compiles what this one would have
            with self._cond:
                self._workers.append(compiler._worker)
                closing = self._closing
            try:
                if closing:
                    return
                if plans:
                    self._set_plan(compiler.probe("ex07_flash_attention.compile_plan"))
                while (job := self._take()) is not None:
                    kind, t, i, key = job
                    row = compiler.probe("ex07_flash_attention.compile_one", t, i, key,
                                         front_end_only=kind == FRONT)
                    self._answer(kind, t, i, row)
            finally:
                compiler._worker.close()
        except BaseException as exc:   # raised again where the test asks for it
            with self._cond:
                if not self._closing and self._error is None:
                    self._error = exc
        finally:
            with self._cond:
                self._live -= 1
                if not self._live:
                    self.seconds = time.perf_counter() - self._began
                self._cond.notify_all()

    def _set_plan(self, plan) -> None:
        from grader.sandbox.runtime.probes.ex07_flash_attention import MAX_COMPILES
        if not isinstance(plan, dict) or not isinstance(plan.get("targets"), list):
            raise TypeError(f"the compile plan is not a dict of targets: {plan!r:.200}")
        launches, answers = [], {}
        for t, target in enumerate(plan["targets"]):
            for i, row in enumerate(target.get("rows", [])):
                if not _needs_compile(row):
                    continue
                kept = self._known.get(row.get("key")) if row.get("key") else None
                if isinstance(kept, dict):
                    answers[(t, i)] = {**{k: kept[k] for k in ROW_ANSWER if k in kept},
                                       "kept": True}
                elif self._shared is not None and \
                        (kept := self._shared.get(target.get("capability"), row)):
                    answers[(t, i)] = {**kept, "kept": True, "shared": True}
                else:
                    launches.append((t, i))
        within = within_cap(launches, len(plan["targets"]), MAX_COMPILES)
        capped = set(launches) - set(within)
        if self.quick:
            history = _history(self._known)
            full = [j for j in first_launches(plan, history) if j in within]
            guess = {(t, i): g for t, target in enumerate(plan["targets"])
                     for i, g in _shared_guess(target, history).items()}
            rest = sorted((j for j in within if j not in full),
                          key=lambda j: (-guess[j], j))
            # the front ends first, in the order made: a kernel that breaks
            # there answers at once (the full compiles after it are not needed)
            first = [(FRONT, *j) for j in sorted(rest)] + [(FULL, *j) for j in full]
            order = first + [(FULL, *j) for j in rest]
        else:
            first = order = [(FULL, *j) for j in within]
        with self._cond:
            self._plan, self._answers, self._capped = plan, answers, capped
            self._order, self._first = order, set(first)
            self._cond.notify_all()

    def _settled(self, job) -> bool:
        """Answered, or never to be: a launch after a failure of its target."""
        kind, t, i = job
        if (t, i) in self._answers or (kind == FRONT and (t, i) in self._fronts):
            return True
        return any(tt == t and ii <= i and _failed(row)
                   for done in (self._answers, self._fronts) for (tt, ii), row in done.items())

    def _take(self):
        with self._cond:
            while not self._closing and self._error is None:
                if self._plan is not None:
                    first_done = all(self._settled(j) for j in self._first)
                    for job in self._order:
                        if job in self._taken or self._settled(job):
                            continue
                        if job not in self._first and not first_done:
                            break     # the rest waits for what `check` answers with
                        self._taken.add(job)
                        kind, t, i = job
                        return kind, t, i, self._plan["targets"][t]["rows"][i].get("key")
                    if all(self._settled(j) for j in self._order):
                        return None
                self._cond.wait()
            return None

    def _answer(self, kind: str, t: int, i: int, row) -> None:
        if not isinstance(row, dict):
            raise TypeError(f"a compile answer is not a dict: {row!r:.200}")
        with self._cond:
            (self._fronts if kind == FRONT else self._answers)[(t, i)] = row
            self._cond.notify_all()
            plan_row = self._plan["targets"][t]["rows"][i]
            capability = self._plan["targets"][t].get("capability")
        if self._keep is not None and kind == FULL:
            self._keep([(capability, {**plan_row, **row})])
        if self._shared is not None and kind == FULL:
            self._shared.put(capability, {**plan_row, **row})

    # -- the grading's side
    def _ready(self) -> bool:
        return self._error is not None or not self._live or (
            self._plan is not None and all(self._settled(j) for j in self._first))

    def result(self) -> dict:
        """The compile check's answer, once what it waits for is answered:
        per target of the plan its rows in the order made, each with its
        full compile's answer, ``kept`` (from ``known``), its front end's
        (``front_end``: `check`), or ``pending`` (never compiled: a launch
        after a failure)."""
        with self._cond:
            while not self._ready():
                self._cond.wait()
            if self._error is not None:
                raise self._error
            if self._plan is None:
                raise RuntimeError("the compile workers ended without an answer")
            return self._built()

    def _built(self) -> dict:
        targets = []
        for t, target in enumerate(self._plan["targets"]):
            entry = {k: v for k, v in target.items() if k != "rows"}
            entry["rows"] = []
            for i, row in enumerate(target.get("rows", [])):
                if (t, i) in self._capped:
                    entry["truncated"] = entry.get("truncated", 0) + 1
                    continue
                answer = self._answers.get((t, i), self._fronts.get((t, i)))
                if answer is not None:
                    row = {**row, **answer}
                elif _needs_compile(row):
                    row = {**row, "pending": True}
                entry["rows"].append(row)
            targets.append(entry)
        return {"targets": targets}

    def wait(self) -> None:
        """Until every worker has ended (``close`` ends them sooner)."""
        with self._cond:
            while self._live:
                self._cond.wait()

    def quiet(self) -> None:
        """Nothing of it runs from now on: a grading waits for the end of its
        compile; `check` for what it answers with, the rest is ended."""
        if self.quick:
            with self._cond:
                while not self._ready():
                    self._cond.wait()
            self.close()
        else:
            self.wait()

    def close(self) -> None:
        """End it: what no test took up, and `check`'s later compiles, are
        stopped, and the workers closed."""
        with self._cond:
            self._closing = True
            live = self._live
            workers = list(self._workers)
            self._cond.notify_all()
        if live:
            for worker in workers:
                worker.kill()
        for thread in self._threads:
            thread.join()


_early: dict[str, CompileEarly] = {}   # submission folder -> the compile begun for it


def _begin(launch_worker, cache_dir, shared=None) -> CompileEarly:
    """A grading's compile (every launch; with ``shared``, the grading run's
    cache, launches compiled for another submission are taken from it), or
    with ``cache_dir`` `check`'s (``quick``; what compiles is kept there)."""
    if cache_dir is None:
        return CompileEarly(launch_worker, shared=shared)
    return CompileEarly(launch_worker, _known(cache_dir), quick=True,
                        keep=lambda rows: _keep_known(cache_dir, rows))


def compile_early(submission_dir, launch_worker, cache_dir=None,
                  shared_dir=None) -> CompileEarly | None:
    """Begin ``compile_results``'s compile now, in the background, unless its
    answer is kept in ``cache_dir``; ``compile_results`` takes it up."""
    if cache_dir is not None and _cache_path(submission_dir, cache_dir).is_file():
        return None
    early = _early[str(submission_dir)] = _begin(launch_worker, cache_dir,
                                                 shared_compiles(submission_dir, shared_dir))
    return early


def shared_compiles(submission_dir, shared_dir):
    """The grading run's shared compile cache (``compile_cache.SharedCompiles``)
    for this submission, or None without one (`check`; a grading without a
    ``compile_cache``)."""
    if shared_dir is None:
        return None
    from grader.reference.compile_cache import SharedCompiles
    files = compile_inputs(submission_dir)
    if files is None:       # imports that cannot be read: every module of it
        files = sorted(Path(submission_dir).glob("*.py"))
    return SharedCompiles(shared_dir, files)


def wait_early(submission_dir) -> None:
    """Until nothing of the compile begun for this submission (if one was)
    runs any more (``CompileEarly.quiet``)."""
    early = _early.get(str(submission_dir))
    if early is not None:
        early.quiet()


def forget_early(submission_dir) -> CompileEarly | None:
    """The grading ended: what it began for this submission is ended, and not
    taken up by another grading."""
    early = _early.pop(str(submission_dir), None)
    if early is not None:
        early.close()
    return early


def _cache_path(submission_dir, cache_dir) -> Path:
    return Path(cache_dir) / f"compile-{_compile_key(submission_dir)}.json"


def compile_results(submission_dir, launch_worker, cache_dir=None,
                    shared_dir=None) -> tuple[dict, bool]:
    """``CompileEarly.result`` for this submission, and whether it came from
    ``cache_dir``.

    Compiling a config for two GPUs takes one to two seconds of CPU.  A
    grading (no ``cache_dir``) compiles every config, begun when the grading
    starts where the suites' conftest could (``compile_early``).  `check`
    (``cache_dir``: its own cache, on the student's machine) answers once it
    has compiled ``first_launches`` and keeps every answer; a student who
    runs it again without changing what the code means (a comment is not a
    change: ``_compile_key``) gets the answer kept from the last time, and a
    launch that compiled before is not compiled again (``known``).
    ``shared_dir``: a grading run's shared compile cache (``compile_cache``):
    a launch compiled for another submission of the run is not compiled again."""
    path = None
    if cache_dir is not None:
        path = _cache_path(submission_dir, cache_dir)
        try:
            return _relocated(json.loads(path.read_text()), submission_dir), True
        except (OSError, ValueError, KeyError, TypeError):
            pass
    early = _early.get(str(submission_dir))
    own = early is None
    if own:
        early = _begin(launch_worker, cache_dir, shared_compiles(submission_dir, shared_dir))
    try:
        res = early.result()
    finally:
        if own:
            early.close()
    if path is not None:
        try:  # best effort: a cache that cannot be written only costs time
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_suffix(f".{os.getpid()}.tmp")
            tmp.write_text(json.dumps({"result": res,
                                       "lines": _code_lines(submission_dir)}))
            os.replace(tmp, path)
        except (OSError, TypeError, ValueError):
            pass
    return res, False


def within_cap(launches: list, targets: int, most: int) -> list:
    """The launches ``(target, index)`` a grading compiles: at most ``most``,
    shared out between the ``targets`` GPUs in the order made, so that a long
    config list for the first never leaves the second uncompiled (a red
    team's 301 launches were told "no kernel of your own" for the second)."""
    per_target = max(1, most // max(1, targets))
    taken: dict = {}
    out = []
    for j in launches:
        if taken.get(j[0], 0) < per_target:
            taken[j[0]] = taken.get(j[0], 0) + 1
            out.append(j)
    return out


def judge_compile(result: dict) -> str:
    """Raises ``Feedback`` naming the compiler's complaint and the line;
    returns a short table for a pass, and says which launches `check` took
    through the front end only (``front_end``) or did not compile
    (``pending``): the grading compiles every one fully."""
    from grader.feedback import Feedback
    from grader.sandbox.runtime.probes.ex07_flash_attention import MAX_COMPILES
    lines, front, pending, cut = [], [], [], []
    for t in result["targets"]:
        if "error" in t:
            if t.get("error_type") == "NotImplementedError":
                raise Feedback("not implemented yet: flash_attention raised "
                               "NotImplementedError")
            raise Feedback(f"flash_attention failed before launching a kernel when its "
                           f"module was imported as on a GPU (without TRITON_INTERPRET), "
                           f"for {t['target']} in {t['dtype']}: {t['error']}")
        own = [r for r in t["rows"] if r.get("in_submission")]
        if t.get("truncated"):
            cut.append(f"  {t['target']:20s} {int(t['truncated'])} more launches")
        if not own:
            raise Feedback("flash_attention launched no Triton kernel of your own file "
                           f"(for {t['target']}): the work must happen in your kernel")
        for r in own:
            name = f"  {t['target']:20s} {r['kernel']} [{r['config'] or 'as launched'}]" + \
                (f" ({_launched_for(r)})" if r.get("launched_for") else "")
            if r.get("pending"):
                pending.append(name)
                continue
            _judge_row(t, r)
            if r.get("front_end"):
                front.append(name)
                continue
            spill = f", spills {r['spill_bytes']} bytes" if r.get("spill_bytes") else ""
            lines.append(f"{name}: {r['registers']} registers{spill}, "
                         f"{r['shared_bytes'] / 1024:.0f} KB shared")
    text = "compiled for real GPUs:\n" + "\n".join(lines)
    total = len(lines) + len(front) + len(pending)
    shared = sum(bool(r.get("shared")) for t in result["targets"] for r in t["rows"])
    if shared:
        text += (f"\n({shared} of {total} answered from this grading run's compile cache: "
                 "the same kernel, launched alike, compiled for an earlier submission)")
    if front:
        text += (f"\nchecked by Triton's front end only, not yet compiled fully ({len(front)} "
                 f"of {total}): {FRONT_END_TEXT}.  {CHECK_FIRST_TEXT}; your grade compiles "
                 f"all {total} fully (as `attn-grade check G --no-cache` does now):\n"
                 + "\n".join(front))
    if pending:
        text += (f"\nnot compiled by this check ({len(pending)} of {total}; your grade "
                 "compiles every one):\n" + "\n".join(pending))
    if cut:
        text += (f"\nnot compiled at all: a grading compiles at most {MAX_COMPILES} launches, "
                 "shared out between the GPUs in the order launched (launch fewer distinct "
                 "configs to have every one checked):\n" + "\n".join(cut))
    return text


def _judge_removed_style(r: dict) -> None:
    """A compile refused because the installed Triton dropped a style (block
    pointers in 3.9) is not the student's failure and not a GPU's: neither
    this Triton's interpreter nor its compiler runs it.  A grader fault (a
    regrade), saying so."""
    from importlib import metadata

    from grader.sandbox.runtime.probes.ex07_flash_attention import STYLES_REMOVED
    for marker, (style, advice) in STYLES_REMOVED.items():
        if marker in r["error"]:
            try:
                version = metadata.version("triton")
            except metadata.PackageNotFoundError:
                version = "?"
            raise RuntimeError(
                f"your kernel {r['kernel']} uses {style}, which Triton "
                f"{version} (the version this grading ran) no "
                f"longer supports, in its interpreter or its GPU compiler: the compile check "
                f"could not be judged here and needs a regrade. {advice[0].upper()}"
                f"{advice[1:]}.")


def _launched_for(r: dict) -> str:
    """The words of the path a plan row was launched for (``OTHER_PATHS`` of
    the ex07 probe), as the worker gave them: a string, cut short."""
    return str(r["launched_for"])[:80]


def _judge_row(t: dict, r: dict) -> None:
    """Raises ``Feedback`` where launch ``r`` of target ``t`` failed to
    compile or does not fit the GPU's shared memory."""
    from grader.feedback import Feedback
    where = f"{r.get('file') or 'your file'}, line {r['line']}" if r.get("line") \
        else (r.get("file") or "your file")
    # a launch of another path than the compiled case's: said with it
    path = f", launched for {_launched_for(r)}" if r.get("launched_for") else ""
    if not r["ok"]:
        _judge_removed_style(r)
        hint = next((h for key, h in COMPILE_HINTS if key in r["error"]), "")
        raise Feedback(
            f"your kernel {r['kernel']} does not compile for {t['target']} "
            f"({t['dtype']}, config {r['config'] or 'as launched'}{path}): the compiler "
            f"says {r['error']} ({where})" + (f"\nHint: {hint}." if hint else "")
            + "\nTriton's CPU interpreter accepts this; a GPU does not.")
    if not r.get("fits", True):
        limit = {80: 163, 90: 227}[t["capability"]]
        raise Feedback(
            f"your kernel {r['kernel']} (config {r['config'] or 'as launched'}{path}) needs "
            f"{r['shared_bytes'] / 1024:.0f} KB of shared memory on {t['target']}, "
            f"more than its {limit} KB per block: use smaller tiles or fewer "
            "pipeline stages (num_stages) in that config")
