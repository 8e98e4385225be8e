"""Every file a class's run leaves beside the gradebook, written from it.

``write_all`` is the one tail of every class command (``batch``, a shard,
``merge``, ``merge --rubric``, ``override``): ``grades.csv`` (every column of
``COLUMNS``, the final grade among them), ``grades_rubric.csv`` (the staff's
sheet, with the points they gave), ``grades-summary.txt`` and
``grades-histogram.png``, ``grades-mistakes.csv``, ``similarity.csv`` and,
for a whole class, ``report/``.  None of them is read back by a stage: they
are exports, and the rubric sheet is staff's input too.

``merge_parts`` joins the gradebooks of ``batch --shard K/N`` runs into one,
refusing overlaps and gaps.  ``import_folder`` reads an output folder of an
earlier version (``grades.csv``, its results JSON and a filled rubric
sheet) into a new gradebook the first time a command meets it: the one
place a grades CSV is parsed.
"""
from __future__ import annotations

import csv
import io
import json
from pathlib import Path

from grader.classroom import pages, rubric
from grader.classroom.gradebook import MISSING, Gradebook, GradebookError, Row, path_for
from grader.classroom.late import LatePolicyError, parse_time
from grader.classroom import similarity
from grader.insight import result_mistakes
from grader.registry import EXERCISES
from grader.artifacts import write_private
from grader.safetext import ANSWER_LIMIT, FIELD_LIMIT, NAME_LIMIT, clean, csv_text, csv_value

# grades.csv's columns after the exercises' own: the one list (exports and pages read Rows).
COLUMNS = ("total", "max_total", "staff_points", "staff_max", "total_with_staff",
           "submitted_at", "due", "late_units", "penalty", "override", "override_reason",
           "final_total", "final_max", "needs_regrade", "status", "isolation", "error",
           "student_id", "name", "lms_user_id", "lms_submission_id", "late")
# Those of COLUMNS that always hold a number (final_total and override are empty without one).
NUMBER_COLUMNS = ("total", "max_total", "staff_points", "staff_max", "total_with_staff",
                  "late_units", "penalty", "final_max", "needs_regrade")
RUBRIC_COLUMNS = ["question", "submission", "points_possible", "answer", "rubric", "points",
                  "comment", "graded_by"]
MISTAKES_COLUMNS = ["exercise", "mistake_id", "text", "count", "students"]
STUDENTS_SEP = "; "


class MergeError(ValueError):
    """Parts that do not join into one class; the text is one sentence."""


def status(row: Row) -> str:
    if row.status == MISSING:
        return "missing"
    if row.final is not None and row.final.points is None:
        return "needs regrade"
    return "not graded" if row.fault == "upload" else "graded"


def grade_cells(row: Row, exercises: list[str]) -> list:
    f = row.final
    return [row.submission, *(row.scores.get(ex, (0.0, 0.0))[0] for ex in exercises),
            row.total, row.max_total, f.staff, row.staff_max, f.raw, row.submitted_at,
            row.due, f.late_units, f.penalty,
            row.override["points"] if row.override else "",
            row.override["reason"] if row.override else "",
            "" if f.points is None else f.points, row.final_max, row.needs_regrade,
            status(row), row.isolation, row.error, row.roster_id, row.name, row.lms_user_id,
            row.lms_submission_id, row.late]


def _safe(cells: list, limit: int = FIELD_LIMIT) -> list:
    """Text cleaned again on its way out (``grader.safetext``): what a
    gradebook holds was cleaned as it came in, and a file nobody should
    trust blindly (an imported one) is cleaned here too."""
    return [clean(c, limit) if isinstance(c, str) else c for c in cells]


def grades_csv(rows: list[Row], exercises: list[str]) -> str:
    """``grades.csv``: a row per student, every column."""
    return csv_text(["submission", *exercises, *COLUMNS],
                    [_safe(grade_cells(r, exercises)) for r in rows])


def rubric_csv(book: Gradebook) -> str:
    """The staff's sheet: one row per free-text answer, grouped by question,
    with the points and comment already given (empty where none is)."""
    return csv_text(RUBRIC_COLUMNS, [
        _safe([q["question"], q["submission"], q["points_possible"], q["answer"], q["rubric"],
               "" if q["points"] is None else q["points"], q["comment"], q["grader"]],
              ANSWER_LIMIT)
        for q in book.questions()])


def rubric_of(out: Path) -> Path:
    """The free-text answers' sheet beside a grades CSV (``NAME_rubric.csv``)."""
    return Path(out).with_name(f"{Path(out).stem}_rubric.csv")


def mistakes_sheet(out: Path) -> Path:
    return Path(out).with_name(Path(out).stem + "-mistakes.csv")


def summary_of(out: Path) -> Path:
    return Path(out).with_name(Path(out).stem + "-summary.txt")


def class_mistakes(results: list[tuple[str, str, dict]]) -> list[list]:
    """The mistakes table: one row per exercise and mistake, most common
    first, each student counted once (however many tests named it)."""
    table: dict[tuple[str, str], tuple[str, set]] = {}
    for label, _, data in results:
        for exercise, ident, text in result_mistakes(data):
            table.setdefault((exercise, ident), (text, set()))[1].add(label)
    rows = [[ex, ident, text, len(who), STUDENTS_SEP.join(sorted(who))]
            for (ex, ident), (text, who) in table.items()]
    return sorted(rows, key=lambda r: (-r[3], r[0], r[1]))


def mistakes_csv(rows: list[list]) -> str:
    return csv_text(MISTAKES_COLUMNS, [[clean(c, NAME_LIMIT, one_line=True) if i == 2 else c
                                        for i, c in enumerate(r)] for r in rows])


def summary(rows: list[Row], exercises: list[str], mistakes: list[list]) -> str:
    """Per-exercise totals and means, the final grades', and the commonest mistakes."""
    n = len(rows)
    lines = [f"{n} submission{'' if n == 1 else 's'}"]
    if not rows:
        return lines[0] + "\n"
    finals = [r.final.points for r in rows if r.final.points is not None]
    columns = [(ex, [r.scores.get(ex, (0.0, 0.0))[0] for r in rows]) for ex in exercises]
    columns += [("total", [r.total for r in rows]), ("final", finals)]
    width = max(len(name) for name, _ in columns)
    for name, values in columns:
        if values:
            lines.append(f"{name:<{width}}  total {sum(values):g}  mean "
                         f"{sum(values) / len(values):.2f}  min {min(values):g}  "
                         f"max {max(values):g}")
    most = max(r.final_max for r in rows)
    regrade = sum(r.final.points is None for r in rows)
    lines.append(f"max_total {max(r.max_total for r in rows):g}; final out of {most:g}; "
                 f"{sum(bool(r.error) for r in rows)} with errors; {regrade} to regrade")
    if not mistakes:
        lines.append("Most common mistakes: none named.")
    else:
        lines.append(f"Most common mistakes (of {n} submissions):")
        lines += [f"  {count:>4}  {ex}  {ident}: {text}"
                  for ex, ident, text, count, _ in mistakes[:5]]
    return "\n".join(lines) + "\n"


def histogram(finals: list[float], path: Path) -> Path | None:
    """A PNG histogram of the class's final grades; None without matplotlib."""
    try:
        fig = histogram_figure(finals)
    except ImportError:
        return None
    fig.savefig(path)
    return path


def histogram_figure(totals: list[float]):
    """The histogram's figure: submissions (whole numbers) per band of grades."""
    import matplotlib
    matplotlib.use("Agg")
    from matplotlib.figure import Figure
    from matplotlib.ticker import MaxNLocator

    fig = Figure(figsize=(6, 4))
    ax = fig.subplots()
    ax.hist(totals, bins=min(20, max(1, len(set(totals)))), color="#4477aa")
    ax.yaxis.set_major_locator(MaxNLocator(integer=True))   # a count of submissions
    ax.set_xlabel("final grade")
    ax.set_ylabel("submissions")
    ax.set_title(f"{len(totals)} submissions")
    return fig


def write_all(book: Gradebook, out: Path, *, whole_class: bool = True,
              results_dir: Path | None = None) -> list[Path]:
    """Every view of ``book`` beside ``out`` (``grades.csv``); returns what was
    written besides ``out``.  A shard writes its sheets, not the report."""
    out = Path(out)
    rows, exercises = book.rows(), book.exercises()
    results = book.results()
    mistakes = class_mistakes(results)
    write_private(out, grades_csv(rows, exercises))
    written = [mistakes_sheet(out)]
    write_private(mistakes_sheet(out), mistakes_csv(mistakes))
    questions = book.questions()
    if questions:
        write_private(rubric_of(out), rubric_csv(book))
        written.append(rubric_of(out))
    pairs = book.pairs()
    if pairs or book.meta("similarity") == "done":
        similar = similarity.similarity_csv(out)
        write_private(similar, similarity.to_csv(pairs))
        written.append(similar)
    if not whole_class:
        return written
    write_private(summary_of(out), summary(rows, exercises, mistakes))
    written.append(summary_of(out))
    png = histogram([r.final.points for r in rows if r.final.points is not None],
                    out.with_name(out.stem + "-histogram.png"))
    if png is not None:
        written.append(png)
    written.append(pages.write_class_report(out.parent / "report", book, rows, mistakes,
                                            results_dir))
    return written


# -- shards ----------------------------------------------------------------

def part_gradebook(part: Path) -> Path:
    """A shard's gradebook: the part named itself, or the one beside its CSV
    (an older shard's CSV and results are imported first)."""
    part = Path(part)
    if part.suffix == ".sqlite":
        return part
    book = path_for(part)
    if not book.is_file():
        import_folder(part)
    return book


def merge_parts(parts: list[Path], target: Gradebook, who: str = "") -> int:
    """Join the gradebooks of ``batch --shard K/N`` runs into ``target``,
    refusing overlaps and gaps; staff points, overrides and extensions
    already in ``target`` stay.  Returns the number of students joined."""
    seen: dict[int, Path] = {}
    total = everyone = None
    books = []
    try:
        for path in parts:
            book = Gradebook(part_gradebook(path))
            books.append(book)
            shard = book.meta("shard")
            if shard is None:
                raise MergeError(f"{path} was not graded with `attn-grade batch --shard K/N`: "
                                 "merge joins the parts of one class.")
            k, n = (int(x) for x in shard.split("/"))
            if total is not None and n != total:
                raise MergeError(f"{path} is a part of {n}, the others of {total}.")
            total = n
            if k in seen:
                raise MergeError(f"{path} and {seen[k]} are both shard {k}/{n}.")
            seen[k] = path
            names = set(json.loads(book.meta("everyone") or "[]"))
            if everyone is not None and names != everyone:
                raise MergeError(f"{path} was graded from another class folder than "
                                 f"{seen[min(seen)]}.")
            everyone = names
        missing = sorted(set(range(1, (total or 0) + 1)) - set(seen))
        if missing:
            raise MergeError(f"shard {missing[0]}/{total} is missing "
                             f"({len(missing)} of {total} parts are).")
        held: dict[str, Path] = {}
        for path, book in zip(parts, books):
            for name in book.submissions():
                if name in held:
                    raise MergeError(f"{name} is in two parts ({held[name]} and {path}).")
                held[name] = path
        absent = sorted((everyone or set()) - set(held))
        if absent:
            raise MergeError(f"{len(absent)} submissions are in no part, {absent[0]} first.")
        count = 0
        for book in books:
            count += target.absorb(book, who)
            if book.meta("similarity") == "done":
                target.set_pairs(book.pairs())
                target.set_meta("similarity", "done")
        return count
    except GradebookError as exc:
        raise MergeError(str(exc)) from None
    finally:
        for book in books:
            book.close()


# -- an older output folder ---------------------------------------------------

def import_folder(out: Path, results_dir: Path | None = None) -> Path | None:
    """Read an output folder of an earlier version into a new gradebook beside
    ``out``: each results JSON of ``results/`` (by its recorded label), the
    rows of ``grades.csv`` with no result (a zero row saying why), the late
    columns it has (submission times) and the staff's points of a filled
    rubric sheet.  None when there is no such folder."""
    out = Path(out)
    target = path_for(out)
    if target.exists() or not out.is_file():
        return None
    results_dir = Path(results_dir) if results_dir else out.parent / "results"
    try:
        rows = [{k: clean(csv_value(v or "")) for k, v in r.items() if k is not None}
                for r in csv.DictReader(io.StringIO(out.read_text(encoding="utf-8-sig",
                                                                  errors="replace")))]
    except (OSError, csv.Error) as exc:
        raise GradebookError(f"{out} cannot be read as an earlier grades CSV ({exc}).") \
            from None
    if rows and "submission" not in rows[0]:
        raise GradebookError(f"{out} is not a grades CSV of attn-grade batch.")
    found = {}
    for path in sorted(results_dir.glob("*.json")) if results_dir.is_dir() else []:
        try:
            data = json.loads(path.read_text())
            label = clean(str(data["extra_data"]["batch"]["submission"]))
        except (OSError, ValueError, KeyError, TypeError):
            continue
        if label not in found or data["extra_data"]["batch"].get("result") == path.stem:
            found[label] = (path.stem, data)
    with Gradebook(target) as book:
        for row in rows:
            name = row.get("submission", "")
            key, data = found.get(name, (name, None))
            late = row.get("late", "")
            book.record_student(name, result_key=key, lms_user_id=row.get("lms_user_id", ""),
                                lms_submission_id=row.get("lms_submission_id", ""),
                                late_flag=None if late not in ("yes", "no") else late == "yes")
            if data is None:
                data = {"score": 0, "tests": [], "extra_data": {
                    "batch_error": row.get("error") or "imported without its result",
                    "exercise_scores": {ex: {"score": float(row.get(ex) or 0),
                                             "max_score": 0.0}
                                        for ex in EXERCISES if ex in row}}}
            stored = data.get("extra_data", {}).get("batch", {}).get("key")
            book.record_grading(name, data, key=stored if isinstance(stored, dict) else {})
            if row.get("submitted_at"):
                try:
                    book.set_submitted_times({name: parse_time(row["submitted_at"])},
                                             "import")
                except LatePolicyError:
                    pass
            staff = data.get("extra_data", {}).get("staff") or []
            book.set_staff_points([{"submission": name, "question": str(e.get("question")),
                                    "points": float(e.get("points", 0)),
                                    "comment": str(e.get("comment", ""))}
                                   for e in staff if isinstance(e, dict)], "import")
        sheet = rubric_of(out)
        if sheet.is_file():
            try:
                rubric.apply_sheet(book, sheet, "import")
            except rubric.RubricError:
                pass    # a sheet it cannot take whole: the staff's points in the results stay
        book.set_meta("imported_from", str(out.name))
    return target
