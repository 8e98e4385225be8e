"""Workers in namespaces of their own, made by bubblewrap (``bwrap``).

A spawned worker gets a sandbox to itself; a grading's fork server
(``grader.sandbox.forkserver``) gets one, with ``/sandbox/w`` holding a folder
per worker, and the workers it forks share it (one submission's exercises,
apart by uid).  The worker sees a new root: a read-only view of only what this Python needs
(its prefix, the virtual environment's packages, ``/usr`` and the system
libraries), its own copy of the submission's modules at
``/sandbox/submission``, the worker runtime's folder itself
(``grader/sandbox/runtime/``, bound read-only as it is) at ``/sandbox/runtime``
with an empty read-only tmpfs over its ``kernels/`` unless the worker is a
trusted one, fresh ``/tmp``, ``/var/tmp`` and ``/dev/shm`` (tmpfs, or as root
folders of the worker's bounded staging file system: ``process.bound``), a new
``/proc`` and ``/dev``; no network and new PID, IPC, UTS and mount namespaces.
Nothing of the grader package, the hidden suites, the solutions, home folders
or other checkouts is mounted.  When the namespace's first process dies every
process in it dies, its IPC objects and tmpfs go with it, and
``--die-with-parent`` ties it to the grading process: kill the grader and its
workers are gone.

As root, bubblewrap is run without a user namespace (one maps only root, so
no uid could be dropped to) and with every capability dropped but setuid and
setgid; the worker switches to its fresh uid before it reads a request
(``worker.py``'s ``drop_to``).  Without root, bubblewrap makes an
unprivileged user namespace and the worker keeps the grading user's uid.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

from grader.paths import (GIT_DIR, KERNELS_DIR, PACKAGE_DIR, REPO_DIR, RUNTIME_DIR,
                          SOLUTIONS_DIR, TESTS_DIR)

SANDBOX = "/sandbox"   # inside: submission/ (the worker's cwd) and runtime/
ETC_FILES = ("ld.so.cache", "ld.so.conf", "ld.so.conf.d", "localtime", "nsswitch.conf",
             "alternatives", "ssl/certs")
TMPFS = ("/tmp", "/var/tmp", "/dev/shm")   # fresh and private in every sandbox
# Where a spawned worker's temp folders come from when its staging folder has
# a bounded file system of its own (``process.bound``): folders of it, so
# that one bound in bytes and files holds all a worker may write.
TEMP_FROM = {"/tmp": "tmp", "/var/tmp": "vartmp", "/dev/shm": "shm"}
TOP_LEVEL = ("usr", "lib", "lib32", "lib64", "libx32", "bin", "sbin")
_probe: tuple[bool, str] | None = None


def executable() -> str | None:
    return shutil.which("bwrap")


def python_roots() -> list[Path]:
    """Folders this interpreter and its packages live in (real paths and
    the paths Python uses, which differ when a venv or pyenv links)."""
    seen: list[Path] = []
    names = {sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix,
             str(Path(sys.executable).parent.parent),
             str(Path(os.path.realpath(sys.executable)).parent.parent)}
    for key in ("stdlib", "platstdlib", "purelib", "platlib"):
        names.add(sysconfig.get_path(key))
    # Folders a .pth file adds (another environment's site-packages, say), as
    # the worker's ``python -I`` sees them; never the grader's own checkout.
    for entry in _isolated_sys_path():
        path = Path(entry)
        # (a virtual environment inside the checkout is not the checkout: a
        # CI's .venv that another environment's .pth names, say)
        if path == REPO_DIR or path in REPO_DIR.parents or \
                (REPO_DIR in path.parents and not _in_a_venv(path)):
            continue
        names.add(entry)
    for name in sorted(names):
        for path in (Path(name), Path(os.path.realpath(name))):
            if path.is_dir() and str(path) != "/" and not _under_system(path):
                seen.append(path)
    # Keep the outermost of nested roots (a venv's site-packages is in the venv).
    out = []
    for path in sorted(set(seen), key=lambda p: len(p.parts)):
        if not any(path == o or o in path.parents for o in out):
            out.append(path)
    return out


_sys_path: list[str] | None = None


def _isolated_sys_path() -> list[str]:
    """``sys.path`` of ``python -I`` with this interpreter (once per process)."""
    global _sys_path
    if _sys_path is None:
        import json
        try:
            out = subprocess.run([sys.executable, "-I", "-c",
                                  "import json, sys; print(json.dumps(sys.path))"],
                                 capture_output=True, text=True, timeout=60, cwd="/")
            _sys_path = [p for p in json.loads(out.stdout) if p]
        except (OSError, ValueError, subprocess.SubprocessError):
            _sys_path = []
    return _sys_path


def _in_a_venv(path: Path) -> bool:
    return any((p / "pyvenv.cfg").is_file() for p in [path, *path.parents])


def under_tmpfs() -> list[str]:
    """The Python roots the sandbox binds inside its fresh temp folders (a
    virtual environment under /tmp): what a worker given temp folders of its
    own must see again (``runtime/fork_server_loop.py``)."""
    return [str(r) for r in python_roots()
            if any(Path(t) in r.parents for t in TMPFS)]


def _under_system(path: Path) -> bool:
    return path.parts[1:2] and path.parts[1] in TOP_LEVEL


def secrets_inside(roots: list[Path]) -> list[Path]:
    """What must stay hidden but lies inside a mounted root (the grader
    installed into the venv, say): each gets an empty tmpfs over it."""
    secret = [PACKAGE_DIR, SOLUTIONS_DIR, TESTS_DIR, GIT_DIR]
    return [s for s in secret if s.exists() and any(r in s.parents for r in roots)]


def gpu_devices() -> list[str]:
    """NVIDIA device files, bound into the sandbox when they exist (ex07)."""
    dev = Path("/dev")
    return sorted(str(p) for p in dev.glob("nvidia*") if not p.is_dir()) + \
        [str(p) for p in [dev / "nvidia-caps"] if p.is_dir()]


def command(staging: Path, argv: list[str], *, root: bool, tmpfs_bytes: int,
            kernels: bool = False, workspace: bool = False, admin: bool = False,
            temp: Path | None = None) -> list[str]:
    """The bwrap command line that runs ``argv`` (a Python command line using
    sandbox paths) over the private ``staging`` folder's ``submission/`` and
    the runtime folder; ``kernels``: the worker is a trusted one and may see
    the runtime's reference kernels; ``workspace``: a fork server's, whose whole
    ``staging`` folder (one folder per worker inside) is at ``/sandbox/w``;
    ``admin`` (a fork server's, as root): it keeps CAP_SYS_ADMIN, to give each
    worker it forks its own mount, IPC and PID namespaces and fresh temp
    folders (``runtime/fork_server_loop.py``); the worker drops it with its uid.
    ``temp``: a folder whose ``TEMP_FROM`` folders are bound as the temp
    folders (a bounded staging folder's), instead of fresh tmpfs of
    ``tmpfs_bytes`` each."""
    bwrap = executable()
    assert bwrap is not None
    cmd = [bwrap]
    if root:
        # No user namespace: it would map only uid 0 and leave no uid to drop to.
        cmd += ["--unshare-pid", "--unshare-ipc", "--unshare-net", "--unshare-uts",
                "--unshare-cgroup-try", "--cap-drop", "ALL",
                "--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID"]
        if admin:
            cmd += ["--cap-add", "CAP_SYS_ADMIN"]
    else:
        cmd += ["--unshare-all"]  # user namespace included; no network
    cmd += ["--die-with-parent", "--new-session", "--hostname", "sandbox"]
    # First the fresh /proc, /dev and temp folders, so that a Python installed
    # under /tmp (a test's virtual environment) is bound on top of them, not hidden.
    cmd += ["--proc", "/proc", "--dev", "/dev", "--perms", "0755", "--dir", "/var"]
    for tmp in TMPFS:
        if temp is not None:
            cmd += ["--bind", str(temp / TEMP_FROM[tmp]), tmp]
        else:
            cmd += ["--perms", "1777", "--size", str(tmpfs_bytes), "--tmpfs", tmp]
    roots = python_roots()
    # bubblewrap makes the folders above each mount point 0700 as root: the
    # worker's user, once switched, must pass through them.
    above = {a for r in [*roots, Path(SANDBOX) / "x", Path("/etc/ssl/x")]
             for a in r.parents if str(a) not in ("/", "/var", "/dev", *TMPFS)}
    for folder in sorted(above, key=lambda p: (len(p.parts), str(p))):
        cmd += ["--perms", "0755", "--dir", str(folder)]
    for top in TOP_LEVEL:
        path = Path("/") / top
        if path.is_symlink():
            cmd += ["--symlink", os.readlink(path), str(path)]
        elif path.is_dir():
            cmd += ["--ro-bind", str(path), str(path)]
    for name in ETC_FILES:
        cmd += ["--ro-bind-try", f"/etc/{name}", f"/etc/{name}"]
    for path in roots:
        cmd += ["--ro-bind", str(path), str(path)]
    for path in secrets_inside(roots):
        cmd += ["--tmpfs", str(path)]
    devices = gpu_devices()
    for dev in devices:
        cmd += ["--dev-bind", dev, dev]
    if devices:  # CUDA reads the PCI topology
        cmd += ["--ro-bind-try", "/sys", "/sys"]
    runtime = f"{SANDBOX}/runtime"
    cmd += ["--ro-bind", str(RUNTIME_DIR), runtime]
    if not kernels and KERNELS_DIR.is_dir():   # (the student edition has none)
        hidden = f"{runtime}/{KERNELS_DIR.name}"
        cmd += ["--perms", "0555", "--size", "4096", "--tmpfs", hidden, "--remount-ro", hidden]
    if workspace:
        cmd += ["--bind", str(staging), f"{SANDBOX}/w"]
    else:
        cmd += ["--bind", str(staging / "submission"), f"{SANDBOX}/submission"]
    cmd += ["--chdir", SANDBOX, "--"]  # the worker enters its folder as its own user
    return cmd + argv


def usable() -> tuple[bool, str]:
    """Can bubblewrap run a sandboxed Python here?  (ok, why not); checked
    once per process by running the real command line on an empty folder."""
    global _probe
    if _probe is not None:
        return _probe
    if not sys.platform.startswith("linux"):
        _probe = (False, "bubblewrap needs Linux")
        return _probe
    if executable() is None:
        _probe = (False, "bubblewrap is not installed (apt-get install bubblewrap)")
        return _probe
    import tempfile
    with tempfile.TemporaryDirectory(prefix="attn-grade-probe-") as tmp:
        staging = Path(tmp)
        (staging / "submission").mkdir()
        root = hasattr(os, "geteuid") and os.geteuid() == 0
        cmd = command(staging, [sys.executable, "-I", "-c", "import os; print(os.getpid())"],
                      root=root, tmpfs_bytes=1 << 20)
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=60,
                                  stdin=subprocess.DEVNULL, umask=0o022)
        except (OSError, subprocess.SubprocessError) as exc:
            _probe = (False, f"bubblewrap could not start: {exc}")
            return _probe
    if proc.returncode != 0 or proc.stdout.strip() != "2":
        why = (proc.stderr.strip().splitlines() or [f"exit status {proc.returncode}"])[-1]
        hint = ""
        if "ermission" in why or "not permitted" in why:
            hint = (" (user namespaces are blocked: on Ubuntu 24.04 AppArmor restricts "
                    "them; in a container, allow the unshare and mount syscalls)")
        _probe = (False, f"bubblewrap cannot make a sandbox here: {why}{hint}")
        return _probe
    _probe = (True, "")
    return _probe
