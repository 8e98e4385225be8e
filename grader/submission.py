"""What a submission may be, turned into a folder of exercise modules.

A submission is a folder of ``exNN_*.py`` modules, a notebook (``.ipynb``)
whose code cells carry ``attn:<exercise>`` tags (or, where an editor lost the
tags, start with ``%%writefile exNN_name.py``), a ``.zip`` holding either,
or a student's whole repository (the student edition, as a GitHub upload to
Gradescope brings it): its ``exercises/`` and ``notebooks/`` are read.
What an archiver or an editor leaves behind (``__MACOSX``, dotfiles,
``.ipynb_checkpoints``, ``foo.py~``, ``#foo.py#``, ``.bak``) is skipped.
``materialize`` returns a folder the grader can use, made in a temporary
directory when the submission is not a folder already; problems are
``SubmissionError`` with one sentence for the person at the keyboard.

Every way in (a zip, the zips in a folder, a notebook, a folder walked or
graded where it is) goes through the caps below, counted in one ``Budget``
per upload: what a bad upload costs is a sentence, never a traceback or a
full disk.
"""
from __future__ import annotations

import ast
import errno
import fnmatch
import json
import os
import re
import shutil
import stat
import sys
import tempfile
import unicodedata
import zipfile
import zlib
from contextlib import contextmanager
from pathlib import Path, PurePosixPath

from grader.registry import EXERCISES

# What one upload may bring in, all its zips and folders together (a zip of a
# whole course repository is far below these; a zip bomb, a folder of many
# zips, a tree nested thousands deep is not).  Each refusal says its cap.
MAX_UNPACKED_BYTES = 50 << 20   # its modules and notebooks: unpacked from its zips (as
                                # declared, then as written) and read from its folders;
                                # and the largest zip or notebook file
MAX_FILES = 2000                # files in its zips and folders, leftovers (.git/) aside
MAX_DEPTH = 16                  # folders inside one another, in a zip or in a folder
MAX_NAME_BYTES = 255            # one name in a path, in UTF-8: NAME_MAX of ext4, XFS, APFS
MAX_PATH_BYTES = 1024           # a zip member's whole path (PATH_MAX is 4096, with our prefix)
MAX_JSON_DEPTH = 64             # a notebook's JSON nesting (the course's: 5; with outputs and
                                # widget state, about 10)
COPY_CHUNK = 1 << 16            # unpacked and counted 64 KB at a time
MAX_CELLS = 5000                # a notebook's cells (a course notebook has about 20)
MAX_TAGS = 100                  # tags kept of one cell (the course's cells carry one)
NOTEBOOK_READ_S = 20.0          # reading one notebook (a capped one takes about 1 s)
NOTEBOOK_READ_BYTES = 2 << 30   # memory reading one may take (50 MB of JSON, parsed)
# A notebook's exercise cells (``grader.notebooks`` builds them so): tagged
# ``attn:<exercise>``, and starting with ``%%writefile <exercise>.py``.
TAG_PREFIX = "attn:"
WRITEFILE = "%%writefile"
WRITEFILE_LINE = re.compile(r"^%%writefile\s+(?:\S*/)?(ex\d\d_\w+)\.py\s*$")


class SubmissionError(ValueError):
    """A submission that cannot be read; the text is one sentence."""


class NotebookError(SubmissionError):
    """A notebook that cannot be used; the text is one sentence."""


def _shown(name: str, width: int = 60) -> str:
    """A name from an upload, fit for one line of a sentence."""
    text = name if name.isprintable() else ascii(name)[1:-1]
    return text if len(text) <= width else text[:width - 3] + "..."


class Budget:
    """What one upload has brought in so far, all its zips and folders
    together; going past a cap is a ``SubmissionError`` that says the cap."""

    def __init__(self) -> None:
        self.declared = 0                 # unpacked sizes its zips declare
        self.taken = 0                    # bytes written from its zips, read from its folders
        self.files = 0                    # zip members and folder files
        self._seen: set[Path] = set()     # folder files are walked more than once

    def count(self, n: int, where: Path) -> None:
        self.files += n
        if self.files > MAX_FILES:
            raise SubmissionError(f"{where} holds more than {MAX_FILES} files, the most one "
                                  "upload may hold with all its zips and folders: upload "
                                  "only your exercise modules and notebooks.")

    def see(self, path: Path, where: Path) -> None:
        if path not in self._seen:
            self._seen.add(path)
            self.count(1, where)

    def declare(self, n: int, where: Path) -> None:
        self.declared += n
        self._check(self.declared, where)

    def take(self, n: int, where: Path) -> None:
        """Before ``n`` more bytes are written or read: so the cap is never passed."""
        self.taken += n
        self._check(self.taken, where)

    @staticmethod
    def _check(total: int, where: Path) -> None:
        if total > MAX_UNPACKED_BYTES:
            raise SubmissionError(f"{where} comes to more than {MAX_UNPACKED_BYTES >> 20} MB, "
                                  "the most one upload may unpack or hold with all its zips "
                                  "and folders: upload only your exercise modules and "
                                  "notebooks.")


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
                  if p.stem in EXERCISES and p.is_file() and not p.is_symlink())


def module_name_problem(name: str) -> str | None:
    """Why a module file called ``name`` (``foo.py``) cannot come into a
    worker, or None: its stem must be a Python identifier that is no
    keyword, and must not name a module of the worker's runtime or one it,
    Python or the exercises import (``reach.reserved_module_names``), which
    the file would stand in for once the submission's folder is on
    ``sys.path``."""
    import keyword
    from grader.sandbox.reach import reserved_module_names
    stem = name[:-3] if name.endswith(".py") else name
    if not stem.isidentifier() or keyword.iskeyword(stem):
        return (f"{_shown(name)} is not a name Python can import: rename it to letters, "
                "digits and underscores (not starting with a digit) and upload it again.")
    if stem in reserved_module_names():
        return (f"{_shown(name)} has the name of a module the grader or Python itself uses "
                f"({stem}), which it would replace: rename it and upload it again.")
    return None


def check_module_names(folder: Path) -> None:
    """Refuse, with one sentence, a folder whose top-level modules (what a
    worker may copy and import) include a name ``module_name_problem`` refuses."""
    for path in sorted(Path(folder).glob("*.py")):
        problem = module_name_problem(path.name)
        if problem is not None:
            raise SubmissionError(problem)


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


def _too_large(path: Path, what: str) -> SubmissionError:
    return SubmissionError(f"{path} is larger than {MAX_UNPACKED_BYTES >> 20} MB, the most "
                           f"one upload may unpack: {what}.")


def _folds_case(folder: Path) -> bool:
    """Whether ``folder``'s file system takes ``A`` and ``a`` for one name
    (macOS's and Windows' do by default; Linux's do not)."""
    probe = folder / ".attn-case-Probe"
    probe.touch()
    try:
        return (folder / ".attn-case-probe").exists()
    finally:
        probe.unlink()


def _check_name(path: Path, name: str, parts: tuple[str, ...], folders: int) -> None:
    """A member name every file system can hold, no deeper than ``MAX_DEPTH``."""
    if len(name.encode("utf-8", "surrogateescape")) > MAX_PATH_BYTES:
        raise SubmissionError(f"{path} holds a path longer than {MAX_PATH_BYTES} bytes "
                              f"({_shown(name)}): put your files nearer the top and zip "
                              "them again.")
    long = next((p for p in parts if len(p.encode("utf-8", "surrogateescape"))
                 > MAX_NAME_BYTES), None)
    if long is not None:
        raise SubmissionError(f"{path} holds a name longer than {MAX_NAME_BYTES} bytes, "
                              f"which file systems refuse ({_shown(long)}): rename it and "
                              "zip again.")
    if folders > MAX_DEPTH:
        raise SubmissionError(f"{path} holds folders nested more than {MAX_DEPTH} deep "
                              f"({_shown(name)}): put your files nearer the top and zip "
                              "them again.")


def _kept(path: Path, members: list, folds_case: bool) -> list:
    """(member, path parts) of the files in a zip that are no archiver's or
    editor's leftovers (those are never unpacked, whatever their names).  A
    zip that no file system could unpack as it is (an unsafe, over-long or
    too deep name; a name twice; a file and a folder of one name) is refused
    whole: which of two clashing files an unpacker keeps is chance."""
    def fold(part: str) -> str:
        return unicodedata.normalize("NFC", part).casefold() if folds_case else part

    files: dict[tuple, str] = {}
    folders: set[tuple] = set()
    kept = []
    for m in members:
        name = PurePosixPath(m.filename)
        if name.is_absolute() or ".." in name.parts:
            raise SubmissionError(f"{path} holds an unsafe path ({_shown(m.filename)}).")
        parts = name.parts
        if any(ignored(p) for p in parts):
            continue
        _check_name(path, m.filename, parts, len(parts) - (not m.is_dir()))
        key = tuple(fold(p) for p in parts)
        folders.update(key[:i] for i in range(1, len(key)))
        if m.is_dir():
            folders.add(key)
            continue
        if key in files:
            first, again = files[key], m.filename
            raise SubmissionError(
                f"{path} holds {_shown(again)} twice: zip your files again, each once."
                if first == again else
                f"{path} holds {_shown(first)} and {_shown(again)}, one name where case is "
                "ignored (as on this machine): rename one and zip again.")
        files[key] = m.filename
        kept.append((m, parts))
    clash = next((files[k] for k in files if k in folders), None)
    if clash is not None:
        raise SubmissionError(f"{path} holds a file and a folder both named "
                              f"{_shown(clash)}: rename one and zip again.")
    return kept


def _unzip(path: Path, dest: Path, budget: Budget | None = None) -> None:
    """The modules and notebooks of the zip at ``path`` -> ``dest``, counted in
    ``budget``: its files (leftovers aside), the sizes it declares for what
    is unpacked (a bomb is refused before a byte is written), then every
    byte as it is written (a declared size could lie)."""
    budget = budget or Budget()
    if path.stat().st_size > MAX_UNPACKED_BYTES:   # and so how many members it can list
        raise _too_large(path, "zip only your exercise modules and notebooks")
    try:
        archive = zipfile.ZipFile(path)
    except (zipfile.BadZipFile, OSError, EOFError, ValueError) as exc:
        # ValueError: a member name marked UTF-8 that is not
        raise SubmissionError(f"{path} is not a readable zip file ({exc}).") from None
    with archive:
        kept = _kept(path, archive.infolist(), _folds_case(dest))
        budget.count(len(kept), path)
        chosen = [(m, parts) for m, parts in kept  # links are not followed or created
                  if PurePosixPath(m.filename).suffix in (".py", ".ipynb")
                  and not stat.S_ISLNK(m.external_attr >> 16)]
        budget.declare(sum(m.file_size for m, _ in chosen), path)
        locked = next((m.filename for m, _ in chosen if m.flag_bits & 0x1), None)
        if locked is not None:
            raise SubmissionError(f"{path} is encrypted ({_shown(locked)}): zip your files "
                                  "again without a password.")
        for m, parts in chosen:
            target = dest.joinpath(*parts)
            try:
                target.parent.mkdir(parents=True, exist_ok=True)
                with archive.open(m) as src, open(target, "xb") as out:
                    while chunk := src.read(COPY_CHUNK):
                        budget.take(len(chunk), path)
                        out.write(chunk)
            except (zipfile.BadZipFile, EOFError, NotImplementedError, zlib.error) as exc:
                # a bad CRC, a truncated member, a method Python lacks (deflate64)
                raise SubmissionError(f"{path} is damaged or packed in a way the grader "
                                      f"cannot read ({_shown(m.filename)}: {exc}): zip your "
                                      "files again.") from None
            except OSError as exc:
                if exc.errno in (errno.ENOSPC, errno.EDQUOT):
                    raise   # the machine's disk, not the upload
                raise SubmissionError(f"{path} could not be unpacked here "
                                      f"({_shown(m.filename)}: {exc.strerror}): rename it "
                                      "and zip again.") from None


def _files(found: Path, pattern: str, recursive: bool = True,
           budget: Budget | None = None) -> list[Path]:
    """Regular files matching ``pattern`` below ``found`` (or directly in it);
    links are never followed (a submission's link could point at the hidden
    suites), and what ``ignored`` names is skipped.  Folders nested deeper
    than ``MAX_DEPTH`` are refused (never walked: the walk recurses); with
    ``budget``, every file seen counts in it."""
    found = Path(found)
    out = []
    for root, dirs, names in os.walk(found, followlinks=False):
        dirs[:] = sorted(d for d in dirs if not ignored(d)) if recursive else []
        if dirs and len(Path(root).relative_to(found).parts) >= MAX_DEPTH:
            deep = str(Path(root, dirs[0]).relative_to(found))
            raise SubmissionError(f"{found} holds folders nested more than {MAX_DEPTH} deep "
                                  f"({_shown(deep)}): put your files nearer the top.")
        for name in names:
            path = Path(root) / name
            if ignored(name):
                continue
            if budget is not None:
                budget.see(path, found)
            if fnmatch.fnmatch(name, pattern) and path.is_file() and not path.is_symlink():
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


def _json_depth(value) -> int:
    """How deep ``value`` nests (lists and objects), counted without recursion
    and only until it passes ``MAX_JSON_DEPTH``."""
    deepest, stack = 0, [(value, 1)]
    while stack and deepest <= MAX_JSON_DEPTH:
        item, depth = stack.pop()
        if isinstance(item, (dict, list)):
            deepest = max(deepest, depth)
            stack.extend((v, depth + 1) for v in (item.values() if isinstance(item, dict)
                                                  else item))
    return deepest


def _many_cells(path: Path) -> NotebookError:
    return NotebookError(f"{path} has more than {MAX_CELLS} cells, far more than a course "
                         "notebook: upload the notebook you worked in.")


def _checked_notebook(path: Path):
    """The notebook at ``path`` read and validated, every cap checked before
    nbformat parses it deeply: its size, its JSON nesting, its format (4:
    nbformat's upgrade of older ones is no place for untrusted input; a
    heading of level 10**12 made it build a string that long) and its cells."""
    import nbformat   # here: grading a folder of modules never needs it

    def invalid(exc: Exception) -> NotebookError:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        return NotebookError(f"{path} is not a valid notebook ({_shown(first, 120)}).")

    try:
        if path.stat().st_size > MAX_UNPACKED_BYTES:
            raise _too_large(path, "clear its outputs, save it and upload it again")
        text = path.read_text(encoding="utf-8")
        # A count of the key every cell has, before the parse (which takes
        # longer): an upper bound on its cells, exact in any notebook Jupyter
        # wrote; the parsed count below is what decides.
        if text.count('"cell_type"') > MAX_CELLS:
            raise _many_cells(path)
        data = json.loads(text)
    except RecursionError:   # deeper than the JSON parser's stack
        data = None
    except SubmissionError as exc:
        raise NotebookError(str(exc)) from None
    except (ValueError, OSError) as exc:
        raise invalid(exc) from None
    deep = NotebookError(f"{path} nests more than {MAX_JSON_DEPTH} deep, which no notebook "
                         "Jupyter saves does: upload the notebook as Jupyter saved it.")
    if data is None:
        raise deep
    # The cheap caps first: the nesting's is a walk over every item.
    version = data.get("nbformat") if isinstance(data, dict) else None
    if type(version) is not int or version != 4:
        raise NotebookError(f"{path} is not in notebook format 4 (it says "
                            f"{_shown(repr(version), 20)}): open it in Jupyter 4 or later, "
                            "save it and upload it again.")
    cells = data.get("cells")
    if isinstance(cells, list) and len(cells) > MAX_CELLS:
        raise _many_cells(path)
    if _json_depth(data) > MAX_JSON_DEPTH:
        raise deep
    try:
        nb = nbformat.reads(text, as_version=4)
        nbformat.validate(nb)
    except (ValueError, AttributeError, KeyError, TypeError, nbformat.ValidationError) as exc:
        raise invalid(exc) from None
    return nb


def _kept_of(nb) -> dict:
    """What the grader reads of a notebook (its cells' kinds, sources and
    tags), as plain JSON: bounded by the caps, whatever else the file held."""
    cells = []
    for cell in nb.cells:
        tags = cell.get("metadata", {}).get("tags", [])
        cells.append({"cell_type": cell.cell_type, "source": cell.source,
                      "metadata": {"tags": [str(t) for t in tags][:MAX_TAGS]}})
    return {"nbformat": 4, "nbformat_minor": 0, "metadata": {}, "cells": cells}


def read_notebook(path: Path):
    """The notebook at ``path`` as the grader reads it (each cell's kind,
    source and tags), or ``NotebookError`` with one sentence when it is none
    or breaks a cap (``_checked_notebook``).  The one reader of a submission's
    notebooks, bounded in time (``NOTEBOOK_READ_S``) and memory
    (``NOTEBOOK_READ_BYTES``): on Linux it reads in a forked child under
    those limits, so that no notebook can exhaust or stall the process that
    grades (a whole batch)."""
    import nbformat

    path = Path(path)
    if not (sys.platform.startswith("linux") and hasattr(os, "fork")):
        return nbformat.from_dict(_kept_of(_checked_notebook(path)))
    nbformat.validate(nbformat.v4.new_notebook())   # its schema loaded before the fork
    answer = _in_child(lambda: json.dumps(_kept_of(_checked_notebook(path))),
                       NOTEBOOK_READ_S, NOTEBOOK_READ_BYTES)
    if answer is None:
        raise NotebookError(f"{path} could not be read within {NOTEBOOK_READ_S:g} s and "
                            f"{NOTEBOOK_READ_BYTES >> 20} MB, which a notebook Jupyter saves "
                            "needs far less than: upload the notebook as Jupyter saved it.")
    kind, text = answer
    if kind == "error":
        raise NotebookError(text)
    return nbformat.from_dict(json.loads(text))


def _in_child(work, seconds: float, memory_bytes: int) -> tuple[str, str] | None:
    """``("ok", work())`` or ``("error", its NotebookError's text)``, computed
    in a forked child with at most ``memory_bytes`` more address space than
    this process has and ``seconds`` of wall clock; None where it ran out of
    either (or died)."""
    import resource
    import select
    import signal
    import time
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:   # the child: never returns into the caller's code
        code = 1
        try:
            os.close(read_end)
            size = int(Path("/proc/self/statm").read_text().split()[0]) * os.sysconf("SC_PAGE_SIZE")
            resource.setrlimit(resource.RLIMIT_AS, (size + memory_bytes, size + memory_bytes))
            try:
                out = json.dumps(["ok", work()])
            except NotebookError as exc:
                out = json.dumps(["error", str(exc)])
            with os.fdopen(write_end, "w", encoding="utf-8") as f:
                f.write(out)
            code = 0
        finally:
            os._exit(code)
    os.close(write_end)
    chunks, deadline, done = [], time.monotonic() + seconds, False
    try:
        while True:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([read_end], [], [], left)[0]:
                break
            chunk = os.read(read_end, 1 << 20)
            if not chunk:
                done = True
                break
            chunks.append(chunk)
    finally:
        os.close(read_end)
        if not done:
            os.kill(pid, signal.SIGKILL)
        _, status = os.waitpid(pid, 0)
    if not done or os.waitstatus_to_exitcode(status) != 0:
        return None
    kind, text = json.loads(b"".join(chunks))
    return kind, text


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
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return count   # unparsable (MemoryError: the parser's own stack): the import says why
    for node in tree.body:
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant) \
                and node.value.value is None:
            count += 1
    return count


def _candidates(found: Path, budget: Budget | None = None
                ) -> tuple[dict[str, list[str]], list[Path]]:
    """{exercise: [sources]} from modules (first) and notebooks, and the
    helper modules beside them; with ``budget``, what is read counts in it."""
    roots = repository_roots(found)
    if roots:   # a repository: its own top level, exercises/ and notebooks/
        # never through a link: a repository's exercises/ that is a link to a
        # folder elsewhere on the grading machine is no part of the upload
        folders = [f for r in roots for f in (r, *(r / n for n in REPO_FOLDERS))
                   if f.is_dir() and not f.is_symlink()]
        modules = [p for f in folders for p in _files(f, "*.py", False, budget)]
        notebooks = [p for f in folders for p in _files(f, "*.ipynb", False, budget)]
    else:
        modules, notebooks = _files(found, "*.py", budget=budget), \
            _files(found, "*.ipynb", budget=budget)
    if budget is not None:
        for path in modules + notebooks:   # read, or copied as a helper
            budget.take(path.stat().st_size, found)
    out: dict[str, list[str]] = {}
    for path in modules:
        if path.stem in EXERCISES:
            try:
                out.setdefault(path.stem, []).append(path.read_text(errors="replace"))
            except OSError as exc:
                raise SubmissionError(f"{path} could not be read ({exc.strerror}).") from None
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


def _flatten(found: Path, dest: Path, budget: Budget | None = None,
             unpacked: bool = False) -> None:
    """Exercise modules and notebooks anywhere in ``found`` -> ``dest``.  Where
    an exercise is found twice (a repository's module and its notebook), the
    one with less of the stub left wins; on a tie, the module.  Zips in
    ``found`` are unpacked (the zips inside them are not: only modules and
    notebooks are); all count in one ``budget``, and the files of a folder
    the intake did not unpack itself (``unpacked``) count as they are read."""
    budget = budget or Budget()
    walked = None if unpacked else budget   # unpacked: counted as they were written
    for i, archive in enumerate(_files(found, "*.zip", budget=walked)):  # zips beside
        inner = dest.parent / f"zip{i}"
        inner.mkdir(exist_ok=True)
        _unzip(archive, inner, budget)
        _flatten(inner, dest, budget, unpacked=True)
    candidates, helpers = _candidates(found, walked)
    for name, sources in candidates.items():
        best = min(sources, key=_unfinished)   # min keeps the first on a tie
        if not (dest / f"{name}.py").exists():
            (dest / f"{name}.py").write_text(best)
    # helpers beside the modules (a student's utils.py) come along: moved out of
    # a folder the intake unpacked (so its disk is the cap, not twice it)
    place = os.replace if unpacked else shutil.copyfile
    for path in helpers:
        if not (dest / path.name).exists():
            place(path, dest / path.name)


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
        if not packed:   # graded where it is: every worker copies its top-level modules
            check_module_names(path)
            budget = Budget()
            for module in path.glob("*.py"):
                if module.is_file() and not module.is_symlink():
                    budget.see(module, path)
                    budget.take(module.stat().st_size, path)
            yield path
            return
    tmp = Path(tempfile.mkdtemp(prefix="attn-submission-"))
    try:
        folder = tmp / "modules"
        folder.mkdir()
        budget = Budget()   # one for the whole upload: all its zips and folders
        if kind == "zip":
            unpacked = tmp / "unpacked"
            unpacked.mkdir()
            _unzip(path, unpacked, budget)
            _flatten(unpacked, folder, budget, unpacked=True)
        elif kind == "notebook":
            for name, source in extract_modules(path).items():
                (folder / f"{name}.py").write_text(source)
        else:  # a folder with notebooks or zips in it
            _flatten(path, folder, budget)
        if not modules_in(folder):
            raise SubmissionError(f"no exercise modules or tagged notebook cells were found "
                                  f"in {path}.")
        check_module_names(folder)
        yield folder
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
