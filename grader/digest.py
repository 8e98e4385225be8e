"""One answer to "is a stored result still valid?": digests of what a grade depends on.

A stored result (``check``'s cache, a class gradebook's grading) stays valid
while three things are unchanged: the grader's own files (suites, references,
runtime, feedback, and the thresholds ``attn-grade calibrate`` writes:
``.py``, ``.json`` and ``.ini``), the libraries it grades with, and the
submission's content (``content_hash``).  ``check`` and ``batch`` both ask
here, so a rewritten threshold file or a new NumPy regrades on both paths.
"""
from __future__ import annotations

import functools
import hashlib
import os
import stat
import sys
from importlib import metadata, util
from pathlib import Path

from grader.paths import PACKAGE_DIR

LIBRARIES = ("numpy", "torch", "triton", "pytest", "matplotlib")
GRADER_SUFFIXES = (".py", ".json", ".ini")


def grader_files() -> bytes:
    """sha256 of the grader's own files: a new version of any of them grades again."""
    h = hashlib.sha256()
    for path in sorted(PACKAGE_DIR.rglob("*")):
        if "__pycache__" in path.parts or path.suffix not in GRADER_SUFFIXES:
            continue
        h.update(str(path.relative_to(PACKAGE_DIR)).encode() + b"\0" + path.read_bytes())
    return h.digest()


def environment() -> bytes:
    """The Python, the libraries' versions, whether Triton imports and a GPU is seen."""
    parts = [sys.version]
    for dist in LIBRARIES:
        try:
            parts.append(f"{dist}={metadata.version(dist)}")
        except metadata.PackageNotFoundError:
            parts.append(f"{dist}=none")
    parts.append(f"triton importable={util.find_spec('triton') is not None}")
    from grader.sandbox import bwrap
    parts.append(f"gpu={bool(bwrap.gpu_devices())}")
    return "\0".join(parts).encode()


@functools.lru_cache(maxsize=1)
def grader_version() -> str:
    """The package's version and a digest of the grader's files and
    environment, as one string a stored result records."""
    try:
        version = metadata.version("attn-course")
    except metadata.PackageNotFoundError:
        version = "unknown"
    digest = hashlib.sha256(grader_files() + environment()).hexdigest()
    return f"{version}+{digest[:16]}"


def _hash_bytes(h, path: Path) -> None:
    with open(path, "rb") as f:   # a piece at a time: a submission's file may be huge
        while chunk := f.read(1 << 20):
            h.update(chunk)


def content_hash(path: Path) -> str:
    """sha256 over a submission's files (names and bytes), links not followed.
    The walk keeps its own stack (``os.walk`` recurses, and a folder nested a
    thousand deep would end the whole batch), in ``os.walk``'s order."""
    h = hashlib.sha256()
    path = Path(path)
    if not path.is_dir():
        h.update(b"file\0")
        _hash_bytes(h, path)
        return h.hexdigest()
    stack = [path]
    while stack:
        folder = stack.pop()
        try:
            entries = list(os.scandir(folder))
        except OSError:
            continue   # as os.walk does: a folder that cannot be listed adds nothing
        # os.walk's split: what is a folder (a link to one too, never entered)
        dirs = sorted(e.name for e in entries if e.is_dir())
        for name in sorted(e.name for e in entries if not e.is_dir()):
            full = folder / name
            rel = str(full.relative_to(path)).encode("utf-8", "surrogateescape")
            st = full.lstat()
            if stat.S_ISLNK(st.st_mode):
                h.update(b"link\0" + rel + b"\0" + os.readlink(full).encode(
                    "utf-8", "surrogateescape") + b"\0")
            elif stat.S_ISREG(st.st_mode):
                h.update(b"file\0" + rel + b"\0")
                _hash_bytes(h, full)
                h.update(b"\0")
        stack += [folder / d for d in reversed(dirs) if not (folder / d).is_symlink()]
    return h.hexdigest()
