"""ex07's speed grade: the clock in the grading process, the reference in a worker of its own.

The student's kernel and the reference kernel (the worker runtime's
``kernels/flash.py``) each run in their own worker on the same GPU; nothing of
the reference is ever in the student's process, and nothing the student's
process does can move the clock:

* the grading process times the round trip of one ``ex07_flash_attention.speed_run``
  request (``calls`` calls on fresh inputs drawn from a seed sent with the
  request, then a full synchronize) to each worker, alternating which goes
  first, round after round;
* the same overhead is subtracted from both: the reference worker's round
  trip of a request that only draws the inputs (measured on the trusted
  side, so a student cannot inflate it);
* after each round the grader picks calls and output rows at random and
  asks both workers for them (``ex07_flash_attention.speed_collect``): a wrong, cached or
  replayed output fails, and a collect that takes much longer than the
  reference's (outputs computed after the clock stopped, or a skipped
  synchronize whose work the copy then waits for) fails too;
* every kernel launched during the timed calls must come from the
  student's own exercise file, and no PyTorch op may do attention's work;
* the student's submission folder is read-only to its worker (``locked``);
* on a GPU, each case's timing holds an exclusive lock on the device
  (``device_lock``), shared by every grading of this user on the machine
  (the ``--jobs`` slots of a batch on one GPU): two students are never timed
  against each other's load.  The result says how long it waited.

``measure`` takes the two sides as objects with ``probe(name, *args)``
(``StudentModule`` s, or fakes in tests) and a ``clock``.  Its result has the
shape ``flash.judge_speed`` judges.  What remains possible is written in
``docs/THREAT_MODEL.md`` (ex07).
"""
from __future__ import annotations

import contextlib
import fcntl
import os
import random
import re
import statistics
import tempfile
import time
from pathlib import Path

import torch

from grader.paths import RUNTIME_PACKAGE
from grader.reference.flash_judge import elsewhere_problems
from grader.sandbox.client import StudentModule

# The reference kernel, loaded where it lies in the worker runtime.
REFERENCE_MODULE = f"{RUNTIME_PACKAGE}.kernels.flash"
CALLS = 4            # calls per timed request: a round trip is long enough to time
PICKS = 2            # calls whose outputs are checked after each round
ROWS = 64            # output rows (query positions) checked per picked call
LATE_FRACTION = 0.5  # of the checked calls' reference time: a later collect is suspect
LATE_SLACK_S = 0.002  # pipe and copy jitter
# Seconds a timing waits for the GPU while other gradings time theirs: about
# ten other submissions' cases; longer, and the machine is not fit to judge
# (a regrade, never a guess).
LOCK_WAIT_S = 600.0
LOCK_POLL_S = 0.05


def lock_folder() -> Path:
    """This user's folder of device locks on this machine, made 0700: every
    grading process of the user (each slot of a batch) finds the same one,
    and no other user (nor a worker running under its own uid) can open
    them.  ``$XDG_RUNTIME_DIR/attn-grade``, else one in the temp folder."""
    base = os.environ.get("XDG_RUNTIME_DIR") or tempfile.gettempdir()
    folder = Path(base) / f"attn-grade-locks-{os.getuid()}"
    folder.mkdir(mode=0o700, exist_ok=True)
    st = folder.lstat()
    if not folder.is_dir() or folder.is_symlink() or st.st_uid != os.getuid():
        raise RuntimeError(f"{folder} is not a folder of this user's own: the GPU cannot "
                           "be locked for timing (remove it)")
    return folder


@contextlib.contextmanager
def device_lock(device_id: str, folder=None, wait_s: float = LOCK_WAIT_S,
                on_wait=None, clock=time.monotonic):
    """Hold the GPU ``device_id`` alone (``fcntl.flock`` on a file named for
    it in ``lock_folder``) while the block runs; yields ``{"held", "file",
    "waited_s"}``.  ``""`` (the CPU): nothing is locked, ``held`` is False.
    ``on_wait()`` is called once if another holder makes it wait.  Raises
    ``RuntimeError`` (a regrade) after ``wait_s`` without it.  The kernel
    drops a dead holder's lock."""
    if not device_id:
        yield {"held": False, "file": "", "waited_s": 0.0}
        return
    name = "gpu-" + re.sub(r"[^A-Za-z0-9_.-]", "_", device_id)[:100] + ".lock"
    path = Path(folder) if folder is not None else lock_folder()
    fd = os.open(path / name, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        start, waited = clock(), False
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if not waited and on_wait is not None:
                    on_wait()
                waited = True
                if clock() - start > wait_s:
                    raise RuntimeError(
                        f"the GPU was held by other gradings for over {wait_s:.0f} s, so this "
                        "kernel could not be timed alone: needs a regrade") from None
                time.sleep(LOCK_POLL_S)
        yield {"held": True, "file": name, "waited_s": clock() - start if waited else 0.0}
    finally:
        os.close(fd)                   # releases the lock


@contextlib.contextmanager
def reference_side(launch_worker, call_timeout: float):
    """A trusted worker running the reference kernel of the worker runtime
    (``runtime.kernels.flash``, where it lies), with an empty submission.

    It runs as the grading user (``trusted``): the kernels folder is the one
    part of the runtime that a student's worker never sees, and as root
    without namespaces it is readable by root alone
    (``confine.secret_paths``).  Only trusted code runs in it.
    ``launch_worker`` is the suites' fixture of that name."""
    worker = launch_worker(REFERENCE_MODULE, call_timeout=call_timeout, trusted=True)
    try:
        yield StudentModule(worker, call_timeout)
    finally:
        worker.close()


def _timed(side, clock, *args, **kwargs) -> tuple:
    start = clock()
    answer = side.probe(*args, **kwargs)
    return clock() - start, answer


def _launch_problems(run, own_file: str) -> list:
    if not isinstance(run, dict):
        return ["sent back something other than the record of its timed calls"]
    out = []
    files = run.get("launched_files") or {}
    if not files:
        out.append("launched no Triton kernel during the timed calls")
    # The grader's own idea of the file: never what the worker says it is.
    foreign = sorted(str(f) for f in files if f != own_file)
    if foreign:
        out.append(f"launched kernels from {', '.join(foreign)} during the timed calls "
                   f"(only your own {own_file} may run)")
    if run.get("forbidden"):
        out.append("let PyTorch do attention's work during the timed calls ("
                   + ", ".join(sorted(run["forbidden"])) + ")")
    moved = elsewhere_problems(run.get("elsewhere"))
    if moved:
        out.append(f"{', '.join(moved)} during the timed calls (the work must be your "
                   "kernel's, launched from the calling thread)")
    return out


def measure(student, reference, cases, *, calls: int = CALLS, rounds: int = 7,
            picks: int = PICKS, rows: int = ROWS, seed: int = 0, clock=time.perf_counter,
            on=None, lock_dir=None) -> dict:
    """Time both sides on ``cases`` (dicts of ``flash.SPEED_CASES``' shape).

    Returns ``{"gpu", "variant", "lock", "cases": [{case, student_s,
    reference_s, max_err, problems, collect_s, variant, lock}]}``: seconds
    per call (overhead removed) per round, the largest difference of the
    checked rows from the reference's, what went wrong, and the device lock
    each case's timing held (``device_lock``; ``lock``: whether every case
    held it, and the seconds waited for it in all).  ``on="cpu"`` (the
    interpreter, tiny shapes) tests the plumbing only; ``lock_dir``: where
    the locks are (``lock_folder``)."""
    rng = random.Random(seed)                   # the grader's choices, never sent ahead
    results, gpu, variants = [], "", set()
    worker = getattr(student, "_worker", None)
    fingerprint = getattr(worker, "fingerprint", None)
    own_file = f"{getattr(worker, 'module', 'ex07_flash_attention')}.py"
    for case in cases:
        info = reference.probe("ex07_flash_attention.speed_prepare", case,
                               seed=rng.randrange(1 << 30), on=on)
        student.probe("ex07_flash_attention.speed_prepare", case,
                      seed=rng.randrange(1 << 30), on=on)
        before = fingerprint() if fingerprint else ""
        gpu, variant = info["gpu"], info["variant"]
        variants.add(variant)
        with device_lock(str(info.get("device_id") or ""), lock_dir) as lock:
            results.append(_timed_case(student, reference, case, rng, clock, on, calls,
                                       rounds, picks, rows, own_file, fingerprint, before))
        results[-1]["lock"] = lock
        results[-1]["variant"] = variant
    return {"gpu": gpu, "variant": " / ".join(sorted(variants)), "cases": results,
            "lock": {"held": bool(results) and all(r["lock"]["held"] for r in results),
                     "waited_s": sum(r["lock"]["waited_s"] for r in results)}}


def _timed_case(student, reference, case, rng, clock, on, calls, rounds, picks, rows,
                own_file, fingerprint, before) -> dict:
    """One case's timing (``measure``): the overhead, then ``rounds`` rounds
    of both sides, alternating, each followed by a check of picked outputs."""
    overhead = statistics.median(
        _timed(reference, clock, "ex07_flash_attention.speed_run", case, calls,
               rng.randrange(1 << 30), run_kernel=False, on=on)[0] for _ in range(3))
    t_student, t_ref, errors, problems, collect = [], [], [], [], []
    for r in range(rounds):
        draw = rng.randrange(1 << 30)       # the same fresh inputs for both sides
        order = [("student", student), ("reference", reference)]
        seconds, runs = {}, {}
        for name, side in (order if r % 2 == 0 else order[::-1]):
            seconds[name], runs[name] = _timed(side, clock, "ex07_flash_attention.speed_run",
                                               case, calls, draw, on=on)
        problems += _launch_problems(runs["student"], own_file)
        chosen = sorted(rng.sample(range(calls), min(picks, calls)))
        rows_at = sorted(rng.sample(range(case["s_q"]), min(rows, case["s_q"])))
        c_s, got = _timed(student, clock, "ex07_flash_attention.speed_collect",
                          chosen, rows_at)
        c_r, want = _timed(reference, clock, "ex07_flash_attention.speed_collect",
                           chosen, rows_at)
        collect.append([c_s, c_r])
        worst = 0.0
        if not isinstance(got, list) or len(got) != len(want):
            got = [{"problem": "handed over something other than the outputs asked for"}]
        for g, w in zip(got, want):
            # The student's side answers as data it chose: check its form first.
            if not isinstance(g, dict) or "problem" in g:
                problems.append(str(g.get("problem"))[:200] if isinstance(g, dict)
                                else "handed over something other than an output")
                worst = float("inf")
            elif g.get("shape") != w["shape"] or g.get("dtype") != w["dtype"] \
                    or not isinstance(g.get("rows"), torch.Tensor) \
                    or g["rows"].shape != w["rows"].shape:
                problems.append(f"returned {g.get('shape')} {g.get('dtype')}")
                worst = float("inf")
            else:
                diff = (g["rows"] - w["rows"]).abs().max().item()
                worst = max(worst, diff if diff == diff else float("inf"))   # NaN: inf
        errors.append(worst)
        t_student.append(max(seconds["student"] - overhead, 1e-9) / calls)
        t_ref.append(max(seconds["reference"] - overhead, 1e-9) / calls)
    if fingerprint and fingerprint() != before:
        problems.append("changed the files of its submission while being timed")
    late = statistics.median(c for c, _ in collect) - statistics.median(c for _, c in collect)
    if late > LATE_FRACTION * min(picks, calls) * statistics.median(t_ref) + LATE_SLACK_S:
        problems.append(
            f"took {late * 1e3:.1f} ms longer than the reference to hand over outputs "
            "after the timed calls (outputs computed after the clock stopped, or work "
            "left running past the synchronize)")
    return {"case": case, "student_s": t_student, "reference_s": t_ref,
            "max_err": errors, "problems": sorted(set(problems)),
            "collect_s": collect, "overhead_s": overhead}
