"""Probes shared by several exercises, and what the picture probes share."""
from __future__ import annotations

import hashlib
import importlib.util
import io
import os
import tempfile
import time

MAX_PNG_BYTES = 8 << 20      # a picture's file read back, at most


def sleep(seconds: float, *args, **kwargs):
    """A function that takes a known time (for testing timers)."""
    time.sleep(seconds)
    return None


def watch_figures(draw, describe, name: str, prefix: str) -> dict:
    """Call ``draw(path)`` (the student's plot function, saving to a fresh
    file) with matplotlib's ``Figure.savefig`` watched.  Only a save whose
    target is ``path`` counts (a name of it, ``str`` or ``PathLike``, or a
    binary file opened on it); ``describe(figure)`` reads that figure at the
    moment it is saved, and a digest of the bytes savefig writes there.

    Returns ``{"saved": [the last such figure's description], "elsewhere":
    saves to any other target, "exists": bool, "file": verdict, "png": uint8
    array}``, or ``{"no_matplotlib": True}``.  ``file`` says what the file at
    ``path`` is once ``draw`` returns: ``"figure"`` (the very bytes the last
    save to ``path`` wrote: only then does ``png`` hold them), ``"missing"``,
    ``"unsaved"`` (no savefig wrote there), ``"too_large"`` (over
    ``MAX_PNG_BYTES``) or ``"changed"`` (other bytes than that save's)."""
    if importlib.util.find_spec("matplotlib") is None:
        return {"no_matplotlib": True}
    import matplotlib
    matplotlib.use("Agg")
    import numpy as np
    from matplotlib.figure import Figure

    last, elsewhere = {}, [0]
    original = Figure.savefig

    def watched(self, *args, **kwargs):
        target = args[0] if args else kwargs.get("fname")
        if not _names_path(target, path):
            elsewhere[0] += 1
            return original(self, *args, **kwargs)
        described = describe(self)
        # Rendered here, then written to the target: the digest is of the very
        # bytes savefig made, whatever the target's file held before or after.
        buffer = io.BytesIO()
        kwargs.pop("fname", None)
        named = isinstance(target, (str, bytes, os.PathLike))
        if named and not kwargs.get("format"):   # as matplotlib: the name's extension
            kwargs["format"] = os.path.splitext(os.fsdecode(target))[1][1:] or None
        result = original(self, buffer, **kwargs)
        data = buffer.getvalue()
        if named:
            with open(target, "wb") as f:
                f.write(data)
        else:
            target.write(data)
            target.flush()
        last.update(described=described, digest=_digest(data))
        return result

    # removed afterwards, whatever the student's function wrote there
    with tempfile.TemporaryDirectory(prefix=prefix, ignore_cleanup_errors=True) as folder:
        path = os.path.join(folder, name)
        Figure.savefig = watched
        try:
            draw(path)
        finally:
            Figure.savefig = original
        data = read_plain_file(path, MAX_PNG_BYTES + 1)
    verdict = ("missing" if data is None else "unsaved" if not last else
               "too_large" if len(data) > MAX_PNG_BYTES else
               "changed" if _digest(data) != last["digest"] else "figure")
    return {"saved": [last["described"]] if last else [], "elsewhere": elsewhere[0],
            "exists": data is not None, "file": verdict,
            "png": np.frombuffer(data if verdict == "figure" else b"", dtype=np.uint8).copy()}


def _names_path(target, path: str) -> bool:
    """Whether savefig's ``target`` is the file at ``path``: a name of it, or a
    file object open on it (the same inode; a BytesIO has no file)."""
    if isinstance(target, (str, bytes, os.PathLike)):
        try:
            return os.path.realpath(os.fsdecode(target)) == os.path.realpath(path)
        except (TypeError, ValueError):
            return False
    try:
        here, there = os.fstat(target.fileno()), os.stat(path)
    except (AttributeError, OSError, ValueError, TypeError):
        return False
    return (here.st_dev, here.st_ino) == (there.st_dev, there.st_ino)


def _digest(data) -> str | None:
    return None if data is None else hashlib.sha256(data).hexdigest()


def read_plain_file(path: str, limit: int):
    """The bytes of a regular file at ``path``, never through a link (a FIFO
    or a device there would block or never end); None when there is none."""
    import stat
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        with os.fdopen(os.dup(fd), "rb") as f:
            return f.read(limit)
    finally:
        os.close(fd)
