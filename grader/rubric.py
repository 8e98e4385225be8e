"""Staff's rubric points, back into the class's grades (``merge --rubric``).

The batch writes ``grades_rubric.csv`` (one row per free-text answer, empty
``points`` and ``comment``); staff fill them in and
``attn-grade merge --rubric grades_rubric.csv`` adds them: to ``grades.csv``
(``staff_points``, ``staff_max`` and ``total_with_staff``), to each
student's results JSON (``extra_data.staff``: question, points, possible,
comment; its test scores stay the grader's, so a rerun's cache reads back
only what the grader gave) and to the class page's students table.

A row is refused, with one sentence, when it names a student the grades do
not hold, a question that student's result does not ask staff to grade, or
points that are not a number from 0 to the question's points (those of the
result, not of the sheet, which anyone may edit).  Any refused row and
nothing is written: a gradebook half-applied is worse than none.  A row
with empty ``points`` is not graded yet and adds nothing.
"""
from __future__ import annotations

import csv
import io
import json
import math
from pathlib import Path

from grader.safetext import NAME_LIMIT, clean, csv_text, csv_value

STAFF_COLUMNS = ("staff_points", "staff_max", "total_with_staff")


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


def staff_points(sheet: Path, grades: list[dict], results: dict[str, tuple[Path, dict]]
                 ) -> dict[str, list[dict]]:
    """{student: [{question, points, points_possible, comment}]} of the filled
    rows, or ``RubricError`` naming every problem."""
    from grader.report import manual_from_gradescope

    students = {row.get("submission", "") for row in grades}
    problems, out, seen = [], {}, set()
    for line, row in enumerate(_read_csv(sheet), start=2):
        who, question, given = row.get("submission", ""), row.get("question", ""), \
            row.get("points", "")
        where = f"{Path(sheet).name} line {line}"
        if not given:
            continue
        if who not in students:
            problems.append(f"{where}: no student {clean(who, NAME_LIMIT, one_line=True)!r} "
                            "is in the grades.")
            continue
        asked = {str(e.get("question", "")): float(e.get("points", 0) or 0)
                 for e in manual_from_gradescope(results.get(who, (None, {}))[1])}
        if question not in asked:
            problems.append(f"{where}: {who}'s result asks staff to grade no question "
                            f"{clean(question, NAME_LIMIT, one_line=True)!r}.")
            continue
        try:
            points = float(given)
        except ValueError:
            points = math.nan
        if not (math.isfinite(points) and 0 <= points <= asked[question]):
            problems.append(f"{where}: {given!r} points for {question} of {who}: give a "
                            f"number from 0 to {asked[question]:g}.")
            continue
        if (who, question) in seen:
            problems.append(f"{where}: {question} of {who} is graded twice.")
            continue
        seen.add((who, question))
        out.setdefault(who, []).append({"question": question, "points": points,
                                        "points_possible": asked[question],
                                        "comment": row.get("comment", "")})
    if problems:
        raise RubricError("\n".join(problems))
    return out


def apply(grades_csv: Path, sheet: Path, results_dir: Path) -> dict[str, list[dict]]:
    """Add the sheet's points to ``grades_csv`` and the results JSON; returns
    what was added, by student."""
    from grader.batch import GRADES_NUMBERS, results_by_label
    from grader.registry import EXERCISES
    from grader.report import write_private

    numbers = {*EXERCISES, *GRADES_NUMBERS, *STAFF_COLUMNS}
    grades = _read_csv(grades_csv)
    results = results_by_label([results_dir])
    staff = staff_points(sheet, grades, results)
    header = next(csv.reader(io.StringIO(Path(grades_csv).read_text(encoding="utf-8"))), [])
    header = [h for h in header if h not in STAFF_COLUMNS] + list(STAFF_COLUMNS)
    rows = []
    for row in grades:
        given = staff.get(row.get("submission", ""), [])
        got = sum(e["points"] for e in given)
        most = sum(e["points_possible"] for e in given)
        row.update(staff_points=got, staff_max=most,
                   total_with_staff=float(row.get("total") or 0) + got)
        rows.append([_cell(row.get(h, "")) if h in numbers else row.get(h, "")
                     for h in header])
    write_private(Path(grades_csv), csv_text(header, rows))
    for who, given in staff.items():
        path, data = results[who]
        data.setdefault("extra_data", {})["staff"] = given
        write_private(path, json.dumps(data, indent=2))
    return staff


def _cell(value):
    """A number column's cell, written as a number again."""
    try:
        return float(value) if value != "" else ""
    except (TypeError, ValueError):
        return value
