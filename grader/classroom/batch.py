"""Grade a whole class: every submission in a folder, each in its own
grader process, into the class's gradebook and a Gradescope-style JSON per
submission.

A submission is a sub-folder, a notebook or a zip (what ``grade`` takes), or
the files of one student in an LMS bulk download (Canvas names them
``login[_late]_userid_submissionid_file``), grouped into a folder.  What an
archiver or editor leaves (``__MACOSX``, dotfiles, backups) is no student.
``--shard K/N`` grades a deterministic K-th part into a gradebook of its
own, which ``merge`` joins (``grader.classroom.views.merge_parts``).  Each is graded as
``attn-grade grade`` grades it, in one of ``--jobs`` long-lived grading
processes (``grader.classroom.slots``), with an overall time limit: a
submission that breaks even the grader has its process killed and replaced,
is tried once more, and then costs only its own row, which is out of the
class's maximum (``class_maximum``), as every other is.  A rerun
keeps a submission whose current grading in the gradebook records the same
validity key (the submission's content hash, the options that change
scores, and ``grader.digest``'s version of the grader and its libraries),
unless ``force``.  Every upload gets a row: one whose files hold no
exercise module (a Canvas student who uploaded only a README) is a zero row
that says so.

Every submission of a batch has a label of its own, fixed at ``discover``:
its folder's name, or a notebook's or zip's name without the suffix, which
a file keeps where a folder or another file has that stem (``ann/`` and
``ann.zip`` are ``ann`` and ``ann.zip``); labels that the cleaning of
control characters would make one get a tag of their original's hash.  The
gradebook, the roster, ``--submitted-times``, the results and the class
report all name it so.  Result names that would collide (``s1/`` and ``s1!.zip``,
names differing only in an accent or in case) get a hash too.
"""
from __future__ import annotations

import csv
import dataclasses
import hashlib
import json
import os
import re
import shutil
import threading
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from grader import digest, safetext
from grader.artifacts import write_private
from grader.classroom.gradebook import Gradebook
from grader.classroom.slots import SlotFailed, SlotPool
from grader.options import Options
from grader.report import exercise_scores_of, manual_from_gradescope
from grader.safetext import NAME_LIMIT, Entries, TextMap, clean, cleaner
from grader.submission import Budget, SubmissionError, ignored
from grader.variants import BadStudentId, normalize

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
    others: list = field(default_factory=list)      # its files that are no module


def discover(folder: Path, staging: Path | None = None,
             skipped: list[str] | None = None) -> list[Submission]:
    """Every sub-folder, notebook and zip in ``folder`` is a submission; flat
    Canvas files are grouped by user id into folders under ``staging``.  A
    file that is neither (nor what an archiver leaves) is named in
    ``skipped``, with why, never dropped without a word."""
    subs, canvas = [], {}
    skipped = [] if skipped is None else skipped
    for path in sorted(Path(folder).iterdir()):
        if ignored(path.name) or path.is_symlink():
            continue
        match = CANVAS_NAME.match(path.name) if path.is_file() else None
        if match and staging is not None:
            who = canvas.setdefault(match["user"], _CanvasStudent(match["student"]))
            if path.suffix.lower() not in SUBMISSION_SUFFIXES:
                who.others.append(match["file"])
                who.submissions.add(match["sub"])
                who.late = who.late or bool(match["late"])
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
    subs = []
    for user, who in sorted(canvas.items()):
        name = f"{who.student}_{user}"
        while name in taken:   # a folder of that name too
            name = f"{name}_canvas"
        taken.add(name)
        dest = Path(staging) / _safe(name)
        dest.mkdir(parents=True, exist_ok=True)
        budget, error = Budget(), ""   # staged copies are what one upload may bring in
        if not who.files:
            shown = ", ".join(sorted(who.others)[:3]) + (" ..." if len(who.others) > 3 else "")
            error = (f"no exercise module found: the upload holds only {shown}, and no "
                     ".py module, notebook or zip")
        try:
            for path, _ in who.files:
                budget.see(path, path)
                budget.take(path.stat().st_size, path)
        except SubmissionError as exc:
            error = str(exc)
        for path, original in who.files if not error else []:
            shutil.copy2(path, dest / _canvas_file(original))
        if who.files:
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


def cache_key(sub: Submission, options: Options) -> dict:
    """What a stored result must match to be reused (no seed given: any seed):
    the submission's content, the grader's version and the options that can
    change a grade (``Options.cache_key``)."""
    return {"content": digest.content_hash(sub.path), "grader": digest.grader_version(),
            **options.cache_key()}


_maxima: dict[tuple, dict[str, float]] = {}
_maxima_lock = threading.Lock()


def class_maximum(options: Options) -> dict[str, float]:
    """Each exercise's maximum for these options (``grader.core.maximum``, the
    one place it is fixed), found once per batch process, when a row that
    could not be graded first needs it."""
    from grader.core import maximum   # pytest's collection: only when a row needs it

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


def _not_graded(outcome: Outcome, maxima: Callable[[], dict], fault: str, *,
                book: Gradebook, key: dict, upload: int) -> Outcome:
    """The zero result of a submission that could not be graded, saying why,
    written and kept in ``book`` as any grading: out of the class's maximum, as
    every row is.  ``fault``: ``upload`` (what was handed in cannot be graded:
    the student's zero) or ``grader`` (the grading did not finish: a regrade)."""
    data = _failed_result(f"not graded: {outcome.error}", maxima())
    data["extra_data"].update(batch_error=outcome.error, batch_fault=fault,
                              batch=_batch_info(outcome.submission, key))
    outcome.scores = exercise_scores_of(data)
    _write_json(outcome.result_path, data)
    book.record_grading(outcome.submission.label, data, key=key, upload=upload,
                        seconds=outcome.seconds)
    return outcome


class RosterError(ValueError):
    """A roster that cannot be used; the text is one sentence."""


ROSTER_COLUMNS = ("submission", "student_id")


@dataclass(frozen=True)
class RosterRow:
    line: int
    submission: str       # empty: a student who handed nothing in
    student_id: str
    name: str = ""


def read_roster(path: Path) -> list[RosterRow]:
    """The rows of a CSV with a header row naming the columns ``submission``
    and ``student_id`` (and, if it has one, ``name``; others are kept for
    people and ignored here)."""
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
    out, names, ids = [], set(), set()
    for line, row in enumerate(rows, start=2):
        row = {(k or "").strip().lower(): (v or "").strip() for k, v in row.items()}
        name, sid = row["submission"], row["student_id"]
        if name and name in names:
            raise RosterError(f"{path} line {line}: submission {name!r} is listed twice")
        if not name and (not sid or sid in ids):
            raise RosterError(f"{path} line {line}: a row without a submission names a "
                              "student who handed nothing in: give their student_id once")
        try:
            normalize(sid)
        except BadStudentId as exc:
            raise RosterError(f"{path} line {line}: {exc}") from None
        names.add(name)
        ids.add(sid)
        out.append(RosterRow(line, name, sid, clean(row.get("name", ""), NAME_LIMIT,
                                                    one_line=True)))
    return out


def match_roster(path: Path, rows: list[RosterRow], subs: list[Submission]
                 ) -> tuple[dict[str, RosterRow], list[RosterRow]]:
    """({submission name: its roster row}, [rows of students without an
    upload]).  A row's ``submission`` names a submission (as the folder spells
    it, or as the outputs show it), or the LMS user id of one from a bulk
    download; a row that names none is a typo: ``RosterError`` naming it."""
    found: dict[str, RosterRow] = {}
    missing = []
    for row in rows:
        if not row.submission:
            missing.append(row)
            continue
        sub = next((s for s in subs if row.submission in (s.name, s.label)), None) or \
            next((s for s in subs if s.lms_user_id and s.lms_user_id == row.submission), None)
        if sub is None:
            raise RosterError(f"{path} line {row.line}: no submission {clean(row.submission, NAME_LIMIT, one_line=True)!r} "
                              "is in the class folder (leave submission empty for a student "
                              "who handed nothing in)")
        found[sub.name] = row
    return found, missing


def match_names(path: Path, named: dict, subs: list[Submission], what: str) -> dict:
    """A staff sheet's ``{submission: value}`` by submission label; a name that
    is no submission is refused (a typo would grade a late student as on time)."""
    labels = {s.name: s.label for s in subs} | {s.label: s.label for s in subs}
    out = {}
    for name, value in named.items():
        if name not in labels:
            raise RosterError(f"{path}: no submission {clean(name, NAME_LIMIT, one_line=True)!r} "
                              f"is in the class folder, so its {what} would apply to nobody")
        out[labels[name]] = value
    return out


def _read_extra(outcome: Outcome, data: dict) -> None:
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
              book: Gradebook, submission_timeout: float = 1800.0,
              force: bool = False, slots: SlotPool | None = None) -> Outcome:
    """Grade ``sub`` with ``options`` as ``attn-grade grade`` would
    (``Options.argv``), in a grading process of ``slots`` (without: a slot of
    its own), into ``book``, or keep its current grading where the validity
    key matches (``grader.digest``: its content, the grader's files and
    libraries, the options)."""
    options = dataclasses.replace(
        options or Options(),
        # Within the overall limit, so that a grading that runs long still ends
        # with its own result (the rest failed at once) rather than being killed.
        grading_budget=max(1.0, submission_timeout * 0.9))
    result_path = results_dir / f"{sub.key or _safe(sub.name)}.json"
    outcome = Outcome(sub, result_path)
    maxima = lambda: class_maximum(options)  # noqa: E731
    key = cache_key(sub, options)
    upload = book.record_upload(sub.label, key["content"], sub.error)
    stored = None if force else book.current_result(sub.label)
    if stored is not None:
        kept = dict(stored[0])
        if options.seed is None:
            kept["seed"] = None   # no seed asked for: the one it had will do
        if kept == key:
            outcome.skipped = True
            _read_extra(outcome, stored[1])
            if not result_path.is_file():
                _write_json(result_path, stored[1])
            return outcome
    if sub.error:   # refused at intake: its zero row, and nothing to grade
        outcome.error = sub.error
        return _not_graded(outcome, maxima, "upload", book=book, key=key, upload=upload)
    # The files the grading makes (the ex04 plot) go beside its result, for its page.
    graded = dataclasses.replace(options, artifacts_dir=artifacts_of(result_path))
    start, fault = time.monotonic(), "grader"
    own = slots is None
    slots = SlotPool(1) if own else slots
    try:
        # A slot that dies or runs out of time is killed and replaced; its
        # submission is tried once more in a fresh one, then it is a regrade.
        for _ in range(2):
            try:
                slot = slots.acquire()
            except SlotFailed as exc:   # the batch was stopped
                outcome.error = str(exc)
                break
            try:
                code, error = slot.grade(sub.path, graded.argv(), result_path,
                                         timeout=submission_timeout)
            except SlotFailed as exc:
                slots.discard(slot)
                outcome.error = str(exc)
                continue
            slots.release(slot)
            outcome.error = ""
            # Exit 3: graded, but not in full (the result says what): not a lost row.
            if code not in (0, 3):
                outcome.error = error or f"the grader exited with {code}"
                # Exit 2: what was handed in cannot be graded (one sentence says why).
                fault = "upload" if code == 2 else "grader"
            break
    finally:
        if own:
            slots.close()
    outcome.seconds = time.monotonic() - start
    if outcome.error:
        return _not_graded(outcome, maxima, fault, book=book, key=key, upload=upload)
    try:
        data = json.loads(result_path.read_text())
        _read_extra(outcome, data)
        data.setdefault("extra_data", {})["batch"] = _batch_info(sub, key)
        _write_json(result_path, data)
    except (OSError, ValueError) as exc:
        outcome.error = f"the result could not be read: {exc}"
        return _not_graded(outcome, maxima, "grader", book=book, key=key, upload=upload)
    book.record_grading(sub.label, data, key=key, upload=upload, seconds=outcome.seconds)
    return outcome


def run_batch(subs: list[Submission], results_dir: Path, options: Options | None = None, *,
              book: Gradebook, jobs: int = 1, submission_timeout: float = 1800.0,
              force: bool = False, roster: dict[str, RosterRow] | None = None,
              on_done: Callable[[Outcome], None] | None = None) -> list[Outcome]:
    """Grade ``subs`` with ``options``, ``jobs`` at a time (one grading
    process per job: ``grader.classroom.slots``), into ``book``;
    exercise A of each submission on the roster for its student's identifier."""
    options = options or Options()
    results_dir.mkdir(parents=True, exist_ok=True)
    roster = roster or {}
    for s in subs:
        row = roster.get(s.name)
        book.record_student(s.label, result_key=s.key, roster_id=row.student_id if row else "",
                            name=row.name if row else "", lms_user_id=s.lms_user_id,
                            lms_submission_id=s.lms_submission_id, late_flag=s.late)
    outcomes = []
    # One grading process per job, each grading submission after submission.
    with SlotPool(jobs) as slots, ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        futures = [pool.submit(grade_one, s, results_dir,
                               dataclasses.replace(options, student_id=roster[s.name].student_id
                                                   if s.name in roster else None),
                               book=book, submission_timeout=submission_timeout, force=force,
                               slots=slots)
                   for s in subs]
        try:
            for future in as_completed(futures):
                outcome = future.result()
                outcomes.append(outcome)
                if on_done:
                    on_done(outcome)
        except BaseException:
            # Interrupted (Ctrl-C): no further submission starts, and the
            # gradings under way end now, with their slots.
            for future in futures:
                future.cancel()
            slots.stop()
            raise
    return outcomes
