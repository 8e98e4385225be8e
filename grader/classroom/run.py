"""The class commands' work, once: what ``batch``, ``merge``, ``merge --rubric``,
``export`` and ``override`` do, each ending in ``views.write_all``.

The command line (``grader.cli``) only reads options into ``ClassOptions``
and turns ``ClassInputError`` into a one-sentence click error (exit 2).
Every input a person gives (roster, submission times, extensions, policy,
rubric sheet) is read and checked against the class folder before anything
is graded or written: a row that names no submission is an error naming
the row, and nothing already in the gradebook is lost.
"""
from __future__ import annotations

import dataclasses
import getpass
import json
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from grader.classroom import batch, lms, rubric, similarity, views
from grader.classroom import late as late_rules
from grader.classroom.gradebook import MISSING, Gradebook, GradebookError, path_for
from grader.options import Options
from grader.artifacts import write_private
from grader.safetext import NAME_LIMIT, clean

NO_POLICY = "none"     # --late-policy none: remove a stored policy


class ClassInputError(ValueError):
    """Input a person gave that cannot be used; ``param`` names the option."""

    def __init__(self, message: str, param: str | None = None):
        super().__init__(message)
        self.param = param


@dataclass
class ClassOptions:
    """Everything a class run takes besides the grading's own ``Options``;
    the Slurm and Actions paths pass the same flags through to ``batch``."""
    out: Path
    results_dir: Path | None = None
    jobs: int = 1
    submission_timeout: float = 1800.0
    force: bool = False
    roster: Path | None = None
    shard: tuple[int, int] | None = None
    due: str | None = None
    late_policy: str | None = None
    submitted_times: Path | None = None
    extensions: Path | None = None
    who: str = field(default_factory=lambda: _user())

    @property
    def results(self) -> Path:
        return self.results_dir or self.out.parent / "results"


def compile_cache_for(out: Path) -> Path:
    """The class's shared cache of exercise G's GPU compiles, beside its
    gradebook: ``grades.csv`` -> ``grades_compile/`` (remove it to compile
    everything again)."""
    out = Path(out).absolute()
    return out.with_name(f"{out.stem}_compile")


def _user() -> str:
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return "staff"


def open_gradebook(out: Path, results_dir: Path | None = None) -> Gradebook:
    """The gradebook beside ``out``; an older output folder there is read in
    the first time (``views.import_folder``)."""
    try:
        views.import_folder(out, results_dir)
        return Gradebook(path_for(out))
    except GradebookError as exc:
        raise ClassInputError(str(exc)) from None


def _policy(opts: ClassOptions):
    """(due, rule text) to store, None to leave the gradebook's, or (None, None)
    to remove it (``--late-policy none``)."""
    if opts.late_policy is not None and opts.late_policy.strip().lower() == NO_POLICY:
        return None, None
    if opts.due is None and opts.late_policy is None:
        return None
    if opts.due is None or opts.late_policy is None:
        raise ClassInputError("--due and --late-policy go together: give both or neither.")
    try:
        when = late_rules.parse_time(opts.due)
    except late_rules.LatePolicyError as exc:
        raise ClassInputError(str(exc), "--due") from None
    try:
        late_rules.parse(opts.late_policy)
    except late_rules.LatePolicyError as exc:
        raise ClassInputError(str(exc), "--late-policy") from None
    return when, opts.late_policy


def _staff_sheets(opts: ClassOptions, subs: list) -> tuple[dict, dict]:
    """{label: time} of ``--submitted-times`` and {label: (due, reason)} of
    ``--extensions``, every row naming a submission of the class."""
    sheets = []
    for path, read, what, flag in (
            (opts.submitted_times, late_rules.read_times, "submission time", "--submitted-times"),
            (opts.extensions, late_rules.read_extensions, "extension", "--extensions")):
        if path is None:
            sheets.append({})
            continue
        try:
            sheets.append(batch.match_names(path, read(path), subs, what))
        except (late_rules.LatePolicyError, batch.RosterError) as exc:
            raise ClassInputError(str(exc), flag) from None
    return sheets[0], sheets[1]


@dataclass
class BatchRun:
    outcomes: list
    everyone: list
    written: list
    skipped: list[str]
    unrostered: list[str]
    missing: int = 0


def run_batch(folder: Path, options: Options, opts: ClassOptions,
              on_start: Callable[[int], None] | None = None,
              on_done: Callable | None = None) -> BatchRun:
    """``attn-grade batch``: discover, check every input, grade into the
    gradebook, write every view."""
    if not folder.exists():
        raise ClassInputError(f"{folder} does not exist.", "FOLDER")
    if not folder.is_dir():
        raise ClassInputError(f"{folder} is not a folder of submissions.", "FOLDER")
    policy = _policy(opts)
    if options.compile_cache is None:     # one for the class, shared by every slot
        options = dataclasses.replace(options, compile_cache=compile_cache_for(opts.out))
    roster_rows = None
    if opts.roster is not None:
        try:
            roster_rows = batch.read_roster(opts.roster)
        except batch.RosterError as exc:
            raise ClassInputError(str(exc), "--roster") from None
    with tempfile.TemporaryDirectory(prefix="attn-intake-") as staging:
        skipped: list[str] = []
        everyone = batch.discover(folder, staging=Path(staging), skipped=skipped)
        if not everyone:
            raise ClassInputError(f"{folder} holds no submissions (sub-folders, notebooks "
                                  "or zip files).")
        roster, missing = {}, []
        if roster_rows is not None:
            try:
                roster, missing = batch.match_roster(opts.roster, roster_rows, everyone)
            except batch.RosterError as exc:
                raise ClassInputError(str(exc), "--roster") from None
        times, extensions = _staff_sheets(opts, everyone)
        subs = batch.shard_of(everyone, *opts.shard) if opts.shard else everyone
        unrostered = [s.label for s in subs if roster_rows is not None and s.name not in roster]
        first = opts.shard is None or opts.shard[0] == 1
        book = open_gradebook(opts.out, opts.results_dir)
        try:
            if opts.shard:
                book.set_meta("shard", f"{opts.shard[0]}/{opts.shard[1]}")
                book.set_meta("everyone", json.dumps(sorted(
                    [s.label for s in everyone] + [_missing_label(r) for r in missing])))
            if policy is not None:
                book.set_policy(*policy, who=opts.who)
            if on_start is not None:
                on_start(len(subs))
            outcomes = batch.run_batch(subs, opts.results, options, book=book, jobs=opts.jobs,
                                       submission_timeout=opts.submission_timeout,
                                       force=opts.force, roster=roster, on_done=on_done)
            mine = {s.label for s in subs}
            book.set_submitted_times({k: v for k, v in times.items() if k in mine}, opts.who)
            book.set_extensions({k: v for k, v in extensions.items() if k in mine}, opts.who)
            for row in missing if first else []:   # each shard sees the roster: shard 1 adds them
                book.record_student(_missing_label(row), status=MISSING,
                                    roster_id=row.student_id, name=row.name)
            # Over the whole class (every shard discovers it all), while Canvas's staged
            # folders exist; of the shards, the first keeps it, and merge takes it.
            if first and similarity.available():
                book.set_pairs(similarity.class_pairs(everyone, exercises=options.exercises))
                book.set_meta("similarity", "done")
            written = views.write_all(book, opts.out, whole_class=opts.shard is None,
                                      results_dir=opts.results)
        finally:
            book.close()
    return BatchRun(outcomes, everyone, written, skipped, unrostered, len(missing) if first else 0)


def _missing_label(row) -> str:
    """A roster student without an upload: their row is named by their id."""
    return clean(row.student_id, NAME_LIMIT, one_line=True)


def run_merge(parts: list[Path], out: Path, results_dir: Path | None, who: str) -> tuple[int, list]:
    """``attn-grade merge PARTS``: the shards' gradebooks joined into the one
    beside ``out`` (its staff points kept), and every view written."""
    book = open_gradebook(out, results_dir)
    try:
        try:
            count = views.merge_parts(parts, book, who)
        except views.MergeError as exc:
            raise ClassInputError(str(exc)) from None
        _copy_results(parts, results_dir or out.parent / "results")
        return count, views.write_all(book, out, results_dir=results_dir or
                                      out.parent / "results")
    finally:
        book.close()


def _copy_results(parts: list[Path], results_dir: Path) -> None:
    """The shards' results JSON and pictures beside the merged gradebook, for
    the students' pages (Slurm's shards share one results folder already)."""
    results_dir.mkdir(parents=True, exist_ok=True)
    for part in parts:
        folder = Path(part).parent / "results"
        if not folder.is_dir() or folder.resolve() == results_dir.resolve():
            continue
        for item in folder.iterdir():
            target = results_dir / item.name
            if item.is_symlink():
                continue
            if item.is_dir():
                shutil.copytree(item, target, dirs_exist_ok=True, symlinks=True)
            elif item.suffix == ".json":
                write_private(target, item.read_text())


def run_rubric(out: Path, sheet: Path, results_dir: Path | None, who: str) -> tuple[int, int, list]:
    """``merge --rubric SHEET``: the staff's points into the gradebook, all or
    none, then every view again."""
    if not out.is_file() and not path_for(out).is_file():
        raise ClassInputError(f"{out} does not exist: --rubric adds points to a batch's "
                              "grades.csv.", "--out")
    book = open_gradebook(out, results_dir)
    try:
        try:
            given, changed = rubric.apply_sheet(book, sheet, who)
        except rubric.RubricError as exc:
            raise ClassInputError(f"{sheet}: nothing was written.\n{exc}") from None
        written = views.write_all(book, out, whole_class=book.meta("shard") is None,
                                  results_dir=results_dir or out.parent / "results")
        return given, changed, written
    finally:
        book.close()


def run_override(out: Path, submission: str, points: float | None, reason: str,
                 who: str) -> list:
    """``attn-grade override``: a final grade replaced, with its reason."""
    if not path_for(out).is_file() and not out.is_file():
        raise ClassInputError(f"{out} does not exist: override changes a graded class.",
                              "--out")
    if points is not None and not reason.strip():
        raise ClassInputError("an override needs a --reason.", "--reason")
    book = open_gradebook(out)
    try:
        try:
            book.set_override(submission, points, reason, who)
        except GradebookError as exc:
            raise ClassInputError(str(exc), "SUBMISSION") from None
        return views.write_all(book, out, whole_class=book.meta("shard") is None,
                               results_dir=out.parent / "results")
    finally:
        book.close()


def gradebook_of(grades: Path) -> Path:
    """The gradebook a command names: itself (``.sqlite``), the one beside a
    grades CSV, or one read in from an older folder's grades CSV."""
    grades = Path(grades)
    if grades.suffix == ".sqlite":
        return grades
    try:
        views.import_folder(grades)
    except GradebookError as exc:
        raise ClassInputError(str(exc), "GRADES") from None
    if not path_for(grades).is_file():
        raise ClassInputError(f"{grades} has no gradebook beside it "
                              f"({path_for(grades).name}).", "GRADES")
    return path_for(grades)


def run_export(grades: Path, canvas: Path | None, assignment: str,
               out: Path | None) -> tuple[Path, Path | None, lms.CanvasImport | None, int]:
    """``attn-grade export``: the generic CSV (every column) and, with
    ``canvas``, Canvas's gradebook import of the final grades."""
    with Gradebook(gradebook_of(grades)) as book:
        rows, exercises = book.rows(), book.exercises()
    made = None
    if canvas is not None:
        try:
            made = lms.canvas_import(rows, canvas, assignment)
        except lms.ExportError as exc:
            raise ClassInputError(str(exc)) from None
    if made is None:
        out = out or Path("grades-export.csv")
        write_private(out, views.grades_csv(rows, exercises))
        return out, None, None, len(rows)
    out = out or Path("canvas-import.csv")
    plain = out.with_name(f"{out.stem}-generic.csv")
    write_private(out, made.text)
    write_private(plain, views.grades_csv(rows, exercises))
    return out, plain, made, len(rows)
