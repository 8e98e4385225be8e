"""What a submission may be, turned into a folder of exercise modules.

A submission is a folder of ``exNN_*.py`` modules, a notebook (``.ipynb``)
whose code cells carry ``attn:<exercise>`` tags, or a ``.zip`` holding
either.  ``materialize`` returns a folder the grader can use, made in a
temporary directory when the submission is not a folder already; problems
are ``SubmissionError`` with one sentence for the person at the keyboard.
"""
from __future__ import annotations

import fnmatch
import os
import shutil
import stat
import tempfile
import zipfile
from contextlib import contextmanager
from pathlib import Path, PurePosixPath

from grader.exercises import EXERCISES

MAX_ZIP_BYTES = 50 << 20        # unpacked size of a zip submission
MAX_ZIP_FILES = 2000


class SubmissionError(ValueError):
    """A submission that cannot be read; the text is one sentence."""


def modules_in(folder: Path) -> list[str]:
    return sorted(p.stem for p in Path(folder).glob("*.py")
                  if p.stem in EXERCISES and not p.is_symlink())


def kind_of(path: Path) -> str:
    if path.is_dir():
        return "folder"
    suffix = path.suffix.lower()
    if suffix == ".ipynb":
        return "notebook"
    if suffix == ".zip":
        return "zip"
    raise SubmissionError(f"{path} is not a folder, a notebook (.ipynb) or a zip file.")


def _unzip(path: Path, dest: Path) -> None:
    try:
        archive = zipfile.ZipFile(path)
    except (zipfile.BadZipFile, OSError) as exc:
        raise SubmissionError(f"{path} is not a readable zip file ({exc}).") from None
    with archive:
        members = archive.infolist()
        if len(members) > MAX_ZIP_FILES:
            raise SubmissionError(f"{path} holds more than {MAX_ZIP_FILES} files.")
        if sum(m.file_size for m in members) > MAX_ZIP_BYTES:
            raise SubmissionError(f"{path} unpacks to more than {MAX_ZIP_BYTES >> 20} MB.")
        for m in members:
            name = PurePosixPath(m.filename)
            if name.is_absolute() or ".." in name.parts:
                raise SubmissionError(f"{path} holds an unsafe path ({m.filename}).")
            if stat.S_ISLNK(m.external_attr >> 16):
                continue  # links are not followed or created
            if m.is_dir():
                continue
            if name.suffix not in (".py", ".ipynb") or "__MACOSX" in name.parts:
                continue
            target = dest.joinpath(*name.parts)
            target.parent.mkdir(parents=True, exist_ok=True)
            with archive.open(m) as src, open(target, "wb") as out:
                shutil.copyfileobj(src, out)


def _files(found: Path, pattern: str) -> list[Path]:
    """Regular files matching ``pattern`` below ``found``; links are never
    followed (a submission's link could point at the hidden suites)."""
    out = []
    for root, _dirs, names in os.walk(found, followlinks=False):
        for name in names:
            path = Path(root) / name
            if fnmatch.fnmatch(name, pattern) and path.is_file() and not path.is_symlink():
                out.append(path)
    return sorted(out)


def _flatten(found: Path, dest: Path) -> None:
    """Exercise modules and notebooks anywhere in ``found`` -> ``dest``."""
    from grader.notebooks import extract_modules

    for i, archive in enumerate(_files(found, "*.zip")):  # a zip uploaded beside
        inner = dest.parent / f"zip{i}"
        inner.mkdir(exist_ok=True)
        _unzip(archive, inner)
        _flatten(inner, dest)
    for path in _files(found, "*.ipynb"):
        for name, source in extract_modules(path).items():
            (dest / f"{name}.py").write_text(source)
    for path in _files(found, "*.py"):
        if path.stem in EXERCISES and not (dest / path.name).exists():
            shutil.copyfile(path, dest / path.name)
    # helpers beside the modules (a student's utils.py) come along
    for path in _files(found, "*.py"):
        if not (dest / path.name).exists():
            shutil.copyfile(path, dest / path.name)


@contextmanager
def materialize(path: Path | str):
    """Yield a folder of exercise modules for ``path`` (folder, notebook, zip)."""
    path = Path(path)
    if not path.exists():
        raise SubmissionError(f"{path} does not exist.")
    kind = kind_of(path)
    if kind == "folder":
        packed = list(path.glob("*.ipynb")) + list(path.glob("*.zip"))
        if not modules_in(path) and not packed:
            raise SubmissionError(f"no exercise modules (ex01_by_hand.py ... "
                                  f"ex07_flash_attention.py) were found in {path}.")
        if not packed:
            yield path
            return
    tmp = Path(tempfile.mkdtemp(prefix="attn-submission-"))
    try:
        folder = tmp / "modules"
        folder.mkdir()
        if kind == "zip":
            unpacked = tmp / "unpacked"
            unpacked.mkdir()
            _unzip(path, unpacked)
            _flatten(unpacked, folder)
        elif kind == "notebook":
            from grader.notebooks import extract_modules
            for name, source in extract_modules(path).items():
                (folder / f"{name}.py").write_text(source)
        else:  # a folder with notebooks or zips in it
            _flatten(path, folder)
        if not modules_in(folder):
            raise SubmissionError(f"no exercise modules or tagged notebook cells were found "
                                  f"in {path}.")
        yield folder
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
