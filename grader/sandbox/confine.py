"""What confines a worker: its own user when we are root, resource limits,
secrets the worker cannot read, and clean-up of every process it started.

As root (a grading container, CI), each worker runs as a fresh unprivileged
user id that no other process uses, in a private folder that only it can
read; the folders holding the hidden suites, the references (and the worker
runtime's reference kernels), the solutions, the package's tests and the git
history are made readable by root alone
(``protect_secrets``, a step of grading: ``grader.core.protect_secret_folders``),
and the grader writes its results with a private umask.  Without root none
of that is possible: the worker runs as the grading user, from a private
folder, and could read what that user can read.
README's threat model says so.
"""
from __future__ import annotations

import os
import random
import signal
import stat
import sys
import tempfile
import threading
import time
from pathlib import Path

from grader.paths import (GIT_DIR, HIDDEN_SUITES_DIR, KERNELS_DIR, SECRET_REFERENCE_DIR,
                          SOLUTIONS_DIR, TESTS_DIR)

UID_RANGE = (61000, 64999)   # ids no account uses on common distributions
_used_uids: set[int] = set()     # held by a live worker of this process
allocated_uids: list[int] = []   # every uid this process handed out (for tests)
_uid_lock = threading.Lock()


def is_root() -> bool:
    return hasattr(os, "geteuid") and os.geteuid() == 0


def secret_paths() -> list[Path]:
    """Folders a student must never read: hidden suites, the secret references
    (the whole folder, whatever it holds), the runtime's reference kernels (a
    working answer to ex07; the trusted worker that times them reads them as
    root), solutions, the package's tests (mutants are copies of solutions)
    and git history."""
    paths = [HIDDEN_SUITES_DIR, SECRET_REFERENCE_DIR, KERNELS_DIR, SOLUTIONS_DIR, TESTS_DIR,
             GIT_DIR]
    return [p for p in paths if p.is_dir()]


def protect_secrets() -> list[Path]:
    """As root, make the secret folders readable by their owner (root) only."""
    if not is_root():
        return []
    done = []
    for path in secret_paths():
        try:
            os.chmod(path, 0o700)
            done.append(path)
        except OSError:
            pass
    return done


_can_drop: dict[str, bool] = {}


def can_drop_privileges() -> bool:
    """As root, can an unprivileged user run this Python and import NumPy?

    Not when the interpreter or its packages live in a folder other users
    cannot enter (a pyenv under /root, say): then workers run as the grading
    user, and the report says so.  Checked once per process."""
    if not is_root():
        return False
    if sys.executable not in _can_drop:
        import subprocess
        uid = fresh_uid()
        try:
            proc = subprocess.run([sys.executable, "-I", "-c", "import numpy"], cwd="/",
                                  user=uid, group=uid, extra_groups=[], timeout=60,
                                  capture_output=True, env={"PATH": os.environ.get("PATH", "")})
            _can_drop[sys.executable] = proc.returncode == 0
        except (OSError, subprocess.SubprocessError):
            _can_drop[sys.executable] = False
        finally:
            release_uid(uid)
    return _can_drop[sys.executable]


def fresh_uid() -> int:
    """A user id for one worker, not used by any running process nor held by
    another grader on this machine.  Workers may start in two threads at once
    (ex07's compile begins in the background): one at a time here, so that no
    two take the same id.  Gradings may run side by side in separate
    processes (``batch --jobs``, a test run's workers): each holds a lock on
    its ids in ``uid_registry`` until it has released them, since an id whose
    worker has just exited is not yet free: its grader will still kill what
    runs as it and remove its files."""
    running = _running_uids()
    with _uid_lock:
        for _ in range(1000):
            uid = random.randint(*UID_RANGE)
            if uid not in _used_uids and uid not in running and not has_account(uid) \
                    and _reserve(uid):
                _used_uids.add(uid)
                allocated_uids.append(uid)
                return uid
    raise RuntimeError("no free user id for a worker")


def release_uid(uid: int) -> None:
    """End what runs as ``uid`` and remove what it left, then free it; only
    for an id this process reserved (``fresh_uid``), never an account's."""
    if not ours(uid):
        return
    kill_uid(uid)
    remove_leftovers(uid)
    with _uid_lock:
        _used_uids.discard(uid)
        _unreserve(uid)


def has_account(uid: int) -> bool:
    """Whether ``uid`` belongs to an account of this machine (the passwd
    database, as ``getpwuid`` reads it: files, LDAP, systemd's dynamic users)."""
    import pwd
    try:
        pwd.getpwuid(uid)
    except KeyError:
        return False
    return True


def ours(uid: int) -> bool:
    """Whether ``uid`` is a worker id this process reserved and that no
    account has taken since: the only ids whose processes and files the
    clean-up may touch."""
    with _uid_lock:
        held = uid in _used_uids
    return held and not has_account(uid)


_registry_fd: int | None = None     # this process's handle on the registry, kept open


def uid_registry() -> Path | None:
    """The file whose bytes stand for the worker ids (byte ``uid`` for ``uid``):
    a grader holds a POSIX lock on the bytes of the ids it uses, which the
    kernel drops when that grader dies.  It lives in ``/run`` (root's alone),
    else in the temp folder; None, leaving each process to itself, when
    neither is safe (a folder someone else could write)."""
    for folder in (Path("/run"), Path(tempfile.gettempdir())):
        try:
            info = folder.lstat()
        except OSError:
            continue
        if stat.S_ISDIR(info.st_mode) and info.st_uid == os.geteuid() and not info.st_mode & 0o022:
            return folder / "attn-grade-uids.lock"
    return None


def _registry() -> int | None:
    global _registry_fd
    if _registry_fd is None and sys.platform.startswith("linux"):
        path = uid_registry()
        if path is not None:
            try:
                # Never closed: closing any handle on the file would drop every
                # lock this process holds on it.
                _registry_fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
            except OSError:
                return None
    return _registry_fd


def _reserve(uid: int) -> bool:
    """Lock ``uid``'s byte of the registry; False when another process holds it."""
    import fcntl
    fd = _registry()
    if fd is None:
        return True
    try:
        fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB, 1, uid)
    except OSError:
        return False
    return True


def _unreserve(uid: int) -> None:
    import fcntl
    fd = _registry()
    if fd is not None:
        fcntl.lockf(fd, fcntl.LOCK_UN, 1, uid)


# The machine's folders any user may write (and POSIX message queues).
SHARED_FOLDERS = (Path("/dev/shm"), Path("/tmp"), Path("/var/tmp"), Path("/dev/mqueue"),
                  Path("/run/lock"), Path("/var/crash"))
SYSV = (("shm", "-m"), ("sem", "-s"), ("msg", "-q"))  # /proc/sysvipc file, ipcrm flag


def remove_leftovers(uid: int, folders=SHARED_FOLDERS) -> list[str]:
    """The fallback's clean-up (namespaces need none): SysV IPC objects and
    files in the shared temp folders owned by a worker's uid, so that a later
    worker given the same uid inherits nothing.  Returns what was removed;
    nothing for an id this process did not reserve (``ours``)."""
    if not ours(uid):
        return []
    import shutil
    import subprocess
    removed = []
    for kind, flag in SYSV:
        try:
            lines = Path(f"/proc/sysvipc/{kind}").read_text().splitlines()
        except OSError:
            continue
        header = lines[0].split() if lines else []
        for line in lines[1:]:
            fields = dict(zip(header, line.split()))
            if fields.get("uid") == str(uid) and "key" in fields:
                ident = fields.get("shmid") or fields.get("semid") or fields.get("msqid")
                if ident is not None and subprocess.run(
                        ["ipcrm", flag, ident], capture_output=True).returncode == 0:
                    removed.append(f"{kind} {ident}")
    # A worker's uid can make files only in folders it owns (removed whole)
    # and in folders anyone may write (``/tmp/.X11-unix``, made by another):
    # those are walked too, so nothing it left there waits for the next worker.
    todo = [Path(f) for f in folders]
    while todo:
        try:
            entries = list(os.scandir(todo.pop()))
        except OSError:
            continue
        for entry in entries:
            try:
                info = entry.stat(follow_symlinks=False)
                if info.st_uid != uid:
                    if stat.S_ISDIR(info.st_mode) and info.st_mode & 0o002:
                        todo.append(Path(entry.path))
                    continue
                if entry.is_dir(follow_symlinks=False):
                    shutil.rmtree(entry.path, ignore_errors=True)  # never follows links
                else:
                    os.unlink(entry.path)
                removed.append(entry.path)
            except OSError:
                pass
    return removed


def proc_status(pid: int | str) -> dict[str, str] | None:
    """``/proc/<pid>/status`` as a mapping of its fields (Linux); None when
    the process is gone or cannot be read."""
    try:
        text = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return None
    return dict(line.split(":", 1) for line in text.splitlines() if ":" in line)


def _proc_table():
    """(pid, real uid, threads) of every living process, from /proc (Linux);
    zombies (dead, waiting to be reaped) are left out."""
    proc = Path("/proc")
    if not proc.is_dir():
        return
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = proc_status(entry.name)
            if fields is None or fields.get("State", "").strip().startswith("Z"):
                continue
            yield int(entry.name), int(fields["Uid"].split()[0]), int(fields["Threads"])
        except (OSError, ValueError, KeyError, IndexError):
            continue


def _running_uids() -> set[int]:
    return {uid for _, uid, _ in _proc_table()}


# Where the grading process is a subreaper that can walk its own tree
# (``process.become_subreaper``): every process a worker's uid runs stays below
# it, so ``processes_of`` looks there instead of reading every process's status
# on the machine at each worker's end.  None: the whole of /proc.
own_tree = None


def processes_of(uid: int, everywhere: bool = False) -> list[int]:
    """The living processes of ``uid``: of this process's tree, where every
    process of a worker's uid stays (``own_tree``), else (or ``everywhere``)
    of the machine."""
    if own_tree is not None and not everywhere:
        found = own_tree()
        if found is not None:
            return [pid for pid, u in found if u == uid]
    return [pid for pid, u, _ in _proc_table() if u == uid]


def threads_of(uid: int) -> int:
    """Processes and threads of ``uid``: what RLIMIT_NPROC counts on Linux."""
    return sum(n for _, u, n in _proc_table() if u == uid)


def kill_uid(uid: int) -> None:
    """Kill every process running as ``uid``: also those that left the worker's
    process group (setsid, double fork).  Only meaningful for a worker uid.

    A fork bomb outruns killing its processes one by one, so a helper running
    as ``uid`` sends SIGKILL to -1: the kernel signals every process of that
    user in one pass, during which none can fork.  Never for an id this
    process did not reserve (``ours``): a real account's processes stay."""
    if not ours(uid) or not processes_of(uid):
        return
    import subprocess
    for _ in range(5):
        try:
            subprocess.run([sys.executable, "-I", "-c",
                            "import os, signal; os.kill(-1, signal.SIGKILL)"],
                           user=uid, group=uid, extra_groups=[], timeout=30,
                           capture_output=True, env={}, cwd="/")
        except (OSError, subprocess.SubprocessError):
            for pid in processes_of(uid):  # the helper could not start: one by one
                try:
                    os.kill(pid, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    pass
        time.sleep(0.05)
        if not processes_of(uid):
            return


def give_to(path: Path, uid: int) -> None:
    """Hand a worker's private folder to its user (0700: no one else reads it)."""
    for root, dirs, files in os.walk(path):
        for name in dirs + files:
            os.chown(os.path.join(root, name), uid, uid, follow_symlinks=False)
    os.chown(path, uid, uid)
    os.chmod(path, 0o700)


def default_rlimits(memory_bytes: int, uid: int | None) -> dict:
    """Resource limits for a worker (names from the ``resource`` module)."""
    limits = {
        "RLIMIT_DATA": memory_bytes,          # heap and anonymous mappings
        "RLIMIT_NOFILE": 1024,
        "RLIMIT_FSIZE": 256 << 20,            # largest file it may write
        "RLIMIT_CORE": 0,
        "RLIMIT_CPU": 3600,                   # CPU seconds over the worker's life
    }
    if sys.platform.startswith("linux"):
        # Processes and threads per user: a fork bomb stops here.  A fresh uid
        # starts at zero; the grading user's own count must be left room for.
        own = 0 if uid is not None else threads_of(os.getuid())
        limits["RLIMIT_NPROC"] = own + 512
    return limits
