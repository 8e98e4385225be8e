"""A class's grades as files an LMS imports (``attn-grade export``), from the gradebook.

``canvas_import`` fills one assignment column of Canvas's gradebook import
with each student's **final grade** (``gradebook.final_grade``: the
grader's and the staff's points, less the late penalty, or the override).  Canvas imports a CSV whose
first columns are those of its own gradebook export (``Student``, ``ID``,
``SIS User ID``, ``SIS Login ID``, ``Section``), then one column per
assignment (``Name (assignment id)`` for an existing one; a name without an
id makes a new assignment); it matches each row on ``ID``, its user id, and
``SIS Login ID``.  So the identity columns are copied from the instructor's
own gradebook export, row by row, for the students this class has a grade
for: a row of a Canvas bulk download by its user id (``lms_user_id``), any
other by its roster id or submission name as the login (or SIS user id).
Grades without a student in the Canvas gradebook, and grades that need a
regrade (no number yet), are returned, never dropped without a word.  The
generic export is ``grades.csv``'s every column (``views.grades_csv``).
"""
from __future__ import annotations

import csv
import re
from dataclasses import dataclass, field
from pathlib import Path

from grader.classroom.gradebook import MISSING, Row
from grader.safetext import csv_text

CANVAS_IDENTITY = ["Student", "ID", "SIS User ID", "SIS Login ID", "Section"]
ASSIGNMENT_ID = re.compile(r"^(?P<name>.*\S)\s*\((?P<id>\d+)\)$")   # "Attention (12345)"


class ExportError(ValueError):
    """A Canvas gradebook export that cannot be used; the text is one sentence."""


def _rows(path: Path, needs: list[str], what: str) -> tuple[list[str], list[dict]]:
    try:
        with open(path, newline="", encoding="utf-8-sig") as f:
            reader = csv.DictReader(f)
            rows = [{k: v or "" for k, v in row.items() if k is not None} for row in reader]
            header = list(reader.fieldnames or [])
    except (OSError, UnicodeDecodeError, csv.Error) as exc:
        raise ExportError(f"{path} is not a readable CSV file ({exc}).") from None
    missing = [c for c in needs if c not in header]
    if missing:
        raise ExportError(f"{path} is not {what}: it has no {missing[0]!r} column.")
    return header, rows


@dataclass
class CanvasImport:
    text: str                                      # the CSV to import
    column: str                                    # the assignment column it fills
    matched: int = 0
    unmatched: list[str] = field(default_factory=list)   # submissions with no student
    to_regrade: list[str] = field(default_factory=list)  # grades without a number yet
    without_grade: int = 0                         # gradebook students with no submission


def _assignment_column(header: list[str], assignment: str) -> str:
    """The gradebook's column for ``assignment`` (its full header, or its name
    before the id), else ``assignment`` itself: a new assignment on import."""
    if assignment in header[len(CANVAS_IDENTITY):]:
        return assignment
    named = [h for h in header[len(CANVAS_IDENTITY):]
             if (m := ASSIGNMENT_ID.match(h)) and m["name"] == assignment.strip()]
    if len(named) > 1:
        raise ExportError(f"the gradebook has {len(named)} assignments named {assignment!r} "
                          f"({', '.join(named)}): give --assignment the full column name.")
    return named[0] if named else assignment


def canvas_import(rows: list[Row], gradebook: Path, assignment: str) -> CanvasImport:
    """Canvas's gradebook import for ``assignment``: the final grade of each
    student, in their row of ``gradebook`` (an export of Canvas's gradebook)."""
    header, students = _rows(gradebook, CANVAS_IDENTITY, "a Canvas gradebook export")
    column = _assignment_column(header, assignment)
    # Export rows that are no student: "Points Possible", muted/manual-posting notes.
    students = [s for s in students if s["ID"].strip().isdigit()]
    by_id = {s["ID"].strip(): s for s in students}
    by_login = {}
    for s in students:
        for key in ("SIS Login ID", "SIS User ID"):
            if s[key].strip():
                by_login.setdefault(s[key].strip().casefold(), s)
    lines, result, graded = [], CanvasImport("", column), set()
    for r in rows:
        if r.status == MISSING:
            continue            # handed nothing in: Canvas shows them without a submission
        uid = r.lms_user_id.strip()
        student = by_id.get(uid) if uid else next(
            (by_login[k] for k in (r.roster_id.strip().casefold(),
                                   r.submission.strip().casefold()) if k and k in by_login),
            None)
        if student is None or student["ID"] in graded:
            result.unmatched.append(r.submission)
            continue
        if r.final is None or r.final.points is None:
            result.to_regrade.append(r.submission)
            continue
        graded.add(student["ID"])
        lines.append([*(student[c] for c in CANVAS_IDENTITY), f"{r.final.points:g}"])
    result.matched = len(lines)
    result.without_grade = len(students) - len(graded)
    result.text = csv_text([*CANVAS_IDENTITY, column], sorted(lines, key=lambda r: r[1]))
    return result
