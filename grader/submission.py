"""What a submission may be, turned into a folder of exercise modules.

A submission is a folder of ``exNN_*.py`` modules, a notebook (``.ipynb``)
whose code cells carry ``attn:<exercise>`` tags (or, where an editor lost the
tags, start with ``%%writefile exNN_name.py``), a ``.zip`` holding either,
or a student's whole repository (the student edition, as a GitHub upload to
Gradescope brings it): its ``exercises/`` and ``notebooks/`` are read.
What an archiver or an editor leaves behind (``__MACOSX``, dotfiles,
``.ipynb_checkpoints``, ``foo.py~``, ``#foo.py#``, ``.bak``) is skipped.  ``materialize`` returns a folder the grader can use, made in a
temporary directory when the submission is not a folder already; problems
are ``SubmissionError`` with one sentence for the person at the keyboard.
"""
from __future__ import annotations

import ast
import fnmatch
import os
import re
import shutil
import stat
import tempfile
import zipfile
from contextlib import contextmanager
from pathlib import Path, PurePosixPath

from grader.exercises import EXERCISES

MAX_ZIP_BYTES = 50 << 20        # unpacked size of a zip submission
MAX_ZIP_FILES = 2000
# A notebook's exercise cells (``grader.notebooks`` builds them so): tagged
# ``attn:<exercise>``, and starting with ``%%writefile <exercise>.py``.
TAG_PREFIX = "attn:"
WRITEFILE = "%%writefile"
WRITEFILE_LINE = re.compile(r"^%%writefile\s+(?:\S*/)?(ex\d\d_\w+)\.py\s*$")


class SubmissionError(ValueError):
    """A submission that cannot be read; the text is one sentence."""


class NotebookError(SubmissionError):
    """A notebook that cannot be used; the text is one sentence."""


# Folders that never hold a student's work.
IGNORED_DIRS = {"__MACOSX", "__pycache__", "node_modules", "site-packages", "venv"}
# Folders of a student's repository where the work is; a folder holding one
# of them is read there (not recursively: the edition's grader/ is no answer).
REPO_FOLDERS = ("exercises", "notebooks")


def ignored(name: str) -> bool:
    """Files and folders an archiver or an editor leaves: never a submission."""
    return (name.startswith((".", "~", "#", "._")) or name.endswith(("~", ".bak", ".orig",
            ".swp", ".tmp", "#")) or name in IGNORED_DIRS or "-checkpoint" in name)


def modules_in(folder: Path) -> list[str]:
    return sorted(p.stem for p in Path(folder).glob("*.py")
                  if p.stem in EXERCISES and not p.is_symlink())


def describe(path: Path) -> str:
    """One line on what an upload holds (for staff's logs)."""
    path = Path(path)
    if not path.is_dir():
        return f"{path.name} ({path.stat().st_size} bytes)" if path.exists() else \
            f"{path} (missing)"
    names = sorted(p.name + ("/" if p.is_dir() else "") for p in path.iterdir())
    shown = ", ".join(names[:12]) + (f" and {len(names) - 12} more" if len(names) > 12 else "")
    return f"folder {path.name}/ with {len(names)} entries: {shown or 'nothing'}"


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
            if name.suffix not in (".py", ".ipynb") or any(ignored(p) for p in name.parts):
                continue
            target = dest.joinpath(*name.parts)
            target.parent.mkdir(parents=True, exist_ok=True)
            with archive.open(m) as src, open(target, "wb") as out:
                shutil.copyfileobj(src, out)


def _files(found: Path, pattern: str, recursive: bool = True) -> list[Path]:
    """Regular files matching ``pattern`` below ``found`` (or directly in it);
    links are never followed (a submission's link could point at the hidden
    suites), and what ``ignored`` names is skipped."""
    out = []
    for root, dirs, names in os.walk(found, followlinks=False):
        dirs[:] = sorted(d for d in dirs if not ignored(d)) if recursive else []
        for name in names:
            path = Path(root) / name
            if fnmatch.fnmatch(name, pattern) and not ignored(name) and path.is_file() \
                    and not path.is_symlink():
                out.append(path)
    return sorted(out)


def repository_roots(found: Path, depth: int = 3) -> list[Path]:
    """Folders (``found`` or below) that hold ``exercises/`` or ``notebooks/``:
    a student's repository, maybe inside the folder a zip or a download adds."""
    found = Path(found)
    if any((found / f).is_dir() and not (found / f).is_symlink() for f in REPO_FOLDERS):
        return [found]
    if depth == 0:
        return []
    out = []
    for sub in sorted(found.iterdir()):
        if sub.is_dir() and not sub.is_symlink() and not ignored(sub.name):
            out += repository_roots(sub, depth - 1)
    return out


def read_notebook(path: Path):
    """The notebook at ``path``, validated; ``NotebookError`` when it is none."""
    import nbformat   # here: grading a folder of modules never needs it

    try:
        nb = nbformat.read(str(path), as_version=4)
        nbformat.validate(nb)
    except (ValueError, OSError, nbformat.ValidationError) as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise NotebookError(f"{path} is not a valid notebook ({first}).") from None
    return nb


def extract_modules(path: Path) -> dict[str, str]:
    """{exercise: module source} from the code cells tagged ``attn:<exercise>``;
    where no cell carries a tag (an editor dropped them), from the cells whose
    first line is ``%%writefile exNN_name.py``."""
    nb = read_notebook(Path(path))
    found: dict[str, list[str]] = {}
    by_writefile: dict[str, list[str]] = {}
    for cell in nb.cells:
        if cell.cell_type != "code":
            continue
        source = cell.source
        first, _, rest = source.partition("\n")
        writes = WRITEFILE_LINE.match(first.strip())
        if first.strip().startswith(WRITEFILE):
            source = rest
        for tag in cell.get("metadata", {}).get("tags", []):
            name = str(tag)[len(TAG_PREFIX):] if str(tag).startswith(TAG_PREFIX) else None
            if name in EXERCISES:
                found.setdefault(name, []).append(source)
        if writes and writes.group(1) in EXERCISES:
            # %%writefile replaces the file: the last such cell is what Jupyter saved
            by_writefile[writes.group(1)] = [source]
    for name, parts in by_writefile.items():
        found.setdefault(name, parts)
    if not found:
        raise NotebookError(f"{path} has no code cell tagged {TAG_PREFIX}<exercise> "
                            f"(for example {TAG_PREFIX}ex02_mha) or starting with "
                            f"{WRITEFILE} exNN_name.py, so there is nothing to grade.")
    return {name: "\n\n".join(parts).rstrip() + "\n" for name, parts in found.items()}


def _unfinished(source: str) -> int:
    """How much of a stub is left: ``NotImplementedError``s, and module
    constants still ``None`` (exercise A's stub)."""
    count = source.count("NotImplementedError")
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return count
    for node in tree.body:
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant) \
                and node.value.value is None:
            count += 1
    return count


def _candidates(found: Path) -> tuple[dict[str, list[str]], list[Path]]:
    """{exercise: [sources]} from modules (first) and notebooks, and the
    folders they were found in."""
    roots = repository_roots(found)
    if roots:   # a repository: its own top level, exercises/ and notebooks/
        folders = [f for r in roots for f in (r, *(r / n for n in REPO_FOLDERS)) if f.is_dir()]
        modules = [p for f in folders for p in _files(f, "*.py", recursive=False)]
        notebooks = [p for f in folders for p in _files(f, "*.ipynb", recursive=False)]
    else:
        folders = [found]
        modules, notebooks = _files(found, "*.py"), _files(found, "*.ipynb")
    out: dict[str, list[str]] = {}
    for path in modules:
        if path.stem in EXERCISES:
            out.setdefault(path.stem, []).append(path.read_text(errors="replace"))
    for path in notebooks:
        try:
            found_here = extract_modules(path)
        except SubmissionError:
            if len(notebooks) == 1 and not modules:
                raise
            continue  # one of several notebooks: the others may hold the work
        for name, source in found_here.items():
            out.setdefault(name, []).append(source)
    helpers = [p for p in modules if p.stem not in EXERCISES]
    return out, helpers


def _flatten(found: Path, dest: Path) -> None:
    """Exercise modules and notebooks anywhere in ``found`` -> ``dest``.  Where
    an exercise is found twice (a repository's module and its notebook), the
    one with less of the stub left wins; on a tie, the module."""
    for i, archive in enumerate(_files(found, "*.zip")):  # a zip uploaded beside
        inner = dest.parent / f"zip{i}"
        inner.mkdir(exist_ok=True)
        _unzip(archive, inner)
        _flatten(inner, dest)
    candidates, helpers = _candidates(found)
    for name, sources in candidates.items():
        best = min(sources, key=_unfinished)   # min keeps the first on a tie
        if not (dest / f"{name}.py").exists():
            (dest / f"{name}.py").write_text(best)
    # helpers beside the modules (a student's utils.py) come along
    for path in helpers:
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
        packed = list(path.glob("*.ipynb")) + list(path.glob("*.zip")) + \
            [p for p in path.iterdir() if p.is_dir() and not p.is_symlink()
             and (p.name in REPO_FOLDERS or not ignored(p.name) and not modules_in(path))]
        if not modules_in(path) and not packed:
            course = [name for name, ex in EXERCISES.items() if ex.in_contract]
            raise SubmissionError(f"no exercise modules ({course[0]}.py ... "
                                  f"{course[-1]}.py) were found in {path}.")
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
