"""``attn-grade``: a thin click shell over ``grader.core`` and ``grader.classroom.run``.

Every expected mistake of the person at the keyboard (a missing path, an
unknown exercise, a bad option, ``--isolation strict`` where namespaces
cannot be made) is a one-sentence click error with exit code 2; a student's
wrong answer is a score, never an exception.  ``grade`` and ``batch`` exit
with ``EXIT_UNGRADED`` (3) when a submission could not be graded in full (a
grader problem, a test that needs a regrade), after writing every result.
"""
from __future__ import annotations

import dataclasses
import functools
import os
import sys
from pathlib import Path

import click

from grader import report as fmt
from grader.options import GraderConfigError, Options
from grader.registry import EXERCISES, available, by_letter, suite_files
from grader.paths import EXERCISES_DIR, HIDDEN_SUITES_DIR, REPO_DIR, SOLUTIONS_DIR
from grader.artifacts import write_private
from grader.safetext import clean
from grader.sandbox import launch
from grader.sandbox.launch import GRADING_BUDGET_S
from grader.submission import SubmissionError, materialize

EXIT_UNGRADED = 3   # a submission (or a test of it) could not be graded: see the report

ISOLATION_HELP = ("auto: namespaces (bubblewrap) where they work, else the weaker fallback, "
                  "said at the top of the report; strict: refuse to grade without "
                  "namespaces; fallback: the older uid-only confinement.")


def _isolation_option(default: str = "auto"):
    from grader.sandbox.isolation import MODES
    return click.option("--isolation", type=click.Choice(MODES), default=default,
                        show_default=True, help=ISOLATION_HELP)


GPU_TIER_HELP = ("Grade the GPU tier (the tests marked gpu): its points count in the maximum "
                 "on every machine, and without a GPU they are not run and need a regrade. "
                 "Without it they are not run and count nowhere, GPU or not: the maximum is "
                 "this choice's, never the machine's.  --require-gpu is the same.")
DEDUCT_HELP = ("--deduct-each: every failing test costs its points, even one that fails only "
               "from a mistake found upstream (a function it calls, an earlier exercise its "
               "module imports).  By default (--deduct-once) such a root cause costs once.")


def _gpu_tier_option():
    return click.option("--gpu-tier", "--require-gpu", "gpu_tier", is_flag=True,
                        help=GPU_TIER_HELP)


def _deduct_option():
    return click.option("--deduct-each/--deduct-once", "deduct_each", default=False,
                        help=DEDUCT_HELP)


# The student edition ships no hidden suites: its attn-grade has only the
# commands that are honest there (``check``), none that claims a grade.
STUDENT_EDITION = not HIDDEN_SUITES_DIR.is_dir()
INSTRUCTOR_COMMANDS = ("grade", "batch", "merge", "override", "export", "staff", "gradescope",
                       "release", "notebooks", "stubs", "calibrate")


def _version() -> str:
    from importlib import metadata
    for dist in ("attn-course", "attn-course-student"):
        try:
            return metadata.version(dist)
        except metadata.PackageNotFoundError:
            continue
    return "0.1.0 (not installed)"


def _match(name: str, known: list[str]) -> list[str]:
    """An exercise by letter (``B``), short name (``ex02``), module name
    (``ex02_mha``) or file name (``ex02_mha.py``)."""
    name = name.removesuffix(".py").removesuffix(".ipynb")
    if len(name) == 1 and name.isalpha():
        ex = by_letter(name)
        return [ex.name] if ex is not None and ex.name in known else []
    return [e for e in known if e == name or e.split("_")[0] == name]


def _exercise_names(names: tuple[str, ...], param_hint: str) -> list[str] | None:
    if not names:
        return None
    known = available()
    out = []
    for name in names:
        match = _match(Path(name).name, known)
        if not match:
            close = [e for e in EXERCISES if name in e]
            hint = f" Did you mean {close[0]}?" if close else ""
            letters = ", ".join(EXERCISES[e].letter for e in known)
            raise click.BadParameter(f"unknown exercise {name!r}; choose from "
                                     f"{', '.join(known)} (or a letter, {letters}).{hint}",
                                     param_hint=param_hint)
        if match[0] not in out:
            out.append(match[0])
    return out


SEED = click.IntRange(0, 2**32 - 1)


def _student_id(value: str | None, param_hint: str) -> str | None:
    from grader.variants import BadStudentId, normalize

    if value is None:
        return None
    try:
        normalize(value)
    except BadStudentId as exc:
        raise click.BadParameter(f"{exc}.", param_hint=param_hint) from None
    return value


# The options ``grade`` and ``batch`` share, written once.  Each is a field
# of ``grader.core.Options`` under its flag there (``Options.argv`` gives the
# flag back, for the batch's grading processes), except
# --fail-on-lost-points, the exit status.  An option of ``grade`` alone is a
# click option there, under its field's flag: ``grading_options`` reads both.
GRADING_OPTIONS = (
    click.option("--suite", type=click.Choice(["public", "hidden"]), default="hidden",
                 show_default=True, help="public: the students' tests; hidden: the full grade."),
    click.option("-e", "--exercise", "exercises", multiple=True,
                 help="Grade only this exercise (repeatable)."),
    click.option("--timeout", type=click.FloatRange(min=0.1), default=None,
                 help="Seconds allowed for each call into a submission."),
    _gpu_tier_option(),
    _isolation_option(),
    click.option("--seed", type=SEED, default=None,
                 help="Seed of the hidden suites' random cases, to reproduce a grade (each "
                      "result records its seed; batch: one for every submission) [default: "
                      "a fresh secret one per submission]."),
    _deduct_option(),
    click.option("--compile-cache", type=click.Path(path_type=Path, file_okay=False),
                 default=None,
                 help="Folder for exercise G's GPU compiles, shared by the gradings given "
                      "it: a kernel launch compiled once is not compiled again [default: "
                      "grade: none, every launch compiled; batch: NAME_compile beside "
                      "--out].  Remove it to compile everything again."),
    click.option("--fail-on-lost-points", is_flag=True,
                 help="Exit with status 1 when any point was lost, a test errored or a "
                      "submission could not be graded (for CI jobs that grade the reference "
                      "solution)."),
)


# Each option of ``Options`` by its flag, and how a command-line value becomes
# its value where it is not the value itself.
_FIELD_OF_FLAG = {f.metadata["flag"]: f.name for f in dataclasses.fields(Options)
                  if f.metadata["flag"]}
_READ = {"exercises": lambda names: _exercise_names(names, "--exercise"),
         "student_id": lambda value: _student_id(value, "--student-id")}


def grading_options(command):
    """``GRADING_OPTIONS`` on ``command``, which gets every option of its own
    that is a field of ``Options`` (by that field's flag) as one ``Options``
    (``options=``), and the rest as they are (``fail_on_lost_points``...)."""
    @functools.wraps(command)
    def with_options(*args, **kwargs):
        given = {}
        for param in click.get_current_context().command.params:
            field = next((_FIELD_OF_FLAG[o] for o in param.opts if o in _FIELD_OF_FLAG), None)
            if field is not None:
                value = kwargs.pop(param.name)
                given[field] = _READ[field](value) if field in _READ else value
        return command(*args, options=Options(**given), **kwargs)
    for option in reversed(GRADING_OPTIONS):
        with_options = option(with_options)
    return with_options


def _unsupported(exercises: list[str] | None) -> list:
    """This machine's unsupported versions (``grader.gpu.versions``) that touch the
    exercises asked for; a one-sentence refusal (exit 2) when they touch every
    one of them, since nothing asked for could be graded."""
    from grader.gpu import versions
    asked = exercises or [e for e in EXERCISES if suite_files(e, "public")]
    found = versions.problems(exercises=asked)
    if found and all(any(e in p.exercises for p in found) for e in asked):
        raise click.UsageError(f"{found[0].text}.")
    return found


def _run(path: Path, options: Options):
    """Grade a folder, notebook or zip; bad input is a one-sentence error.
    Returns the report and the unsupported versions it was marked for.
    With `check`'s cache (``options.check_cache``, `check` only), unchanged
    exercises' results are read back from it (``grader.checkcache``)."""
    from grader.gpu import versions
    found = _unsupported(options.exercises)
    try:
        with materialize(path) as folder:
            _begin_fork_server(options)
            if options.check_cache is not None:
                from grader.checkcache import grade_cached
                report = grade_cached(folder, options, grade)
            else:
                report = grade(folder, options)
            report.submission = str(path)
            versions.mark_untrusted(report, found)
            return report, found
    except SubmissionError as exc:   # it may name the submission's files: safetext
        raise click.UsageError(clean(exc)) from None
    except GraderConfigError as exc:  # --isolation strict without namespaces, too
        raise click.UsageError(str(exc)) from None
    finally:
        launch.drop_begun()


# In an ``attn-grade slot`` process, the fork server kept from one grading to
# the next (``grader.classroom.slots.KeptForkServer``); None elsewhere.
_kept_fork_server = None


def grade(folder: Path, options: Options):
    """``grader.core.grade``, imported on the first grading: the command line
    starts without the core's imports (``_begin_fork_server``).  In a slot,
    the grading forks its workers from the slot's kept fork server."""
    from grader.core import grade as grade_folder
    kept = _kept_fork_server
    return grade_folder(folder, options,
                        fork_server=kept.lend(options) if kept is not None else None)


def _begin_fork_server(options: Options) -> None:
    """Begin the fork server the grading will ask for before this process
    imports the grader's core (pytest, NumPy: about a third of a `check` of
    one NumPy exercise), so that the two start side by side
    (``launch.begin_fork_server``; the grading takes it or closes it)."""
    from grader.options import exercises_of
    from grader.registry import fork_server_preloads
    from grader.sandbox import bwrap, forkserver
    if not options.fork_server:
        return
    if _kept_fork_server is not None:   # a slot's: kept where the options want the same
        _kept_fork_server.begin(options)
        return
    try:
        names = exercises_of(options)
    except GraderConfigError:
        return      # the grading says so
    gpu = bool(bwrap.gpu_devices())
    needs, extra = fork_server_preloads(names, gpu)
    forked = [e for e in names if not (gpu and "GPU" in EXERCISES[e].needs)]
    first = forkserver.wanted(EXERCISES[forked[0]].needs, EXERCISES[forked[0]].preload) \
        if forked else ()
    launch.begin_fork_server(options.isolation, options.memory_mb, needs, extra, first,
                             font_cache=options.font_cache)


def _html_page(report, artifacts: Path | None) -> str:
    """``grade --format html``: the student's page, with the PNGs (the ex04
    plot) the grading left in ``--artifacts``."""
    from grader.pages import pictures_in, student_page

    return student_page(fmt.to_gradescope(report), Path(report.submission).name,
                        pictures_in(artifacts))


def _emit(report, out_format: str, out: Path | None, public_only: bool,
          artifacts: Path | None = None) -> None:
    render = {"text": lambda r: fmt.to_text(r, public_only=public_only),
              "json": fmt.to_json, "junit": fmt.to_junit,
              "html": lambda r: _html_page(r, artifacts)}[out_format]
    text = render(report)
    if out is None:
        click.echo(text, nl=False)
        return
    try:
        write_private(out, text)
    except OSError as exc:
        # Keep the grade: print it rather than lose it.
        click.echo(text, nl=False)
        raise click.FileError(str(out), hint=f"could not write the result ({exc.strerror})")
    click.echo(f"{report.score:g}/{report.max_score:g} points; "
               f"{out_format} result written to {out}")


def _user_cache() -> Path:
    """``check``'s cache: $XDG_CACHE_HOME/attn-grade, else ~/.cache/attn-grade."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "attn-grade"


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(_version(), "--version", "-V", prog_name="attn-grade",
                      message="%(prog)s %(version)s" + (" (student edition)"
                                                         if STUDENT_EDITION else ""))
def main() -> None:
    """Check and grade the attention exercises."""


@main.command()
@click.argument("exercise", nargs=-1)
@click.option("--path", type=click.Path(path_type=Path), default=None,
              help="Folder holding your exercise modules, or the zip you hand in  "
                   "[default: exercises, or the folder of the files named].")
@click.option("--timeout", type=click.FloatRange(min=0.1), default=None,
              help="Seconds allowed for each call into your code.")
@click.option("--artifacts", type=click.Path(path_type=Path, file_okay=False),
              default="attn-grade-output", show_default=True,
              help="Folder for files made for you (the ex04 plot, the heatmaps of A, B, C "
                   "and H); never your exercises' folder.")
@_isolation_option()
@_gpu_tier_option()
@_deduct_option()
@click.option("--no-fail", is_flag=True,
              help="Exit 0 even when a test fails (the exit code is 1 otherwise).")
@click.option("--cache/--no-cache", default=True, show_default=True,
              help="Keep answers that depend only on your files (exercise G's GPU "
                   "compile check) in your user cache, and reuse them while the files "
                   "they depend on are unchanged.")
def check(exercise, path, timeout, no_fail, artifacts, isolation, gpu_tier, deduct_each, cache):
    """Run the public tests on your exercises (all, or the ones named).

    Name an exercise by letter (B), by name (ex02, ex02_mha) or by file
    (exercises/ex02_mha.py).  Exits 1 when a public test fails, or when this
    machine's Triton or NumPy is one the grader does not support for an
    exercise checked, so that CI fails with it (--no-fail to exit 0)."""
    files = [Path(e) for e in exercise if "/" in e or e.endswith(".py")]
    folders = {f.parent for f in files if f.parent != Path(".") or f.exists()}
    if path is None:
        if len(folders) > 1:
            raise click.BadParameter("the files named are in different folders; check one "
                                     "folder at a time (or pass --path).",
                                     param_hint="EXERCISE")
        path = folders.pop() if folders else Path("exercises")
    path = Path(path)
    if not path.exists():
        raise click.BadParameter(f"{path} does not exist; run this from the course folder "
                                 "or pass --path.", param_hint="--path")
    # The zip a student hands in is checked as it will be graded (``materialize``
    # unpacks it with the grading's caps), so a missing or misnamed module shows now.
    if not path.is_dir() and path.suffix.lower() != ".zip":
        raise click.BadParameter(f"{path} is not a folder of exercise modules, nor the "
                                 "zip you hand in.", param_hint="--path")
    options = Options(suite="public", exercises=_exercise_names(exercise, "EXERCISE"),
                      call_timeout=timeout, artifacts_dir=artifacts, isolation=isolation,
                      gpu_tier=gpu_tier, deduct_each=deduct_each,
                      check_cache=_user_cache() if cache else None, font_cache=_user_cache())
    report, unsupported = _run(path, options)
    click.echo(fmt.to_text(report, public_only=True), nl=False)
    for problem in unsupported:   # last, where the exit status is read
        click.echo(f"not checked: {problem.text}.", err=True)
    failed = sum(t.status == "failed" for t in report.tests)
    if (failed or report.errors or unsupported) and not no_fail:
        sys.exit(1)


@main.command(name="grade")
@click.argument("path", type=click.Path(path_type=Path), metavar="SUBMISSION")
@grading_options
@click.option("--format", "out_format", type=click.Choice(["text", "json", "junit", "html"]),
              default="text", show_default=True,
              help="json: Gradescope's results.json; junit: JUnit XML for CI systems; "
                   "html: the student's page (static, offline; --artifacts' pictures in it).")
@click.option("--out", type=click.Path(path_type=Path, dir_okay=False), default=None,
              help="Write the result to this file instead of the terminal.")
@click.option("-k", "--keyword", default=None,
              help="Only the tests matching this pytest -k expression (e.g. 'softmax').")
@click.option("--artifacts", type=click.Path(path_type=Path, file_okay=False), default=None,
              help="Folder for files made for the student (the ex04 plot, the heatmaps "
                   "of A, B, C and H) [default: none kept].")
@click.option("--student-id", default=None,
              help="The roster's identifier for this submission: exercise A is graded for "
                   "it, and a different STUDENT_ID in the module earns nothing.")
@click.option("--exercise-budget", type=click.FloatRange(min=1), default=None,
              help="Seconds all workers of one exercise may spend (starting, answering); "
                   "once spent, its remaining tests fail at once [default: 300, ex07 900].")
@click.option("--grading-budget", type=click.FloatRange(min=1), default=GRADING_BUDGET_S,
              show_default=True,
              help="Seconds the whole grading may take; once spent, every remaining call "
                   "fails at once, and the result is still written.")
def grade_cmd(path, options, fail_on_lost_points, out_format, out):
    """Grade a submission: a folder of exercise modules, a notebook, or a zip.

    Exit status: 0 graded; 1 points lost, with --fail-on-lost-points; 2 bad
    input (or --isolation strict where namespaces cannot be made, or a Triton
    or NumPy version unsupported for every exercise asked for); 3 written,
    but not fully graded (a grader problem, a test that needs a regrade, an
    exercise whose versions are unsupported here)."""
    if not path.exists():
        raise click.BadParameter(f"{path} does not exist.", param_hint="SUBMISSION")
    report, _ = _run(path, options)
    _emit(report, out_format, out, public_only=options.suite == "public",
          artifacts=options.artifacts_dir)
    if report.ungraded:   # before --fail-on-lost-points: not graded is the graver news
        click.echo(f"not fully graded: {len(report.errors)} grader problem(s), "
                   f"{report.needs_regrade} test(s) needing a regrade (exit status "
                   f"{EXIT_UNGRADED})", err=True)
        sys.exit(EXIT_UNGRADED)
    if fail_on_lost_points and _lost_points(report):
        click.echo(f"points lost: {report.score:g}/{report.max_score:g}"
                   + (f", {len(report.errors)} grader errors" if report.errors else ""),
                   err=True)
        sys.exit(1)


def _lost_points(report) -> bool:
    """Any test below its points, or a grader-side error (--fail-on-lost-points)."""
    return bool(report.errors) or any(t.score < t.max_score for t in report.tests)


def _shard(value):
    """``K/N`` -> (K, N), 1 <= K <= N."""
    if value is None:
        return None
    try:
        k, n = (int(x) for x in value.split("/"))
    except ValueError:
        raise click.BadParameter(f"{value!r} is not K/N (for example 2/4).",
                                 param_hint="--shard") from None
    if not 1 <= k <= n:
        raise click.BadParameter(f"{value!r}: K must be between 1 and N.",
                                 param_hint="--shard")
    return k, n


def _plural(n: int, word: str) -> str:
    return f"{n} {word}" + ("" if n == 1 else "s")


@main.command()
@click.argument("folder", type=click.Path(path_type=Path))
@grading_options
@click.option("--out", type=click.Path(path_type=Path, dir_okay=False), default="grades.csv",
              show_default=True, help="The class's CSV (a view of the gradebook NAME.sqlite "
              "beside it; free-text answers for staff go to NAME_rubric.csv).")
@click.option("--results", "results_dir", type=click.Path(path_type=Path, file_okay=False),
              default=None, help="Folder for each submission's results JSON "
              "[default: results/ beside --out].")
@click.option("-j", "--jobs", type=click.IntRange(min=1), default=1, show_default=True,
              help="Submissions graded at once.")
@click.option("--submission-timeout", type=click.FloatRange(min=1), default=1800,
              show_default=True, help="Seconds allowed for grading one whole submission.")
@click.option("--force", is_flag=True, help="Grade again what an earlier run graded.")
@click.option("--roster", type=click.Path(path_type=Path, dir_okay=False, exists=True),
              default=None, help="CSV with columns submission,student_id (and name): exercise A "
              "of each submission is graded for its student's identifier; a row with an empty "
              "submission is a student who handed nothing in.")
@click.option("--shard", default=None, metavar="K/N",
              help="Grade only the K-th of N equal parts of the class (for N machines; "
                   "join their gradebooks with attn-grade merge).")
@click.option("--due", default=None, metavar="TIME",
              help="The due time (2026-12-15T23:59; UTC without a zone), for --late-policy.")
@click.option("--late-policy", default=None, metavar="POLICY",
              help='Points off late work: "10%/day,max 3" (P%/day or P%/hour, max N, '
                   'grace M min), kept in the gradebook for later runs; "none" removes it.')
@click.option("--submitted-times", type=click.Path(path_type=Path, dir_okay=False, exists=True),
              default=None, help="A CSV of submission,submitted_at from the LMS, for "
                                 "--late-policy (never read from a submission's own files).")
@click.option("--extensions", type=click.Path(path_type=Path, dir_okay=False, exists=True),
              default=None, help="A CSV of submission,due[,reason]: a student's own due time.")
def batch(folder, options, fail_on_lost_points, out, results_dir, jobs, submission_timeout,
          force, roster, shard, due=None, late_policy=None, submitted_times=None,
          extensions=None):
    """Grade every submission in FOLDER into the class's gradebook: each sub-folder,
    notebook and zip, or an LMS bulk download (Canvas's name_id_submissionid_file,
    grouped by student).

    Exit status: 0 all graded; 1 points lost, with --fail-on-lost-points; 2 bad
    input; 3 the CSV and results are written, but some submission could not be
    graded or has tests needing a regrade."""
    from grader.classroom.run import ClassOptions, run_batch

    opts = ClassOptions(out=out, results_dir=results_dir, jobs=jobs,
                        submission_timeout=submission_timeout, force=force, roster=roster,
                        shard=_shard(shard), due=due, late_policy=late_policy,
                        submitted_times=submitted_times, extensions=extensions)
    bars = []

    def start(count: int):
        bars.append(click.progressbar(length=count, label="grading", file=sys.stderr,
                                      show_pos=True, item_show_func=lambda o:
                                      o.submission.label if o else ""))
        bars[0].__enter__()
    try:
        run = _class_run(lambda: run_batch(folder, options, opts, on_start=start,
                                           on_done=lambda o: bars[0].update(1, o)))
    finally:
        for bar in bars:
            bar.__exit__(None, None, None)
    for why in run.skipped:
        click.echo(f"  skipped {clean(why)}", err=True)
    for label in run.unrostered:
        click.echo(f"  {label} is not on the roster: exercise A is graded for the STUDENT_ID "
                   "in its module, if any", err=True)
    outcomes = run.outcomes
    skipped = sum(o.skipped for o in outcomes)
    broken = [o for o in outcomes if o.error]
    where = f" (shard {opts.shard[0]}/{opts.shard[1]} of " \
        f"{_plural(len(run.everyone), 'submission')})" if opts.shard else ""
    missing = f", {run.missing} on the roster without a submission" if run.missing else ""
    click.echo(f"{_plural(len(outcomes), 'submission')}{where}: {len(outcomes) - skipped} "
               f"graded, {skipped} already graded (--force to redo), "
               f"{len(broken)} with errors{missing}; "
               + ("no grading changed; " if skipped == len(outcomes) else "")
               + f"wrote {out}, {opts.results}/" + "".join(f", {p}" for p in run.written))
    for o in broken:
        click.echo(f"  {o.submission.label}: {o.error}")
    regrade = [o for o in outcomes if o.needs_regrade]
    if broken or regrade:
        click.echo(f"{len(broken)} submission(s) not graded and {len(regrade)} with tests "
                   f"needing a regrade (exit status {EXIT_UNGRADED})", err=True)
        sys.exit(EXIT_UNGRADED)
    lost = [o for o in outcomes if o.error or any(got < total for got, total
                                                   in (o.scores or {}).values())]
    if fail_on_lost_points and lost:
        click.echo(f"{_plural(len(lost), 'submission')} lost points or were not graded", err=True)
        sys.exit(1)


@main.command(name="slot", hidden=True)
def slot_cmd():
    """Grade one submission per JSON line on standard input, answering one JSON
    line each: ``batch``'s long-lived grading process per --jobs slot
    (``grader.classroom.slots``)."""
    global _kept_fork_server
    from grader.classroom.slots import KeptForkServer, serve
    _kept_fork_server = KeptForkServer()
    try:
        serve(grade_cmd, _kept_fork_server)
    finally:
        _kept_fork_server.close()
        _kept_fork_server = None


def _class_run(work):
    """A class command's work; a person's bad input is one sentence, exit 2."""
    from grader.classroom.run import ClassInputError

    try:
        return work()
    except ClassInputError as exc:
        if exc.param:
            raise click.BadParameter(str(exc), param_hint=exc.param) from None
        raise click.UsageError(str(exc)) from None


@main.command()
@click.argument("student_id", metavar="ID")
def variant(student_id):
    """Print exercise A's Q, K and V for a student identifier."""
    from grader.variants import inputs_for

    inputs = inputs_for(_student_id(student_id, "ID"))
    click.echo(f"Exercise A for {student_id!r} (d_head = 2; set STUDENT_ID = "
               f"{student_id!r} in ex01_by_hand.py):\n")
    click.echo(inputs.text())


@main.command()
@click.argument("parts", nargs=-1,
                type=click.Path(path_type=Path, exists=True, dir_okay=False))
@click.option("--out", type=click.Path(path_type=Path, dir_okay=False), default="grades.csv",
              show_default=True, help="The joined CSV (its gradebook NAME.sqlite beside it).")
@click.option("--rubric", "rubric_sheet", default=None,
              type=click.Path(path_type=Path, exists=True, dir_okay=False),
              help="The rubric sheet with staff's points filled in: stores them in the "
                   "gradebook beside --out (graded already, or merged from PARTS).")
@click.option("--results", "results_dir", type=click.Path(path_type=Path, file_okay=False),
              default=None, help="The results JSON folder [default: results/ beside --out].")
@click.option("--grader", "who", default=None,
              help="Who gave the rubric's points, for the gradebook's history "
                   "[default: your user name].")
def merge(parts, out, rubric_sheet, results_dir, who):
    """Join the gradebooks of `batch --shard K/N` runs (PARTS: their grades.csv or
    .sqlite files) into the one beside --out, refusing overlaps and gaps; staff points
    already there stay.  With --rubric (PARTS then optional): store staff's points
    from the filled sheet."""
    from grader.classroom.run import ClassOptions, run_merge, run_rubric

    who = who or ClassOptions(out=out).who
    if not parts and rubric_sheet is None:
        raise click.UsageError("Name the parts to merge, or --rubric SHEET.")
    if parts:
        count, written = _class_run(lambda: run_merge(list(parts), out, results_dir, who))
        click.echo(f"merged {_plural(len(parts), 'part')} into {out}: "
                   f"{_plural(count, 'submission')}" + "".join(f"; wrote {p}" for p in written))
    if rubric_sheet is not None:
        given, changed, _ = _class_run(lambda: run_rubric(out, rubric_sheet, results_dir, who))
        click.echo(f"staff points: {_plural(given, 'answer')} in {rubric_sheet}, "
                   f"{changed} new or changed, stored in the gradebook beside {out}; "
                   "its CSV, sheet and pages written again")


@main.command()
@click.argument("submission")
@click.option("--out", type=click.Path(path_type=Path, dir_okay=False), default="grades.csv",
              show_default=True, help="The class's CSV (its gradebook NAME.sqlite beside it).")
@click.option("--points", type=float, default=None,
              help="The final grade to give instead of the computed one.")
@click.option("--reason", default="", help="Why (kept in the gradebook's history).")
@click.option("--remove", is_flag=True, help="Remove the override: the computed grade again.")
@click.option("--grader", "who", default=None, help="Who [default: your user name].")
def override(submission, out, points, reason, remove, who):
    """Replace SUBMISSION's final grade (a regrade by hand, an academic decision), with
    a reason; the gradebook keeps who and when, and every view shows it."""
    from grader.classroom.run import ClassOptions, run_override

    if remove == (points is not None):
        raise click.UsageError("Give --points N --reason TEXT, or --remove.")
    who = who or ClassOptions(out=out).who
    _class_run(lambda: run_override(out, submission, points, reason, who))
    click.echo(f"{clean(submission, one_line=True)}: " + (
        "override removed" if remove else f"final grade {points:g} ({clean(reason)})")
        + f"; {out} and its pages written again")


@main.command()
@click.argument("gradebook", type=click.Path(path_type=Path, dir_okay=False))
@click.option("--grader", "who", default=None,
              help="Who grades, for the gradebook's history [default: your user name].")
def staff(gradebook, who):
    """Grade the free-text answers of a class in a browser: serves a grading page for
    GRADEBOOK (its .sqlite, or the grades.csv beside it) on 127.0.0.1 at a URL with a
    one-time token, printed here (open it yourself); Ctrl-C stops it and writes the
    class's files."""
    from grader.classroom.gradebook import GradebookError
    from grader.classroom.run import ClassOptions
    from grader.classroom.staff import StaffServer, open_session

    who = who or ClassOptions(out=gradebook).who
    try:
        session = open_session(gradebook, who)
    except GradebookError as exc:
        raise click.BadParameter(str(exc), param_hint="GRADEBOOK") from None
    server = StaffServer(session)
    click.echo(f"grading page for {gradebook} as {session.who}: {server.url}\n"
               "(open it in your browser; Ctrl-C stops the server)", err=False)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
        with session.lock:
            written = session.write()["written"]
        session.book.close()
        click.echo(f"stopped; wrote {len(written)} files beside {session.out}")


@main.command()
@click.argument("grades", type=click.Path(path_type=Path, exists=True, dir_okay=False))
@click.option("--canvas", "gradebook", type=click.Path(path_type=Path, exists=True,
                                                       dir_okay=False), default=None,
              help="Your Canvas gradebook export (Grades > Export): the file written is "
                   "Canvas's gradebook import, each final grade in its student's row (matched "
                   "on the Canvas user id, else the login).")
@click.option("--assignment", default="Attention exercises", show_default=True,
              help="The Canvas assignment column to fill: an existing one's name (or its "
                   "full column, 'Name (12345)'), or a new one's.")
@click.option("--out", type=click.Path(path_type=Path, dir_okay=False), default=None,
              help="[default: canvas-import.csv with --canvas, the generic one beside it as "
                   "NAME-generic.csv; grades-export.csv without]")
def export(grades, gradebook, assignment, out):
    """Write a class's final grades (GRADES: the grades.csv of batch or merge, or its
    gradebook) for an LMS: Canvas's gradebook import with --canvas, and a generic CSV
    with every column."""
    from grader.classroom.run import run_export

    out, plain, made, count = _class_run(lambda: run_export(grades, gradebook, assignment, out))
    if made is None:
        click.echo(f"wrote {out}: {_plural(count, 'submission')} with their identifiers, "
                   "points and final grades")
        return
    click.echo(f"wrote {out} for Canvas (Grades > Import), column {made.column!r}: "
               f"{_plural(made.matched, 'student')} graded (final grades), "
               f"{made.without_grade} in the gradebook without a grade; and {plain}")
    for name in made.unmatched:
        click.echo(f"  {clean(name)}: no student of the gradebook matches it (or one already "
                   "graded does): not in the import", err=True)
    for name in made.to_regrade:
        click.echo(f"  {clean(name)}: needs a regrade, so no final grade yet: not in the "
                   "import", err=True)


@main.command()
def doctor():
    """Say what isolation this machine gives the workers, and what to change."""
    from grader.sandbox.isolation import decide, doctor as checks

    for what, fine, detail in checks():
        click.echo(f"{'ok ' if fine else 'NO '} {what:<14} {detail}")
    try:
        iso = decide("auto", 8192)
    except Exception as exc:  # pragma: no cover - decide("auto") does not refuse
        iso = None
        click.echo(f"isolation: unknown ({exc})")
    if iso is not None:
        click.echo(f"isolation: {iso.text}")
        if iso.degraded:
            click.echo("--isolation strict would refuse to grade here.")


@main.command()
@click.argument("out", type=click.Path(path_type=Path, dir_okay=True, file_okay=False))
@click.option("--install", default=None,
              help="What the notebooks' install cell pip-installs in Colab (a "
                   "git+https URL of the student repository, say).")
@click.option("--force", is_flag=True, help="Overwrite notebooks already in OUT.")
def notebooks(out, install, force):
    """Write one notebook per exercise into OUT (never over an existing one
    without --force)."""
    from grader.notebooks import DEFAULT_INSTALL, write_notebooks

    stubs = _stub_sources()
    try:
        paths = write_notebooks(out, stubs, install or DEFAULT_INSTALL, force=force)
    except FileExistsError as exc:
        raise click.UsageError(f"{exc}; nothing was written.") from None
    for path in paths:
        click.echo(f"wrote {path}")
    if not install:
        click.echo("warning: no --install URL: the notebooks' install cell cannot install "
                   "the checker in Colab.", err=True)


def _stub_sources() -> dict[str, str]:
    """The student stubs: derived from solutions/ where present, else exercises/."""
    solutions, exercises = SOLUTIONS_DIR, EXERCISES_DIR
    if solutions.is_dir():
        from grader.stubs import derive_all
        return derive_all(solutions)
    if exercises.is_dir():
        return {p.stem: p.read_text() for p in sorted(exercises.glob("*.py"))
                if p.stem in EXERCISES}
    raise click.UsageError("neither solutions/ nor exercises/ is here to make notebooks from.")


@main.command()
@click.argument("out", type=click.Path(path_type=Path, dir_okay=False), required=False)
@click.option("--test", "test_submission", type=click.Path(path_type=Path, exists=True),
              default=None, help="Replay Gradescope on this upload (a folder, notebook, "
              "zip or repository) with the bundle, and print the results.")
@click.option("--isolation", type=click.Choice(["strict", "auto"]), default="strict",
              show_default=True,
              help="strict: the image's build fails where bubblewrap's namespaces cannot be "
                   "made (Docker's default seccomp profile blocks them), saying what to "
                   "change; auto: it grades with the strongest isolation the image gives "
                   "(namespaces, else each student's code as its own unprivileged user), "
                   "decided once at build and said in every results.json for staff.")
def gradescope(out, test_submission, isolation):
    """Build a Gradescope autograder bundle (a zip) at OUT, and/or test it."""
    try:
        from grader.gradescope import build_bundle, replay
    except ImportError:
        raise click.UsageError("this is an instructors' command, not part of the student "
                               "edition.") from None
    if out is None and test_submission is None:
        raise click.UsageError("give OUT (the bundle to write), --test SUBMISSION, or both.")
    if out is not None:
        if out.suffix.lower() != ".zip":
            raise click.BadParameter(f"{out} must end in .zip (Gradescope uploads a zip).",
                                     param_hint="OUT")
        build_bundle(out, isolation)
        click.echo(f"wrote {out} (--isolation {isolation}): upload it as the autograder of a "
                   "Gradescope programming assignment")
    if test_submission is not None:
        result = replay(test_submission, bundle=out, isolation=isolation)
        click.echo("--- run_autograder's output (staff see this) ---")
        click.echo(result.log.rstrip())
        click.echo("--- results.json (students see this) ---")
        data = result.results
        for t in data.get("tests", []):
            click.echo(f"  {t.get('score', 0):g}/{t.get('max_score', 0):g}  "
                       f"[{t.get('visibility', 'visible')}] {t.get('name')}")
        if data.get("output"):
            click.echo(data["output"])
        click.echo(f"score {data.get('score', 0):g}; specification check: "
                   + ("ok" if not result.problems else "; ".join(result.problems)))
        if result.problems or result.returncode != 0:
            sys.exit(1)


@main.command()
@click.argument("out", type=click.Path(path_type=Path, file_okay=False))
@click.option("--install", default=None,
              help="Where the edition will live, for the notebooks' install cell in Colab "
                   "(a git+https URL of the student repository). Asked for when missing "
                   "on a terminal.")
@click.option("--git/--no-git", "make_git", default=True, show_default=True,
              help="Make OUT a git repository with a first commit (ready to push as a "
                   "template).")
@click.option("--self-check", type=click.Choice(["fail", "report"]), default="fail",
              show_default=True,
              help="The edition's GitHub workflow: fail while a public test fails (a new "
                   "repository's badge is red until the exercises are done; its README says "
                   "why), or report the table and pass.")
def release(out, install, make_git, self_check):
    """Build the student edition in OUT (an empty or new folder)."""
    try:
        from grader.release import build
    except ImportError:
        raise click.UsageError("this is an instructors' command, not part of the student "
                               "edition.") from None
    if not SOLUTIONS_DIR.is_dir():
        raise click.UsageError("solutions/ is not here: the student edition is built from "
                               "the instructors' edition.")
    if out.exists() and any(out.iterdir()):
        raise click.BadParameter(f"{out} is not empty; give a new or empty folder.",
                                 param_hint="OUT")
    if install is None and sys.stdin.isatty():
        install = click.prompt("Where will the edition live (a git+https URL for the "
                               "notebooks' install cell; empty for none)", default="",
                               show_default=False).strip() or None
    if install is None:
        click.echo("warning: no --install URL: the notebooks' install cell will say that the "
                   "checker is missing instead of installing it (Colab users need the URL).",
                   err=True)
    click.echo("recording the public tests' answers from the solutions ...", err=True)
    try:
        build(out, install, git=make_git, self_check=self_check)
    except RuntimeError as exc:
        raise click.UsageError(str(exc)) from None
    click.echo(f"wrote the student edition to {out}"
               + (" (a git repository with a first commit)" if make_git else ""))


def _readme_table(check_only: bool) -> bool:
    """README.md's generated table of exercises (``grader.release``), written
    anew unless ``check_only``; whether it was stale.  No README (a copy of
    the solutions alone): nothing to do."""
    from grader.release import NoTable, with_exercise_table

    readme = REPO_DIR / "README.md"
    if not readme.is_file():
        return False
    text = readme.read_text()
    try:
        fresh = with_exercise_table(text)
    except NoTable as exc:
        raise click.UsageError(str(exc)) from None
    if fresh == text:
        return False
    if check_only:
        click.echo("README.md's table of exercises differs from the registry's")
    else:
        readme.write_text(fresh)
        click.echo("wrote README.md's table of exercises, from the registry")
    return True


@main.command()
@click.option("--check", "check_only", is_flag=True,
              help="Only report stubs (and README.md's table) that differ; exit 1 if any do.")
def stubs(check_only):
    """Regenerate exercises/ from the solutions' BEGIN/END SOLUTION markers,
    and README.md's table of exercises from the registry."""
    from grader.stubs import derive_all, write_stubs

    solutions, exercises = SOLUTIONS_DIR, EXERCISES_DIR
    if not solutions.is_dir():
        raise click.UsageError("solutions/ is not here: stubs are made in the "
                               "instructors' edition.")
    if check_only:
        stale = [n for n, text in derive_all(solutions).items()
                 if not (exercises / f"{n}.py").is_file()
                 or (exercises / f"{n}.py").read_text() != text]
        for name in stale:
            click.echo(f"exercises/{name}.py differs from its solution's stub")
        table_stale = _readme_table(check_only=True)
        sys.exit(1 if stale or table_stale else 0)
    written = write_stubs(solutions, exercises)
    for path in written:
        click.echo(f"wrote {path.relative_to(REPO_DIR)}")
    total = sum((solutions / f"{name}.py").is_file() for name in EXERCISES)
    folder = f"{exercises.relative_to(REPO_DIR)}/"
    click.echo(f"{_plural(len(written), 'stub')} written, {total - len(written)} already up "
               f"to date in {folder}" if written else
               f"all {total} stubs in {folder} are up to date with their solutions; "
               "nothing written")
    _readme_table(check_only=False)


try:  # an instructors' command: the student edition has no calibrate module
    from grader.gpu.calibrate import calibrate as _calibrate  # noqa: E402
except ImportError:  # pragma: no cover - student edition
    pass
else:
    main.add_command(_calibrate)


if STUDENT_EDITION:   # no command that claims a grade the edition cannot give
    for _name in INSTRUCTOR_COMMANDS:
        main.commands.pop(_name, None)
    main.help = ("Check your attention exercises with the public tests (the student "
                 "edition: your grade comes from your instructor's hidden tests).")


if __name__ == "__main__":  # pragma: no cover
    main()
