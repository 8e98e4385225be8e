"""The grading process's side of the sandbox: start, call and kill workers.

``Worker`` runs one exercise module of one submission in a child process
(``runtime/worker.py``), in a private directory that holds only a copy of the
submission's ``.py`` files.  The worker runtime (``grader/sandbox/runtime/``)
is one folder used as it is: under namespaces bubblewrap binds it read-only
into the sandbox (nothing is written into it or copied at start); without them
it is copied whole, with one ``copytree``, into the private directory, because
the worker's fresh uid may not be able to read where the grader is installed (a
checkout or a Python under ``/root``, mode 700).  Its ``kernels/`` (the
reference kernels) is seen by trusted workers only (``kernels=True``): hidden
from a student's worker in both cases.  Every request has a time limit; a
timeout kills the worker's whole process group, a crash or exit is reported,
and the next request starts a fresh worker.  ``StudentModule`` is the object a
suite sees as ``student``: attribute access and calls become requests, and
answers come back as plain data (see ``codec``).
"""
from __future__ import annotations

import json
import os
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from grader.paths import HIDDEN_SUITES_DIR, KERNELS_DIR, RUNTIME_DIR, RUNTIME_PACKAGE
from grader.sandbox import bwrap, confine, memcg
from grader.sandbox.runtime import codec


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
    """Per-worker limits.  ``call_timeout`` applies to every request."""

    call_timeout: float = 10.0
    import_timeout: float = 60.0
    max_timeouts: int = 4      # after this many, further calls fail at once
    max_response_bytes: int = 256 << 20
    max_output_bytes: int = 64 << 10  # stderr kept for feedback (head + tail)
    memory_bytes: int = 8 << 30       # RLIMIT_DATA, and the cgroup's limit
    drop_privileges: bool = True      # as root: run as a fresh unprivileged uid
    namespaces: bool = False          # run under bubblewrap (see ``bwrap``)
    rlimits: dict | None = None       # None: confine.default_rlimits
    env: Mapping = field(default_factory=dict)  # read when the worker starts


# Address space a worker needs beyond its data when no cgroup counts its
# memory: importing PyTorch and Triton maps about 0.8 GB (CPU build, measured:
# VmSize 830 MB, of which 225 MB data), plus thread stacks; malloc's arenas
# are bounded by MALLOC_ARENA_MAX.  Any more would let shared memory through.
AS_HEADROOM = 1 << 30


def _die_with_parent_hook():
    """For the fallback's child, run between fork and exec (after its uid
    switch, which would clear it): SIGKILL when the grading process dies.  Its
    own detached children are not covered; bubblewrap's PID namespace is.
    ctypes is loaded here, in the parent: the child must not import."""
    if not sys.platform.startswith("linux"):
        return None
    import ctypes
    prctl = ctypes.CDLL(None, use_errno=True).prctl
    PR_SET_PDEATHSIG = 1

    def hook() -> None:
        prctl(PR_SET_PDEATHSIG, int(signal.SIGKILL))
    return hook


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


STAGING_PREFIX = "attn-grade-"
_stale_removed = False


def staging_folder(kind: str = "") -> Path:
    """A private folder for workers (0700), named after this process:
    ``attn-grade-<pid>-<kind>...`` in the temp folder.  A grader killed with
    ``kill -9`` cannot remove its own; the next one does
    (``remove_stale_staging``)."""
    return Path(tempfile.mkdtemp(prefix=f"{STAGING_PREFIX}{os.getpid()}-{kind}"))


def staging_owner(folder: Path) -> int | None:
    """The pid of the grader a staging folder belongs to (None: not one)."""
    head = folder.name[len(STAGING_PREFIX):].split("-")[0]
    return int(head) if folder.name.startswith(STAGING_PREFIX) and head.isdigit() else None


def stale_staging(min_age_s: float = 600.0, pid: int | None = None) -> list[Path]:
    """The staging folders of graders that are gone: the pid in the name is
    not running, and the folder was last changed ``min_age_s`` ago (a grader
    in another PID namespace sharing this temp folder keeps its own).
    ``pid``: only that grader's, at any age (batch, after killing a grading
    that ran out of time)."""
    stale = []
    now = time.time()
    pattern = f"{STAGING_PREFIX}{pid if pid is not None else '*'}-*"
    for folder in Path(tempfile.gettempdir()).glob(pattern):
        owner = staging_owner(folder)
        if owner is None or owner == os.getpid() or Path(f"/proc/{owner}").exists():
            continue
        try:
            if pid is None and now - folder.lstat().st_mtime < min_age_s:
                continue
        except OSError:
            continue
        if folder.is_dir() and not folder.is_symlink():
            stale.append(folder)
    return stale


def remove_stale_staging(min_age_s: float = 600.0, pid: int | None = None) -> list[Path]:
    """Remove ``stale_staging(min_age_s, pid)``; returns what was removed."""
    stale = stale_staging(min_age_s, pid)
    for folder in stale:
        shutil.rmtree(folder, ignore_errors=True)
    return stale


def remove_stale_staging_once() -> None:
    """``remove_stale_staging`` the first time a grading runs in this process."""
    global _stale_removed
    if not _stale_removed and sys.platform.startswith("linux"):
        _stale_removed = True
        remove_stale_staging()


def worker_environment(private: Path, namespaces: bool, extra: Mapping | None = None) -> dict:
    """A scrubbed environment: nothing of the grader's but what Python,
    BLAS and the GPU need; home, temp and caches inside the private folder
    (under namespaces, the sandbox's own /tmp)."""
    keep = ("PATH", "LANG", "LC_ALL", "CUDA_VISIBLE_DEVICES", "LD_LIBRARY_PATH",
            "OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE", "OMP_NUM_THREADS", "MKL_NUM_THREADS",
            "OPENBLAS_NUM_THREADS")
    env = {k: os.environ[k] for k in keep if k in os.environ}
    if namespaces:
        env["USER"] = env["LOGNAME"] = "student"  # no passwd entry for its uid
        env["MALLOC_ARENA_MAX"] = "2"  # reserved arenas count in an address-space limit
    # One BLAS/OpenMP thread unless the grader was told otherwise: workers of
    # parallel gradings that each spin a thread per core slow one another
    # down tenfold; the exercises' own measurements pin their threads.
    for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
        env.setdefault(var, "1")
    env.update(private_environment(private, namespaces))
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    env["PYTHONUNBUFFERED"] = "1"
    env.update({k: str(v) for k, v in (extra or {}).items()})
    return env


def private_environment(private: Path, namespaces: bool) -> dict:
    """The variables that point into a worker's private folder (under
    namespaces, the sandbox's own tmpfs /tmp)."""
    tmp = Path("/tmp") if namespaces else private / "tmp"
    home = Path("/tmp") if namespaces else private
    return {"HOME": str(home), "TMPDIR": str(tmp), "MPLCONFIGDIR": str(tmp),
            "TRITON_CACHE_DIR": str(tmp / "triton")}


class Worker:
    """One exercise module of one submission, run in a child process.

    ``module`` is a module of the submission, or for a trusted worker one of
    the runtime's own (``runtime.kernels.flash``); ``kernels=True`` lets the
    worker see the runtime's reference kernels (trusted workers only)."""

    def __init__(self, submission: Path, module: str, limits: Limits | None = None, *,
                 kernels: bool = False, zygote=None):
        self.submission = Path(submission)
        self.module = module
        self.limits = limits or Limits()
        self.kernels = kernels
        # A student's worker of a grading: forked by the grading's zygote
        # (``grader.sandbox.zygote``) while it runs, else spawned.
        self.zygote = None if kernels else zygote
        self.proc: subprocess.Popen | None = None
        self.output: _OutputTail | None = None
        self._dir: Path | None = None
        self.load_error: StudentLoadError | None = None
        self.timeouts = 0
        self.uid: int | None = None
        self.cgroup: memcg.MemoryCgroup | None = None

    # -- lifecycle ---------------------------------------------------------
    def _forking(self) -> bool:
        return self.zygote is not None and self.zygote.alive

    def _prepare_dir(self) -> Path:
        forking = self._forking()
        root = self.zygote.folder() if forking else staging_folder()
        sub = root / "submission"
        sub.mkdir()
        for path in sorted(self.submission.glob("*.py")):
            # Never a link: copied as root it would bring whatever it points
            # at (a hidden suite, say) into the worker's reach.
            if path.is_file() and not path.is_symlink():
                shutil.copyfile(path, sub / path.name, follow_symlinks=False)
        if not self.limits.namespaces and not forking:
            self._copy_runtime(root)
        return root

    def _copy_runtime(self, root: Path) -> None:
        """The whole runtime folder, as it is (bubblewrap binds it instead),
        but its reference kernels for trusted workers only.  A forked worker
        has it from its zygote."""
        def ignore(folder, names):
            hidden = not self.kernels and Path(folder) == RUNTIME_DIR
            return {KERNELS_DIR.name} & set(names) if hidden else set()
        shutil.copytree(RUNTIME_DIR, root / "runtime", ignore=ignore)

    def _env(self) -> dict:
        assert self._dir is not None
        return worker_environment(self._dir, self.limits.namespaces, self.limits.env)

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

    def start(self) -> None:
        self.load_error = self.module_problem()
        if self.load_error is not None:
            return  # no process for a module that is not there
        if self._dir is None:
            self._dir = self._prepare_dir()
            (self._dir / "tmp").mkdir()
            if self.limits.drop_privileges and confine.is_root() and (
                    self.limits.namespaces or confine.can_drop_privileges()):
                self.uid = confine.fresh_uid()
                if self.limits.namespaces:
                    confine.give_to(self._dir / "submission", self.uid)
                else:
                    confine.give_to(self._dir, self.uid)
        rlimits = self.limits.rlimits
        if rlimits is None:
            rlimits = confine.default_rlimits(self.limits.memory_bytes, self.uid)
        self.proc = None
        if self._forking():
            from grader.sandbox.zygote import ZygoteError
            try:
                self.proc = self._spawn_forked(rlimits)
            except ZygoteError:
                self.kill()   # spawned below instead
        if self.proc is None:
            if not self.limits.namespaces and not (self._dir / "runtime").is_dir():
                self._copy_runtime(self._dir)   # prepared for a zygote that is gone
            if self.limits.namespaces:
                self.proc = self._spawn_sandboxed(rlimits)
            else:
                self.proc = self._spawn_plain(rlimits)
        self.output = _OutputTail(self.proc.stderr, self.limits.max_output_bytes)
        try:
            self._request({"op": "load", "module": self.module},
                          self.limits.import_timeout, f"importing {self.module}.py")
        except StudentRaised as exc:
            r = exc.raised
            where = f" at {r.where}" if r.where else ""
            self.load_error = StudentLoadError(
                f"{self.module}.py could not be imported: {r.type_name}{where}: {r.message}")
        except StudentError as exc:
            self.load_error = StudentLoadError(f"{self.module}.py could not be imported: {exc}")

    def _memory_limit(self, rlimits: dict) -> dict:
        """Under namespaces: a memory cgroup for the worker where one can be
        made (``self.cgroup``), else an address-space limit added to
        ``rlimits`` (shared and tmpfs memory then escape RLIMIT_DATA, and the
        tmpfs sizes bound what files can hold).  Returns the limits to apply."""
        rlimits = dict(rlimits)
        try:
            self.cgroup = memcg.MemoryCgroup(self.limits.memory_bytes)
        except OSError:
            self.cgroup = None
            if not bwrap.gpu_devices():  # CUDA reserves far more address space
                rlimits["RLIMIT_AS"] = self.limits.memory_bytes + AS_HEADROOM
        return rlimits

    def _spawn_forked(self, rlimits: dict):
        """Forked by the grading's zygote, with what a spawned worker gets:
        its own uid, limits, folder and, under namespaces, ``_memory_limit``'s
        memory cgroup or address-space limit."""
        if self.limits.namespaces:
            rlimits = self._memory_limit(rlimits)
        inside = self.zygote.sandbox_path(self._dir)
        env = private_environment(Path(inside), self.limits.namespaces)
        env.update({k: str(v) for k, v in self.limits.env.items()})
        cfg = {"env": env, "rlimits": rlimits, "drop_to": self.uid,
               "cwd": f"{inside}/submission"}

        def join_cgroup(pid: int) -> None:
            if self.cgroup is not None:
                self.cgroup.procs.write_text(str(pid))
        return self.zygote.fork(cfg, on_forked=join_cgroup)

    def _spawn_plain(self, rlimits: dict) -> subprocess.Popen:
        """The fallback: a child process, as the worker's uid when there is one."""
        cfg = {"env": dict(self.limits.env), "rlimits": rlimits}
        as_user = {}
        if self.uid is not None:
            as_user = dict(user=self.uid, group=self.uid, extra_groups=[], umask=0o077)
        return subprocess.Popen(
            [sys.executable, "-I", str(self._dir / "runtime" / "worker.py"), json.dumps(cfg)],
            cwd=self._dir / "submission", env=self._env(), stdin=subprocess.PIPE,
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True,
            preexec_fn=_die_with_parent_hook(), **as_user)

    def _spawn_sandboxed(self, rlimits: dict) -> subprocess.Popen:
        """Under bubblewrap, within ``_memory_limit``'s limits."""
        rlimits = self._memory_limit(rlimits)
        cfg = {"env": dict(self.limits.env), "rlimits": rlimits, "drop_to": self.uid,
               "cwd": f"{bwrap.SANDBOX}/submission"}
        worker = f"{bwrap.SANDBOX}/runtime/worker.py"
        cmd = bwrap.command(self._dir, [sys.executable, "-I", worker, json.dumps(cfg)],
                            root=confine.is_root(), kernels=self.kernels,
                            tmpfs_bytes=min(self.limits.memory_bytes, 4 << 30))
        if self.cgroup is not None:
            # Join the cgroup before bubblewrap starts, so all it forks is inside.
            cmd = ["/bin/sh", "-c", 'echo $$ > "$0" && exec "$@"', str(self.cgroup.procs),
                   *cmd]
        # umask 022: the folders bubblewrap makes for its mount points (/root,
        # /sandbox) must let the worker's user through once it has switched.
        return subprocess.Popen(cmd, cwd="/", env=self._env(), stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                start_new_session=True, umask=0o022)

    def kill(self) -> None:
        if self.proc is not None:
            try:  # the whole group: children it forked die with it
                os.killpg(self.proc.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        if self.uid is not None:
            confine.kill_uid(self.uid)  # also those that left the group
        if self.proc is not None:
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:  # pragma: no cover
                pass
            for stream in (self.proc.stdin, self.proc.stdout):
                try:
                    stream.close()
                except OSError:
                    pass
        self.proc = None
        if self.cgroup is not None:
            self.cgroup.remove()
            self.cgroup = None

    def close(self) -> None:
        self.kill()
        if self.uid is not None:
            confine.release_uid(self.uid)
            self.uid = None
        if self._dir is not None:
            shutil.rmtree(self._dir, ignore_errors=True)
            self._dir = None

    def _ensure(self) -> None:
        if self.load_error is not None:
            raise self.load_error  # a module that failed to import is not retried
        if self.timeouts >= self.limits.max_timeouts:
            raise StudentTimeout(f"not run: {self.timeouts} earlier calls into "
                                 f"{self.module}.py ran out of time, so the rest of this "
                                 "exercise is not tried")
        if self.proc is None or self.proc.poll() is not None:
            if self.proc is not None:
                self.kill()
            self.start()
        if self.load_error is not None:
            raise self.load_error

    # -- requests ----------------------------------------------------------
    def _request(self, req: dict, timeout: float, what: str):
        proc = self.proc
        assert proc is not None
        try:
            proc.stdin.write(codec.pack(req))
            proc.stdin.flush()
        except (BrokenPipeError, OSError):
            return self._died(what)
        deadline = time.monotonic() + timeout
        fd = proc.stdout.fileno()

        def read_exact(n: int) -> bytes:
            chunks, got = [], 0
            while got < n:
                left = deadline - time.monotonic()
                if left <= 0 or not select.select([fd], [], [], left)[0]:
                    raise TimeoutError
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
            self.timeouts += 1
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

    def _died(self, what: str):
        code = None
        if self.proc is not None:
            try:
                code = self.proc.wait(timeout=2)
            except subprocess.TimeoutExpired:
                pass
        over_memory = self.cgroup is not None and self.cgroup.oom_killed()
        # A forked worker's code comes from its zygote's wait(), as Popen's would.
        bubblewrapped = self.limits.namespaces and not getattr(self.proc, "forked", False)
        self.kill()
        out = self.output.text().strip() if self.output else ""
        tail = f"; its last output:\n{out[-1500:]}" if out else ""
        if bubblewrapped and code is not None and code > 128:
            code = -(code - 128)  # bubblewrap reports a signal as 128 + its number
        why = _describe_exit(code)
        if over_memory:
            why = (f"was stopped for going over its memory limit of "
                   f"{self.limits.memory_bytes >> 20} MB (shared memory and files in /tmp "
                   "count too)")
        raise StudentCrash(f"the process running your code {why} during {what}{tail}")

    def request(self, req: dict, what: str, timeout: float | None = None):
        self._ensure()
        return self._request(req, timeout or self.limits.call_timeout, what)


def _call_text(name: str, args, kwargs) -> str:
    def short(v):
        if hasattr(v, "shape") and hasattr(v, "dtype"):
            return f"<{type(v).__name__} {tuple(v.shape)} {str(v.dtype).replace('torch.', '')}>"
        text = repr(v)
        return text if len(text) <= 40 else text[:37] + "..."
    parts = [short(a) for a in args] + [f"{k}={short(v)}" for k, v in kwargs.items()]
    return f"{name}({', '.join(parts)})"


def _student_edition() -> bool:
    """The student edition has no hidden suites (grader.release)."""
    return not HIDDEN_SUITES_DIR.is_dir()


class StudentModule:
    """What a suite calls: ``student.softmax(x)``, ``student.SCORES``.

    Each attribute access or call is a request to the worker.  Values come
    back decoded from plain data.  ``student.with_timeout(60)`` gives a view
    with another time limit; ``student.probe(name, ...)`` runs a trusted probe
    on the module inside the worker."""

    def __init__(self, worker: Worker, timeout: float | None = None,
                 called: list[str] | None = None):
        self._worker = worker
        self._timeout = timeout
        # The functions a test called, in order (``grader.rootcause`` reads them).
        self.called: list[str] = [] if called is None else called

    @property
    def module_name(self) -> str:
        return self._worker.module

    def with_timeout(self, seconds: float) -> "StudentModule":
        return StudentModule(self._worker, seconds, self.called)

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
        return value

    def call(self, name: str, *args, **kwargs):
        what = _call_text(f"{self._worker.module}.{name}", args, kwargs)
        self.called.append(name)
        try:
            return self._worker.request({"op": "call", "name": name, "args": list(args),
                                         "kwargs": kwargs}, what, self._timeout)
        except StudentRaised as exc:
            if exc.raised.is_a("AttributeError") and f"'{name}'" in exc.raised.message \
                    and "module" in exc.raised.message:
                raise StudentError(f"{self._worker.module}.py does not define {name}") from None
            raise

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
