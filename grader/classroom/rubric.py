"""Staff's rubric points, from the sheet they fill into the gradebook (``merge --rubric``).

Every class run writes ``grades_rubric.csv`` from the gradebook: one row per
free-text answer, with the ``points`` and ``comment`` staff already gave
(empty where none is yet).  Staff fill it in and
``attn-grade merge --rubric grades_rubric.csv`` stores the points in the
gradebook (who, when, the comment; the history keeps what each replaced),
where every view finds them: ``grades.csv``'s ``staff_points`` and
``final_total``, the pages, the LMS export.  A later ``batch`` writes the
sheet again with those points in it.

A row is refused, with one sentence, when it names a student the gradebook
does not hold, a question that student's grading does not ask staff to
grade, or points that are not a number from 0 to the question's points
(those of the grading, not of the sheet, which anyone may edit).  Any
refused row and nothing is written: a gradebook half-applied is worse than
none.  A row with empty ``points`` adds nothing and removes nothing.
"""
from __future__ import annotations

import csv
import io
import math
from pathlib import Path

from grader.classroom.gradebook import Gradebook
from grader.safetext import NAME_LIMIT, clean, csv_value


class RubricError(ValueError):
    """Rows that cannot be applied: one sentence per problem, one per line."""


def _read_csv(path: Path) -> list[dict]:
    try:
        text = Path(path).read_text(encoding="utf-8-sig", errors="replace")
    except OSError as exc:
        raise RubricError(f"{path} cannot be read ({exc.strerror}).") from None
    return [{(k or "").strip().lower(): clean(csv_value(v or "")).strip()
             for k, v in row.items() if k is not None}
            for row in csv.DictReader(io.StringIO(text))]


def staff_points(sheet: Path, book: Gradebook) -> list[dict]:
    """The filled rows as ``{submission, question, points, comment}``, or
    ``RubricError`` naming every problem."""
    students = set(book.submissions())
    problems, out, seen = [], [], set()
    for line, row in enumerate(_read_csv(sheet), start=2):
        who, question, given = row.get("submission", ""), row.get("question", ""), \
            row.get("points", "")
        where = f"{Path(sheet).name} line {line}"
        if not given:
            continue
        shown = clean(who, NAME_LIMIT, one_line=True)
        if who not in students:
            problems.append(f"{where}: no student {shown!r} is in the gradebook.")
            continue
        asked = book.asked(who)
        if question not in asked:
            problems.append(f"{where}: {shown}'s grading asks staff to grade no question "
                            f"{clean(question, NAME_LIMIT, one_line=True)!r}.")
            continue
        try:
            points = float(given)
        except ValueError:
            points = math.nan
        if not (math.isfinite(points) and 0 <= points <= asked[question]):
            problems.append(f"{where}: {given!r} points for {question} of {shown}: give a "
                            f"number from 0 to {asked[question]:g}.")
            continue
        if (who, question) in seen:
            problems.append(f"{where}: {question} of {shown} is graded twice.")
            continue
        seen.add((who, question))
        out.append({"submission": who, "question": question, "points": points,
                    "comment": row.get("comment", "")})
    if problems:
        raise RubricError("\n".join(problems))
    return out


def apply_sheet(book: Gradebook, sheet: Path, who: str) -> tuple[int, int]:
    """Store the sheet's points in ``book`` as given by ``who``, all or none;
    returns (rows with points, rows that changed a stored grade)."""
    entries = staff_points(sheet, book)
    return len(entries), book.set_staff_points(entries, who)
