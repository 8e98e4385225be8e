"""Grade a whole class: every submission in a folder, each in its own
grader process, into one CSV and a Gradescope-style JSON per submission.

A submission is a sub-folder, a notebook or a zip (what ``grade`` takes), or
the files of one student in an LMS bulk download (Canvas names them
``login[_late]_userid_submissionid_file``), grouped into a folder.  What an
archiver or editor leaves (``__MACOSX``, dotfiles, backups) is no student.
``--shard K/N`` grades a deterministic K-th part; ``merge_parts`` joins the
parts' CSVs, refusing overlaps and gaps.  Each is graded by
``attn-grade grade`` in a fresh process with an overall time limit, so one
submission that breaks even the grader costs only its own row, and that row
is out of the class's maximum (``class_maximum``), as every other is.  A rerun
skips a submission whose result file records the same cache key (the
submission's content hash, the suite, the exercises, the options that change
scores and the grader's version), unless ``force``.

Every submission of a batch has a label of its own, fixed at ``discover``:
its folder's name, or a notebook's or zip's name without the suffix, which
a file keeps where a folder or another file has that stem (``ann/`` and
``ann.zip`` are ``ann`` and ``ann.zip``); labels that the cleaning of
control characters would make one get a tag of their original's hash.  The
CSV, the roster, ``--submitted-times``, the results and the class report
all name it so.  Result names that would collide (``s1/`` and ``s1!.zip``,
names differing only in an accent or in case) get a hash too.
"""
from __future__ import annotations

import csv
import dataclasses
import hashlib
import io
import json
import os
import re
import shutil
import stat
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from grader import safetext
from grader.core import Options
from grader.paths import PACKAGE_DIR
from grader.registry import EXERCISES
from grader.report import exercise_scores_of
from grader.safetext import (NAME_LIMIT, Entries, TextMap, clean, cleaner, csv_number, csv_text,
                             csv_value)
from grader.sandbox.process import remove_stale_staging

ONE_LINE = cleaner(NAME_LIMIT, one_line=True)


@dataclass
class Submission:
    name: str              # as the class folder spells it, unique (_name_files): the roster's key
    path: Path
    key: str = ""          # its result file's stem, unique in the batch
    error: str = ""        # why it cannot be graded, found at intake: a zero row, no grading
    lms_user_id: str = ""        # an LMS bulk download's user id (Canvas), else ""
    lms_submission_id: str = ""  # its submission id(s), space-separated
    late: bool | None = None     # the download's late flag; None: no LMS file
    label: str = field(init=False, default="")   # the name as outputs show it (safetext)

    def __post_init__(self):
        self.label = ONE_LINE(self.name)


@safetext.fields(error=cleaner(), manual=Entries, import_errors=TextMap, isolation=ONE_LINE)
@dataclass
class Outcome:
    submission: Submission
    result_path: Path
    skipped: bool = False          # graded in an earlier run
    error: str = ""
    seconds: float = 0.0
    scores: dict = field(default_factory=dict)   # exercise -> (score, max)
    manual: list = field(default_factory=list)   # free-text answers for staff (rubric sheet)
    needs_regrade: int = 0         # tests that could not be judged
    import_errors: dict = field(default_factory=dict)   # exercise -> why
    isolation: str = ""

    @property
    def problems(self) -> str:
        """The CSV's error column: the error, then each import error; one field
        (``FIELD_LIMIT``), so that a merge reads back what was written."""
        errors = [self.error] if self.error else []
        errors += [f"{ex}: {why}" for ex, why in sorted(self.import_errors.items())]
        return clean(" | ".join(errors))


def _safe(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", name).strip("._") or "submission"


# Canvas's bulk download: the student's name (family then given names, run
# together, lower case, in any script: ``müllerjörg``), ``late`` when late,
# user id, submission id, then the file's own name (a resubmission's gets
# "-1", "-2" before the suffix).  Two students of one name differ in user id.
CANVAS_NAME = re.compile(r"^(?P<student>[^_\s]+?)(?P<late>_(?i:late))?_(?P<user>\d+)_"
                         r"(?P<sub>\d+)_(?P<file>.+)$")
SUBMISSION_SUFFIXES = (".py", ".ipynb", ".zip")


def _canvas_file(name: str) -> str:
    stem, dot, suffix = name.rpartition(".")
    return re.sub(r"-\d+$", "", stem) + dot + suffix


@dataclass
class _CanvasStudent:
    """One user id's files of a Canvas bulk download."""
    student: str
    files: list = field(default_factory=list)       # (path, its original name)
    submissions: set = field(default_factory=set)
    late: bool = False


def discover(folder: Path, staging: Path | None = None,
             skipped: list[str] | None = None) -> list[Submission]:
    """Every sub-folder, notebook and zip in ``folder`` is a submission; flat
    Canvas files are grouped by user id into folders under ``staging``.  A
    file that is neither (nor what an archiver leaves) is named in
    ``skipped``, with why, never dropped without a word."""
    from grader.submission import ignored

    subs, canvas = [], {}
    skipped = [] if skipped is None else skipped
    for path in sorted(Path(folder).iterdir()):
        if ignored(path.name) or path.is_symlink():
            continue
        match = CANVAS_NAME.match(path.name) if path.is_file() else None
        if match and staging is not None:
            who = canvas.setdefault(match["user"], _CanvasStudent(match["student"]))
            if path.suffix.lower() not in SUBMISSION_SUFFIXES:
                skipped.append(f"{path.name}: Canvas file of {who.student}_{match['user']} "
                               "that is no module, notebook or zip")
                continue
            who.files.append((path, match["file"]))
            who.submissions.add(match["sub"])
            who.late = who.late or bool(match["late"])
        elif path.is_dir() or path.suffix.lower() in (".ipynb", ".zip"):
            subs.append(Submission(path.name, path))   # named by _name_files below
        else:
            skipped.append(f"{path.name}: a loose file, not a sub-folder, notebook, zip or "
                           "Canvas download file (login[_late]_userid_submissionid_file)")
    _name_files(subs)
    subs += _stage_canvas(canvas, {s.name for s in subs}, staging)
    subs.sort(key=lambda s: s.name)
    _unique_labels(subs)
    _unique_keys(subs)
    return subs


def _name_files(subs: list[Submission]) -> None:
    """A notebook or zip is named by its stem, unless a folder or another
    file would have that name: then by its whole file name, suffix kept, so
    that a student and the roster still know it (``ann/`` and ``ann.zip``
    are ``ann`` and ``ann.zip``; ``ann.zip`` and ``ann.ipynb`` keep both).
    File names are unique in a folder, so this ends with unique names."""
    for sub in subs:
        sub.name = sub.path.name if sub.path.is_dir() else sub.path.stem
    while True:
        count: dict[str, int] = {}
        for sub in subs:
            count[sub.name] = count.get(sub.name, 0) + 1
        clash = [s for s in subs if count[s.name] > 1 and s.name != s.path.name]
        if not clash:
            break
        for sub in clash:
            sub.name = sub.path.name
    for sub in subs:
        sub.label = ONE_LINE(sub.name)


def _unique_labels(subs: list[Submission]) -> None:
    """Names are unique, but their shown forms may not be (``a\\x1b`` and
    ``a`` then ESC both show as ``a\\x1b``): such labels get `` #`` and a hash
    of the name, so that no two rows, pages or roster entries are one."""
    count: dict[str, int] = {}
    for sub in subs:
        count[sub.label] = count.get(sub.label, 0) + 1
    for sub in subs:
        if count[sub.label] > 1:
            digest = hashlib.sha256(sub.name.encode("utf-8", "surrogatepass")).hexdigest()
            tag = f" #{digest[:12]}"
            sub.label = sub.label[:NAME_LIMIT - len(tag)] + tag


def _stage_canvas(canvas: dict, taken: set, staging: Path | None) -> list[Submission]:
    """A folder under ``staging`` per Canvas user id, named ``student_userid``."""
    from grader.submission import Budget, SubmissionError

    subs = []
    for user, who in sorted(canvas.items()):
        if not who.files:
            continue
        name = f"{who.student}_{user}"
        while name in taken:   # a folder of that name too
            name = f"{name}_canvas"
        taken.add(name)
        dest = Path(staging) / _safe(name)
        dest.mkdir(parents=True, exist_ok=True)
        budget, error = Budget(), ""   # staged copies are what one upload may bring in
        try:
            for path, _ in who.files:
                budget.see(path, path)
                budget.take(path.stat().st_size, path)
        except SubmissionError as exc:
            error = str(exc)
        for path, original in who.files if not error else []:
            shutil.copy2(path, dest / _canvas_file(original))
        newest = max(path.stat().st_mtime for path, _ in who.files)
        os.utime(dest, (newest, newest))   # unchanged files keep an earlier result valid
        subs.append(Submission(name, dest, error=error, lms_user_id=user,
                               lms_submission_id=" ".join(sorted(who.submissions, key=int)),
                               late=who.late))
    return subs


def shard_of(subs: list[Submission], k: int, n: int) -> list[Submission]:
    """The K-th of N parts (1-based): every N-th submission in name order,
    so that the parts are disjoint, cover the class and differ by one at most."""
    ordered = sorted(subs, key=lambda s: s.name)
    return [s for i, s in enumerate(ordered) if i % n == k - 1]


def _unique_keys(subs: list[Submission]) -> None:
    """A result name per submission (its results JSON, artifacts folder and
    page): the safe form of its name, plus a hash of the original where two
    safe forms would collide, in case too, as they do on macOS's and
    Windows's disks (never "already graded" for someone else's result)."""
    count: dict[str, int] = {}
    for sub in subs:
        count[_safe(sub.name).casefold()] = count.get(_safe(sub.name).casefold(), 0) + 1
    taken = {k for k, n in count.items() if n == 1}
    for sub in subs:
        safe = _safe(sub.name)
        if count[safe.casefold()] == 1:
            sub.key = safe
            continue
        digest = hashlib.sha256(sub.path.name.encode("utf-8", "surrogateescape")).hexdigest()
        for width in (8, 16, 64):
            key = f"{safe}-{digest[:width]}"
            if key.casefold() not in taken:
                break
        taken.add(key.casefold())
        sub.key = key


def _hash_bytes(h, path: Path) -> None:
    with open(path, "rb") as f:   # a piece at a time: a submission's file may be huge
        while chunk := f.read(1 << 20):
            h.update(chunk)


def content_hash(path: Path) -> str:
    """sha256 over a submission's files (names and bytes), links not followed.
    The walk keeps its own stack (``os.walk`` recurses, and a folder nested a
    thousand deep would end the whole batch), in ``os.walk``'s order."""
    h = hashlib.sha256()
    path = Path(path)
    if not path.is_dir():
        h.update(b"file\0")
        _hash_bytes(h, path)
        return h.hexdigest()
    stack = [path]
    while stack:
        folder = stack.pop()
        try:
            entries = list(os.scandir(folder))
        except OSError:
            continue   # as os.walk does: a folder that cannot be listed adds nothing
        # os.walk's split: what is a folder (a link to one too, never entered)
        dirs = sorted(e.name for e in entries if e.is_dir())
        for name in sorted(e.name for e in entries if not e.is_dir()):
            full = folder / name
            rel = str(full.relative_to(path)).encode("utf-8", "surrogateescape")
            st = full.lstat()
            if stat.S_ISLNK(st.st_mode):
                h.update(b"link\0" + rel + b"\0" + os.readlink(full).encode(
                    "utf-8", "surrogateescape") + b"\0")
            elif stat.S_ISREG(st.st_mode):
                h.update(b"file\0" + rel + b"\0")
                _hash_bytes(h, full)
                h.update(b"\0")
        stack += [folder / d for d in reversed(dirs) if not (folder / d).is_symlink()]
    return h.hexdigest()


_grader_version: str | None = None


def grader_version() -> str:
    """The package's version and a hash of the grader's own files: an edited
    suite or reference grades anew."""
    global _grader_version
    if _grader_version is None:
        from importlib import metadata
        try:
            version = metadata.version("attn-course")
        except metadata.PackageNotFoundError:
            version = "unknown"
        h = hashlib.sha256()
        package = PACKAGE_DIR
        for file in sorted(package.rglob("*.py")):
            if "__pycache__" not in file.parts:
                h.update(str(file.relative_to(package)).encode() + b"\0" + file.read_bytes())
        _grader_version = f"{version}+{h.hexdigest()[:16]}"
    return _grader_version


def cache_key(sub: Submission, options: Options) -> dict:
    """What a stored result must match to be reused (no seed given: any seed):
    the submission's content, the grader's version and the options that can
    change a grade (``Options.cache_key``)."""
    return {"content": content_hash(sub.path), "grader": grader_version(),
            **options.cache_key()}


_maxima: dict[tuple, dict[str, float]] = {}
_maxima_lock = threading.Lock()


def class_maximum(options: Options) -> dict[str, float]:
    """Each exercise's maximum for these options (``grader.core.maximum``, the
    one place it is fixed), found once per batch process, when a row that
    could not be graded first needs it."""
    from grader.core import maximum

    key = (options.suite, tuple(options.exercises or ()), options.gpu_tier, options.keyword,
           options.markers)
    with _maxima_lock:      # one collection at a time: pytest's state is the process's
        if key not in _maxima:
            _maxima[key] = maximum(Options(suite=options.suite,
                                           exercises=options.exercises or None,
                                           gpu_tier=options.gpu_tier, keyword=options.keyword,
                                           markers=options.markers))
        return _maxima[key]


def _failed_result(message: str, maxima: dict[str, float]) -> dict:
    """A zero result: one entry per exercise at its maximum, so that the row
    is out of what every other row is out of."""
    tests = [{"name": f"{exercise}: not graded", "score": 0.0, "max_score": most,
              "status": "failed", "output": message, "visibility": "visible"}
             for exercise, most in maxima.items()]
    scores = {exercise: {"score": 0.0, "max_score": most} for exercise, most in maxima.items()}
    return {"score": 0, "tests": tests, "output": message, "output_format": "text",
            "extra_data": {"exercise_scores": scores}}


def _write_json(path: Path, data: dict) -> None:
    from grader.report import write_private
    write_private(path, json.dumps(data, indent=2))


def _batch_info(sub: Submission, key: dict | None = None) -> dict:
    """What the batch keeps in a result (under ``extra_data``, as Gradescope's
    format asks of keys of one's own): its cache key, label, result name
    (which ``merged_results`` prefers to an older run's file of that label)
    and LMS fields."""
    info = {"submission": sub.label, "result": sub.key}
    if key is not None:
        info = {"key": key, **info}
    if sub.lms_user_id:
        info["lms"] = {"user_id": sub.lms_user_id, "submission_id": sub.lms_submission_id,
                       "late": bool(sub.late)}
    return info


def _extra(data: dict) -> dict:
    extra = data.get("extra_data")
    return extra if isinstance(extra, dict) else {}


def _not_graded(outcome: Outcome, batch: dict, maxima: Callable[[], dict]) -> Outcome:
    """The zero result of a submission that could not be graded, saying why:
    out of the class's maximum, as every row is."""
    data = _failed_result(f"not graded: {outcome.error}", maxima())
    data["extra_data"].update(batch_error=outcome.error, batch=batch)
    outcome.scores = exercise_scores_of(data)
    _write_json(outcome.result_path, data)
    return outcome


class RosterError(ValueError):
    """A roster that cannot be used; the text is one sentence."""


ROSTER_COLUMNS = ("submission", "student_id")


def read_roster(path: Path) -> dict[str, str]:
    """{submission name: student identifier} from a CSV with a header row
    naming the columns ``submission`` and ``student_id`` (others are kept
    for people and ignored here)."""
    from grader.variants import BadStudentId, normalize

    try:
        with open(path, newline="", encoding="utf-8-sig") as f:
            rows = list(csv.DictReader(f))
            header = [h.strip().lower() for h in (rows and rows[0].keys() or [])]
    except (OSError, UnicodeDecodeError, csv.Error) as exc:
        raise RosterError(f"{path} is not a readable CSV file ({exc})") from None
    if not rows:
        raise RosterError(f"{path} holds no rows under a header of "
                          f"{', '.join(ROSTER_COLUMNS)}")
    if not set(ROSTER_COLUMNS) <= set(header):
        raise RosterError(f"{path} needs a header row with the columns "
                          f"{' and '.join(ROSTER_COLUMNS)}; it has {', '.join(header)}")
    roster: dict[str, str] = {}
    for line, row in enumerate(rows, start=2):
        row = {(k or "").strip().lower(): (v or "").strip() for k, v in row.items()}
        name, sid = row["submission"], row["student_id"]
        if name in roster:
            raise RosterError(f"{path} line {line}: submission {name!r} is listed twice")
        try:
            normalize(sid)
        except BadStudentId as exc:
            raise RosterError(f"{path} line {line}: {exc}") from None
        roster[name] = sid
    return roster


def roster_by_name(roster: dict[str, str], subs: list[Submission]) -> dict[str, str]:
    """{submission name: identifier}: a roster row's ``submission`` names a
    submission (as the folder spells it, or as grades.csv shows it), or the
    LMS user id of one from a bulk download."""
    out = {}
    for sub in subs:
        sid = roster.get(sub.name) or roster.get(sub.label) or \
            (roster.get(sub.lms_user_id) if sub.lms_user_id else None)
        if sid is not None:
            out[sub.name] = sid
    return out


def _read_extra(outcome: Outcome, data: dict) -> None:
    from grader.report import manual_from_gradescope

    outcome.scores = exercise_scores_of(data)
    outcome.manual = manual_from_gradescope(data)
    extra = _extra(data)
    outcome.needs_regrade = int(extra.get("needs_regrade", 0) or 0)
    outcome.import_errors = dict(extra.get("import_errors") or {})
    outcome.isolation = str(extra.get("isolation", ""))
    problems = list(extra.get("errors") or [])
    outcome.error = extra.get("batch_error", "") or "; ".join(problems)


def artifacts_of(result_path: Path) -> Path:
    """The folder of the files one grading made (the ex04 plot), beside its
    results JSON: ``results/<key>.artifacts/``; the class report shows them."""
    return Path(result_path).with_suffix(".artifacts")


def grade_one(sub: Submission, results_dir: Path, options: Options | None = None, *,
              submission_timeout: float = 1800.0, force: bool = False) -> Outcome:
    """Grade ``sub`` with ``options`` in a fresh ``attn-grade grade`` process
    (``Options.argv``), or reuse its stored result where the key matches."""
    options = dataclasses.replace(
        options or Options(),
        # Within the overall limit, so that a grading that runs long still ends
        # with its own result (the rest failed at once) rather than being killed.
        grading_budget=max(1.0, submission_timeout * 0.9))
    result_path = results_dir / f"{sub.key or _safe(sub.name)}.json"
    outcome = Outcome(sub, result_path)
    maxima = lambda: class_maximum(options)  # noqa: E731
    if sub.error:   # refused at intake: its zero row, and nothing to grade or cache
        outcome.error = sub.error
        return _not_graded(outcome, _batch_info(sub), maxima)
    key = cache_key(sub, options)
    if not force and result_path.is_file():
        try:
            data = json.loads(result_path.read_text())
            stored = dict(_extra(data).get("batch", {}).get("key") or {})
            if options.seed is None:
                stored["seed"] = None   # no seed asked for: the one it had will do
            if stored == key:
                outcome.skipped = True
                _read_extra(outcome, data)
                return outcome
        except (OSError, ValueError, AttributeError, TypeError):
            pass  # unreadable or another key: grade again
    # The files the grading makes (the ex04 plot) go beside its result, for its page.
    graded = dataclasses.replace(options, artifacts_dir=artifacts_of(result_path))
    cmd = [sys.executable, "-m", "grader.cli", "grade", str(sub.path), *graded.argv(),
           "--format", "json", "--out", str(result_path)]
    start = time.monotonic()
    with subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                          stdin=subprocess.DEVNULL) as proc:
        try:
            stdout, stderr = proc.communicate(timeout=submission_timeout)
            # Exit 3: graded, but not in full (the result says what): not a lost row.
            if proc.returncode not in (0, 3):
                lines = (stderr or stdout).strip().splitlines()
                last = lines[-1] if lines else f"the grader exited with {proc.returncode}"
                outcome.error = last.removeprefix("Error: ")
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.communicate()
            # Killed, it could not remove its workers' folders: they go now.
            remove_stale_staging(pid=proc.pid)
            outcome.error = f"grading took longer than {submission_timeout:g} s and was stopped"
    outcome.seconds = time.monotonic() - start
    if outcome.error:
        return _not_graded(outcome, _batch_info(sub, key), maxima)  # --force: again
    try:
        data = json.loads(result_path.read_text())
        _read_extra(outcome, data)
        data.setdefault("extra_data", {})["batch"] = _batch_info(sub, key)
        _write_json(result_path, data)
    except (OSError, ValueError) as exc:
        outcome.error = f"the result could not be read: {exc}"
        return _not_graded(outcome, {"key": key, "submission": sub.label, "result": sub.key},
                           maxima)
    return outcome


GRADES_NUMBERS = ("total", "max_total", "needs_regrade")   # and each exercise's column
# An LMS bulk download's identity of each row (empty for a folder, notebook or zip):
# the LMS's user id (what its gradebook import matches), submission id(s), late flag.
LMS_COLUMNS = ("lms_user_id", "lms_submission_id", "late")


def grades_fields(exercises: list[str]) -> list[str]:
    """The grades CSV's header, one run's or merged."""
    return ["submission", *exercises, *GRADES_NUMBERS, "isolation", "error", *LMS_COLUMNS]


def _lms_cells(sub: Submission) -> list[str]:
    late = "" if sub.late is None else ("yes" if sub.late else "no")
    return [sub.lms_user_id, sub.lms_submission_id, late]


def to_csv(outcomes: list[Outcome], exercises: list[str]) -> str:
    rows = []
    for o in sorted(outcomes, key=lambda o: (o.submission.name, o.submission.key)):
        row: list = [o.submission.label]
        total = max_total = 0.0
        for ex in exercises:
            got, most = o.scores.get(ex, (0.0, 0.0))
            row.append(float(got))
            total, max_total = total + got, max_total + most
        rows.append(row + [total, max_total, o.needs_regrade, o.isolation, o.problems,
                           *_lms_cells(o.submission)])
    return csv_text(grades_fields(exercises), rows)


RUBRIC_COLUMNS = ["question", "submission", "points_possible", "answer", "rubric", "points",
                  "comment"]


def to_rubric_csv(outcomes: list[Outcome]) -> str:
    """The staff's sheet for free-text answers: one row per answer, grouped by
    question (staff grade one question across the class), with the rubric and
    empty ``points`` and ``comment`` columns to fill in."""
    rows = [(str(e.get("question", "")), o.submission.label, e) for o in outcomes
            for e in o.manual]
    return csv_text(RUBRIC_COLUMNS, [
        [question, name, float(e.get("points", 0)), e.get("answer", ""), e.get("rubric", ""),
         "", ""] for question, name, e in sorted(rows, key=lambda r: (r[0], r[1]))])


def run_batch(subs: list[Submission], results_dir: Path, options: Options | None = None, *,
              jobs: int = 1, submission_timeout: float = 1800.0, force: bool = False,
              roster: dict[str, str] | None = None,
              on_done: Callable[[Outcome], None] | None = None) -> list[Outcome]:
    """Grade ``subs`` with ``options``, ``jobs`` at a time; exercise A of each
    submission on the roster for its student's identifier."""
    options = options or Options()
    results_dir.mkdir(parents=True, exist_ok=True)
    outcomes = []
    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        futures = [pool.submit(grade_one, s, results_dir,
                               dataclasses.replace(options, student_id=(roster or {}).get(s.name)),
                               submission_timeout=submission_timeout, force=force)
                   for s in subs]
        for future in as_completed(futures):
            outcome = future.result()
            outcomes.append(outcome)
            if on_done:
                on_done(outcome)
    return outcomes


def columns(outcomes: list[Outcome]) -> list[str]:
    seen = {ex for o in outcomes for ex in o.scores}
    return [ex for ex in EXERCISES if ex in seen]


# -- shards, and what stands beside grades.csv -----------------------------

class MergeError(ValueError):
    """Parts that do not join into one class; the text is one sentence."""


def _shard_file(csv_path: Path) -> Path:
    return csv_path.with_name(csv_path.stem + ".shard.json")


def merge_parts(parts: list[Path]) -> str:
    """Join the CSVs of ``batch --shard K/N`` runs (each with its
    ``.shard.json`` beside it) into the CSV one unsharded run writes."""
    header: list[str] = []
    rows: dict[str, dict] = {}
    seen: dict[int, Path] = {}
    everyone: set[str] | None = None
    total = None
    for path in parts:
        try:
            info = json.loads(_shard_file(path).read_text())
            k, n = info["shard"]
        except (OSError, ValueError, KeyError, TypeError):
            raise MergeError(f"{path} has no readable {_shard_file(path).name} beside it: "
                             "merge joins the CSVs of `attn-grade batch --shard K/N`.") from None
        if total is not None and n != total:
            raise MergeError(f"{path} is a part of {n}, the others of {total}.")
        total = n
        if k in seen:
            raise MergeError(f"{path} and {seen[k]} are both shard {k}/{n}.")
        seen[k] = path
        if everyone is not None and set(info["everyone"]) != everyone:
            raise MergeError(f"{path} was graded from another class folder than "
                             f"{seen[min(seen)]}.")
        everyone = set(info["everyone"])
        reader = csv.DictReader(io.StringIO(path.read_text(encoding="utf-8",
                                                           errors="replace")))
        for column in reader.fieldnames or []:
            if column not in header:
                header.append(column)
        for row in reader:
            row = {k: clean(csv_value(v)) for k, v in row.items()
                   if k is not None and v is not None}
            name = row["submission"]
            if name in rows:
                raise MergeError(f"{name} is in two parts ({path} and another).")
            rows[name] = row
    missing = sorted(set(range(1, (total or 0) + 1)) - set(seen))
    if missing:
        raise MergeError(f"shard {missing[0]}/{total} is missing "
                         f"({len(missing)} of {total} parts are).")
    absent = sorted((everyone or set()) - set(rows))
    if absent:
        raise MergeError(f"{len(absent)} submissions are in no part, {absent[0]} first.")
    exercises = [c for c in EXERCISES if c in header]
    fields = grades_fields(exercises)
    # Columns a part has beyond the grades (the late work's, after --late-policy)
    # stay, in the parts' order.
    fields += [c for c in header if c not in fields and c not in EXERCISES]
    from grader.late import NUMBER_COLUMNS as LATE_NUMBERS
    numbers = {*exercises, *GRADES_NUMBERS, *LATE_NUMBERS}
    return csv_text(fields, [[csv_number(rows[name].get(f) or ("0" if f in exercises else ""))
                              if f in numbers
                              else rows[name].get(f) or "" for f in fields]
                             for name in sorted(rows)])


def rubric_of(grades_csv: Path) -> Path:
    """The free-text answers' sheet beside a grades CSV (``NAME_rubric.csv``)."""
    return grades_csv.with_name(f"{grades_csv.stem}_rubric.csv")


def merge_rubrics(parts: list[Path]) -> str | None:
    """The rubric sheets beside the parts' CSVs joined into the one an
    unsharded run writes (None when no part has one)."""
    rows, found = [], False
    for path in parts:
        sheet = rubric_of(path)
        if not sheet.is_file():
            continue   # a part whose students wrote no free-text answer
        found = True
        reader = csv.DictReader(io.StringIO(sheet.read_text(encoding="utf-8",
                                                            errors="replace")))
        for row in reader:
            row = {k: clean(csv_value(v or "")) for k, v in row.items() if k is not None}
            rows.append([row.get("question", ""), row.get("submission", ""),
                         csv_number(row.get("points_possible", "")), row.get("answer", ""),
                         row.get("rubric", ""), row.get("points", ""), row.get("comment", "")])
    if not found:
        return None
    return csv_text(RUBRIC_COLUMNS, sorted(rows, key=lambda r: (r[0], r[1])))


def class_summary(text: str) -> str:
    """Per-exercise totals and means of a grades CSV, and the class's totals."""
    rows = list(csv.DictReader(io.StringIO(text)))
    exercises = [c for c in (rows[0].keys() if rows else []) if c in EXERCISES]
    n = len(rows)
    lines = [f"{n} submission{'' if n == 1 else 's'}"]
    if not rows:
        return lines[0] + "\n"
    width = max(len(e) for e in exercises + ["total"])
    for column in exercises + ["total"]:
        values = [float(r[column] or 0) for r in rows]
        lines.append(f"{column:<{width}}  total {sum(values):g}  mean {sum(values) / n:.2f}  "
                     f"min {min(values):g}  max {max(values):g}")
    most = max(float(r["max_total"] or 0) for r in rows)
    lines.append(f"max_total {most:g}; {sum(bool(r['error']) for r in rows)} with errors")
    return "\n".join(lines) + "\n"


def histogram(text: str, path: Path) -> Path | None:
    """A PNG histogram of the class's totals; None without matplotlib."""
    try:
        fig = histogram_figure([float(r["total"] or 0)
                                for r in csv.DictReader(io.StringIO(text))])
    except ImportError:
        return None
    fig.savefig(path)
    return path


def histogram_figure(totals: list[float]):
    """The histogram's figure: submissions (whole numbers) per band of totals."""
    import matplotlib
    matplotlib.use("Agg")
    from matplotlib.figure import Figure
    from matplotlib.ticker import MaxNLocator

    fig = Figure(figsize=(6, 4))
    ax = fig.subplots()
    ax.hist(totals, bins=min(20, max(1, len(set(totals)))), color="#4477aa")
    ax.yaxis.set_major_locator(MaxNLocator(integer=True))   # a count of submissions
    ax.set_xlabel("total points")
    ax.set_ylabel("submissions")
    ax.set_title(f"{len(totals)} submissions")
    return fig


def write_extras(out: Path, text: str, shard: tuple | None = None,
                 everyone: list[str] | None = None, results: Path | None = None) -> list[Path]:
    """Beside ``out``: the summary (``<stem>-summary.txt``) and histogram
    (``<stem>-histogram.png``) of a whole class, or, for a shard, the
    ``.shard.json`` that ``merge_parts`` needs (and that ``part_results``
    reads: where the shard's results JSONs are)."""
    from grader.report import write_private

    out = Path(out)
    if shard is not None:
        path = _shard_file(out)
        write_private(path, json.dumps({"shard": list(shard), "everyone": everyone,
                                        "results": str(Path(results).resolve())
                                        if results is not None else None}))
        return [path]
    summary = out.with_name(out.stem + "-summary.txt")
    write_private(summary, class_summary(text))
    written = [summary]
    png = histogram(text, out.with_name(out.stem + "-histogram.png"))
    if png is not None:
        written.append(png)
    return written


def part_results(part: Path) -> Path:
    """The results folder of a shard's CSV: the one its ``.shard.json`` names,
    else ``results/`` beside it (batch's default)."""
    try:
        named = json.loads(_shard_file(part).read_text()).get("results")
    except (OSError, ValueError, AttributeError):
        named = None
    if named and Path(named).is_dir():
        return Path(named)
    return Path(part).parent / "results"


def results_by_label(folders: list[Path]) -> dict[str, tuple[Path, dict]]:
    """{label: (results JSON's path, results JSON)} of the batch results in
    ``folders`` (labels as shown, ``clean``).  Labels are unique in a batch;
    of two files of one label (one left by a run before the names changed),
    the one written under its own result name wins."""
    found: dict[str, tuple[Path, dict, bool]] = {}
    for folder in folders:
        for path in sorted(Path(folder).glob("*.json")):
            try:
                data = json.loads(path.read_text())
                batch = data["extra_data"]["batch"]
                label = clean(str(batch["submission"]))
            except (OSError, ValueError, KeyError, TypeError):
                continue
            own = batch.get("result") == path.stem
            if label not in found or own and not found[label][2]:
                found[label] = (path, data, own)
    return {label: (path, data) for label, (path, data, _) in found.items()}


def merged_results(parts: list[Path], text: str) -> list[tuple[str, Path, dict]]:
    """(label, results JSON's path, results JSON) of each submission of the
    merged CSV ``text``, from the parts' results folders, in name order; a
    submission whose result is not found has its row in the CSV only."""
    wanted = {clean(csv_value(row["submission"]))
              for row in csv.DictReader(io.StringIO(text))}
    found = results_by_label([part_results(part) for part in parts])
    return [(label, *found[label]) for label in sorted(found) if label in wanted]
