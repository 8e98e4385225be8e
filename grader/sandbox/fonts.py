"""matplotlib's font list, kept between `check`s.

matplotlib scans the machine's fonts the first time it is imported with an
empty config folder, and a worker's (and the fork server's) config folder is
its private ``/tmp``, new each grading: a quarter of a second on a quiet
machine, spent again in every `check` of an exercise that draws.  Here a
trusted process (the grader's own Python, ``-I``, no student code) builds the
list once per matplotlib and Python, in `check`'s cache; the fork server is
given a copy in its own folder and puts it in its config folder before it
imports matplotlib.  matplotlib checks the list against its own version, and
builds it again itself where a font it names is missing: a stale or foreign
list costs time, never a wrong picture.

Only `check` keeps one (`grade` leaves nothing behind on the machine).
"""
from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

NAME = re.compile(r"fontlist-v[0-9A-Za-z.]+\.json")
BUILD_TIMEOUT = 120.0


def font_list(cache: Path | None) -> Path | None:
    """The font list of this Python's matplotlib in ``cache``, built there
    the first time; None without a cache, without matplotlib, or where it
    cannot be built (the fork server then builds its own, as before)."""
    if cache is None:
        return None
    import importlib.metadata   # (here: the command line's start waits for what it imports)
    try:
        version = importlib.metadata.version("matplotlib")
    except importlib.metadata.PackageNotFoundError:
        return None
    where = hashlib.sha256(sys.prefix.encode()).hexdigest()[:12]
    folder = Path(cache) / f"mpl-{version}-{where}"
    found = _found(folder)
    if found is not None:
        return found
    part = folder.with_name(f"{folder.name}.{os.getpid()}.part")
    try:
        part.mkdir(parents=True, exist_ok=True)
        env = {"MPLCONFIGDIR": str(part), "HOME": str(part), "PATH": os.environ.get("PATH", "")}
        subprocess.run([sys.executable, "-I", "-c", "import matplotlib.font_manager"],
                       env=env, cwd=str(part), timeout=BUILD_TIMEOUT, capture_output=True,
                       stdin=subprocess.DEVNULL, check=False)
        if _found(part) is not None:
            try:
                part.rename(folder)   # whole or not at all; another `check` may have won
            except OSError:
                pass
    except (OSError, subprocess.SubprocessError):
        pass
    finally:
        shutil.rmtree(part, ignore_errors=True)
    return _found(folder)


def _found(folder: Path) -> Path | None:
    try:
        names = sorted(p for p in folder.iterdir() if NAME.fullmatch(p.name) and p.is_file())
    except OSError:
        return None
    return names[-1] if names else None
