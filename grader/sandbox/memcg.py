"""A memory cgroup per worker, so that every page it touches counts.

``RLIMIT_DATA`` counts heap and private mappings only: a shared ``mmap``, a
SysV segment or a file in ``/dev/shm`` escape it.  A cgroup's memory limit
counts them all (shmem and tmpfs pages are charged to the cgroup that
touched them), and going past it gets the worker killed by the kernel, which
the grader reports.  Either hierarchy is used: cgroup v2 (``memory.max``)
or the v1 memory controller (``memory.limit_in_bytes``), below the cgroup
this process already lives in, where that is writable (root in a container,
a delegated systemd scope).  Where neither is, ``base()`` says why and the
worker falls back to an address-space limit.
"""
from __future__ import annotations

import itertools
import os
import time
from pathlib import Path

CGROUP_ROOT = Path("/sys/fs/cgroup")
_counter = itertools.count()
_base: tuple[Path | None, str, str] | None = None  # (folder, version, why not)


def _own_cgroups() -> dict[str, str]:
    """controller ('' for v2) -> this process's cgroup path, from /proc."""
    out = {}
    try:
        for line in Path("/proc/self/cgroup").read_text().splitlines():
            _, controllers, path = line.split(":", 2)
            for c in controllers.split(",") if controllers else [""]:
                out[c] = path
    except (OSError, ValueError):
        pass
    return out


def _writable_child(parent: Path) -> bool:
    """Can a child cgroup be made (and removed) under ``parent``?"""
    probe = parent / f"attn-grade-probe-{os.getpid()}"
    try:
        probe.mkdir()
    except OSError:
        return False
    try:
        probe.rmdir()
    except OSError:
        pass
    return True


def _find() -> tuple[Path | None, str, str]:
    own = _own_cgroups()
    # cgroup v2: the unified hierarchy, at /sys/fs/cgroup or .../unified.
    for mount in (CGROUP_ROOT, CGROUP_ROOT / "unified"):
        controllers = mount / "cgroup.controllers"
        if "" in own and controllers.is_file():
            try:
                has_memory = "memory" in controllers.read_text().split()
            except OSError:
                has_memory = False
            if not has_memory:
                continue
            # A v2 cgroup with processes cannot enable controllers for
            # children ("no internal processes"): use the first writable
            # folder between ours and the root whose children get memory.
            here = mount / own[""].lstrip("/")
            for folder in (here, *here.parents):
                if not str(folder).startswith(str(mount)):
                    break
                try:
                    enabled = (folder / "cgroup.subtree_control").read_text().split()
                except OSError:
                    continue
                if "memory" not in enabled:
                    try:
                        (folder / "cgroup.subtree_control").write_text("+memory")
                    except OSError:
                        continue
                if _writable_child(folder):
                    return folder, "v2", ""
    # cgroup v1: the memory controller's own hierarchy.
    v1 = CGROUP_ROOT / "memory"
    if "memory" in own and (v1 / "memory.limit_in_bytes").is_file():
        folder = v1 / own["memory"].lstrip("/")
        if _writable_child(folder):
            return folder, "v1", ""
        return None, "", f"{folder} is not writable by this user"
    return None, "", "no memory cgroup controller is mounted"


def base() -> tuple[Path | None, str, str]:
    """(parent folder for workers' cgroups, 'v1' or 'v2', why none): once."""
    global _base
    if _base is None:
        _base = _find()
        if _base[0] is not None:
            _remove_stale(_base[0])
    return _base


def _remove_stale(parent: Path) -> None:
    """Remove the empty cgroups of graders that died without cleaning up (a
    ``kill -9``): their names carry the dead grader's pid."""
    for child in parent.glob("attn-grade-*-*"):
        try:
            pid = int(child.name.split("-")[2])
        except (IndexError, ValueError):
            continue
        if not Path(f"/proc/{pid}").exists():
            try:
                child.rmdir()   # refused while a process is inside
            except OSError:
                pass


class MemoryCgroup:
    """One worker's cgroup: made before it starts, removed after it is gone."""

    def __init__(self, limit_bytes: int):
        parent, self.version, why = base()
        if parent is None:
            raise OSError(why)
        self.path = parent / f"attn-grade-{os.getpid()}-{next(_counter)}"
        self.path.mkdir()
        try:
            if self.version == "v2":
                (self.path / "memory.max").write_text(str(limit_bytes))
                _try_write(self.path / "memory.swap.max", "0")
            else:
                (self.path / "memory.limit_in_bytes").write_text(str(limit_bytes))
                # With swap accounting, swapped-out pages count too.
                _try_write(self.path / "memory.memsw.limit_in_bytes", str(limit_bytes))
        except OSError:
            self.remove()
            raise

    @property
    def procs(self) -> Path:
        return self.path / "cgroup.procs"

    def oom_killed(self) -> bool:
        """Did the kernel kill something here for going over the limit?"""
        try:
            if self.version == "v2":
                events = dict(line.split() for line in
                              (self.path / "memory.events").read_text().splitlines())
                return int(events.get("oom_kill", 0)) > 0 or int(events.get("max", 0)) > 0
            fields = dict(line.split() for line in
                          (self.path / "memory.oom_control").read_text().splitlines())
            if "oom_kill" in fields:
                return int(fields["oom_kill"]) > 0
            return int((self.path / "memory.failcnt").read_text()) > 0
        except (OSError, ValueError):
            return False

    def pids(self) -> list[int]:
        try:
            return [int(p) for p in self.procs.read_text().split()]
        except (OSError, ValueError):
            return []

    def kill(self) -> None:
        """Kill every process inside: none can leave a cgroup it was put in
        (moving needs write access to another's ``cgroup.procs``), so this
        reaches those that left the worker's session or process group.  v2's
        ``cgroup.kill`` does it in one pass; otherwise, again until empty
        (a fork bomb's children are in here too)."""
        import signal
        if self.version == "v2" and _try_write(self.path / "cgroup.kill", "1"):
            return
        for _ in range(50):
            pids = self.pids()
            if not pids:
                return
            for pid in pids:
                try:
                    os.kill(pid, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    pass
            time.sleep(0.005)

    def remove(self) -> None:
        """Kill what is left inside, then remove the folder (the kernel
        refuses while a process is inside, so retry briefly)."""
        for _ in range(50):
            self.kill()
            try:
                self.path.rmdir()
                return
            except FileNotFoundError:
                return
            except OSError:
                time.sleep(0.02)


def _try_write(path: Path, value: str) -> bool:
    try:
        path.write_text(value)
        return True
    except OSError:
        return False
