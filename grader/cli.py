"""``attn-grade``: a thin click shell over ``grader.core``.

Every expected mistake of the person at the keyboard (a missing path, an
unknown exercise, a bad option) is a one-sentence click error with exit
code 2; a student's wrong answer is a score, never an exception.
"""
from __future__ import annotations

import sys
from pathlib import Path

import click

from grader import report as fmt
from grader.core import GraderConfigError, Options, grade
from grader.exercises import EXERCISES, REPO_DIR, available
from grader.report import write_private
from grader.submission import SubmissionError, materialize


def _exercise_names(names: tuple[str, ...], param_hint: str) -> list[str] | None:
    if not names:
        return None
    known = available()
    out = []
    for name in names:
        match = [e for e in known if e == name or e.split("_")[0] == name]
        if not match:
            close = [e for e in EXERCISES if name in e]
            hint = f" Did you mean {close[0]}?" if close else ""
            raise click.BadParameter(f"unknown exercise {name!r}; choose from "
                                     f"{', '.join(known)}.{hint}", param_hint=param_hint)
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


def _run(path: Path, options: Options):
    """Grade a folder, notebook or zip; bad input is a one-sentence error."""
    try:
        with materialize(path) as folder:
            report = grade(folder, options)
            report.submission = str(path)
            return report
    except SubmissionError as exc:
        raise click.UsageError(str(exc)) from None
    except GraderConfigError as exc:
        raise click.UsageError(str(exc)) from None


def _emit(report, out_format: str, out: Path | None, public_only: bool) -> None:
    render = {"text": lambda r: fmt.to_text(r, public_only=public_only),
              "json": fmt.to_json, "junit": fmt.to_junit}[out_format]
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


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
def main() -> None:
    """Check and grade the attention exercises."""


@main.command()
@click.argument("exercise", nargs=-1)
@click.option("--path", type=click.Path(path_type=Path), default="exercises",
              show_default=True, help="Folder holding your exercise modules.")
@click.option("--timeout", type=click.FloatRange(min=0.1), default=None,
              help="Seconds allowed for each call into your code.")
def check(exercise, path, timeout):
    """Run the public tests on your exercises (all, or the ones named)."""
    path = Path(path)
    if not path.exists():
        raise click.BadParameter(f"{path} does not exist; run this from the course folder "
                                 "or pass --path.", param_hint="--path")
    if not path.is_dir():
        raise click.BadParameter(f"{path} is not a folder of exercise modules.",
                                 param_hint="--path")
    options = Options(suite="public", exercises=_exercise_names(exercise, "EXERCISE"),
                      call_timeout=timeout)
    report = _run(path, options)
    click.echo(fmt.to_text(report, public_only=True), nl=False)


@main.command(name="grade")
@click.argument("path", type=click.Path(path_type=Path), metavar="SUBMISSION")
@click.option("--suite", type=click.Choice(["public", "hidden"]), default="hidden",
              show_default=True, help="public: the students' tests; hidden: the full grade.")
@click.option("--format", "out_format", type=click.Choice(["text", "json", "junit"]),
              default="text", show_default=True,
              help="json: Gradescope's results.json; junit: JUnit XML for CI systems.")
@click.option("--out", type=click.Path(path_type=Path, dir_okay=False), default=None,
              help="Write the result to this file instead of the terminal.")
@click.option("-e", "--exercise", "exercises", multiple=True,
              help="Grade only this exercise (repeatable).")
@click.option("--timeout", type=click.FloatRange(min=0.1), default=None,
              help="Seconds allowed for each call into the submission.")
@click.option("--require-gpu", is_flag=True,
              help="Fail GPU tests that cannot run, instead of skipping them.")
@click.option("-k", "--keyword", default=None,
              help="Only the tests matching this pytest -k expression (e.g. 'softmax').")
@click.option("--seed", type=SEED, default=None,
              help="Seed of the hidden suites' random cases, to reproduce a grade (its "
                   "result records the seed) [default: a fresh secret one].")
@click.option("--student-id", default=None,
              help="The roster's identifier for this submission: exercise A is graded for "
                   "it, and a different STUDENT_ID in the module earns nothing.")
def grade_cmd(path, suite, out_format, out, exercises, timeout, require_gpu, keyword, seed,
              student_id):
    """Grade a submission: a folder of exercise modules, a notebook, or a zip."""
    if not path.exists():
        raise click.BadParameter(f"{path} does not exist.", param_hint="SUBMISSION")
    options = Options(suite=suite, exercises=_exercise_names(exercises, "--exercise"),
                      call_timeout=timeout, require_gpu=require_gpu, keyword=keyword,
                      seed=seed, student_id=_student_id(student_id, "--student-id"))
    report = _run(path, options)
    _emit(report, out_format, out, public_only=suite == "public")


@main.command()
@click.argument("folder", type=click.Path(path_type=Path))
@click.option("--out", type=click.Path(path_type=Path, dir_okay=False), default="grades.csv",
              show_default=True, help="The class's CSV: points per exercise and total "
              "(free-text answers for staff go to NAME_rubric.csv beside it).")
@click.option("--results", "results_dir", type=click.Path(path_type=Path, file_okay=False),
              default=None, help="Folder for each submission's results JSON "
              "[default: results/ beside --out].")
@click.option("-j", "--jobs", type=click.IntRange(min=1), default=1, show_default=True,
              help="Submissions graded at once.")
@click.option("--suite", type=click.Choice(["public", "hidden"]), default="hidden",
              show_default=True)
@click.option("--timeout", type=click.FloatRange(min=0.1), default=None,
              help="Seconds allowed for each call into a submission.")
@click.option("--submission-timeout", type=click.FloatRange(min=1), default=1800,
              show_default=True, help="Seconds allowed for grading one whole submission.")
@click.option("-e", "--exercise", "exercises", multiple=True,
              help="Grade only this exercise (repeatable).")
@click.option("--force", is_flag=True, help="Grade again what an earlier run graded.")
@click.option("--roster", type=click.Path(path_type=Path, dir_okay=False, exists=True),
              default=None, help="CSV with columns submission,student_id: exercise A of "
              "each submission is graded for its student's identifier.")
@click.option("--seed", type=SEED, default=None,
              help="One seed for every submission's random hidden cases [default: a fresh "
                   "secret one per submission, recorded in its result].")
def batch(folder, out, results_dir, jobs, suite, timeout, submission_timeout, exercises, force,
          roster, seed):
    """Grade every submission in FOLDER: each sub-folder, notebook and zip."""
    from grader.batch import (RosterError, columns, discover, read_roster, run_batch, to_csv,
                              to_rubric_csv)

    if not folder.exists():
        raise click.BadParameter(f"{folder} does not exist.", param_hint="FOLDER")
    if not folder.is_dir():
        raise click.BadParameter(f"{folder} is not a folder of submissions.",
                                 param_hint="FOLDER")
    only = _exercise_names(exercises, "--exercise")
    subs = discover(folder)
    if not subs:
        raise click.UsageError(f"{folder} holds no submissions (sub-folders, notebooks or "
                               "zip files).")
    ids = None
    if roster is not None:
        try:
            ids = read_roster(roster)
        except RosterError as exc:
            raise click.BadParameter(str(exc), param_hint="--roster") from None
        for sub in subs:
            if sub.name not in ids:
                click.echo(f"  {sub.name} is not on the roster: exercise A is graded for the "
                           "STUDENT_ID in its module, if any", err=True)
    results_dir = results_dir or out.parent / "results"
    with click.progressbar(length=len(subs), label="grading", file=sys.stderr,
                           show_pos=True, item_show_func=lambda o: o.submission.name
                           if o else "") as bar:
        outcomes = run_batch(subs, results_dir, jobs=jobs, suite=suite, timeout=timeout,
                             submission_timeout=submission_timeout, force=force,
                             exercises=only, seed=seed, roster=ids,
                             on_done=lambda o: bar.update(1, o))
    write_private(out, to_csv(outcomes, columns(outcomes)))
    rubric = out.with_name(f"{out.stem}_rubric.csv")   # beside grades.csv, for staff
    if any(o.manual for o in outcomes):
        write_private(rubric, to_rubric_csv(outcomes))
        click.echo(f"free-text answers for staff: {rubric}")
    skipped = sum(o.skipped for o in outcomes)
    broken = [o for o in outcomes if o.error]
    click.echo(f"{len(outcomes)} submissions: {len(outcomes) - skipped} graded, {skipped} "
               f"already graded (--force to redo), {len(broken)} with errors; "
               f"wrote {out} and {results_dir}/")
    for o in broken:
        click.echo(f"  {o.submission.name}: {o.error}")


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
@click.argument("out", type=click.Path(path_type=Path, dir_okay=True, file_okay=False))
@click.option("--install", default=None,
              help="What the notebooks' install cell pip-installs (for Colab) "
                   "[default: the student edition's package name].")
def notebooks(out, install):
    """Write one notebook per exercise into OUT."""
    from grader.notebooks import DEFAULT_INSTALL, write_notebooks

    stubs = _stub_sources()
    for path in write_notebooks(out, stubs, install or DEFAULT_INSTALL):
        click.echo(f"wrote {path}")


def _stub_sources() -> dict[str, str]:
    """The student stubs: derived from solutions/ where present, else exercises/."""
    solutions, exercises = REPO_DIR / "solutions", REPO_DIR / "exercises"
    if solutions.is_dir():
        from grader.stubs import derive_all
        return derive_all(solutions)
    if exercises.is_dir():
        return {p.stem: p.read_text() for p in sorted(exercises.glob("*.py"))
                if p.stem in EXERCISES}
    raise click.UsageError("neither solutions/ nor exercises/ is here to make notebooks from.")


@main.command()
@click.argument("out", type=click.Path(path_type=Path, dir_okay=False))
def gradescope(out):
    """Build a Gradescope autograder bundle (a zip) at OUT."""
    try:
        from grader.gradescope import build_bundle
    except ImportError:
        raise click.UsageError("this is an instructors' command, not part of the student "
                               "edition.") from None

    if out.suffix.lower() != ".zip":
        raise click.BadParameter(f"{out} must end in .zip (Gradescope uploads a zip).",
                                 param_hint="OUT")
    build_bundle(out)
    click.echo(f"wrote {out}: upload it as the autograder of a Gradescope programming "
               "assignment")


@main.command()
@click.argument("out", type=click.Path(path_type=Path, file_okay=False))
@click.option("--install", default=None,
              help="What the notebooks' install cell pip-installs (a git URL of the "
                   "student repository, say) [default: the student package's name].")
def release(out, install):
    """Build the student edition in OUT (an empty or new folder)."""
    try:
        from grader.release import build
    except ImportError:
        raise click.UsageError("this is an instructors' command, not part of the student "
                               "edition.") from None
    if not (REPO_DIR / "solutions").is_dir():
        raise click.UsageError("solutions/ is not here: the student edition is built from "
                               "the instructors' edition.")
    if out.exists() and any(out.iterdir()):
        raise click.BadParameter(f"{out} is not empty; give a new or empty folder.",
                                 param_hint="OUT")
    click.echo("recording the public tests' answers from the solutions ...", err=True)
    build(out, install)
    click.echo(f"wrote the student edition to {out}")


@main.command()
@click.option("--check", "check_only", is_flag=True,
              help="Only report stubs that differ; exit 1 if any do.")
def stubs(check_only):
    """Regenerate exercises/ from the solutions' BEGIN/END SOLUTION markers."""
    from grader.stubs import derive_all, write_stubs

    solutions, exercises = REPO_DIR / "solutions", REPO_DIR / "exercises"
    if not solutions.is_dir():
        raise click.UsageError("solutions/ is not here: stubs are made in the "
                               "instructors' edition.")
    if check_only:
        stale = [n for n, text in derive_all(solutions).items()
                 if not (exercises / f"{n}.py").is_file()
                 or (exercises / f"{n}.py").read_text() != text]
        for name in stale:
            click.echo(f"exercises/{name}.py differs from its solution's stub")
        sys.exit(1 if stale else 0)
    for path in write_stubs(solutions, exercises):
        click.echo(f"wrote {path.relative_to(REPO_DIR)}")


try:  # an instructors' command: the student edition has no calibrate module
    from grader.calibrate import calibrate as _calibrate  # noqa: E402
except ImportError:  # pragma: no cover - student edition
    pass
else:
    main.add_command(_calibrate)


if __name__ == "__main__":  # pragma: no cover
    main()
