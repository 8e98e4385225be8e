"""A class's grades as files an LMS imports (``attn-grade export``).

``canvas_import`` fills one assignment column of Canvas's gradebook import
from a grades CSV of ``attn-grade batch``.  Canvas imports a CSV whose
first columns are those of its own gradebook export (``Student``, ``ID``,
``SIS User ID``, ``SIS Login ID``, ``Section``), then one column per
assignment (``Name (assignment id)`` for an existing one; a name without an
id makes a new assignment); it matches each row on ``ID``, its user id, and
``SIS Login ID``.  So the identity columns are copied from the instructor's
own gradebook export, row by row, for the students this class has a grade
for: a row of a Canvas bulk download by its user id (the grades CSV's
``lms_user_id``), any other by its submission name as the login (or SIS
user id).  Grades without a student in the gradebook are returned, never
dropped without a word.  ``generic`` is one row per submission with its
identifiers and points, for any other LMS or a spreadsheet.
"""
from __future__ import annotations

import csv
import re
from dataclasses import dataclass, field
from pathlib import Path

from grader.safetext import csv_number, csv_text, csv_value

CANVAS_IDENTITY = ["Student", "ID", "SIS User ID", "SIS Login ID", "Section"]
ASSIGNMENT_ID = re.compile(r"^(?P<name>.*\S)\s*\((?P<id>\d+)\)$")   # "Attention (12345)"
GENERIC_COLUMNS = ["submission", "lms_user_id", "lms_submission_id", "late", "score",
                   "points_possible", "needs_regrade", "error"]


class ExportError(ValueError):
    """A grades CSV or gradebook that cannot be used; the text is one sentence."""


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


def read_grades(path: Path) -> list[dict]:
    """The rows of a grades CSV (``batch`` or ``merge``), its text as written."""
    _, rows = _rows(path, ["submission", "total", "max_total"], "a grades CSV of attn-grade "
                    "batch")
    return [{k: csv_value(v) for k, v in row.items()} for row in rows]


def _number(text: str) -> str:
    value = csv_number(text)
    return f"{value:g}" if isinstance(value, float) else ""


def generic(grades: list[dict]) -> str:
    """One row per submission: its identifiers, its points and the most."""
    return csv_text(GENERIC_COLUMNS, [
        [g["submission"], g.get("lms_user_id", ""), g.get("lms_submission_id", ""),
         g.get("late", ""), csv_number(g["total"]), csv_number(g["max_total"]),
         csv_number(g.get("needs_regrade") or "0"), g.get("error", "")] for g in grades])


@dataclass
class CanvasImport:
    text: str                                      # the CSV to import
    column: str                                    # the assignment column it fills
    matched: int = 0
    unmatched: list[str] = field(default_factory=list)   # submissions with no student
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


def canvas_import(grades: list[dict], gradebook: Path, assignment: str) -> CanvasImport:
    """Canvas's gradebook import for ``assignment``: the total of each
    submission, in the row of its student in ``gradebook`` (an export of
    Canvas's gradebook)."""
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
    rows, result, graded = [], CanvasImport("", column), set()
    for g in grades:
        uid = g.get("lms_user_id", "").strip()
        student = by_id.get(uid) if uid else by_login.get(g["submission"].strip().casefold())
        if student is None or student["ID"] in graded:
            result.unmatched.append(g["submission"])
            continue
        graded.add(student["ID"])
        rows.append([*(student[c] for c in CANVAS_IDENTITY), _number(g["total"])])
    result.matched = len(rows)
    result.without_grade = len(students) - len(graded)
    result.text = csv_text([*CANVAS_IDENTITY, column], sorted(rows, key=lambda r: r[1]))
    return result
