"""The grading process's side of a grading's fork server (``runtime/fork_server_loop.py``).

One ``ForkServer`` per grading: a sandboxed process like a worker (under
bubblewrap with namespaces, else a plain child), started before the first
worker, that imports NumPy and PyTorch once (and what the exercises' tests
import besides, ``Exercise.preload``: matplotlib, PyTorch's trace machinery),
each when the first worker that wants it is forked, and forks each of the
grading's workers.  Every worker keeps what a spawned one has: its own copy
of the submission in its own folder, its own uid, cgroup and resource
limits, its own session, pipes and time limits, and it dies with the grading.
Under namespaces each forked worker also gets mount, IPC and PID namespaces
of its own, with fresh ``/tmp``, ``/var/tmp``, ``/dev/shm`` and ``/proc``
(``runtime/fork_server_loop.py``): nothing one exercise leaves there (a file, a SysV
segment, a detached process) is seen by the next, and all of it goes when
its worker ends.  That needs root (the fork server's sandbox keeps CAP_SYS_ADMIN
for it); where the fork server cannot do it, it is not used under namespaces.
Without namespaces (the fallback) workers share the machine's temp folders,
as spawned ones do there.

The command line begins a grading's fork server (``ForkServer.begin``, by
``launch.begin_fork_server``) before it imports the grader's core, and the
grading takes that one when it would have asked for the same: the fork
server's imports run beside the grading process's own start.

Only ``grader.sandbox.launch`` makes a fork server.  If it cannot start or dies,
workers are spawned instead: the fork server changes how fast a worker starts,
never whether it does, nor how it is confined.
"""
from __future__ import annotations

import json
import os
import select
import shutil
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

from grader.sandbox import bwrap, confine, fonts, process

# What the exercises' ``needs`` preload (Triton is left to the worker: ex07's
# TRITON_INTERPRET must be set before it is imported).
PRELOAD = {"NumPy": "numpy", "PyTorch": "torch"}
READY_TIMEOUT = 120.0
FORK_TIMEOUT = 30.0
WORKSPACE = f"{bwrap.SANDBOX}/w"   # the fork server's folder, in its sandbox


def wanted(needs, extra=()) -> tuple[str, ...]:
    """The modules a worker of an exercise with these ``needs`` and
    ``Exercise.preload`` (``extra``) wants the fork server to have imported
    before it forks it."""
    return tuple(PRELOAD[n] for n in PRELOAD if n in needs) + tuple(extra)


def _heavy(module: str) -> bool:
    return module == "torch" or module.startswith("torch.")


def supported() -> bool:
    return sys.platform.startswith("linux") and hasattr(socket, "send_fds")


class ForkServerError(Exception):
    pass


class ForkedProcess:
    """A worker forked by the fork server, with the parts of ``subprocess.Popen``
    that ``Worker`` uses: ``pid`` (as the grading process sees it), the three
    pipes, ``poll`` and ``wait``."""

    forked = True

    def __init__(self, fork_server: "ForkServer", inner: int, pid: int, stdin, stdout, stderr):
        self._fork_server, self._inner, self.pid = fork_server, inner, pid
        self.stdin, self.stdout, self.stderr = stdin, stdout, stderr
        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is None:
            self.returncode = self._fork_server.exit_code(self._inner, timeout=0)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        if self.returncode is None:
            code = self._fork_server.exit_code(self._inner, timeout=timeout)
            if code is None:
                raise subprocess.TimeoutExpired("worker", timeout)
            self.returncode = code
        return self.returncode


class ForkServer:
    def __init__(self, needs: set[str], *, namespaces: bool, memory_bytes: int,
                 extra: tuple[str, ...] = (), font_cache: Path | None = None):
        """``extra``: modules preloaded beside the needs' libraries (the
        exercises' ``Exercise.preload``).  It imports each when the first
        worker that wants it is forked (``fork``'s ``wants``), PyTorch's last:
        A's, B's and C's workers, asked for first, start without waiting for
        PyTorch.  ``font_cache``: where `check` keeps matplotlib's font list
        (``fonts``), given to it before it imports matplotlib."""
        self.font_cache = font_cache
        self.preload = sorted(dict.fromkeys(wanted(needs, extra)), key=_heavy)   # stable
        self.preloaded: list[str] = []   # what it had imported at its latest fork
        self.namespaces = namespaces
        self.memory_bytes = memory_bytes
        self.root: Path | None = None
        self.proc: subprocess.Popen | None = None
        self.failed: str | None = None
        self._sock: socket.socket | None = None
        self._lock = threading.Lock()
        self._changed = threading.Condition()
        self._forked: dict[int, int] = {}     # request id -> pid (the fork server's view)
        self._exits: dict[int, int] = {}      # pid (the fork server's view) -> exit code
        self._next = 0
        self._pidns: str | None = None
        self._reader: threading.Thread | None = None
        self._folders = 0
        self._eager: list[str] = []   # imported at once (``begin``), not when first wanted

    # -- lifecycle ---------------------------------------------------------
    @property
    def alive(self) -> bool:
        return self.failed is None and self.proc is not None and self.proc.poll() is None

    def begin(self, eager: tuple[str, ...] = ()) -> None:
        """Spawn it now, without waiting for it (``start`` waits), importing
        ``eager`` of its preloads as soon as it runs instead of when a worker
        first asks for them: a grading about to begin (``launch.begin_fork_server``)
        whose first worker will want them.  The fork server dies with the
        thread that calls this (bubblewrap's --die-with-parent): only a
        thread that outlives the grading may, the main thread."""
        self._eager = [m for m in self.preload if m in eager]
        try:
            self._spawn()
        except Exception as exc:
            self.failed = f"{type(exc).__name__}: {exc}"
            self.close()

    def start(self) -> None:
        """Start it (unless ``begin`` did) and wait until it is ready.  On any
        failure ``failed`` says why and workers are spawned instead."""
        if self.failed is not None:
            return
        try:
            if self.proc is None:
                self._spawn()
            self._await_ready()
        except Exception as exc:
            self.failed = f"{type(exc).__name__}: {exc}"
            self.close()

    def same(self, other: "ForkServer") -> bool:
        """Would ``other``, not started, be this one?  (``launch``: a fork
        server begun early serves only the grading it was begun for.)"""
        return (self.preload, self.namespaces, self.memory_bytes, self.font_cache) == \
            (other.preload, other.namespaces, other.memory_bytes, other.font_cache)

    def _spawn(self) -> None:
        self.root = process.staging_folder("fork_server-")
        os.chmod(self.root, 0o711)   # each worker's uid passes through to its own folder
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self._sock = ours
        tmpfs = min(self.memory_bytes, process.WORKER_DISK_BYTES)
        # Under namespaces each forked worker gets namespaces and temp folders
        # of its own (runtime/fork_server_loop.py), which needs root's CAP_SYS_ADMIN in
        # the fork server's sandbox; without it workers are spawned, each in a
        # sandbox of its own (``launch``).
        own = {"tmpfs_bytes": tmpfs, "files": process.WORKER_FILES,
               "keep": bwrap.under_tmpfs()} if self.namespaces else None
        cfg = {"fork_server": {"preload": self.preload, "eager": self._eager,
                               "own_namespaces": own}}
        font_list = None
        if any(m.split(".")[0] == "matplotlib" for m in self.preload):
            font_list = fonts.font_list(self.font_cache)
        if font_list is not None:   # a copy in its (own user's) folder: never the cache
            shutil.copyfile(font_list, self.root / font_list.name)
            inside = Path(WORKSPACE) if self.namespaces else self.root
            cfg["fork_server"]["font_list"] = str(inside / font_list.name)
        env = process.worker_environment(self.root, self.namespaces)
        if not self.namespaces:
            # Only the runtime's student part, readable by the workers' uids.
            process.copy_runtime(self.root, kernels=False)
        # Its own complaints (an import that fails) go to a file of the
        # grader's: a pipe nobody reads while it runs could fill and stall it.
        fd = os.open(self.root / "fork_server.err", os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        err = os.fdopen(fd, "wb")
        try:
            self.proc = process.spawn(self.root, cfg, namespaces=self.namespaces, uid=None,
                                      env=env, tmpfs_bytes=tmpfs, workspace=True,
                                      admin=self.namespaces, stdin=theirs,
                                      stdout=subprocess.DEVNULL, stderr=err)
        finally:
            theirs.close()
            err.close()

    def _await_ready(self) -> None:
        ready = self._receive(READY_TIMEOUT)
        if "ready" not in ready:
            raise ForkServerError(f"unexpected first message {ready!r}")
        if self.namespaces and not ready.get("own_namespaces"):
            raise ForkServerError("it cannot give a worker namespaces of its own here")
        if self.namespaces:
            pid = self._outer_pid(int(ready["ready"]), below=self.proc.pid)
            self._pidns = os.readlink(f"/proc/{pid}/ns/pid")
        self._reader = threading.Thread(target=self._read, name="attn-grade-fork_server",
                                        daemon=True)
        self._reader.start()

    def _receive(self, timeout: float) -> dict:
        assert self._sock is not None and self.root is not None
        if not select.select([self._sock], [], [], timeout)[0]:
            raise ForkServerError(f"no answer within {timeout:g} s")
        data = self._sock.recv(1 << 16)
        if not data:
            try:
                said = (self.root / "fork_server.err").read_text(errors="replace")[-800:]
            except OSError:
                said = ""
            raise ForkServerError(f"it exited: {said.strip()}")
        return json.loads(data)

    def _read(self) -> None:
        """Answers and exits, from the fork server, until it is gone."""
        assert self._sock is not None
        while True:
            try:
                data = self._sock.recv(1 << 16)
            except OSError:
                data = b""
            with self._changed:
                if not data:
                    self.failed = self.failed or "it exited"
                    self._changed.notify_all()
                    return
                try:
                    msg = json.loads(data)
                except ValueError:
                    continue
                if "forked" in msg:
                    self._forked[int(msg["forked"])] = int(msg["pid"])
                    self.preloaded = [str(m) for m in msg.get("preloaded", [])]
                elif "exited" in msg:
                    self._exits[int(msg["exited"])] = int(msg["code"])
                self._changed.notify_all()

    def close(self) -> None:
        if self._sock is not None:
            try:
                self._sock.close()
            except OSError:
                pass
        if self.proc is not None:
            process.end(self.proc)
        if self._reader is not None:
            self._reader.join(timeout=5)
        if self.root is not None:
            process.remove_staging(self.root)
            self.root = None
        with self._changed:
            self._changed.notify_all()

    # -- workers -----------------------------------------------------------
    def folder(self) -> Path:
        """A new folder for one worker, inside the fork server's (its sandbox sees
        it at ``sandbox_path``)."""
        assert self.root is not None
        with self._lock:
            self._folders += 1
            folder = self.root / str(self._folders)
        folder.mkdir(mode=0o711)
        os.chmod(folder, 0o711)
        return folder

    def sandbox_path(self, folder: Path) -> str:
        """Where a worker's folder lies as the worker sees it."""
        return f"{WORKSPACE}/{folder.name}" if self.namespaces else str(folder)

    def fork(self, cfg: dict, on_forked=None, wants=None) -> ForkedProcess:
        """Fork a worker that runs ``worker.serve(cfg)``, once the fork server
        has imported ``wants`` of its preloads (None: all of them; one that
        fails to import is left to the worker).  ``on_forked(pid)``
        runs before the worker reads its first request (to move it into its
        memory cgroup)."""
        if wants is None:
            wants = self.preload
        if not self.alive:
            raise ForkServerError(self.failed or "not running")
        fds = [os.pipe() for _ in range(3)]   # (read, write) each
        child = [fds[0][0], fds[1][1], fds[2][1]]
        ours = [fds[0][1], fds[1][0], fds[2][0]]
        with self._lock:
            self._next += 1
            ident = self._next
            try:
                socket.send_fds(self._sock, [json.dumps({
                    "op": "fork", "id": ident, "cfg": cfg, "wants": list(wants)}).encode()],
                    child)
            except OSError as exc:
                for fd in child + ours:
                    os.close(fd)
                raise ForkServerError(f"could not ask for a worker: {exc}") from None
        for fd in child:
            os.close(fd)
        with self._changed:
            # (what it still imports for this worker: up to a start's wait)
            if not self._changed.wait_for(lambda: ident in self._forked or
                                          self.failed is not None,
                                          FORK_TIMEOUT + (READY_TIMEOUT if wants else 0)):
                self.failed = "it did not fork in time"
            inner = self._forked.pop(ident, None)
        if inner is None:
            for fd in ours:
                os.close(fd)
            raise ForkServerError(self.failed or "no worker")
        pid = self._outer_pid(inner) if self.namespaces else inner
        proc = ForkedProcess(self, inner, pid, os.fdopen(ours[0], "wb"),
                             os.fdopen(ours[1], "rb", buffering=0),
                             os.fdopen(ours[2], "rb", buffering=0))
        if on_forked is not None:
            try:
                on_forked(pid)
            except Exception as exc:
                try:
                    os.killpg(pid, 9)
                except OSError:
                    pass
                for stream in (proc.stdin, proc.stdout, proc.stderr):
                    stream.close()
                raise ForkServerError(f"could not set up the worker: {exc}") from None
        return proc

    def exit_code(self, inner: int, timeout: float | None) -> int | None:
        with self._changed:
            self._changed.wait_for(lambda: inner in self._exits or self.failed is not None
                                   or self.proc is None, timeout)
            if inner in self._exits:
                return self._exits[inner]
            if self.failed is not None:
                return -9    # the fork server is gone, and its workers with it
            return None

    def _outer_pid(self, inner: int, below: int | None = None) -> int:
        """The pid, as this process sees it, of a process of the fork server's PID
        namespace (``/proc/*/status``'s NSpid): in that namespace
        (``_pidns``) or, for the fork server itself, a descendant of ``below``."""
        for _ in range(200):
            for entry in os.scandir("/proc"):
                fields = confine.proc_status(entry.name) if entry.name.isdigit() else None
                if fields is None:
                    continue
                nspid = fields.get("NSpid", "").split()
                if len(nspid) < 2 or int(nspid[-1]) != inner:
                    continue
                pid = int(entry.name)
                try:
                    if self._pidns is not None:
                        if os.readlink(f"/proc/{pid}/ns/pid") == self._pidns:
                            return pid
                    elif below is not None and _descends(pid, below):
                        return pid
                except OSError:
                    continue
            time.sleep(0.01)
        raise ForkServerError(f"could not find process {inner} of the fork server's sandbox")


def _descends(pid: int, ancestor: int) -> bool:
    for _ in range(64):
        if pid == ancestor:
            return True
        if pid <= 1:
            return False
        fields = confine.proc_status(pid)
        if fields is None or "PPid" not in fields:
            return False
        pid = int(fields["PPid"])
    return False
