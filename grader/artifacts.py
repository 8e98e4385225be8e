"""Every file the grader writes, written one way: atomically, never through a link.

Two kinds: a result (``write_private``: a results JSON, a report, a class's
CSV and pages; readable by its owner only) and an artifact (``save``: the
ex04 plot, the heatmaps of exercises A, B, C and H, for the person graded),
written only into a grader-owned output folder, never into a submission: a
submission may hold a link where the file would go, and the grader (root, in
CI) would write the student's bytes wherever it points.  Both make the file
beside its target under a fresh name (``O_EXCL``, ``O_NOFOLLOW``) and rename
it into place, so a file or link already there is replaced, not followed;
an artifact's folder is opened without following a link, and reports name
an artifact by its path relative to that folder, never by an absolute path
of the grading machine.  A result written to a device or a pipe
(``/dev/stdout``) is written to, never replaced.
"""
from __future__ import annotations

import os
import secrets
import stat
from pathlib import Path


class ArtifactError(OSError):
    pass


def _replace_into(dir_fd: int, name: str, data: bytes, mode: int) -> None:
    """``data`` as ``name`` in the folder ``dir_fd``: a fresh file, then a rename."""
    tmp = f".{name}.{secrets.token_hex(6)}"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, mode,
                 dir_fd=dir_fd)
    try:
        with os.fdopen(fd, "wb") as f:
            os.fchmod(f.fileno(), mode)     # whatever the umask
            f.write(data)
        os.replace(tmp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
    except BaseException:
        try:
            os.unlink(tmp, dir_fd=dir_fd)
        except OSError:
            pass
        raise


def _open_folder(folder: Path) -> int:
    folder.mkdir(parents=True, exist_ok=True, mode=0o755)
    try:
        return os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    except OSError as exc:
        raise ArtifactError(f"the output folder {folder.name} cannot be opened as a folder "
                            f"(a link is not followed): {exc.strerror}") from None


def save(folder: Path | str, name: str, data: bytes) -> str:
    """Write ``data`` as ``folder/name``; returns ``name`` (relative to the folder)."""
    if os.sep in name or name in ("", ".", ".."):
        raise ValueError(f"an artifact's name is one plain file name, not {name!r}")
    dir_fd = _open_folder(Path(folder))
    try:
        _replace_into(dir_fd, name, data, 0o644)
    finally:
        os.close(dir_fd)
    return name


def write_private(path: Path, text: str) -> None:
    """Write a result atomically, readable by its owner only: whatever a
    submission left at that path (a file, a link) is replaced, not followed.
    A device or a pipe (``/dev/stdout``, ``/dev/null``) is written to, never
    replaced."""
    path = Path(path)
    try:
        mode = os.stat(path).st_mode
    except OSError:
        mode = None
    if mode is not None and not stat.S_ISREG(mode) and not os.path.islink(path):
        with open(path, "w", encoding="utf-8") as f:
            f.write(text)
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    dir_fd = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY)
    try:
        _replace_into(dir_fd, path.name, text.encode("utf-8"), 0o600)
    finally:
        os.close(dir_fd)
