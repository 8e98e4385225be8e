"""Probes shared by several exercises, and what the picture probes share."""
from __future__ import annotations

import importlib.util
import os
import tempfile
import time

MAX_PNG_BYTES = 8 << 20      # a picture's file read back, at most
MAX_FIGURES = 3              # figures described per call, at most


def sleep(seconds: float, *args, **kwargs):
    """A function that takes a known time (for testing timers)."""
    time.sleep(seconds)
    return None


def watch_figures(draw, describe, name: str, prefix: str) -> dict:
    """Call ``draw(path)`` (the student's plot function, saving to a fresh
    file) with matplotlib's ``Figure.savefig`` watched: ``describe(figure)``
    reads each saved figure (the first ``MAX_FIGURES``) at the moment it is
    saved.  Returns ``{"saved": [...], "exists": bool, "png": uint8 array}``,
    or ``{"no_matplotlib": True}``."""
    if importlib.util.find_spec("matplotlib") is None:
        return {"no_matplotlib": True}
    import matplotlib
    matplotlib.use("Agg")
    import numpy as np
    from matplotlib.figure import Figure

    saved = []
    original = Figure.savefig

    def watched(self, *args, **kwargs):
        if len(saved) < MAX_FIGURES:
            saved.append(describe(self))
        return original(self, *args, **kwargs)

    # removed afterwards, whatever the student's function wrote there
    with tempfile.TemporaryDirectory(prefix=prefix, ignore_cleanup_errors=True) as folder:
        path = os.path.join(folder, name)
        Figure.savefig = watched
        try:
            draw(path)
        finally:
            Figure.savefig = original
        data = read_plain_file(path, MAX_PNG_BYTES)
    return {"saved": saved, "exists": data is not None,
            "png": np.frombuffer(data or b"", dtype=np.uint8).copy()}


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
