"""Which isolation this machine gives the workers, in one line for reports,
and what ``attn-grade doctor`` says about it.

``auto`` uses bubblewrap's namespaces where they work and otherwise falls
back to the older confinement (a fresh uid as root, the grading user
otherwise), which every report then says at its top.  ``strict`` refuses
to grade without namespaces.  ``fallback`` asks for the older confinement
(for comparisons and tests).
"""
from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path

from grader.sandbox import bwrap, confine, memcg

MODES = ("auto", "strict", "fallback")
NAMESPACES, UID, GRADING_USER, ROOT = "namespaces", "uid", "grading-user", "root"


class IsolationUnavailable(RuntimeError):
    """``strict`` was asked for and namespaces cannot be made here."""


@dataclass
class Isolation:
    level: str          # namespaces, uid, grading-user or root
    text: str           # one line for the top of every report
    namespaces: bool

    @property
    def degraded(self) -> bool:
        return self.level != NAMESPACES


def decide(mode: str, memory_mb: int) -> Isolation:
    """The isolation workers will get in ``mode``; changes nothing on this
    machine (grading protects the secret folders itself: ``grader.core``)."""
    if mode not in MODES:
        raise ValueError(f"unknown isolation {mode!r}: use {', '.join(MODES)}")
    ok, why = (False, "the fallback was asked for") if mode == "fallback" else bwrap.usable()
    if ok:
        cg, version, cg_why = memcg.base()
        memory = (f"{memory_mb} MB per worker counted by a cgroup ({version}), shared "
                  "memory and tmpfs included" if cg is not None else
                  f"{memory_mb} MB of data per worker plus an address-space limit "
                  f"(no writable memory cgroup: {cg_why})")
        who = ", each as its own unprivileged user" if confine.is_root() else ""
        return Isolation(NAMESPACES, f"namespaces (bubblewrap): no network, private /tmp, "
                         f"only the Python runtime and its own modules visible{who}; "
                         f"{memory}", True)
    if mode == "strict":
        raise IsolationUnavailable(f"--isolation strict: {why}; run `attn-grade doctor` to "
                                   "see what this machine lacks")
    if confine.is_root():
        if confine.can_drop_privileges():
            return Isolation(UID, f"WEAK ISOLATION ({why}): each exercise runs as its own "
                             "unprivileged user, sharing this machine's network, /tmp and "
                             "/dev/shm", False)
        return Isolation(ROOT, f"NO ISOLATION ({why}): workers run as ROOT, since this "
                         "Python is not reachable by an unprivileged user; they can read "
                         "and write the hidden suites and every file here", False)
    return Isolation(GRADING_USER, f"NO ISOLATION ({why}): workers run as the grading user "
                     "and can read what it can read", False)


def doctor() -> list[tuple[str, bool, str]]:
    """(what, fine, detail and what to change) for each thing isolation needs."""
    rows = []
    exe = bwrap.executable()
    rows.append(("bubblewrap", exe is not None, exe or
                 "not installed: apt-get install bubblewrap (Debian, Ubuntu)"))
    ok, why = bwrap.usable() if exe else (False, "needs bubblewrap")
    userns = Path("/proc/sys/kernel/apparmor_restrict_unprivileged_userns")
    hint = ""
    if not ok and userns.is_file() and userns.read_text().strip() == "1":
        hint = ("; AppArmor restricts user namespaces: add an AppArmor profile for "
                "/usr/bin/bwrap allowing userns, or run as root")
    rows.append(("namespaces", ok, "a sandboxed Python starts" if ok else why + hint))
    cg, version, cg_why = memcg.base()
    rows.append(("memory cgroup", cg is not None,
                 f"{version} at {cg}" if cg is not None else
                 f"{cg_why}: shared memory is then bounded by the tmpfs size and an "
                 "address-space limit only; run as root or in a delegated cgroup"))
    root = confine.is_root()
    rows.append(("root", root, "workers get their own uids" if root else
                 "not root: workers run as this user inside their namespaces"))
    gpus = bwrap.gpu_devices()
    smi = shutil.which("nvidia-smi")
    rows.append(("GPU", bool(gpus), ", ".join(gpus) + " bound into each sandbox" if gpus else
                 "no /dev/nvidia*: ex07's GPU tests are not run" +
                 (" (nvidia-smi is there: is the driver loaded?)" if smi else "")))
    return rows

