"""`attn-grade check` keeps each exercise's results while nothing they depend on changed.

A student who checks everything again after editing one exercise waits for
that one only: the others' results are read back from ``check``'s cache on
the student's machine (``cli._user_cache``).  An exercise's key is what its
public results can depend on: the files of the submission its module can
import (``reach.imported_modules``; names, and code with the place of every
token but without comments, so that every line number in the feedback is
still right: ``_code``), the grader's own files and the
versions of Python and of the libraries (``grader.digest``, as a class's
gradebook asks too), and the options of the check.  A
result that could not be judged (a regrade, a grader problem) is never
kept, nor one whose files (the ex04 plot) are gone.  Grading never uses it:
only `check` does, and `--no-cache` checks everything again.
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import time
from pathlib import Path

from grader import digest
from grader.report import NEEDS_REGRADE, Report, TestResult

VERSION = b"attn-grade check results 1\0"
KEPT_NOTE = ("{n} exercise(s) kept from an earlier check of these same files: {names} "
             "(--no-cache checks them again).")


def _options(options) -> bytes:
    """The options a check's results depend on (not the exercises asked for,
    nor the caches themselves)."""
    fields = dataclasses.asdict(options)
    for name in ("exercises", "check_cache", "font_cache", "seed", "grading_budget"):
        fields.pop(name, None)
    return json.dumps(fields, sort_keys=True, default=str).encode()


def _inputs(folder: Path, exercise: str) -> bytes:
    from grader.sandbox.reach import imported_modules
    h = hashlib.sha256()
    paths = imported_modules(folder, exercise)
    if paths is None:      # an import that cannot be read: every file counts
        return digest.content_hash(folder).encode()
    own = folder / f"{exercise}.py"
    h.update(b"own " + (b"link" if own.is_symlink() else b"file" if own.is_file()
                        else b"missing") + b"\0")
    for path in paths:
        h.update(path.name.encode("utf-8", "surrogateescape") + b"\0" + _code(path) + b"\0")
    return h.digest()


def _code(path: Path) -> bytes:
    """A module's code and where each of its tokens sits, without its
    comments (``reach.code_key``): a comment edited on its own line or at
    a line's end checks nothing again, while anything that moves code (a
    line added above it) does, so that every line and column the feedback
    names is still right.  Its bytes where it does not tokenize."""
    from grader.sandbox.reach import code_key
    return code_key(path.read_bytes(), places=True)


def keys(folder: Path, options, exercises: list[str]) -> dict[str, str]:
    """Each exercise's key in the cache."""
    common = hashlib.sha256(VERSION + digest.grader_files() + digest.environment() + _options(options))
    out = {}
    for exercise in exercises:
        h = common.copy()
        h.update(exercise.encode() + b"\0" + _inputs(Path(folder), exercise))
        out[exercise] = h.hexdigest()[:32]
    return out


def _path(cache_dir: Path, key: str) -> Path:
    return Path(cache_dir) / f"check-{key}.json"


def _load(cache_dir: Path, key: str) -> dict | None:
    try:
        entry = json.loads(_path(cache_dir, key).read_text(encoding="utf-8"))
        tests = [TestResult(**t) for t in entry["tests"]]
    except (OSError, ValueError, TypeError, KeyError):
        return None
    if not all(Path(p).is_file() for p in entry.get("files", [])):
        return None        # what it made for the student (the ex04 plot) is gone
    return {**entry, "tests": tests}


def _store(cache_dir: Path, key: str, report: Report, exercise: str,
           files: list[str]) -> None:
    tests = [t for t in report.tests if t.exercise == exercise]
    if not tests or any(t.status == NEEDS_REGRADE for t in tests) or report.errors:
        return
    entry = {"tests": [dataclasses.asdict(t) for t in tests],
             "manual": [m for m in report.manual if m.get("exercise") == exercise],
             "import_error": report.import_errors.get(exercise),
             "files": files}
    path = _path(cache_dir, key)
    try:   # best effort: a cache that cannot be written only costs time
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps(entry), encoding="utf-8")
        os.replace(tmp, path)
    except (OSError, TypeError, ValueError):
        pass


def _made(artifacts: Path | None, since: float, exercise: str) -> list[str]:
    """The files the check wrote for ``exercise`` in the artifacts folder."""
    if artifacts is None or not Path(artifacts).is_dir():
        return []
    stem = exercise.split("_")[0]
    return [str(p.resolve()) for p in Path(artifacts).iterdir()
            if p.is_file() and p.name.startswith(stem) and p.stat().st_mtime >= since - 1]


def grade_cached(folder: Path, options, grade) -> Report:
    """``grade(folder, options)`` for the exercises whose results are not
    kept in ``options.check_cache``; the others' read back from it.  The
    report holds every exercise asked for, in course order."""
    from grader.options import exercises_of
    cache_dir = options.check_cache
    names = exercises_of(options)
    began = time.time()
    found = keys(folder, options, names)
    kept = {e: entry for e in names if (entry := _load(cache_dir, found[e])) is not None}
    todo = [e for e in names if e not in kept]
    if todo:
        report = grade(folder, dataclasses.replace(options, exercises=todo))
        for exercise in todo:
            _store(cache_dir, found[exercise], report, exercise,
                   _made(options.artifacts_dir, began, exercise))
    else:       # nothing runs: no worker, no isolation to decide
        report = Report(submission=str(folder), suite=options.suite)
    if not kept:
        return report
    tests = list(report.tests)
    for exercise, entry in kept.items():
        tests += entry["tests"]
        report.manual += entry.get("manual", [])
        if entry.get("import_error"):
            report.import_errors[exercise] = entry["import_error"]
    order = {e: i for i, e in enumerate(names)}
    report.tests[:] = sorted(tests, key=lambda t: order.get(t.exercise, len(order)))
    report.exercises = list(names)
    report.notes.append(KEPT_NOTE.format(n=len(kept), names=", ".join(kept)))
    report.seconds = time.time() - began
    return report
