"""Build the student edition: what students receive.

Stubs, public suites, notebooks, a student README, the ``attn-grade``
command (``check`` only: no command there claims a grade) and a GitHub
Actions workflow that self-checks on push, written as a git repository with
a first commit (ready to push as a template).  Left out: ``solutions/``, the
hidden suites, the reference modules (replayed instead, see
``grader.replay``), the worker runtime's reference kernels
(``sandbox/runtime/kernels/``: the reference Triton kernel is a working
answer to ex07; only the hidden GPU suite's speed grade runs it), the
package's tests and benchmarks, and the instructors' tools (release,
Gradescope bundle, GPU calibration).

The measuring kit ships (issue 26): the grader's timer
(``measure.time_call``), its log-log fit (``timing.lsq_slope``) and the
worker's op tracer (``runtime/probes/ex06_gqa_intensity.py``) measure; they
answer nothing, since what a check compares with (the reference values) stays
secret and is replayed.  So the student edition measures exercises D, F and
H on the student's own machine, as the graded run does.  ``MEASURING_KIT``
names those functions, which do what a student task also does (a student's
module that imports them is held for review: ``grader.sandbox.reach``);
tests/test_release.py finds no other such function in the edition.

Grading-only code: grader code that would be a working answer to a student
task and cannot ship.  ``GRADING_ONLY`` names it (nothing today); the
edition ships each as a stub that raises ``GradingOnly``, a pytest skip: the
public check that needs one says "not checked in the student edition" and
runs when graded.
"""
from __future__ import annotations

import ast
import shutil
import subprocess
from pathlib import Path

from grader.paths import (KERNELS_DIR, PACKAGE_DIR, SECRET_REFERENCE_DIR, SOLUTIONS_DIR,
                          SUITES_DIR)
from grader.replay import Recorder

PACKAGE_NAME = "attn-course-student"
# Files of the grader package that stay with instructors.
INSTRUCTOR_ONLY = {"release.py", "gradescope.py", "calibrate.py"}
# Grader code that is a working answer to a student task: {file under
# grader/: functions}, None for the whole module.  Shipped as stubs.
GRADING_ONLY: dict[str, tuple | None] = {}
# The measuring kit: grader functions that ship although they do what a
# student task does, {file under grader/: functions}.  Measuring is not
# answering: a timer, a fit and a trace give the student's own numbers, and
# every verdict on them compares with a replayed or recomputed reference.
MEASURING_KIT = {
    "sandbox/runtime/measure.py": ("time_call",),             # a timer, as ex04's time_fn
    "reference/timing.py": ("lsq_slope",),                    # a fit, as ex04's loglog_slope
    "sandbox/runtime/probes/ex06_gqa_intensity.py": ("_traced",),  # counts, as ex06's task
}
GRADING_ONLY_NOTE = ("not checked in the student edition: this check needs grader code "
                     "that would answer an exercise (the graded run has it)")
GRADING_ONLY_CLASS = f"""

try:  # in the grading process, a pytest skip of the check that needed it
    from _pytest.outcomes import Skipped as _GradingOnlyBase
except ImportError:  # pragma: no cover
    _GradingOnlyBase = Exception


class GradingOnly(_GradingOnlyBase):
    \"\"\"Grader code that runs when graded only (it would answer an exercise).\"\"\"


GRADING_ONLY_NOTE = {GRADING_ONLY_NOTE!r}
"""

STUDENT_PYPROJECT = """\
[build-system]
requires = ["setuptools>=64"]
build-backend = "setuptools.build_meta"

[project]
name = "{name}"
version = "0.1.0"
description = "Exercises on attention in transformers, with a self-check"
readme = "README.md"
requires-python = ">=3.10"
dependencies = [
    "numpy>=1.24",
    "torch>=2.1",
    "pytest>=7.4",
    "click>=8.1",
    "nbformat>=5.9",
    # exercise D's log-log plot, drawn by check (and shown in its notebook)
    "matplotlib>=3.7",
    # Linux only; exercise G (the Triton kernel) needs it, the rest does not.
    # The floors are the instructors' (tests/test_versions.py holds them equal).
    "triton>=3.5; sys_platform == 'linux'",
]

[project.optional-dependencies]
# kept so that `pip install -e ".[plot]"` (older instructions) still works;
# matplotlib is a dependency now
plot = ["matplotlib>=3.7"]

[project.scripts]
attn-grade = "grader.cli:main"

[tool.setuptools.packages.find]
include = ["grader*"]

[tool.setuptools.package-data]
grader = ["contract.json", "suites/pytest.ini", "suites/*/*.py", "suites/*.py",
          "sandbox/runtime/*.py", "sandbox/runtime/*/*.py", "reference/secret/recorded.bin",
          "data/*.json"]
"""

STUDENT_README = """\
# Attention, the exercises

```bash
# first the CPU build of PyTorch (skip this line on a machine with a CUDA GPU):
# pip would otherwise fetch the CUDA build, gigabytes this course does not need
pip install torch --index-url https://download.pytorch.org/whl/cpu
pip install -e .            # this folder, as the package {name} (matplotlib included)
attn-grade check            # check your exercises with the public tests
```

Notebooks on your machine: `pip install -e . jupyterlab`, then
`jupyter lab notebooks/` (each notebook's first cell finds the checker
installed).

{count} exercises on attention in transformers, and interview questions. Each module in `exercises/`
states its task, shapes and conventions in its docstrings, and raises
`NotImplementedError` (exercise A: constants set to `None`) where your work
goes. Prefer notebooks? `notebooks/` has one per exercise, with a self-check
cell. {colab}

{table}

## Checking yourself

```bash
attn-grade check                       # every exercise
attn-grade check B C                   # some of them: by letter,
attn-grade check ex02_mha exercises/ex03_gqa.py   # by name or by file
attn-grade check --path handin.zip     # the zip you hand in, unpacked as grading will
attn-grade --version
```

`check` exits 1 when a public test fails (so CI fails with it); add
`--no-fail` to always exit 0.  Exercise G's check that your kernel compiles
for real GPUs takes about a second per config: `check` keeps its answer in
your user cache (`~/.cache/attn-grade`) while `ex07_flash_attention.py` and
the modules it imports are unchanged (`--no-cache` to compile again).

Each test shows its points and, when it fails, what was expected, what came
back (first mismatch, max error) and which known mistake it looks like.
These are the public tests: your instructor grades with more (random
shapes, both precisions, properties), so a clean check is a first step, not
a promise. A reference answer this edition cannot replay from the
instructors' record (one asked only for data your code made) says "not
checked in the student edition"; it is checked when you are graded.

{triton}, which has Linux wheels only; on macOS and Windows
every other exercise works, and {triton_letters} says that it needs Triton (use Colab or
Linux for it).

Exercises D, E, F and H measure your code on your machine, as the grading
machine will: D shows your times, the fitted slope and your log-log plot
(`attn-grade-output/ex04_scaling.png`, `--artifacts` to put it elsewhere;
its notebook shows it), E your TFLOP/s and GB/s against this machine's
measured peaks and its roofline with your prefill and decode on it
(`attn-grade-output/ex05_roofline.png`), F the intensity counted from your decode's operations, H
the trace of your absorbed decode. Close other heavy programs while they
run: a check the machine was too busy to judge says "not graded" and is
judged again when you are graded.

## Your identifier (exercise A)

Exercise A gives each student their own Q, K and V, derived from an
identifier: set `STUDENT_ID = "..."` in `exercises/ex01_by_hand.py` (as
text) and print your matrices with `attn-grade variant YOUR_ID`. Which
identifier:

- **Gradescope:** your Gradescope student ID (`sid`), where your course set
  one, or the email of your Gradescope account, exactly as Gradescope has it.
  Any other (a university number Gradescope does not know, a friend's) is
  graded as your email, and answers worked for it earn no points: the
  feedback then names the identifier to print and set.
- **A course roster** (your instructor grades a folder of submissions): the
  identifier the roster lists for you; ask your instructor which.
- **Anywhere else:** the one your course tells you to use.

Case and spaces around it do not matter. Left as `None`, the common
exercise of the module's docstring is checked (and graded, except on
Gradescope, which grades your email's variant).

## Handing in

Hand in the modules of `exercises/` (a folder or a zip of them), your
notebooks (the grader reads the cells tagged `attn:<exercise>`, or those
starting with `%%writefile exNN_name.py`), or this whole repository.{builds_on}

## The self-check on GitHub

{workflow}
"""

WORKFLOW_FAILS = """\
The workflow in `.github/workflows/check.yml` runs the self-check on every
push, writes its table to the run's summary (Actions, the run, Summary) and
**fails while a public test fails**. So a repository made from this template
starts with a red badge: every exercise is still a stub. That is expected;
it turns green once your exercises pass the public tests (which is not yet
your grade: the hidden tests decide it)."""
WORKFLOW_REPORTS = """\
The workflow in `.github/workflows/check.yml` runs the self-check on every
push and writes its table to the run's summary (Actions, the run, Summary).
Your instructor chose that it passes whatever the tests say: its badge says
the check ran, not that your exercises pass; read the summary for that."""

STUDENT_WORKFLOW = """\
name: self-check
on: [push, workflow_dispatch]

jobs:
  check:
    runs-on: ubuntu-latest
    timeout-minutes: 30
    env:
      PIP_EXTRA_INDEX_URL: https://download.pytorch.org/whl/cpu
    steps:
      - uses: actions/checkout@v4
      - uses: actions/setup-python@v5
        with:
          python-version: "3.11"
      - run: python -m pip install -e .
      - name: Public tests (the hidden ones decide the grade)
        shell: bash
        # pipefail: a failing check fails the job, not just tee
        run: |
          set -o pipefail
          attn-grade check{no_fail} 2>&1 | tee check.txt
      - name: The check's table in the run's summary
        if: always()
        shell: bash
        run: |
          {{
            echo "## Self-check: the public tests"
            echo '```'
            cat check.txt
            echo '```'
          }} >> "$GITHUB_STEP_SUMMARY"
      - uses: actions/upload-artifact@v4
        if: always()
        with:
          name: self-check
          path: check.txt
"""
SELF_CHECK = ("fail", "report")   # release --self-check: the workflow fails on a failed test, or not


def student_workflow(self_check: str = "fail") -> str:
    """The edition's workflow: ``fail`` fails the job while a public test fails
    (a red badge until the exercises are done), ``report`` only reports."""
    if self_check not in SELF_CHECK:
        raise ValueError(f"unknown self-check {self_check!r}: use fail or report")
    return STUDENT_WORKFLOW.format(no_fail="" if self_check == "fail" else " --no-fail")


def _copy_package(dest: Path) -> None:
    def ignore(folder, names):
        folder = Path(folder)
        skip = {n for n in names if n == "__pycache__"}
        if folder == PACKAGE_DIR:
            skip |= INSTRUCTOR_ONLY & set(names)
        if folder == SUITES_DIR:
            skip.add("hidden")
        if folder == SECRET_REFERENCE_DIR:
            # secret as a whole: every file here stays out (replay modules
            # are written in their stead by record_public_answers)
            skip |= set(names)
        if folder == KERNELS_DIR.parent:
            skip |= {KERNELS_DIR.name} & set(names)   # instructors only, as a whole
        return skip

    shutil.copytree(PACKAGE_DIR, dest, ignore=ignore)
    for name, functions in GRADING_ONLY.items():
        path = dest / name
        path.write_text(strip_grading_only(path.read_text(), functions))


def strip_grading_only(source: str, functions: tuple | None) -> str:
    """``source`` with the named top-level functions' bodies (every top-level
    function, and nothing else but the docstring, when ``functions`` is None)
    replaced by ``raise GradingOnly(...)``; docstrings and signatures stay."""
    tree = ast.parse(source)
    raise_line = "raise GradingOnly(GRADING_ONLY_NOTE)"
    if functions is None:
        doc = ast.get_docstring(tree) or ""
        out = [f'"""{doc}\n\n(Student edition: these probes run when graded only.)\n"""',
               "from __future__ import annotations"]
        for node in tree.body:
            # private ones too: another probe may import them (ex08 uses
            # _traced, and subclasses _Trace: a class whose making raises)
            first = ((ast.get_docstring(node) or "(grading only)").splitlines() or [""])[0] \
                if isinstance(node, (ast.FunctionDef, ast.ClassDef)) else ""
            if isinstance(node, ast.FunctionDef):
                out.append(f'\n\ndef {node.name}(*args, **kwargs):\n    """{first}"""\n'
                           f"    {raise_line}")
            elif isinstance(node, ast.ClassDef):
                out.append(f'\n\nclass {node.name}:\n    """{first}"""\n\n'
                           f"    def __init__(self, *args, **kwargs):\n        {raise_line}")
        return "\n".join(out) + GRADING_ONLY_CLASS
    lines = source.splitlines()
    found = {n.name: n for n in tree.body if isinstance(n, ast.FunctionDef)}
    missing = [f for f in functions if f not in found]
    if missing:
        raise RuntimeError(f"GRADING_ONLY names {missing[0]}, which is not a top-level "
                           "function any more: update grader/release.py")
    for node in sorted((found[f] for f in functions), key=lambda n: -n.lineno):
        body = node.body[1:] if ast.get_docstring(node) is not None else node.body
        start = body[0].lineno - 1 if body else node.end_lineno
        indent = " " * (node.col_offset + 4)
        lines[start:node.end_lineno] = [f"{indent}{raise_line}"]
    return "\n".join(lines) + "\n" + GRADING_ONLY_CLASS


def record_public_answers(dest_reference: Path) -> Recorder:
    """Run the public suites on the solutions, recording the references' answers."""
    from grader.core import Options, grade

    # Tests marked nothing_to_record (ex07's GPU compile check: half a minute
    # of compiling; ex04's measurement: seconds of timing; no secret reference
    # called) have no answer to record; the package's tests prove the
    # solutions pass them (tests/test_gpu_compile.py, tests/test_ex04_06.py),
    # and tests/test_release.py that they call no secret reference.
    _forget_suite_modules()
    with Recorder() as recorder:
        report = grade(SOLUTIONS_DIR, Options(suite="public", markers="not nothing_to_record"))
    # A test this (busy) machine could not judge keeps its points in the
    # maximum ("needs regrade"); it is no failure of the solutions.
    judged = report.max_score - sum(t.max_score for t in report.tests
                                    if t.status == "needs_regrade")
    if report.errors or report.score != round(judged, 6):
        bad = [t.full_name for t in report.tests if t.status == "failed"]
        raise RuntimeError(f"the solutions do not pass the public suites ({bad[:3]}, "
                           f"{report.errors[:3]}): fix them before a release")
    recorder.save(dest_reference)
    return recorder


def _forget_suite_modules() -> None:
    """A suite imported by an earlier grading in this process is imported
    again, so that what its module body asks of a reference (exercise A's
    worked example, say) is recorded too: pytest reuses a module it finds in
    ``sys.modules`` and would not run that body again."""
    import sys

    suites = str(SUITES_DIR.resolve())
    for name, module in list(sys.modules.items()):
        file = getattr(module, "__file__", None) or ""
        if file and str(Path(file).resolve()).startswith(suites):
            del sys.modules[name]


# Public tests of the solutions that may still say "not checked in the student
# edition" there, as (exercise, test function): none, now that the measuring kit
# ships (issue 26, item 2).  The list may only shrink (tests/test_release.py
# holds it to what the edition does).
STILL_NOT_CHECKED: frozenset = frozenset()
NOT_CHECKED = "not checked in the student edition"
_EDITION_REPORT = """\
import json, sys
from grader.core import Options, grade
names = sys.argv[2].split(",") if len(sys.argv) > 2 else None
report = grade(sys.argv[1], Options(suite="public", exercises=names,
                                    markers="not gpu"))
print(json.dumps([[t.exercise, t.name, t.status, t.output] for t in report.tests]))
"""


def unchecked_in_edition(edition: Path, exercises: list[str] | None = None
                         ) -> set[tuple[str, str]]:
    """(exercise, test function) of each public test that says "not checked in
    the student edition" when the edition in ``edition`` checks a copy of the
    solutions: its own grader package, in a process of its own (the answers
    replayed from its record, the secret modules absent).  ``exercises``: only
    these (default: all)."""
    import json
    import os
    import sys
    import tempfile

    with tempfile.TemporaryDirectory(prefix="attn-edition-check-") as tmp:
        sub = Path(tmp) / "solutions"
        shutil.copytree(SOLUTIONS_DIR, sub, ignore=shutil.ignore_patterns("__pycache__"))
        # no __pycache__ left in the edition (it is committed as it stands)
        env = dict(os.environ, PYTHONPATH=str(edition), PYTHONDONTWRITEBYTECODE="1")
        names = [",".join(exercises)] if exercises else []
        proc = subprocess.run([sys.executable, "-c", _EDITION_REPORT, str(sub), *names],
                              cwd=edition,
                              env=env, capture_output=True, text=True, timeout=1800)
    if proc.returncode != 0 or not proc.stdout.strip():
        raise RuntimeError(f"the student edition could not check the solutions: "
                           f"{(proc.stderr or proc.stdout).strip()[-300:]}")
    tests = json.loads(proc.stdout.strip().splitlines()[-1])
    return {(ex, name.split("[")[0]) for ex, name, _status, output in tests
            if NOT_CHECKED in output}


def verify_every_public_test_checks(edition: Path) -> None:
    """Fail the release when a public test of the solutions would say "not
    checked in the student edition" (beyond ``STILL_NOT_CHECKED``): its inputs
    depend on something other than the test (a run's seed, a measurement), so
    the answers recorded at release never replay, and the check checks nothing."""
    unchecked = unchecked_in_edition(edition) - STILL_NOT_CHECKED
    if unchecked:
        names = ", ".join(f"{ex}::{name}" for ex, name in sorted(unchecked))
        raise RuntimeError(f"in the student edition these public tests would check nothing "
                           f"(\"{NOT_CHECKED}\"): {names}. Fix their inputs in the test "
                           "itself (no run seed, no measured data as a reference's argument), "
                           "compute a verdict on measured data from the chapter's formula, "
                           "or move the check to the hidden suite")


def _git_init(out: Path) -> None:
    """``out`` as a git repository with one commit of everything in it."""
    ident = ["-c", "user.name=attn-grade release", "-c", "user.email=attn-grade@localhost"]
    try:
        for cmd in (["init", "-q"], ["add", "-A"],
                    [*ident, "commit", "-q", "-m", "The student edition"]):
            subprocess.run(["git", *cmd], cwd=out, check=True, capture_output=True, text=True)
        subprocess.run(["git", "branch", "-M", "main"], cwd=out, check=True,
                       capture_output=True)
    except FileNotFoundError:
        raise RuntimeError("git is not installed: install it, or pass --no-git") from None
    except subprocess.CalledProcessError as exc:
        raise RuntimeError(f"git {exc.cmd[1]} failed in {out}: "
                           f"{(exc.stderr or '').strip()[:200]}") from None


NUMBER_WORDS = ("No", "One", "Two", "Three", "Four", "Five", "Six", "Seven", "Eight", "Nine",
                "Ten", "Eleven", "Twelve")


def exercise_count(names: list[str] | None = None) -> str:
    """``"Eight"``: how many of ``names`` (default: all registered) are
    contract exercises, as the READMEs say it (the questions are extra)."""
    from grader.registry import EXERCISES

    n = sum(EXERCISES[name].in_contract for name in (EXERCISES if names is None else names))
    return NUMBER_WORDS[n] if n < len(NUMBER_WORDS) else str(n)


def exercise_table(names: list[str] | None = None) -> str:
    """The READMEs' table of the exercises ``names`` (default: all registered),
    from the registry, in its order: module, label, what it needs."""
    from grader.registry import EXERCISES

    rows = [f"| `{e.name}` | {e.label} | {e.needs_text} |" for e in EXERCISES.values()
            if names is None or e.name in names]
    return "\n".join(["| module | exercise | needs |", "| --- | --- | --- |", *rows])


# Where the instructors' README.md holds its generated table (``attn-grade stubs``).
TABLE_BEGIN = ("<!-- The table of exercises is generated from grader/registry.py: "
               "`attn-grade stubs` writes it. -->")
TABLE_END = "<!-- end of the generated table -->"


class NoTable(ValueError):
    """A README without the generated table's markers; the text is one sentence."""


def with_exercise_table(readme: str) -> str:
    """``readme`` with the table between ``TABLE_BEGIN`` and ``TABLE_END``
    generated anew from the registry (``exercise_table``)."""
    if readme.count(TABLE_BEGIN) != 1 or readme.count(TABLE_END) != 1 or \
            readme.index(TABLE_BEGIN) > readme.index(TABLE_END):
        raise NoTable(f"README.md needs the lines {TABLE_BEGIN!r} and {TABLE_END!r}, once "
                      "each, in that order, around its table of exercises")
    head, rest = readme.split(TABLE_BEGIN, 1)
    _, tail = rest.split(TABLE_END, 1)
    return f"{head}{TABLE_BEGIN}\n{exercise_table()}\n{TABLE_END}{tail}"


def student_readme(names: list[str], install: str | None = None,
                   self_check: str = "fail") -> str:
    """The edition's README for the exercises ``names``, from the registry;
    ``self_check``: what its workflow does (``student_workflow``)."""
    from grader.registry import EXERCISES

    shipped = [e for e in EXERCISES.values() if e.name in names]
    table = exercise_table(names)
    where = (f"In Colab, the first code cell installs the checker from `{install}`."
             if install else "The notebooks were made without an install address: in "
             "Colab, `pip install` this repository first (its git URL).")
    triton = [e.letter for e in shipped if "Triton" in e.needs]
    builds_on = "".join(
        f" Exercise {e.letter} imports your {', '.join(EXERCISES[n].letter for n in e.after)} "
        f"({', '.join(f'`{n}`' for n in e.after)}): its notebook loads "
        f"{'it' if len(e.after) == 1 else 'them'} from "
        f"{' or '.join(f'`{n}.py` or `{n}.ipynb`' for n in e.after)} beside it."
        for e in shipped if e.after)
    return STUDENT_README.format(
        count=exercise_count(names), table=table, colab=where, name=PACKAGE_NAME,
        triton=(f"Exercise{'s' if len(triton) > 1 else ''} {', '.join(triton)} "
                f"need{'' if len(triton) > 1 else 's'} Triton"),
        triton_letters=", ".join(triton) or "none", builds_on=builds_on,
        workflow=WORKFLOW_FAILS if self_check == "fail" else WORKFLOW_REPORTS)


def build(out: Path, install: str | None = None, git: bool = False,
          self_check: str = "fail", verify: bool = True) -> Path:
    """Write the student edition into ``out``.  ``install``: where the edition
    will live (a pip-installable URL), for the notebooks' install cell;
    ``self_check``: whether its workflow fails on a failed public test;
    ``verify``: check the solutions with the edition itself and fail when a
    public test would check nothing there (``verify_every_public_test_checks``)."""
    from grader.notebooks import DEFAULT_INSTALL, write_notebooks
    from grader.stubs import derive_all

    if out.exists() and any(out.iterdir()):
        raise FileExistsError(f"{out} is not empty")
    out.mkdir(parents=True, exist_ok=True)
    stubs = derive_all(SOLUTIONS_DIR)
    (out / "exercises").mkdir()
    for name, text in stubs.items():
        (out / "exercises" / f"{name}.py").write_text(text)
    write_notebooks(out / "notebooks", stubs, install or DEFAULT_INSTALL)
    _copy_package(out / "grader")
    record_public_answers(out / "grader" / "reference" / "secret")
    (out / "pyproject.toml").write_text(STUDENT_PYPROJECT.format(name=PACKAGE_NAME))
    (out / "README.md").write_text(student_readme(list(stubs), install, self_check))
    (out / ".github" / "workflows").mkdir(parents=True)
    (out / ".github" / "workflows" / "check.yml").write_text(student_workflow(self_check))
    (out / ".gitignore").write_text("__pycache__/\n*.egg-info/\n*.png\n"
                                    "attn-grade-output/\n")   # check's pictures
    if verify:
        verify_every_public_test_checks(out)
    if git:
        _git_init(out)
    return out
