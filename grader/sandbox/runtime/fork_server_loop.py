"""The fork server: one process per grading that imports the heavy libraries once
and forks a worker for each exercise (and each restart) of that grading.

Importing PyTorch takes a worker one to three seconds, and a grading starts
one worker per exercise, again after every time-out or crash: the fork server pays
it once.  It holds no student code, ever: it imports only the libraries named
in its configuration, then waits on its control socket (its stdin, a Unix
``SOCK_SEQPACKET`` socket) for requests from the grading process:

* ``{"op": "fork", "id": n, "cfg": {...}}`` with three file descriptors (the
  worker's stdin, stdout and stderr, made by the grading process): fork; the
  child makes them its 0, 1 and 2, closes every other descriptor (the control
  socket first), starts its own session and runs ``worker.serve(cfg)``, which
  switches to the worker's own uid and asks to be killed with the fork server.
  The answer is ``{"forked": n, "pid": pid}`` (its pid as seen here).
* A child's end is told as ``{"exited": pid, "code": c}`` (negative: killed
  by that signal).

With ``own_namespaces`` in its configuration (a fork server under bubblewrap as
root, which keeps CAP_SYS_ADMIN for this alone), each child first gets
namespaces of its own: mount, IPC and PID, with fresh tmpfs ``/tmp``,
``/var/tmp`` and ``/dev/shm`` and its own ``/proc``.  The child stays root
and waits (a trusted keeper: the worker's uid cannot signal it); the worker
runs below the new PID namespace's first process (a trusted init that reaps
its orphans), forked only once the grading process has put the keeper into
the worker's cgroup (it waits for the first request to arrive), and it drops
to its uid, and with it every capability, before it reads that request.  When the worker ends, every
process it started ends with its namespace, and its temp folders and IPC
objects with their namespaces; the keeper exits with the worker's status.

The grading process owns everything else: the child's memory cgroup, its time
limits and killing it.  When the control socket closes, the fork server exits, and
its children are killed with it (their parent-death signal; under
bubblewrap the whole PID namespace goes too).  Started as
``worker.py`` with ``{"fork_server": {...}}`` as its configuration.  Linux only.
"""
from __future__ import annotations

import importlib
import json
import os
import select
import shutil
import signal
import socket
import sys

MAX_FDS = 3
CLONE_NEWNS, CLONE_NEWIPC, CLONE_NEWPID = 0x00020000, 0x08000000, 0x20000000
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC = 1, 2, 4, 8
MS_REMOUNT, MS_BIND, MS_REC, MS_PRIVATE = 32, 4096, 1 << 14, 1 << 18
TMPFS = (b"/tmp", b"/var/tmp", b"/dev/shm")


def _send(sock: socket.socket, message: dict) -> None:
    try:
        sock.send(json.dumps(message).encode())
    except OSError:  # the grading process is gone: so are we, shortly
        pass


def _reap(sock: socket.socket) -> None:
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        _send(sock, {"exited": pid, "code": os.waitstatus_to_exitcode(status)})


def _libc():
    import ctypes
    return ctypes.CDLL(None, use_errno=True)


def _mount(libc, source: bytes, target: bytes, fstype: bytes, flags: int, data: bytes | None):
    if libc.mount(source, target, fstype, flags, data) != 0:
        import ctypes
        raise OSError(ctypes.get_errno(), f"mount {target.decode()}")


def _own_namespaces(tmpfs_bytes: int, keep=(), files: int | None = None) -> None:
    """Mount, IPC and PID namespaces of this child's own, with fresh temp
    folders; the PID namespace takes effect for the next fork.  ``keep``:
    folders inside the temp folders that the sandbox binds (a Python
    installed under /tmp, as a CI's clone may be), bound again, read-only,
    over the fresh ones.  ``files``: the most files each temp folder holds."""
    libc = _libc()
    if libc.unshare(CLONE_NEWNS | CLONE_NEWIPC | CLONE_NEWPID) != 0:
        import ctypes
        raise OSError(ctypes.get_errno(), "unshare")
    _mount(libc, b"none", b"/", None, MS_REC | MS_PRIVATE, None)
    # Held open across the new tmpfs, which hides their paths.
    held = [(path, os.open(path, os.O_PATH | os.O_DIRECTORY)) for path in keep
            if os.path.isdir(path)]
    inodes = f",nr_inodes={int(files)}" if files else ""   # a file filler ends here
    opts = f"size={int(tmpfs_bytes)}{inodes},mode=1777".encode()
    for path in TMPFS:
        _mount(libc, b"tmpfs", path, b"tmpfs", MS_NOSUID | MS_NODEV, opts)
    for path, fd in held:
        _rebind(libc, path, fd)
        os.close(fd)


def _rebind(libc, path: str, fd: int) -> None:
    """Bind what ``fd`` holds at ``path`` again, read-only; the folders above
    it in the fresh tmpfs are made passable (0755) for the worker's user."""
    parts = path.strip("/").split("/")
    for i in range(1, len(parts) + 1):
        folder = "/" + "/".join(parts[:i])
        if not os.path.isdir(folder):
            os.mkdir(folder, 0o755)
    target = path.encode()
    _mount(libc, f"/proc/self/fd/{fd}".encode(), target, None, MS_BIND | MS_REC, None)
    _mount(libc, b"none", target, None, MS_REMOUNT | MS_BIND | MS_RDONLY, None)


def _keep(cfg: dict, serve) -> None:
    """The keeper: once the first request is there (the cgroup is joined by
    then), fork the new PID namespace's init, wait, exit as it did."""
    _die_with_parent()
    select.select([0], [], [])
    pid = os.fork()
    if pid == 0:
        _init(cfg, serve)
    _close_pipes()
    os._exit(_exit_code(os.waitpid(pid, 0)[1]))


def _init(cfg: dict, serve) -> None:
    """The namespace's first process, root and trusted: the worker runs as
    its child, not as pid 1 (which signals it sends itself would not reach),
    and when the worker ends, so does init, and with it the namespace."""
    _die_with_parent()
    _mount(_libc(), b"proc", b"/proc", b"proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, None)
    worker = os.fork()
    if worker == 0:
        serve(dict(cfg, forked=True))
        os._exit(0)
    _close_pipes()
    while True:
        try:
            pid, status = os.waitpid(-1, 0)   # orphans of the worker are reaped here
        except ChildProcessError:
            os._exit(70)
        if pid == worker:
            os._exit(_exit_code(status))


def _exit_code(status: int) -> int:
    """An exit status to pass on: a signal as 128 + its number, as a shell
    (and bubblewrap) reports it."""
    code = os.waitstatus_to_exitcode(status)
    return code if code >= 0 else 128 - code


def _close_pipes() -> None:
    for fd in range(MAX_FDS):   # the worker's pipes are the worker's alone
        os.close(fd)


def _die_with_parent() -> None:
    PR_SET_PDEATHSIG = 1
    _libc().prctl(PR_SET_PDEATHSIG, int(signal.SIGKILL))


def _child(fds: list[int], cfg: dict, serve, own_namespaces: dict | None) -> None:
    """In the forked child: become a worker (or its keeper), on the grading
    process's pipes."""
    try:
        os.setsid()
        for target, fd in enumerate(fds):
            os.dup2(fd, target)   # over fd 0 first: the control socket is gone
        os.closerange(MAX_FDS, os.sysconf("SC_OPEN_MAX") if hasattr(os, "sysconf") else 4096)
        for sig in (signal.SIGCHLD, signal.SIGPIPE, signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, signal.SIG_DFL)
        if own_namespaces:
            _own_namespaces(own_namespaces["tmpfs_bytes"], own_namespaces.get("keep", ()),
                            own_namespaces.get("files"))
            _keep(cfg, serve)
        serve(dict(cfg, forked=True))
    except BaseException:  # nothing of the fork server's must run on in a child
        os._exit(71)
    os._exit(0)


def _can_own(own: dict | None) -> bool:
    """Can a child be given namespaces of its own here?  Tried once, in a
    child, before any worker is forked (the grading process spawns its
    workers instead when not)."""
    if not own:
        return False
    pid = os.fork()
    if pid == 0:
        try:
            _own_namespaces(1 << 20, own.get("keep", ()))
            if not all(os.path.isdir(p) for p in own.get("keep", ())):
                os._exit(1)
        except BaseException:
            os._exit(1)
        os._exit(0)
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status) == 0


def _import_without_triton(name: str) -> None:
    """Import ``name`` with Triton hidden: the fork server never imports Triton
    (ex07's worker sets TRITON_INTERPRET before its first import, and a Triton
    imported earlier fails every interpreted launch), and a library that would
    import it (``torch._dynamo``) takes it for absent here and in every worker
    forked from here.  A worker imports Triton itself, afresh."""
    hidden = "triton" not in sys.modules
    if hidden:
        sys.modules["triton"] = None      # import triton: ImportError
    try:
        importlib.import_module(name)
    finally:
        if hidden and sys.modules.get("triton", 0) is None:
            del sys.modules["triton"]


def _take_font_list(path: str | None) -> None:
    """matplotlib's font list, which the grader built and copied into this
    folder (``grader.sandbox.fonts``), into the config folder where
    matplotlib looks for it: it is not scanned for again."""
    folder = os.environ.get("MPLCONFIGDIR")
    if not path or not folder:
        return
    try:
        os.makedirs(folder, exist_ok=True)
        shutil.copyfile(path, os.path.join(folder, os.path.basename(path)))
    except OSError:
        pass   # matplotlib builds its own


def run(cfg: dict, serve) -> None:
    """The fork server's loop; ``serve`` is the worker's request loop.  It
    says it is ready first; it imports each of its preloads when the first
    worker that wants it (``wants``) asks to be forked, so that the workers
    asked for first, which want the least (A's, B's and C's: no PyTorch),
    start before the imports that only later ones need."""
    for key, value in cfg.get("env", {}).items():
        os.environ[key] = str(value)
    sock = socket.socket(fileno=os.dup(0))
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.close(devnull)
    _send(sock, {"ready": os.getpid(), "own_namespaces": _can_own(cfg.get("own_namespaces"))})
    _take_font_list(cfg.get("font_list"))
    preload = list(cfg.get("preload", []))
    todo = list(preload)            # not imported yet
    # What the grading's first worker will want, imported before it asks: a
    # fork server begun before its grading process has finished its own start.
    _import_wanted(todo, cfg.get("eager") or [])
    while True:
        _reap(sock)
        if not select.select([sock], [], [], 0.05)[0]:
            continue
        try:
            data, fds, _flags, _addr = socket.recv_fds(sock, 1 << 20, MAX_FDS)
        except OSError:
            return
        if not data:
            return   # the grading process closed its end
        try:
            req = json.loads(data)
        except ValueError:
            req = {}
        if req.get("op") != "fork" or len(fds) != MAX_FDS:
            for fd in fds:
                os.close(fd)
            continue
        _import_wanted(todo, req.get("wants"))
        _fork(sock, req, fds, serve, cfg, preload)


def _import_wanted(todo: list[str], wants) -> None:
    """Import the modules of ``todo`` that are in ``wants`` (None: all), in
    preload's order, and take them off ``todo``."""
    for name in [m for m in todo if wants is None or m in wants]:
        try:
            _import_without_triton(name)
        except Exception:  # not installed: the worker says so later
            pass
        todo.remove(name)


def _fork(sock, req: dict, fds: list[int], serve, cfg: dict, preload: list[str]) -> None:
    """Fork the worker ``req`` asks for and answer with its pid and what of
    the preloads it has."""
    pid = os.fork()
    if pid == 0:
        sock.close()
        _child(fds, req.get("cfg", {}), serve, cfg.get("own_namespaces"))
    for fd in fds:
        os.close(fd)
    _send(sock, {"forked": req.get("id"), "pid": pid,
                 "preloaded": [m for m in preload if m in sys.modules]})
