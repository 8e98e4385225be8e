"""Hostile uploads, built on demand: each a few KB to build, each aimed at
one cap of the intake (``grader.submission``'s ``MAX_*``).

Used by ``tests/test_hostile_uploads.py`` (each must end in one sentence)
and ``benchmarks/bench_hostile_upload.py`` (the disk they cost while they
are refused).  Every builder takes a folder to build in and returns the
upload: a zip, a notebook or a folder.  The exercise inside, where there is
one, is exercise A's reference: graded, it would earn points.
"""
from __future__ import annotations

import zipfile
from pathlib import Path

import json

from grader.submission import (MAX_CELLS, MAX_DEPTH, MAX_FILES, MAX_JSON_DEPTH,
                               MAX_NAME_BYTES, MAX_PATH_BYTES, MAX_UNPACKED_BYTES)

REPO = Path(__file__).resolve().parent.parent
SOLUTION = (REPO / "solutions" / "ex01_by_hand.py").read_text()
MODULE = "ex01_by_hand.py"


def _zip(path: Path, members: list[tuple[str, bytes | str]],
         method: int = zipfile.ZIP_DEFLATED) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(path, "w", method) as z:
        for name, data in members:
            z.writestr(name, data)
    return path


def file_and_folder(folder: Path) -> Path:
    """A file and a folder of one name (``FileExistsError`` once)."""
    return _zip(folder / "clash.zip", [(MODULE, SOLUTION), (f"{MODULE}/helper.py", "x = 1\n")])


def twice(folder: Path) -> Path:
    """One name twice: which copy an unpacker keeps is chance."""
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")   # zipfile warns "Duplicate name"
        return _zip(folder / "twice.zip", [(MODULE, SOLUTION), (MODULE, "SCORES = None\n")])


def long_name(folder: Path) -> Path:
    """A 300-character member name (``OSError`` once: no file system takes it)."""
    assert 300 > MAX_NAME_BYTES
    return _zip(folder / "long.zip", [(MODULE, SOLUTION), ("a" * 296 + ".py", "x = 1\n")])


def long_path(folder: Path) -> Path:
    """Names each short enough, a path too long."""
    deep = "/".join(["d" * 200] * (MAX_PATH_BYTES // 200 + 1))
    return _zip(folder / "longpath.zip", [(MODULE, SOLUTION), (f"{deep}/{MODULE}", SOLUTION)])


def deep_zip(folder: Path, depth: int = 200) -> Path:
    """Folders nested ``depth`` deep in a zip."""
    assert depth > MAX_DEPTH
    return _zip(folder / "deep.zip", [("d/" * depth + MODULE, SOLUTION)])


def deep_folder(folder: Path, depth: int = 200) -> Path:
    """A folder upload nested ``depth`` deep, the module at the bottom."""
    assert depth > MAX_DEPTH
    bottom = folder / "deeptree" / Path(*["d"] * depth)
    bottom.mkdir(parents=True)
    (bottom / MODULE).write_text(SOLUTION)
    return folder / "deeptree"


def deep_notebook(folder: Path, depth: int = 100_000) -> Path:
    """JSON nested ``depth`` deep (``RecursionError`` once)."""
    assert depth > MAX_JSON_DEPTH
    path = folder / "deep.ipynb"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("[" * depth + "]" * depth)
    return path


def many_files(folder: Path) -> Path:
    """One member more than ``MAX_FILES``, each empty."""
    return _zip(folder / "many.zip", [(MODULE, SOLUTION)] +
                [(f"f/{i}.txt", b"") for i in range(MAX_FILES)], zipfile.ZIP_STORED)


def zip_bomb(folder: Path, mb: int | None = None) -> Path:
    """One member of zeros declared (and truly) ``mb`` MB, about 1000:1
    compressed: by default just over the cap."""
    mb = mb or (MAX_UNPACKED_BYTES >> 20) + 1
    return _zip(folder / "bomb.zip", [(MODULE, SOLUTION), ("zeros.py", bytes(mb << 20))])


def many_zips(folder: Path, count: int = 60, mb: int = 1) -> Path:
    """A folder of ``count`` zips, each well under the cap (``mb`` MB of zeros
    in a helper module), together over it."""
    assert count * mb > MAX_UNPACKED_BYTES >> 20
    up = folder / "manyzips"
    up.mkdir(parents=True)
    for i in range(count):
        _zip(up / f"part{i:03}.zip", [(f"helper{i:03}.py", bytes(mb << 20))])
    _zip(up / "work.zip", [(MODULE, SOLUTION)])
    return up


def encrypted(folder: Path) -> Path:
    """A member marked encrypted, in its local and its central header
    (zipfile writes no encryption: the flag is what readers go by)."""
    path = _zip(folder / "locked.zip", [(MODULE, SOLUTION)])
    data = bytearray(path.read_bytes())
    for signature, flags in ((b"PK\x03\x04", 6), (b"PK\x01\x02", 8)):
        data[data.find(signature) + flags] |= 0x1
    path.write_bytes(bytes(data))
    return path


def damaged(folder: Path) -> Path:
    """A member whose compressed bytes were changed (a bad CRC, or bad data)."""
    path = _zip(folder / "damaged.zip", [(MODULE, SOLUTION)])
    data = bytearray(path.read_bytes())
    start = 30 + len(MODULE)          # the local header, then the member's data
    data[start + 20] ^= 0xFF
    path.write_bytes(bytes(data))
    return path


def _notebook(path: Path, data: dict) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data))
    return path


def old_notebook(folder: Path, level: int = 10**12) -> Path:
    """A 7 KB notebook in format 3 with a heading cell of level ``level``:
    nbformat's upgrade to 4 builds ``'#' * level`` (``MemoryError`` once,
    in the grading process)."""
    heading = {"cell_type": "heading", "level": level, "metadata": {},
               "source": "x" * 7000}
    return _notebook(folder / "old.ipynb", {
        "nbformat": 3, "nbformat_minor": 0, "metadata": {"name": ""},
        "worksheets": [{"cells": [heading], "metadata": {}}]})


def many_cells(folder: Path, cells: int = 150_000) -> Path:
    """A format-4 notebook of ``cells`` empty markdown cells, then exercise
    A's reference in a tagged cell (77 s to read once, at 150,000)."""
    body = [{"cell_type": "markdown", "metadata": {}, "source": ""}] * cells
    body.append({"cell_type": "code", "metadata": {"tags": ["attn:ex01_by_hand"]},
                 "source": SOLUTION, "outputs": [], "execution_count": None})
    return _notebook(folder / "cells.ipynb", {"nbformat": 4, "nbformat_minor": 5,
                                              "metadata": {}, "cells": body})


def runtime_named(folder: Path) -> Path:
    """The red team's way into the trusted worker: a helper named after the
    reference kernel's module, importing a ``triton.py`` of its own."""
    return _zip(folder / "named.zip", [(MODULE, SOLUTION),
                                       ("runtime.kernels.flash.py", "import triton\n"),
                                       ("triton.py", "raise SystemExit('in the trusted worker')\n")])


def shadowing(folder: Path) -> Path:
    """A folder whose helper would stand in for NumPy in the worker."""
    up = folder / "shadow"
    up.mkdir(parents=True)
    (up / MODULE).write_text(SOLUTION)
    (up / "numpy.py").write_text("raise SystemExit('not numpy')\n")
    return up


# name -> (builder, a phrase its sentence must hold)
HOSTILE = {
    "file_and_folder": (file_and_folder, "a file and a folder both named"),
    "twice": (twice, "twice"),
    "long_name": (long_name, f"longer than {MAX_NAME_BYTES} bytes"),
    "long_path": (long_path, f"longer than {MAX_PATH_BYTES} bytes"),
    "deep_zip": (deep_zip, f"nested more than {MAX_DEPTH} deep"),
    "deep_folder": (deep_folder, f"nested more than {MAX_DEPTH} deep"),
    "deep_notebook": (deep_notebook, f"more than {MAX_JSON_DEPTH} deep"),
    "many_files": (many_files, f"more than {MAX_FILES} files"),
    "zip_bomb": (zip_bomb, f"more than {MAX_UNPACKED_BYTES >> 20} MB"),
    "many_zips": (many_zips, f"more than {MAX_UNPACKED_BYTES >> 20} MB"),
    "encrypted": (encrypted, "without a password"),
    "damaged": (damaged, "damaged"),
    "old_notebook": (old_notebook, "not in notebook format 4"),
    "many_cells": (many_cells, f"more than {MAX_CELLS} cells"),
    "runtime_named": (runtime_named, "not a name Python can import"),
    "shadowing": (shadowing, "a module the grader or Python itself uses (numpy)"),
}
