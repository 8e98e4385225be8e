"""The grading process's side of the sandbox: call and end workers.

``Worker`` runs one exercise module of one submission in a child process
(``runtime/worker.py``), in a private directory that holds a copy of only the
submission's modules it can import.  Only ``grader.sandbox.launch`` makes
one, with the grading's ``Confinement``; ``grader.sandbox.process`` starts
and ends its process.  The worker runtime (``grader/sandbox/runtime/``) is
one folder used as it is: under namespaces bubblewrap binds it read-only into
the sandbox; without them it is copied whole into the private directory,
because the worker's fresh uid may not be able to read where the grader is
installed (a checkout or a Python under ``/root``, mode 700).  Its
``kernels/`` (the reference kernels) is seen by trusted workers only: hidden
from a student's worker in both cases.  Every request has a time limit, and
within the budgets (an exercise's, the grading's) that the worker was given;
a time-out or a crash ends the worker and everything it started, and counts
toward the cut-off; the next request starts a fresh worker.
``StudentModule`` is the object a suite sees as ``student``: attribute access
and calls become requests, and answers come back as plain data (see
``codec``).
"""
from __future__ import annotations

import os
import select
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from grader.paths import HIDDEN_SUITES_DIR, RUNTIME_PACKAGE
from grader.sandbox import bwrap, confine, memcg, process
from grader.sandbox.runtime import codec
from grader.sandbox.forkserver import ForkServerError


class StudentError(Exception):
    """Student code failed to give an answer; ``str()`` is the feedback."""


class StudentRaised(StudentError):
    def __init__(self, what: str, raised: codec.Raised):
        self.raised = raised
        where = f" ({raised.where})" if raised.where else ""
        if raised.is_a("NotImplementedError"):
            text = f"not implemented yet: {what} raised NotImplementedError{where}"
        else:
            text = f"{what} raised {raised.type_name}: {raised.message}{where}"
        super().__init__(text)


class StudentLoadError(StudentError):
    """The module is missing, or failed to import."""


class StudentTimeout(StudentError):
    pass


class StudentCrash(StudentError):
    pass


class StudentBadValue(StudentError):
    pass


@dataclass
class Limits:
    """Per-worker limits.  ``call_timeout`` applies to every request.  How a
    worker is confined is not here: it is the grading's, fixed in one place
    (``launch.Launcher``) for every worker it makes."""

    call_timeout: float = 10.0
    import_timeout: float = 60.0
    max_failures: int = 4      # time-outs and crashes; after this many, calls fail at once
    max_response_bytes: int = 256 << 20
    max_output_bytes: int = 64 << 10  # stderr kept for feedback (head + tail)
    memory_bytes: int = 8 << 30       # RLIMIT_DATA, and the cgroup's limit
    rlimits: dict | None = None       # None: confine.default_rlimits
    env: Mapping = field(default_factory=dict)  # read when the worker starts


class Budget:
    """Wall-clock seconds a set of workers may use: an exercise's (the time
    its workers spent starting and answering, charged by each request) or,
    with ``deadline=True``, the whole grading's (from when it began).  Every
    request and start is given at most what is left, and once it is spent
    every further call fails at once, saying which."""

    def __init__(self, seconds: float | None, what: str, option: str, *,
                 deadline: bool = False):
        self.seconds, self.what, self.option = seconds, what, option
        self.used = 0.0
        self._start = time.monotonic() if deadline else None

    def charge(self, seconds: float) -> None:
        self.used += seconds

    def left(self) -> float:
        if self.seconds is None:
            return float("inf")
        used = time.monotonic() - self._start if self._start is not None else self.used
        return self.seconds - used

    def spent_text(self) -> str:
        return (f"not run: {self.what}'s time budget of {self.seconds:g} s is spent (by "
                f"earlier calls that were slow, hung or crashed), so the rest is not tried "
                f"({self.option} changes it)")


@dataclass(frozen=True)
class Confinement:
    """How the workers of one grading are confined, decided once
    (``launch.Launcher``): under bubblewrap's namespaces or the fallback, and
    whether, as root, each student's worker gets a fresh uid of its own."""

    namespaces: bool
    own_uids: bool


# Address space a worker needs beyond its data when no cgroup counts its
# memory: importing PyTorch and Triton maps about 0.8 GB (CPU build, measured:
# VmSize 830 MB, of which 225 MB data), plus thread stacks; malloc's arenas
# are bounded by MALLOC_ARENA_MAX.  Any more would let shared memory through.
AS_HEADROOM = 1 << 30


def _describe_exit(code: int | None) -> str:
    if code is None:
        return "stopped answering"
    if code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        return f"was killed by {name}"
    return f"exited with code {code}"


class _OutputTail:
    """Keeps the first and last bytes of a stream; the rest is dropped."""

    def __init__(self, stream, limit: int):
        self.limit, self.head, self.tail, self.dropped = limit, b"", b"", 0
        self._thread = threading.Thread(target=self._pump, args=(stream,), daemon=True)
        self._thread.start()

    def _pump(self, stream):
        half = self.limit // 2
        while True:
            chunk = stream.read1(65536) if hasattr(stream, "read1") else stream.read(65536)
            if not chunk:
                return
            if len(self.head) < half:
                take = half - len(self.head)
                self.head += chunk[:take]
                chunk = chunk[take:]
            self.tail += chunk
            if len(self.tail) > half:
                self.dropped += len(self.tail) - half
                self.tail = self.tail[-half:]

    def text(self) -> str:
        self._thread.join(timeout=0.2)
        mid = f"\n[... {self.dropped} bytes of output dropped ...]\n" if self.dropped else ""
        return (self.head + mid.encode() + self.tail).decode("utf-8", "replace")


class Worker:
    """One exercise module of one submission, run in a child process.

    Made by ``launch.Launcher`` only, never directly.  ``module`` is a module
    of the submission, or for a trusted worker one of the runtime's own
    (``runtime.kernels.flash``); ``trusted=True`` lets the worker see the
    runtime's reference kernels and keeps the grading user (trusted code
    only); ``locked=True``: its copy of the submission is read-only to it
    (ex07's speed worker)."""

    def __init__(self, submission: Path, module: str, limits: Limits,
                 confinement: Confinement, *, trusted: bool = False, locked: bool = False,
                 fork_server=None, fork_wants: tuple[str, ...] | None = None,
                 budgets: tuple[Budget, ...] = ()):
        self.submission = Path(submission)
        self.module = module
        self.limits = limits
        self.confinement = confinement
        self.trusted = trusted
        self.locked = locked
        self.budgets = budgets
        # A student's worker of a grading: forked by the grading's fork server
        # (``grader.sandbox.forkserver``) while it runs, else spawned.
        self.fork_server = None if trusted else fork_server
        self.fork_wants = fork_wants    # what of its preloads the fork waits for (None: all)
        self.proc: subprocess.Popen | None = None
        self.output: _OutputTail | None = None
        self._dir: Path | None = None
        self.load_error: StudentLoadError | None = None
        self.failures = 0
        self.uid: int | None = None
        self.cgroup: memcg.MemoryCgroup | None = None
        self.disk: process.DiskWatch | None = None   # the fallback's bound on writes

    @property
    def namespaces(self) -> bool:
        return self.confinement.namespaces

    # -- lifecycle ---------------------------------------------------------
    def _forking(self) -> bool:
        return self.fork_server is not None and self.fork_server.alive

    def _prepare_dir(self) -> Path:
        """The worker's private folder, with a copy of the submission's
        modules that this one can import (``needed_modules``): a worker gets
        no more of the upload than it can use.  A trusted worker's holds
        nothing of the submission, whatever its files are named: it runs the
        runtime's own module, and a file named after it (``runtime.kernels.flash.py``)
        would otherwise bring what that file imports (a ``triton.py``) in."""
        forking = self._forking()
        root = self.fork_server.folder() if forking else process.staging_folder()
        sub = root / "submission"
        sub.mkdir()
        for path in [] if self.trusted else needed_modules(self.submission, self.module):
            # Never a link: copied as root it would bring whatever it points
            # at (a hidden suite, say) into the worker's reach.
            if path.is_file() and not path.is_symlink():
                shutil.copyfile(path, sub / path.name, follow_symlinks=False)
        (root / "tmp").mkdir()   # the fallback's TMPDIR
        if self.namespaces and not forking and process.is_bounded(root):
            # A spawned sandbox's /tmp, /var/tmp and /dev/shm, on its bounded
            # file system (``bwrap.command``); seen by no other worker.
            for name in process.TEMP_FOLDERS:
                (root / name).mkdir(exist_ok=True)
                os.chmod(root / name, 0o1777)
        if not self.namespaces and not forking:
            process.copy_runtime(root, self.trusted)
        return root

    def _env(self) -> dict:
        assert self._dir is not None
        return process.worker_environment(self._dir, self.namespaces, self.limits.env)

    def runtime_reach(self) -> str | None:
        """Where the submission names the worker's runtime, if it does (cached)."""
        if not hasattr(self, "_reach"):
            from grader.sandbox.reach import runtime_reach
            self._reach = runtime_reach(self.submission)
        return self._reach

    def module_problem(self) -> StudentLoadError | None:
        """Why the module cannot be loaded at all (missing, or a link), if so."""
        if self.module.startswith(f"{RUNTIME_PACKAGE}."):
            return None  # one of the runtime's own (a trusted worker)
        path = self.submission / f"{self.module}.py"
        if path.is_symlink():
            return StudentLoadError(f"{self.module}.py is a link; submit the file itself")
        if not path.is_file():
            return StudentLoadError(f"{self.module}.py was not found in the submission")
        return None

    def _own_uid(self) -> bool:
        return (not self.trusted and self.confinement.own_uids and confine.is_root()
                and (self.namespaces or confine.can_drop_privileges()))

    def _first_start(self) -> None:
        self._dir = self._prepare_dir()
        if self._own_uid():
            self.uid = confine.fresh_uid()
            confine.give_to(self._dir / "submission" if self.namespaces else self._dir,
                            self.uid)
        if self.locked:
            # The submission folder and its files stay the grader's: readable,
            # not writable, by the worker (as root; otherwise only their write
            # bits are cleared, and ``fingerprint`` detects a change).
            sub = self._dir / "submission"
            for path in [sub, *sub.iterdir()]:
                if confine.is_root():
                    os.chown(path, 0, 0, follow_symlinks=False)
                os.chmod(path, 0o555 if path.is_dir() else 0o444)

    def start(self) -> None:
        self.load_error = self.module_problem()
        if self.load_error is not None:
            return  # no process for a module that is not there
        if self._dir is None:
            self._first_start()
        rlimits = self.limits.rlimits
        if rlimits is None:
            rlimits = confine.default_rlimits(self.limits.memory_bytes, self.uid)
        rlimits = self._memory_limit(rlimits)
        self.proc = None
        if self._forking():
            try:
                self.proc = self._spawn_forked(rlimits)
            except ForkServerError:
                self.kill()   # spawned below instead
                rlimits = self._memory_limit(rlimits)
        if self.proc is None:
            if not self.namespaces and not (self._dir / "runtime").is_dir():
                process.copy_runtime(self._dir, self.trusted)  # prepared for a fork server that is gone
            self.proc = self._spawn(rlimits)
        if not (self.namespaces and confine.is_root()) and self.disk is None:
            # no file system of its own for the machine's /tmp (the fallback),
            # nor, without root, for its folder: its writes are watched
            # instead, from its first start (a restart is no new allowance)
            self.disk = process.DiskWatch([self._dir, *process.SHARED_WRITABLE,
                                           tempfile.gettempdir(), *process.local_mounts()])
        self.output = _OutputTail(self.proc.stderr, self.limits.max_output_bytes)
        try:
            self._request({"op": "load", "module": self.module},
                          self._timeout(self.limits.import_timeout),
                          f"importing {self.module}.py")
        except StudentRaised as exc:
            r = exc.raised
            where = f" at {r.where}" if r.where else ""
            self.load_error = StudentLoadError(
                f"{self.module}.py could not be imported: {r.type_name}{where}: {r.message}")
        except StudentError as exc:
            self.load_error = StudentLoadError(f"{self.module}.py could not be imported: {exc}")

    def _memory_limit(self, rlimits: dict) -> dict:
        """A cgroup for the worker where one can be made (``self.cgroup``), in
        every mode: it counts every page the worker touches, and ending the
        worker kills every process inside (``process.end``).  Without one, an
        address-space limit is added to ``rlimits`` (shared and tmpfs memory
        then escape RLIMIT_DATA, and the tmpfs sizes bound what files can
        hold).  Returns the limits to apply."""
        rlimits = dict(rlimits)
        try:
            self.cgroup = memcg.MemoryCgroup(self.limits.memory_bytes)
        except OSError:
            self.cgroup = None
            if not bwrap.gpu_devices():  # CUDA reserves far more address space
                rlimits["RLIMIT_AS"] = self.limits.memory_bytes + AS_HEADROOM
        return rlimits

    def _join_cgroup(self, pid: int) -> None:
        """Before the worker runs any student code (it waits for its first
        request): all it starts then is inside."""
        if self.cgroup is not None:
            self.cgroup.procs.write_text(str(pid))

    def _spawn_forked(self, rlimits: dict):
        """Forked by the grading's fork server, with what a spawned worker gets:
        its own uid, limits, folder and cgroup."""
        inside = self.fork_server.sandbox_path(self._dir)
        env = process.private_environment(Path(inside), self.namespaces)
        env.update({k: str(v) for k, v in self.limits.env.items()})
        cfg = {"env": env, "rlimits": rlimits, "drop_to": self.uid,
               "cwd": f"{inside}/submission"}
        return self.fork_server.fork(cfg, on_forked=self._join_cgroup, wants=self.fork_wants)

    def _spawn(self, rlimits: dict) -> subprocess.Popen:
        """Under bubblewrap, or the fallback's plain child, as the worker's uid
        when there is one (``process.spawn``)."""
        cfg = {"env": dict(self.limits.env), "rlimits": rlimits}
        if self.trusted:   # the runtime's package only on its sys.path
            cfg["trusted"] = True
        if self.namespaces:
            cfg.update(drop_to=self.uid, cwd=f"{bwrap.SANDBOX}/submission")
        proc = process.spawn(self._dir, cfg, namespaces=self.namespaces, uid=self.uid,
                             env=self._env(), kernels=self.trusted,
                             tmpfs_bytes=min(self.limits.memory_bytes,
                                             process.WORKER_DISK_BYTES),
                             cgroup_procs=self.cgroup.procs if self.namespaces and
                             self.cgroup is not None else None)
        if not self.namespaces:
            try:
                self._join_cgroup(proc.pid)
            except OSError:
                process.end(proc)
                raise
        return proc

    def kill(self) -> None:
        """Kill the worker and everything it started (``process.end``)."""
        process.end(self.proc, uid=self.uid, cgroup=self.cgroup)
        self.proc = None
        if self.cgroup is not None:
            self.cgroup.remove()
            self.cgroup = None

    def fingerprint(self) -> str:
        """A digest of the worker's copy of the submission: a worker that runs
        as the grading user (no unprivileged user available) could write
        despite the cleared bits, so a change is also detected."""
        import hashlib
        digest = hashlib.sha256()
        sub = (self._dir / "submission") if self._dir is not None else None
        for path in sorted(sub.iterdir()) if sub is not None and sub.is_dir() else []:
            digest.update(path.name.encode() + b"\0")
            if path.is_file() and not path.is_symlink():
                digest.update(path.read_bytes())
        return digest.hexdigest()

    def close(self) -> None:
        self.kill()
        if self.uid is not None:
            confine.release_uid(self.uid)
            self.uid = None
        if self._dir is not None:
            if self.locked:             # writable again, so that it can be removed
                sub = self._dir / "submission"
                for path in [sub, *sub.iterdir()] if sub.is_dir() else []:
                    os.chmod(path, 0o700 if path.is_dir() else 0o600)
            process.remove_staging(self._dir)
            self._dir = None

    def _timeout(self, limit: float) -> float:
        """``limit``, or less where a budget has less left."""
        return min([limit] + [b.left() for b in self.budgets])

    def _ensure(self) -> None:
        if self.load_error is not None:
            raise self.load_error  # a module that failed to import is not retried
        for budget in self.budgets:
            if budget.left() <= 0:
                raise StudentTimeout(budget.spent_text())
        if self.failures >= self.limits.max_failures:
            raise StudentTimeout(f"not run: {self.failures} earlier calls into "
                                 f"{self.module}.py ran out of time or crashed, so the rest "
                                 "of this exercise is not tried")
        if self.proc is None or self.proc.poll() is not None:
            if self.proc is not None:
                self.kill()
            self.start()
        if self.load_error is not None:
            raise self.load_error

    # -- requests ----------------------------------------------------------
    def _request(self, req: dict, timeout: float, what: str):
        began = time.monotonic()
        try:
            return self._exchange(req, timeout, what)
        finally:
            for budget in self.budgets:
                budget.charge(time.monotonic() - began)

    def _exchange(self, req: dict, timeout: float, what: str):
        proc = self.proc
        assert proc is not None
        try:
            proc.stdin.write(codec.pack(req))
            proc.stdin.flush()
        except (BrokenPipeError, OSError):
            return self._died(what)
        deadline = time.monotonic() + max(timeout, 0.0)
        fd = proc.stdout.fileno()

        def read_exact(n: int) -> bytes:
            chunks, got = [], 0
            while got < n:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError
                if not select.select([fd], [], [], min(left, self._poll_s()))[0]:
                    self._check_disk(what)
                    continue
                chunk = os.read(fd, min(n - got, 1 << 20))
                if not chunk:
                    raise EOFError
                chunks.append(chunk)
                got += len(chunk)
            return b"".join(chunks)

        try:
            answer = codec.read_message(read_exact, self.limits.max_response_bytes)
        except TimeoutError:
            self.kill()
            self.failures += 1
            spent = next((b for b in self.budgets if b.left() <= 0), None)
            if spent is not None:
                raise StudentTimeout(f"{what} was stopped: " + spent.spent_text()
                                     .removeprefix("not run: ")) from None
            raise StudentTimeout(f"{what} did not finish within {timeout:g} s "
                                 "(the time limit); it was stopped") from None
        except EOFError:
            return self._died(what)
        except (codec.CodecError, ValueError, KeyError, IndexError, TypeError,
                RecursionError) as exc:
            self.kill()
            raise StudentBadValue(f"{what} sent back a malformed answer: {exc}") from None
        if not isinstance(answer, dict):
            self.kill()
            raise StudentBadValue(f"{what} sent back a malformed answer")
        if "raised" in answer and isinstance(answer["raised"], codec.Raised):
            raise StudentRaised(what, answer["raised"])
        if "bad_value" in answer:
            raise StudentBadValue(f"{what} returned something that is not plain data "
                                  f"(arrays, tensors, numbers, strings, lists): "
                                  f"{answer['bad_value']}")
        if "ok" not in answer:
            raise StudentBadValue(f"{what} sent back a malformed answer")
        return answer["ok"]

    def _poll_s(self) -> float:
        return process.DiskWatch.INTERVAL_S if self.disk is not None else 3600.0

    def _check_disk(self, what: str) -> None:
        """Stop the worker whose writes went past the fallback's bound (``process.DiskWatch``)."""
        over = self.disk.over() if self.disk is not None else None
        if over is None:
            return
        self.kill()
        self.failures += 1
        raise StudentCrash(f"the process running your code was stopped during {what}: it "
                           f"{over}")

    def _died(self, what: str):
        code = None
        if self.proc is not None:
            try:
                code = self.proc.wait(timeout=2)
            except subprocess.TimeoutExpired:
                pass
        over_memory = self.cgroup is not None and self.cgroup.oom_killed()
        self.kill()
        self.failures += 1   # a crash counts toward the cut-off as a time-out does
        out = self.output.text().strip() if self.output else ""
        tail = f"; its last output:\n{out[-1500:]}" if out else ""
        if self.namespaces and code is not None and code > 128:
            # bubblewrap, and a forked worker's keeper, report a signal as 128 + it
            code = -(code - 128)
        why = _describe_exit(code)
        if over_memory:
            why = (f"was stopped for going over its memory limit of "
                   f"{self.limits.memory_bytes >> 20} MB (shared memory and files in /tmp "
                   "count too)")
        raise StudentCrash(f"the process running your code {why} during {what}{tail}")

    def request(self, req: dict, what: str, timeout: float | None = None):
        self._ensure()
        return self._request(req, self._timeout(timeout or self.limits.call_timeout), what)


def needed_modules(folder: Path, module: str) -> list[Path]:
    """The submission's top-level modules that ``module`` can import: its
    own, those it imports, and theirs (``reach.imported_modules``); every
    module when an import cannot be read from the source."""
    from grader.sandbox.reach import imported_modules
    folder = Path(folder)
    found = imported_modules(folder, module)
    if found is None:
        return sorted(folder.glob("*.py"))
    return found


def _call_text(name: str, args, kwargs) -> str:
    def short(v):
        if hasattr(v, "shape") and hasattr(v, "dtype"):
            return f"<{type(v).__name__} {tuple(v.shape)} {str(v.dtype).replace('torch.', '')}>"
        text = repr(v)
        return text if len(text) <= 40 else text[:37] + "..."
    parts = [short(a) for a in args] + [f"{k}={short(v)}" for k, v in kwargs.items()]
    return f"{name}({', '.join(parts)})"


MAX_CALLS_KEPT = 8   # a test's calls kept for the line pointer


def _student_edition() -> bool:
    """The student edition has no hidden suites (grader.release)."""
    return not HIDDEN_SUITES_DIR.is_dir()


class StudentModule:
    """What a suite calls: ``student.softmax(x)``, ``student.SCORES``.

    Each attribute access or call is a request to the worker.  Values come
    back decoded from plain data, each call under ``timeout`` (a test's
    ``timeout_s`` marker; None: the worker's own limit).  ``student.probe(name,
    ...)`` runs a trusted probe on the module inside the worker."""

    def __init__(self, worker: Worker, timeout: float | None = None,
                 called: list[str] | None = None, answers: list | None = None):
        self._worker = worker
        self._timeout = timeout
        # The functions a test called, in order (``grader.rootcause`` reads them).
        self.called: list[str] = [] if called is None else called
        # What came back to the test (``grader.fault`` tells by them whether an
        # exception in the grader's code was raised by a malformed answer).
        self.answers: list = [] if answers is None else answers
        # The test's last calls, (answer, name, args, kwargs, seconds): the line pointer
        # (``grader.linepointer``) traces again the one whose answer was wrong.
        self.calls: list[tuple] = []

    def __getattr__(self, name: str):
        if name.startswith("__"):
            raise AttributeError(name)
        mod = self._worker.module
        try:
            value = self._worker.request({"op": "getattr", "name": name},
                                         f"reading {mod}.{name}", self._timeout)
        except StudentRaised as exc:
            if exc.raised.is_a("AttributeError"):
                raise StudentError(f"{mod}.py does not define {name}") from None
            raise
        if isinstance(value, dict) and value == {"$callable": True}:
            return lambda *args, **kwargs: self.call(name, *args, **kwargs)
        self.answers.append(value)
        return value

    def call(self, name: str, *args, **kwargs):
        what = _call_text(f"{self._worker.module}.{name}", args, kwargs)
        self.called.append(name)
        start = time.monotonic()
        try:
            value = self._worker.request({"op": "call", "name": name, "args": list(args),
                                          "kwargs": kwargs}, what, self._timeout)
        except StudentRaised as exc:
            if exc.raised.is_a("AttributeError") and f"'{name}'" in exc.raised.message \
                    and "module" in exc.raised.message:
                raise StudentError(f"{self._worker.module}.py does not define {name}") from None
            raise
        self.answers.append(value)
        took = time.monotonic() - start
        self.calls = self.calls[-(MAX_CALLS_KEPT - 1):] + [(value, name, args, kwargs, took)]
        return value

    @property
    def call_limit(self) -> float:
        """The time limit of one of this test's calls, in seconds."""
        return self._timeout if self._timeout is not None else self._worker.limits.call_timeout

    def trace_lines(self, name: str | None, args, kwargs, budget: float):
        """What each line of the module's own file made while ``name(*args,
        **kwargs)`` ran again (``None``: while the module's code ran again),
        as the shared probe ``linetrace.trace`` returns it; None where the
        submission imports the runtime (what it reports could be forged)."""
        if self._worker.runtime_reach() is not None:
            return None
        return self._worker.request(
            {"op": "probe", "name": "linetrace.trace",
             "args": [name, list(args), dict(kwargs), float(budget)], "kwargs": {}},
            f"tracing {self._worker.module}", self._timeout)

    def probe(self, name: str, *args, **kwargs):
        reach = self._worker.runtime_reach()
        if reach is not None:
            # What the probe would measure could be forged (grader.sandbox.reach).
            import pytest
            pytest.skip(f"under review: the submission imports the grader's in-worker "
                        f"runtime ({reach}), so what it measures here cannot be trusted; "
                        "a person decides these points")
        try:
            return self._worker.request({"op": "probe", "name": name, "args": list(args),
                                         "kwargs": kwargs},
                                        f"checking {self._worker.module} ({name})",
                                        self._timeout)
        except StudentRaised as exc:
            # The student edition ships some probes as stubs (grader.release's
            # GRADING_ONLY): the check that needs one is skipped there, said so.
            # Only there: a class of that name raised by student code in the
            # instructors' grader would otherwise shrink the test's maximum.
            if exc.raised.is_a("GradingOnly") and _student_edition():
                import pytest
                pytest.skip(exc.raised.message)
            raise
