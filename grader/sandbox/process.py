"""Starting and ending the processes that run student code: the mechanism.

Every such process (an exercise's worker, ex07's compile and speed workers,
the reference's trusted worker, a grading's fork server) is started by ``spawn``
and ended by ``end``; which ones are started, and with what confinement, is
decided in one place above this one (``grader.sandbox.launch``).  This module
holds no policy of its own beyond what the kernel offers to make "everything
it started dies with it" true in every mode:

* a cgroup per worker where one can be made (as root, a delegated systemd
  scope): its processes cannot leave it, and ``end`` kills all of them,
  however detached (``setsid``, a double fork);
* under namespaces, a PID namespace (bubblewrap's, or a forked worker's own):
  when its first process dies, every process in it dies;
* as root with a fresh uid, every process of that uid;
* and always, this process as a child subreaper (Linux): whatever a worker
  orphans is re-parented here instead of to init, and ``end`` kills every
  adopted child that is not a live process of ours (``sweep_orphans``).

Also here: the private staging folders (named after the grading process, so
that the next grader removes those of one killed with ``kill -9``; as root
each a tmpfs bounded in bytes and files, so that no worker fills the disk)
and the scrubbed environment every worker gets.
"""
from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Mapping
from pathlib import Path

from grader.paths import KERNELS_DIR, RUNTIME_DIR
from grader.sandbox import bwrap, confine

STAGING_PREFIX = "attn-grade-"
WORKER_PROGRAM = "worker.py"   # the runtime's entry point: a worker, or a fork server
_stale_removed = False
_live: set[int] = set()       # pids (and so session ids) of the processes spawn started
_live_lock = threading.Lock()
_subreaper = False
# What one worker may write (its private folder and, under namespaces, its
# temp folders together): far above what the exercises write (a plot, Triton's
# cache), far below a disk; RLIMIT_FSIZE (256 MB) still bounds one file.
WORKER_DISK_BYTES = 512 << 20
WORKER_FILES = 4096
TEMP_FOLDERS = tuple(bwrap.TEMP_FROM.values())   # in each worker's staging folder
_bounded: set[str] = set()    # staging folders with a file system of their own


# The machine's folders a fallback worker can write (no namespace gives it
# its own): ``DiskWatch`` watches the file systems they lie on, and every
# other local one mounted (a worker running as root writes /dev or a cgroup
# file system too).  Network file systems are left out: a statvfs there may
# wait on a server, and the grader looks twenty times a second.
SHARED_WRITABLE = ("/tmp", "/var/tmp", "/dev/shm")
LOCAL_FILE_SYSTEMS = {"tmpfs", "devtmpfs", "ramfs", "ext2", "ext3", "ext4", "xfs", "btrfs",
                      "overlay", "zfs", "f2fs", "vfat", "exfat", "jfs", "reiserfs", "cgroup2"}


def local_mounts() -> list[str]:
    """Mount points of the machine's local, writable file systems (``/proc/self/mounts``)."""
    out = []
    try:
        lines = Path("/proc/self/mounts").read_text().splitlines()
    except OSError:
        return out
    for line in lines:
        parts = line.split()
        point = parts[1].replace("\\040", " ") if len(parts) >= 4 else ""
        # a grader's own staging file systems are bounded already (``bound``),
        # and another grading's workers write them
        if point and parts[2] in LOCAL_FILE_SYSTEMS and "ro" not in parts[3].split(",") \
                and not os.path.basename(point).startswith(STAGING_PREFIX):
            out.append(point)
    return out


class DiskWatch:
    """How much a worker without namespaces has added to the file systems it
    can write, from the file systems' own counts (``statvfs``: one call each,
    whatever the files), against ``WORKER_DISK_BYTES`` and ``WORKER_FILES``.

    The fallback has no file system of its own to give a worker for the
    machine's ``/tmp`` (and, without root, none for its folder either): the
    grader watches instead while it waits for an answer, and stops the worker
    that went past the bound (``over``), so a grading can never fill the
    machine's disk, only come within a polling interval of the bound.  What
    the machine's other programs write meanwhile counts too; the bound is far
    above what the exercises write (a plot, Triton's cache)."""

    INTERVAL_S = 0.05    # how often the grader looks while a call runs (a statvfs each)

    def __init__(self, folders):
        self.max_bytes, self.max_files = WORKER_DISK_BYTES, WORKER_FILES
        self.start: dict[int, tuple[str, int, int]] = {}
        for folder in folders:
            try:
                device = os.stat(folder).st_dev
                if device not in self.start:
                    self.start[device] = (str(folder), *self._used(folder))
            except OSError:
                continue

    @staticmethod
    def _used(folder) -> tuple[int, int]:
        info = os.statvfs(folder)
        return ((info.f_blocks - info.f_bfree) * info.f_frsize,
                max(info.f_files - info.f_ffree, 0))

    def over(self) -> str | None:
        """What went past the bound since the worker started, in words; None if nothing."""
        for folder, used_bytes, used_files in self.start.values():
            try:
                now_bytes, now_files = self._used(folder)
            except OSError:
                continue
            if now_bytes - used_bytes > self.max_bytes:
                return (f"wrote more than {self.max_bytes >> 20} MB of files (the limit) "
                        f"on the file system of {folder}")
            if now_files - used_files > self.max_files:
                return f"made more than {self.max_files} files (the limit) on that of {folder}"
        return None


def staging_folder(kind: str = "") -> Path:
    """A private folder for workers (0700), named after this process:
    ``attn-grade-<pid>-<kind>...`` in the temp folder, on a file system of
    its own bounded in bytes and files where one can be mounted (``bound``).
    A grader killed with ``kill -9`` cannot remove its own; the next one does
    (``remove_stale_staging``).  Removed with ``remove_staging``."""
    folder = Path(tempfile.mkdtemp(prefix=f"{STAGING_PREFIX}{os.getpid()}-{kind}"))
    bound(folder)
    return folder


def _libc():
    import ctypes
    return ctypes.CDLL(None, use_errno=True)


def bound(folder: Path) -> bool:
    """Mount a tmpfs of ``WORKER_DISK_BYTES`` and ``WORKER_FILES`` files over
    the empty ``folder`` (0700), so that what the workers write there (their
    folder, and under namespaces their /tmp, /var/tmp and /dev/shm) ends in
    ENOSPC there, never on the machine's disk; its pages are memory, counted
    in the writer's cgroup.  As root on Linux only; False where it could not
    (the folder stays on the disk it is on: ``RLIMIT_FSIZE`` bounds each file)."""
    if not sys.platform.startswith("linux") or not confine.is_root():
        return False
    opts = f"size={WORKER_DISK_BYTES},nr_inodes={WORKER_FILES},mode=0700".encode()
    MS_NOSUID, MS_NODEV = 2, 4
    if _libc().mount(b"tmpfs", str(folder).encode(), b"tmpfs", MS_NOSUID | MS_NODEV, opts) != 0:
        return False
    _bounded.add(str(folder))
    return True


def is_bounded(folder: Path) -> bool:
    return str(folder) in _bounded


def remove_staging(folder: Path) -> None:
    """Remove a staging folder, unmounting its file system first (lazily: a
    process still holding a file open there keeps it until it lets go)."""
    if os.path.ismount(folder):
        MNT_DETACH = 2
        _libc().umount2(str(folder).encode(), MNT_DETACH)
    _bounded.discard(str(folder))
    shutil.rmtree(folder, ignore_errors=True)


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
        remove_staging(folder)
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


def copy_runtime(root: Path, kernels: bool) -> None:
    """The fallback's copy of the runtime folder, as it is (bubblewrap binds
    it instead), readable by the worker's uid wherever the grader lies; its
    reference kernels for trusted workers only."""
    def ignore(folder, names):
        hidden = not kernels and Path(folder) == RUNTIME_DIR
        return {KERNELS_DIR.name} & set(names) if hidden else set()
    shutil.copytree(RUNTIME_DIR, root / "runtime", ignore=ignore)


def _die_with_parent_hook():
    """For the fallback's child, run between fork and exec (after its uid
    switch, which would clear it): SIGKILL when the grading process dies.
    ctypes is loaded here, in the parent: the child must not import."""
    if not sys.platform.startswith("linux"):
        return None
    import ctypes
    prctl = ctypes.CDLL(None, use_errno=True).prctl
    PR_SET_PDEATHSIG = 1

    def hook() -> None:
        prctl(PR_SET_PDEATHSIG, int(signal.SIGKILL))
    return hook


def become_subreaper() -> bool:
    """Make this process the child subreaper of everything it starts (Linux
    3.4+): a process a worker orphans (a double fork, ``setsid``) is adopted
    here, where ``sweep_orphans`` finds it, instead of by init."""
    global _subreaper
    if _subreaper or not sys.platform.startswith("linux"):
        return _subreaper
    import ctypes
    PR_SET_CHILD_SUBREAPER = 36
    _subreaper = ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1) == 0
    if _subreaper:
        # Nothing started below a subreaper leaves its tree: a worker uid's
        # processes are found there (``confine.processes_of``), not in all of /proc.
        confine.own_tree = _own_tree
    return _subreaper


def _own_tree() -> list[tuple[int, int]] | None:
    """(pid, real uid) of every living process below this one, from the
    kernel's children files; None where the kernel keeps none (then only a
    scan of /proc finds them)."""
    below = _descendants_by_children(os.getpid())
    if below is None:
        return None
    out = []
    for pid in below:
        fields = confine.proc_status(pid)
        if fields is None or fields.get("State", "").strip().startswith("Z"):
            continue
        try:
            out.append((pid, int(fields["Uid"].split()[0])))
        except (KeyError, ValueError, IndexError):
            continue
    return out


def spawn(staging: Path, cfg: dict, *, namespaces: bool, uid: int | None, env: dict,
          tmpfs_bytes: int, kernels: bool = False, workspace: bool = False,
          cgroup_procs: Path | None = None, admin: bool = False, stdin=subprocess.PIPE,
          stdout=subprocess.PIPE, stderr=subprocess.PIPE) -> subprocess.Popen:
    """Start ``runtime/worker.py`` with configuration ``cfg``: under
    bubblewrap over ``staging`` (``bwrap.command``), or in the fallback as a
    plain child from its copy of the runtime (``copy_runtime``), as ``uid``
    where one is given.  ``cgroup_procs``: the cgroup to start in (joined
    before bubblewrap forks; the fallback's child is moved in by the caller
    before it runs any student code).  ``admin``: a fork server's sandbox keeps
    the capability to give each worker it forks namespaces of its own.  In
    its own session; tracked for ``sweep_orphans``."""
    become_subreaper()
    payload = json.dumps(cfg)
    if namespaces:
        worker = f"{bwrap.SANDBOX}/runtime/{WORKER_PROGRAM}"
        temp = staging if is_bounded(staging) and not workspace else None
        cmd = bwrap.command(staging, [sys.executable, "-I", worker, payload],
                            root=confine.is_root(), kernels=kernels, workspace=workspace,
                            tmpfs_bytes=tmpfs_bytes, admin=admin, temp=temp)
        if cgroup_procs is not None:
            # Join the cgroup before bubblewrap starts, so all it forks is inside.
            cmd = ["/bin/sh", "-c", 'echo $$ > "$0" && exec "$@"', str(cgroup_procs), *cmd]
        # umask 022: the folders bubblewrap makes for its mount points (/root,
        # /sandbox) must let the worker's user through once it has switched.
        kwargs = dict(cwd="/", umask=0o022)
    else:
        as_user = {}
        if uid is not None:
            as_user = dict(user=uid, group=uid, extra_groups=[], umask=0o077)
        cmd = [sys.executable, "-I", str(staging / "runtime" / WORKER_PROGRAM), payload]
        cwd = staging / "submission"
        kwargs = dict(cwd=cwd if cwd.is_dir() else staging,
                      preexec_fn=_die_with_parent_hook(), **as_user)
    with _live_lock:
        proc = subprocess.Popen(cmd, env=env, stdin=stdin, stdout=stdout, stderr=stderr,
                                start_new_session=True, **kwargs)
        _live.add(proc.pid)
    return proc


def descendants(pid: int) -> list[int]:
    """Every living process below ``pid`` (as this process's /proc shows them)."""
    out = _descendants_by_children(pid)
    return out if out is not None else _descendants_by_scan(pid)


def _children(pid: int) -> list[int] | None:
    """``pid``'s children, from each of its threads' ``children`` file (the
    kernel's own list); None where the kernel keeps no such file."""
    if not os.path.exists(f"/proc/self/task/{os.getpid()}/children"):
        return None      # a kernel without CONFIG_PROC_CHILDREN: scan instead
    task = f"/proc/{pid}/task"
    try:
        threads = os.listdir(task)
    except FileNotFoundError:
        return []        # gone: no children
    except OSError:
        return None
    out = []
    for tid in threads:
        try:
            with open(f"{task}/{tid}/children") as f:
                out += [int(c) for c in f.read().split()]
        except (OSError, ValueError):
            continue     # the thread ended meanwhile
    return out


def _descendants_by_children(pid: int) -> list[int] | None:
    """The tree below ``pid``, walked down from it: a few files read where a
    scan of /proc reads one per process on the machine."""
    out, todo = [], [pid]
    while todo:
        children = _children(todo.pop())
        if children is None:
            return None
        for child in children:
            if child not in out:
                out.append(child)
                todo.append(child)
    return out


def _descendants_by_scan(pid: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        fields = confine.proc_status(entry.name)
        if fields is None or "PPid" not in fields:
            continue
        try:
            children.setdefault(int(fields["PPid"]), []).append(int(entry.name))
        except ValueError:
            continue
    out, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            out.append(child)
            todo.append(child)
    return out


def _session(pid: int) -> int | None:
    try:
        return os.getsid(pid)
    except OSError:
        return None


def sweep_orphans() -> list[int]:
    """Kill what workers orphaned and this (subreaper) process adopted: its
    children that are in another session than its own and than any live
    process ``spawn`` started.  The grader's own short helper processes stay
    in its session and are never touched.  Repeated until none is left (a
    fork bomb's children are adopted in turn)."""
    if not sys.platform.startswith("linux"):
        return []
    me, own = os.getpid(), _session(0)
    killed: list[int] = []
    for _ in range(50):
        with _live_lock:
            live = set(_live)
        found = []
        for pid in descendants(me):
            fields = confine.proc_status(pid)
            if fields is None or fields.get("PPid", "").strip() != str(me):
                continue
            sid = _session(pid)
            if sid is None or sid == own or sid in live or pid in live:
                continue
            found.append(pid)
        if not found:
            break
        for pid in found:
            for p in [*descendants(pid), pid]:
                try:
                    os.kill(p, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    pass
            try:
                os.waitpid(pid, 0)
            except (ChildProcessError, OSError):
                pass
        killed += found
    return killed


def end(proc, *, uid: int | None = None, cgroup=None) -> None:
    """Kill ``proc`` and everything it started, in every mode: its cgroup's
    processes, its descendants (found before it dies, while they are still
    below it), its process group, its uid's processes, then the orphans
    adopted here.  Waits for it."""
    if cgroup is not None:
        cgroup.kill()
    if proc is not None:
        below = descendants(proc.pid) if sys.platform.startswith("linux") else []
        try:  # the whole group: children it forked die with it
            os.killpg(proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        for pid in below:
            try:
                os.kill(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
    if uid is not None:
        confine.kill_uid(uid)  # also those that left the group
    if proc is not None:
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:  # pragma: no cover
            pass
        with _live_lock:
            _live.discard(proc.pid)
        for stream in (proc.stdin, proc.stdout):
            try:
                stream.close()
            except (OSError, AttributeError):
                pass
    sweep_orphans()
