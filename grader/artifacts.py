"""Files the grader makes for the person graded (the ex04 plot, the heatmaps
of exercises A, B, C and H), written only into a grader-owned output folder.

Never into a submission: a submission may hold a link where the file would
go, and the grader (root, in CI) would write the student's bytes wherever it
points.  The folder is opened without following a link, the file is made
beside it under a fresh name and renamed into place (so a link already there
is replaced, not followed), and reports name it by its path relative to the
folder, never by an absolute path of the grading machine.
"""
from __future__ import annotations

import os
import secrets
from pathlib import Path


class ArtifactError(OSError):
    pass


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
    tmp = f".{name}.{secrets.token_hex(6)}"
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644,
                     dir_fd=dir_fd)
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(data)
            os.replace(tmp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
        except BaseException:
            try:
                os.unlink(tmp, dir_fd=dir_fd)
            except OSError:
                pass
            raise
    finally:
        os.close(dir_fd)
    return name
