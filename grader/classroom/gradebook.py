"""The class's gradebook: one SQLite database that owns every grade.

Students (roster id, name, LMS ids), every upload (its content hash),
every grading (its result, per test points, maximum, needs-regrade and
mistake ids, its seed and validity key), staff points per free-text
question (who, when, comment), the late policy with per-student extensions
and submission times, overrides with a reason, the similar pairs, and a
history of every change made by a person.  Each stage of a class's run
(``batch``, a shard's ``merge``, the rubric round trip, the pages, the LMS
export) reads and writes here; the CSV files beside it are views
(``grader.classroom.views``) and staff's inputs, never the way stages talk.

**The final grade is defined once** (``final_grade``): the grader's points
plus the staff's points, the late penalty applied to that sum and capped
by the policy; an override replaces it; a grade whose tests need a regrade
has no number until it is regraded or overridden.

The database is in WAL mode with a busy time-out, so that the threads of
``batch --jobs N``, a second writer and a reader work on it at once; every
write is one transaction.
"""
from __future__ import annotations

import contextlib
import json
import math
import os
import sqlite3
import threading
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

from grader.classroom import late as late_rules
from grader.registry import EXERCISES
from grader.rubric_line import parse_rubric
from grader.safetext import ANSWER_LIMIT, NAME_LIMIT, clean, cleaner

ONE_LINE = cleaner(NAME_LIMIT, one_line=True)

SCHEMA_VERSION = 1
SUFFIX = ".sqlite"
BUSY_MS = 120_000    # a writer waits this long for another's transaction
MISSING = "missing"      # a roster student without an upload
SUBMITTED = "submitted"

SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS students (
    id INTEGER PRIMARY KEY,
    submission TEXT NOT NULL UNIQUE,      -- the label the outputs show (unique in a class)
    result_key TEXT NOT NULL DEFAULT '',  -- its results JSON's and page's name
    status TEXT NOT NULL DEFAULT 'submitted',
    roster_id TEXT NOT NULL DEFAULT '',
    name TEXT NOT NULL DEFAULT '',
    lms_user_id TEXT NOT NULL DEFAULT '',
    lms_submission_id TEXT NOT NULL DEFAULT '',
    late_flag INTEGER                     -- the LMS download's flag; NULL: no LMS file
);
CREATE TABLE IF NOT EXISTS uploads (
    id INTEGER PRIMARY KEY,
    student INTEGER NOT NULL REFERENCES students(id),
    content_hash TEXT NOT NULL,
    seen_at TEXT NOT NULL,
    error TEXT NOT NULL DEFAULT '',       -- refused at intake: why
    UNIQUE (student, content_hash)
);
CREATE TABLE IF NOT EXISTS gradings (
    id INTEGER PRIMARY KEY,
    student INTEGER NOT NULL REFERENCES students(id),
    upload INTEGER REFERENCES uploads(id),
    graded_at TEXT NOT NULL,
    valid_key TEXT NOT NULL,              -- JSON: content, grader digest, options
    grader_digest TEXT NOT NULL DEFAULT '',
    seed INTEGER,
    error TEXT NOT NULL DEFAULT '',
    fault TEXT NOT NULL DEFAULT '',       -- 'upload': the student's zero; 'grader': to regrade
    isolation TEXT NOT NULL DEFAULT '',
    needs_regrade INTEGER NOT NULL DEFAULT 0,
    seconds REAL NOT NULL DEFAULT 0,
    result TEXT NOT NULL,                 -- the results JSON (Gradescope's format)
    current INTEGER NOT NULL DEFAULT 1
);
CREATE INDEX IF NOT EXISTS gradings_current ON gradings(student, current);
CREATE TABLE IF NOT EXISTS tests (
    grading INTEGER NOT NULL REFERENCES gradings(id),
    position INTEGER NOT NULL,
    exercise TEXT NOT NULL,
    name TEXT NOT NULL,
    points REAL NOT NULL,
    max_points REAL NOT NULL,
    status TEXT NOT NULL,
    needs_regrade INTEGER NOT NULL DEFAULT 0,
    mistakes TEXT NOT NULL DEFAULT '[]',
    PRIMARY KEY (grading, position)
);
CREATE TABLE IF NOT EXISTS exercise_scores (
    grading INTEGER NOT NULL REFERENCES gradings(id),
    exercise TEXT NOT NULL,
    points REAL NOT NULL,
    max_points REAL NOT NULL,
    PRIMARY KEY (grading, exercise)
);
CREATE TABLE IF NOT EXISTS questions (     -- free-text answers a grading asks staff to grade
    grading INTEGER NOT NULL REFERENCES gradings(id),
    exercise TEXT NOT NULL,
    question TEXT NOT NULL,
    points_possible REAL NOT NULL,
    answer TEXT NOT NULL,
    rubric TEXT NOT NULL,
    PRIMARY KEY (grading, question)
);
CREATE TABLE IF NOT EXISTS staff_points (
    student INTEGER NOT NULL REFERENCES students(id),
    question TEXT NOT NULL,
    points REAL NOT NULL,
    comment TEXT NOT NULL DEFAULT '',
    grader TEXT NOT NULL DEFAULT '',
    at TEXT NOT NULL,
    PRIMARY KEY (student, question)
);
CREATE TABLE IF NOT EXISTS policy (
    id INTEGER PRIMARY KEY CHECK (id = 1),
    due TEXT NOT NULL,
    rule TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS submitted_times (
    student INTEGER PRIMARY KEY REFERENCES students(id),
    submitted_at TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS extensions (
    student INTEGER PRIMARY KEY REFERENCES students(id),
    due TEXT NOT NULL,
    reason TEXT NOT NULL DEFAULT ''
);
CREATE TABLE IF NOT EXISTS overrides (
    student INTEGER PRIMARY KEY REFERENCES students(id),
    points REAL NOT NULL,
    reason TEXT NOT NULL,
    grader TEXT NOT NULL DEFAULT '',
    at TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS pairs (
    exercise TEXT NOT NULL,
    a TEXT NOT NULL,
    b TEXT NOT NULL,
    share_a REAL NOT NULL,
    share_b REAL NOT NULL,
    spans_a TEXT NOT NULL,
    spans_b TEXT NOT NULL,
    source_a TEXT NOT NULL DEFAULT '',
    source_b TEXT NOT NULL DEFAULT '',
    PRIMARY KEY (exercise, a, b)
);
CREATE TABLE IF NOT EXISTS history (
    id INTEGER PRIMARY KEY,
    at TEXT NOT NULL,
    who TEXT NOT NULL,
    what TEXT NOT NULL,
    submission TEXT NOT NULL DEFAULT '',
    detail TEXT NOT NULL DEFAULT '{}'
);
CREATE TABLE IF NOT EXISTS rubric_items (   -- a free-text question's rubric, item by item
    question TEXT NOT NULL,
    position INTEGER NOT NULL,            -- 1, 2, ...: the key that applies it on the page
    text TEXT NOT NULL,
    points REAL NOT NULL,
    PRIMARY KEY (question, position)
);
CREATE TABLE IF NOT EXISTS applied_items (  -- the items staff applied to an answer
    student INTEGER NOT NULL REFERENCES students(id),
    question TEXT NOT NULL,
    position INTEGER NOT NULL,
    PRIMARY KEY (student, question, position)
);
CREATE TABLE IF NOT EXISTS staff_versions ( -- each answer's grade: changes made to it so far
    student INTEGER NOT NULL REFERENCES students(id),
    question TEXT NOT NULL,
    version INTEGER NOT NULL,
    PRIMARY KEY (student, question)
);
"""
class GradebookError(ValueError):
    """A gradebook that cannot be used as asked; the text is one sentence."""


class StaleMark(GradebookError):
    """An answer's grade changed since the grader saw it (``mark_answers``):
    ``current`` is what it holds now, for the grader to decide."""

    def __init__(self, text: str, current: dict):
        super().__init__(text)
        self.current = current


def now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def path_for(out: Path) -> Path:
    """The gradebook beside a class's CSV: ``grades.csv`` -> ``grades.sqlite``."""
    return Path(out).with_suffix(SUFFIX)


@dataclass(frozen=True)
class Final:
    """A student's grade as the course defines it (``final_grade``)."""
    auto: float               # the grader's points
    staff: float              # the staff's points
    raw: float                # auto + staff
    late_units: int
    penalty: float
    points: float | None      # raw - penalty (or the override); None: needs a regrade
    overridden: bool = False


def final_grade(auto: float, staff: float, *, policy: late_rules.Policy | None = None,
                late_units: int = 0, needs_regrade: bool = False,
                override: float | None = None) -> Final:
    """The one definition of a final grade: the late penalty applies to the
    sum of the grader's and the staff's points (``late.penalty`` caps it,
    and past the policy's ``max`` takes everything); an override replaces
    the result; a grade with tests needing a regrade has no number."""
    raw = auto + staff
    off = late_rules.penalty(policy, raw, late_units) if policy is not None else 0.0
    if override is not None:
        return Final(auto, staff, raw, late_units, off, override, overridden=True)
    return Final(auto, staff, raw, late_units, off, None if needs_regrade else raw - off)


@dataclass
class Row:
    """One student of the class as every view shows them."""
    submission: str
    result_key: str
    status: str
    roster_id: str
    name: str
    lms_user_id: str
    lms_submission_id: str
    late_flag: bool | None
    scores: dict = field(default_factory=dict)      # exercise -> (points, max)
    max_total: float = 0.0
    staff_max: float = 0.0                          # the class's: the same for everyone
    staff: list = field(default_factory=list)       # [{question, points, comment, grader, at}]
    needs_regrade: int = 0
    error: str = ""
    isolation: str = ""
    submitted_at: str = ""
    due: str = ""                                   # the student's own due time (extension)
    override: dict | None = None                    # {points, reason, grader, at}
    final: Final | None = None
    graded: bool = False
    fault: str = ""                                 # 'grader': a grading it could not finish

    @property
    def grading_failed(self) -> bool:
        return self.fault == "grader"

    @property
    def total(self) -> float:
        return sum(p for p, _ in self.scores.values())

    @property
    def final_max(self) -> float:
        return self.max_total + self.staff_max

    @property
    def late(self) -> str:
        return "" if self.late_flag is None else ("yes" if self.late_flag else "no")


class Gradebook:
    """A class's gradebook file; one connection shared by a process's threads
    (each write holds the lock and is one transaction)."""

    def __init__(self, path: Path):
        self.path = Path(path)
        if self.path.is_symlink():
            raise GradebookError(f"{self.path} is a link: a gradebook is a file of its own.")
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fresh = not self.path.exists()
        self._lock = threading.RLock()
        try:
            self.db = sqlite3.connect(self.path, timeout=BUSY_MS / 1000,
                                      check_same_thread=False, isolation_level=None)
            self.db.execute(f"PRAGMA busy_timeout = {BUSY_MS}")
            self.db.execute("PRAGMA journal_mode = WAL")
            self.db.execute("PRAGMA foreign_keys = ON")
            self.db.executescript(SCHEMA)    # every statement is IF NOT EXISTS
            with self._write():
                self.db.execute("INSERT OR IGNORE INTO meta VALUES ('schema', ?)",
                                (str(SCHEMA_VERSION),))
        except sqlite3.DatabaseError as exc:
            raise GradebookError(f"{self.path} is not a gradebook this grader can open "
                                 f"({exc}).") from None
        if fresh:
            with contextlib.suppress(OSError):
                os.chmod(self.path, 0o600)   # grades are private, as every result file is

    # -- plumbing ------------------------------------------------------------

    @contextlib.contextmanager
    def _write(self):
        """One transaction, taken at once (``BEGIN IMMEDIATE``), so that two
        writers queue on the busy time-out rather than fail on an upgrade."""
        with self._lock:
            self.db.execute("BEGIN IMMEDIATE")
            try:
                yield self.db
            except BaseException:
                self.db.execute("ROLLBACK")
                raise
            self.db.execute("COMMIT")

    def close(self) -> None:
        self.db.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def meta(self, key: str, default: str | None = None) -> str | None:
        row = self.db.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
        return row[0] if row else default

    def set_meta(self, key: str, value: str) -> None:
        with self._write() as db:
            db.execute("INSERT OR REPLACE INTO meta VALUES (?, ?)", (key, value))

    def _history(self, db, who: str, what: str, submission: str = "", **detail) -> None:
        db.execute("INSERT INTO history (at, who, what, submission, detail) VALUES (?,?,?,?,?)",
                   (now(), who, what, submission, json.dumps(detail, sort_keys=True)))

    def _student(self, submission: str) -> int | None:
        row = self.db.execute("SELECT id FROM students WHERE submission = ?",
                              (ONE_LINE(submission),)).fetchone()
        return row[0] if row else None

    def student_id(self, submission: str) -> int:
        found = self._student(submission)
        if found is None:
            raise GradebookError(f"the gradebook has no submission {submission!r}.")
        return found

    def submissions(self) -> list[str]:
        return [r[0] for r in self.db.execute(
            "SELECT submission FROM students ORDER BY submission")]

    # -- students and uploads ------------------------------------------------

    def record_student(self, submission: str, *, result_key: str = "", status: str = SUBMITTED,
                       roster_id: str = "", name: str = "", lms_user_id: str = "",
                       lms_submission_id: str = "", late_flag: bool | None = None) -> int:
        """Add or update a student by their submission's label; returns its id.
        Empty fields never erase what an earlier run knew."""
        with self._write() as db:
            return self._upsert_student(db, submission, result_key=result_key, status=status,
                                        roster_id=roster_id, name=name,
                                        lms_user_id=lms_user_id,
                                        lms_submission_id=lms_submission_id,
                                        late_flag=late_flag)

    def _upsert_student(self, db, submission: str, **fields) -> int:
        found = self._student(submission)
        late_flag = fields.pop("late_flag")
        if found is None:
            submission = ONE_LINE(submission)
            cur = db.execute(
                "INSERT INTO students (submission, result_key, status, roster_id, name, "
                "lms_user_id, lms_submission_id, late_flag) VALUES (?,?,?,?,?,?,?,?)",
                (submission, fields["result_key"], fields["status"], fields["roster_id"],
                 fields["name"], fields["lms_user_id"], fields["lms_submission_id"],
                 None if late_flag is None else int(late_flag)))
            return cur.lastrowid
        for column, value in fields.items():
            if value or column == "status":
                db.execute(f"UPDATE students SET {column} = ? WHERE id = ?", (value, found))
        if late_flag is not None:
            db.execute("UPDATE students SET late_flag = ? WHERE id = ?", (int(late_flag), found))
        return found

    def record_upload(self, submission: str, content_hash: str, error: str = "") -> int:
        student = self.student_id(submission)
        with self._write() as db:
            db.execute("INSERT OR IGNORE INTO uploads (student, content_hash, seen_at, error) "
                       "VALUES (?,?,?,?)", (student, content_hash, now(), error))
            return db.execute("SELECT id FROM uploads WHERE student = ? AND content_hash = ?",
                              (student, content_hash)).fetchone()[0]

    # -- gradings -----------------------------------------------------------

    def current_result(self, submission: str) -> tuple[dict, dict] | None:
        """(validity key, results JSON) of a student's current grading."""
        row = self.db.execute(
            "SELECT g.valid_key, g.result FROM gradings g JOIN students s ON s.id = g.student "
            "WHERE s.submission = ? AND g.current = 1", (ONE_LINE(submission),)).fetchone()
        return (json.loads(row[0]), json.loads(row[1])) if row else None

    def record_grading(self, submission: str, result: dict, *, key: dict | None = None,
                       upload: int | None = None, seconds: float = 0.0) -> int:
        """A grading's result becomes the student's current one: its tests,
        per-exercise scores and free-text questions kept row by row."""
        from grader.report import exercise_scores_of, manual_from_gradescope

        student = self.student_id(submission)
        # As stored and as read back: a result is the JSON it is kept as (a
        # pair of surrogates written as two is one character read back).
        result = json.loads(json.dumps(result))
        extra = result.get("extra_data") if isinstance(result.get("extra_data"), dict) else {}
        problems = [str(extra["batch_error"])] if extra.get("batch_error") else \
            [str(p) for p in extra.get("errors") or []]
        # Text is made safe as it enters (grader.safetext), as every batch field is.
        error = clean(" | ".join(problems + [f"{ex}: {why}" for ex, why in
                                             sorted((extra.get("import_errors") or {}).items())]))
        key = key or {}
        with self._write() as db:
            db.execute("UPDATE gradings SET current = 0 WHERE student = ?", (student,))
            grading = db.execute(
                "INSERT INTO gradings (student, upload, graded_at, valid_key, grader_digest, "
                "seed, error, fault, isolation, needs_regrade, seconds, result) "
                "VALUES (?,?,?,?,?,?,?,?,?,?,?,?)",
                (student, upload, now(), json.dumps(key, sort_keys=True),
                 str(key.get("grader", "")), _int_or_none(extra.get("seed")), error,
                 str(extra.get("batch_fault", "")),
                 ONE_LINE(extra.get("isolation", "")), int(extra.get("needs_regrade") or 0),
                 float(seconds), json.dumps(result))).lastrowid
            for position, test in enumerate(result.get("tests") or []):
                name = ONE_LINE(test.get("name", ""))
                db.execute("INSERT INTO tests VALUES (?,?,?,?,?,?,?,?,?)", (
                    grading, position, name.split(":", 1)[0], name, _float(test.get("score")),
                    _float(test.get("max_score")), ONE_LINE(test.get("status", "")),
                    int(bool((test.get("extra_data") or {}).get("needs_regrade"))),
                    json.dumps((test.get("extra_data") or {}).get("mistakes") or [])))
            for exercise, (got, most) in exercise_scores_of(result).items():
                db.execute("INSERT INTO exercise_scores VALUES (?,?,?,?)",
                           (grading, exercise, got, most))
            for entry in manual_from_gradescope(result):
                db.execute("INSERT OR REPLACE INTO questions VALUES (?,?,?,?,?,?)", (
                    grading, ONE_LINE(entry.get("exercise", "")),
                    ONE_LINE(entry.get("question", "")), _float(entry.get("points")),
                    clean(entry.get("answer", ""), ANSWER_LIMIT), clean(entry.get("rubric", ""))))
            return grading

    def results(self) -> list[tuple[str, str, dict]]:
        """(label, result name, results JSON) of every current grading, in name order."""
        return [(s, k or s, json.loads(r)) for s, k, r in self.db.execute(
            "SELECT s.submission, s.result_key, g.result FROM students s JOIN gradings g "
            "ON g.student = s.id AND g.current = 1 ORDER BY s.submission")]

    # -- staff, policy, overrides --------------------------------------------

    def questions(self) -> list[dict]:
        """Every free-text answer of a current grading, with the staff's
        points where given: the rubric sheet's rows."""
        rows = self.db.execute(
            "SELECT q.question, s.submission, q.points_possible, q.answer, q.rubric, "
            "p.points, p.comment, p.grader, q.exercise FROM questions q "
            "JOIN gradings g ON g.id = q.grading AND g.current = 1 "
            "JOIN students s ON s.id = g.student "
            "LEFT JOIN staff_points p ON p.student = s.id AND p.question = q.question "
            "ORDER BY q.question, s.submission").fetchall()
        return [{"question": q, "submission": s, "points_possible": pp, "answer": a,
                 "rubric": r, "points": p, "comment": c or "", "grader": who or "",
                 "exercise": ex} for q, s, pp, a, r, p, c, who, ex in rows]

    def asked(self, submission: str) -> dict[str, float]:
        """{question: points possible} that a student's current grading asks staff to grade."""
        return dict(self.db.execute(
            "SELECT q.question, q.points_possible FROM questions q JOIN gradings g ON "
            "g.id = q.grading AND g.current = 1 JOIN students s ON s.id = g.student "
            "WHERE s.submission = ?", (ONE_LINE(submission),)).fetchall())

    def set_staff_points(self, entries: list[dict], who: str) -> int:
        """Staff's points (``{submission, question, points, comment}`` each), in
        one transaction; returns how many changed.  The history keeps what
        each replaced."""
        changed = 0
        with self._write() as db:
            for e in entries:
                student = self.student_id(e["submission"])
                old = db.execute("SELECT points, comment FROM staff_points WHERE student = ? "
                                 "AND question = ?", (student, e["question"])).fetchone()
                new = (float(e["points"]), clean(e.get("comment", "")))
                if old is not None and (float(old[0]), old[1]) == new:
                    continue
                db.execute("INSERT OR REPLACE INTO staff_points VALUES (?,?,?,?,?,?)",
                           (student, e["question"], new[0], new[1], who, now()))
                # points from the sheet stand for themselves: no rubric item explains them
                db.execute("DELETE FROM applied_items WHERE student = ? AND question = ?",
                           (student, e["question"]))
                self._bump(db, student, e["question"])
                self._history(db, who, "staff points", e["submission"], question=e["question"],
                              points=new[0], comment=new[1],
                              replaced=None if old is None else {"points": old[0],
                                                                 "comment": old[1]})
                changed += 1
        return changed

    # -- grading by rubric item (the staff's page, grader.classroom.staff) ---

    def _bump(self, db, student: int, question: str) -> int:
        version = self._version(student, question) + 1
        db.execute("INSERT OR REPLACE INTO staff_versions VALUES (?,?,?)",
                   (student, question, version))
        return version

    def _version(self, student: int, question: str) -> int:
        row = self.db.execute("SELECT version FROM staff_versions WHERE student = ? AND "
                              "question = ?", (student, question)).fetchone()
        return row[0] if row else 0

    def rubric(self, question: str) -> list[dict]:
        """A question's rubric items ``{position, text, points}``; the first
        time a question is asked, its items are read from its gradings'
        rubric line (``parse_rubric``) and kept, so that staff may change
        an item's points here afterwards."""
        items = self._rubric_rows(question)
        if items:
            return items
        row = self.db.execute(
            "SELECT q.rubric, MAX(q.points_possible) FROM questions q JOIN gradings g ON "
            "g.id = q.grading AND g.current = 1 WHERE q.question = ? GROUP BY q.rubric "
            "ORDER BY COUNT(*) DESC, q.rubric LIMIT 1", (question,)).fetchone()
        if row is None:
            raise GradebookError(f"no grading asks staff to grade a question {question!r}.")
        with self._write() as db:
            for item in parse_rubric(row[0], row[1]):
                db.execute("INSERT OR IGNORE INTO rubric_items VALUES (?,?,?,?)",
                           (question, item["position"], item["text"], item["points"]))
        return self._rubric_rows(question)

    def _rubric_rows(self, question: str) -> list[dict]:
        return [{"position": p, "text": t, "points": pts} for p, t, pts in self.db.execute(
            "SELECT position, text, points FROM rubric_items WHERE question = ? "
            "ORDER BY position", (question,))]

    def staff_mark(self, submission: str, question: str) -> dict:
        """One answer's grade: ``{points, comment, grader, at, items, version}``
        (points None: not graded yet; items: the applied rubric positions)."""
        student = self.student_id(submission)
        row = self.db.execute("SELECT points, comment, grader, at FROM staff_points WHERE "
                              "student = ? AND question = ?", (student, question)).fetchone()
        items = [p for (p,) in self.db.execute(
            "SELECT position FROM applied_items WHERE student = ? AND question = ? "
            "ORDER BY position", (student, question))]
        points, comment, who, at = row if row else (None, "", "", "")
        return {"points": points, "comment": comment, "grader": who, "at": at,
                "items": items, "version": self._version(student, question)}

    def mark_answers(self, submissions: list[str], question: str, items: list[int],
                     comment: str, who: str, seen: dict[str, int],
                     replace: bool = False) -> dict[str, int]:
        """Grade one question of ``submissions`` (one answer text, graded once)
        with rubric ``items`` and a comment, in one transaction: the staff
        points are the items' points, at most the question's.  ``seen``: the
        version of each answer's grade the grader saw; one changed since is
        refused (``StaleMark``) unless ``replace``.  Returns the new versions."""
        rubric = {i["position"]: i["points"] for i in self.rubric(question)}
        chosen = sorted(set(int(i) for i in items))
        unknown = [i for i in chosen if i not in rubric]
        if unknown:
            raise GradebookError(f"{question} has no rubric item {unknown[0]}.")
        comment, who = clean(comment), ONE_LINE(who)
        out = {}
        with self._write() as db:
            for submission in submissions:
                student = self.student_id(submission)
                possible = self.asked(submission).get(question)
                if possible is None:
                    raise GradebookError(f"{submission}'s grading asks staff to grade no "
                                         f"question {question!r}.")
                old = self.staff_mark(submission, question)
                if old["version"] != seen.get(submission, 0) and not replace:
                    by = f" by {old['grader']}" if old["grader"] else ""
                    got = "not graded" if old["points"] is None else f"{old['points']:g} points"
                    raise StaleMark(f"{submission}'s answer was changed{by} at {old['at']} "
                                    f"since you opened it (now {got}): replace it with yours?",
                                    old)
                points = min(possible, sum(rubric[i] for i in chosen))
                db.execute("INSERT OR REPLACE INTO staff_points VALUES (?,?,?,?,?,?)",
                           (student, question, points, comment, who, now()))
                db.execute("DELETE FROM applied_items WHERE student = ? AND question = ?",
                           (student, question))
                db.executemany("INSERT INTO applied_items VALUES (?,?,?)",
                               [(student, question, i) for i in chosen])
                out[submission] = self._bump(db, student, question)
                self._history(db, who, "staff marks", submission, question=question,
                              items=chosen, points=points, comment=comment,
                              replaced=None if old["points"] is None else
                              {k: old[k] for k in ("points", "comment", "items", "grader")})
        return out

    def set_rubric_points(self, question: str, position: int, points: float, who: str) -> int:
        """Change a rubric item's points and score again every answer it was
        applied to (each answer's version moves on); returns how many."""
        if not (math.isfinite(points) and points >= 0):
            raise GradebookError(f"{points!r} is not a number of points from 0 up.")
        rubric = {i["position"]: i for i in self.rubric(question)}
        if position not in rubric:
            raise GradebookError(f"{question} has no rubric item {position}.")
        who = ONE_LINE(who)
        with self._write() as db:
            db.execute("UPDATE rubric_items SET points = ? WHERE question = ? AND position = ?",
                       (float(points), question, position))
            self._history(db, who, "rubric item", question=question, position=position,
                          points=float(points), replaced=rubric[position]["points"])
            users = [s for (s,) in db.execute(
                "SELECT student FROM applied_items WHERE question = ? AND position = ?",
                (question, position)).fetchall()]
            for student in users:
                (label,) = db.execute("SELECT submission FROM students WHERE id = ?",
                                      (student,)).fetchone()
                possible = self.asked(label).get(question, 0.0)
                (got,) = db.execute(
                    "SELECT COALESCE(SUM(r.points), 0) FROM applied_items a JOIN rubric_items r "
                    "ON r.question = a.question AND r.position = a.position "
                    "WHERE a.student = ? AND a.question = ?", (student, question)).fetchone()
                db.execute("UPDATE staff_points SET points = ? WHERE student = ? AND "
                           "question = ?", (min(possible, got), student, question))
                self._bump(db, student, question)
                self._history(db, who, "staff points rescored", label, question=question,
                              points=min(possible, got))
        return len(users)

    def set_policy(self, due: datetime | None, rule: str | None, who: str = "") -> None:
        """The class's late policy (``rule`` None: none)."""
        with self._write() as db:
            old = db.execute("SELECT due, rule FROM policy").fetchone()
            new = None if rule is None else (due.isoformat(), rule)
            if old == new:
                return
            db.execute("DELETE FROM policy")
            if new is not None:
                db.execute("INSERT INTO policy VALUES (1, ?, ?)", new)
            self._history(db, who, "late policy", due=None if new is None else new[0],
                          rule=rule, replaced=None if old is None else list(old))

    def policy(self) -> tuple[late_rules.Policy, datetime, str] | None:
        row = self.db.execute("SELECT due, rule FROM policy").fetchone()
        if row is None:
            return None
        return late_rules.parse(row[1]), late_rules.parse_time(row[0]), row[1]

    def set_submitted_times(self, times: dict[str, datetime], who: str = "") -> None:
        with self._write() as db:
            for submission, when in times.items():
                student = self.student_id(submission)
                db.execute("INSERT OR REPLACE INTO submitted_times VALUES (?, ?)",
                           (student, when.isoformat()))
            if times:
                self._history(db, who, "submission times", count=len(times))

    def set_extensions(self, extensions: dict[str, tuple[datetime, str]], who: str = "") -> None:
        with self._write() as db:
            for submission, (due, reason) in extensions.items():
                student = self.student_id(submission)
                old = db.execute("SELECT due FROM extensions WHERE student = ?",
                                 (student,)).fetchone()
                if old is not None and old[0] == due.isoformat():
                    continue
                db.execute("INSERT OR REPLACE INTO extensions VALUES (?,?,?)",
                           (student, due.isoformat(), reason))
                self._history(db, who, "extension", submission, due=due.isoformat(),
                              reason=reason)

    def set_override(self, submission: str, points: float | None, reason: str,
                     who: str) -> None:
        """Replace a student's final grade (``points`` None: remove the override)."""
        student = self.student_id(submission)
        if points is not None and not math.isfinite(points):
            raise GradebookError(f"{points!r} is not a number of points.")
        with self._write() as db:
            db.execute("DELETE FROM overrides WHERE student = ?", (student,))
            if points is not None:
                db.execute("INSERT INTO overrides VALUES (?,?,?,?,?)",
                           (student, float(points), clean(reason), ONE_LINE(who), now()))
            self._history(db, who, "override", submission, points=points, reason=reason)

    def set_pairs(self, pairs: list) -> None:
        """The similar pairs of the whole class (``grader.classroom.similarity.Pair``)."""
        with self._write() as db:
            db.execute("DELETE FROM pairs")
            for p in pairs:
                db.execute("INSERT OR REPLACE INTO pairs VALUES (?,?,?,?,?,?,?,?,?)", (
                    p.exercise, p.a, p.b, p.share_a, p.share_b, json.dumps(p.spans_a),
                    json.dumps(p.spans_b), p.source_a, p.source_b))

    def pairs(self) -> list:
        from grader.classroom.similarity import Pair, ordered
        return ordered([Pair(ex, a, b, sa, sb, [tuple(s) for s in json.loads(pa)],
                             [tuple(s) for s in json.loads(pb)], src_a, src_b)
                        for ex, a, b, sa, sb, pa, pb, src_a, src_b
                        in self.db.execute("SELECT * FROM pairs")])

    def history(self) -> list[dict]:
        return [{"at": at, "who": who, "what": what, "submission": s, **json.loads(d)}
                for at, who, what, s, d in self.db.execute(
                    "SELECT at, who, what, submission, detail FROM history ORDER BY id")]

    # -- the class's rows ----------------------------------------------------

    def rows(self) -> list[Row]:
        """Every student, in name order, with their final grade."""
        policy = self.policy()
        staff_max, max_total = self.staff_maximum(), self.class_max_total()
        out = []
        for (sid, submission, key, status, roster_id, name, uid, subid, flag) in self.db.execute(
                "SELECT id, submission, result_key, status, roster_id, name, lms_user_id, "
                "lms_submission_id, late_flag FROM students ORDER BY submission").fetchall():
            row = Row(submission, key, status, roster_id, name, uid, subid,
                      None if flag is None else bool(flag), max_total=max_total,
                      staff_max=staff_max)
            grading = self.db.execute(
                "SELECT id, error, isolation, needs_regrade, fault FROM gradings "
                "WHERE student = ? AND current = 1", (sid,)).fetchone()
            if grading is not None:
                row.graded = True
                row.error, row.isolation, row.needs_regrade = grading[1], grading[2], grading[3]
                row.fault = grading[4]
                row.scores = {ex: (p, m) for ex, p, m in self.db.execute(
                    "SELECT exercise, points, max_points FROM exercise_scores WHERE grading = ?",
                    (grading[0],))}
            elif status == MISSING:
                row.error = "no submission"
            row.staff = [{"question": q, "points": p, "comment": c, "grader": g, "at": at}
                         for q, p, c, g, at in self.db.execute(
                             "SELECT question, points, comment, grader, at FROM staff_points "
                             "WHERE student = ? ORDER BY question", (sid,))]
            times = self.db.execute("SELECT submitted_at FROM submitted_times WHERE student = ?",
                                    (sid,)).fetchone()
            row.submitted_at = times[0] if times else ""
            ext = self.db.execute("SELECT due FROM extensions WHERE student = ?",
                                  (sid,)).fetchone()
            over = self.db.execute("SELECT points, reason, grader, at FROM overrides "
                                   "WHERE student = ?", (sid,)).fetchone()
            row.override = dict(zip(("points", "reason", "grader", "at"), over)) if over else None
            units = 0
            if policy is not None:
                rule, due, _ = policy
                due = late_rules.parse_time(ext[0]) if ext else due
                row.due = due.isoformat()
                when = late_rules.parse_time(row.submitted_at) if row.submitted_at else None
                units = late_rules.units_late(rule, due, when, bool(row.late_flag))
            row.final = final_grade(row.total, sum(e["points"] for e in row.staff),
                                    policy=policy[0] if policy else None, late_units=units,
                                    needs_regrade=row.needs_regrade > 0 or row.grading_failed,
                                    override=row.override["points"] if row.override else None)
            out.append(row)
        return out

    def class_max_total(self) -> float:
        """The grader's maximum: the largest of the current gradings' (each
        grading's maximum is fixed by the suites: every full grading has it)."""
        row = self.db.execute(
            "SELECT MAX(total) FROM (SELECT SUM(e.max_points) AS total FROM exercise_scores e "
            "JOIN gradings g ON g.id = e.grading AND g.current = 1 GROUP BY g.id)").fetchone()
        return float(row[0] or 0.0)

    def staff_maximum(self) -> float:
        """Points staff may give: every question any current grading asks,
        once, at its points; the same for every student."""
        rows = self.db.execute(
            "SELECT question, MAX(points_possible) FROM questions q JOIN gradings g ON "
            "g.id = q.grading AND g.current = 1 GROUP BY question").fetchall()
        return float(sum(p for _, p in rows))

    def exercises(self) -> list[str]:
        seen = {r[0] for r in self.db.execute(
            "SELECT DISTINCT e.exercise FROM exercise_scores e JOIN gradings g "
            "ON g.id = e.grading AND g.current = 1")}
        return [ex for ex in EXERCISES if ex in seen]

    # -- joining shards ------------------------------------------------------

    def absorb(self, other: "Gradebook", who: str = "") -> int:
        """Copy another gradebook's students and current gradings in (a
        shard's, or an earlier folder's), a student this one holds already
        updated, and a grading it holds already left as it is; staff points,
        times, extensions and overrides come along where this one has none, so
        that what staff gave the joined gradebook survives a merge again.
        Returns the number of students copied.  (Parts overlapping one
        another are refused by ``views.merge_parts``.)"""
        theirs = other.rows()
        results = {label: data for label, _, data in other.results()}
        keys = {s: json.loads(k) for s, k in other.db.execute(
            "SELECT s.submission, g.valid_key FROM gradings g JOIN students s "
            "ON s.id = g.student AND g.current = 1")}
        for r in theirs:
            self.record_student(r.submission, result_key=r.result_key, status=r.status,
                                roster_id=r.roster_id, name=r.name, lms_user_id=r.lms_user_id,
                                lms_submission_id=r.lms_submission_id, late_flag=r.late_flag)
            if r.submission in results:
                grading = (keys.get(r.submission) or {}, results[r.submission])
                if self.current_result(r.submission) != grading:
                    self.record_grading(r.submission, grading[1], key=grading[0])
            if r.staff:
                with self._write() as db:
                    sid = self.student_id(r.submission)
                    for e in r.staff:
                        db.execute("INSERT OR IGNORE INTO staff_points VALUES (?,?,?,?,?,?)",
                                   (sid, e["question"], e["points"], e["comment"],
                                    e["grader"], e["at"]))
            if r.submitted_at:
                self.set_submitted_times({r.submission: late_rules.parse_time(r.submitted_at)})
            mine = self.db.execute("SELECT 1 FROM overrides o JOIN students s ON s.id = o.student "
                                   "WHERE s.submission = ?", (r.submission,)).fetchone()
            if r.override and mine is None:
                self.set_override(r.submission, r.override["points"], r.override["reason"],
                                  r.override["grader"])
        ext = other.db.execute("SELECT s.submission, e.due, e.reason FROM extensions e "
                               "JOIN students s ON s.id = e.student").fetchall()
        self.set_extensions({s: (late_rules.parse_time(d), why) for s, d, why in ext}, who)
        if self.policy() is None and (theirs_policy := other.policy()) is not None:
            self.set_policy(theirs_policy[1], theirs_policy[2], who)
        return len(theirs)


def _float(value) -> float:
    try:
        number = float(value)
    except (TypeError, ValueError):
        return 0.0
    return number if math.isfinite(number) else 0.0


def _int_or_none(value) -> int | None:
    try:
        return int(value)
    except (TypeError, ValueError):
        return None
