"""Build the student edition: what students receive.

Stubs, public suites, notebooks, a student README, the ``attn-grade``
command (``check`` and ``grade --suite public``) and a GitHub Actions
workflow that self-checks on push.  Left out: ``solutions/``, the hidden
suites, the reference modules (replayed instead, see ``grader.replay``), the
package's tests and benchmarks, and the instructors' tools (release,
Gradescope bundle, GPU calibration).
"""
from __future__ import annotations

import shutil
from pathlib import Path

from grader.exercises import PACKAGE_DIR, REPO_DIR
from grader.replay import SECRET_MODULES, Recorder

PACKAGE_NAME = "attn-course-student"
# Files of the grader package that stay with instructors.
INSTRUCTOR_ONLY = {"release.py", "gradescope.py", "calibrate.py"}

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
    # Linux only; exercise G (the Triton kernel) needs it, the rest does not.
    "triton>=3.0; sys_platform == 'linux'",
]

[project.optional-dependencies]
plot = ["matplotlib>=3.7"]

[project.scripts]
attn-grade = "grader.cli:main"

[tool.setuptools.packages.find]
include = ["grader*"]

[tool.setuptools.package-data]
grader = ["contract.json", "suites/pytest.ini", "suites/*/*.py", "suites/*.py",
          "sandbox/probes/*.py", "reference/recorded.bin", "data/*.json"]
"""

STUDENT_README = """\
# Attention, the exercises

```bash
pip install -e . && attn-grade check         # check your exercises with the public tests
```

Seven exercises on attention in transformers. Each module in `exercises/`
states its task, shapes and conventions in its docstrings, and raises
`NotImplementedError` (exercise A: constants set to `None`) where your work
goes. Prefer notebooks? `notebooks/` has one per exercise, with a self-check
cell; in Colab, the first code cell installs this package.

| module | exercise |
| --- | --- |
{table}

## Checking yourself

```bash
attn-grade check              # every exercise
attn-grade check ex02 ex03    # some of them
```

Each test shows its points and, when it fails, what was expected, what came
back (first mismatch, max error) and which known mistake it looks like.
These are the public tests: your instructor grades with more (random
shapes, both precisions, properties), so a clean check is a first step, not
a promise. A few public checks say "not checked in the student edition":
they need the instructors' reference and run when you are graded.

On a machine without a GPU, install the CPU build of PyTorch first
(`pip install torch --index-url https://download.pytorch.org/whl/cpu`).
Exercise G needs Triton, which has Linux wheels only; on macOS and Windows
every other exercise works, and G says that it needs Triton (use Colab or
Linux for it). Exercises D-F measure your machine: close other heavy
programs while they run.

## Handing in

Hand in the modules of `exercises/` (a folder or a zip of them), or your
notebooks: the grader reads the cells tagged `attn:<exercise>`. The GitHub
workflow in `.github/workflows/check.yml` runs the self-check on every push.
"""

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
      - run: python -m pip install -e ".[plot]"
      - name: Public tests (the hidden ones decide the grade)
        run: attn-grade check | tee check.txt
      - uses: actions/upload-artifact@v4
        with:
          name: self-check
          path: check.txt
"""


def _copy_package(dest: Path) -> None:
    def ignore(folder, names):
        folder = Path(folder)
        skip = {n for n in names if n == "__pycache__"}
        if folder == PACKAGE_DIR:
            skip |= INSTRUCTOR_ONLY & set(names)
        if folder == PACKAGE_DIR / "suites":
            skip.add("hidden")
        if folder == PACKAGE_DIR / "reference":
            skip |= {f"{m}.py" for m in SECRET_MODULES}
        return skip

    shutil.copytree(PACKAGE_DIR, dest, ignore=ignore)


def record_public_answers(dest_reference: Path) -> Recorder:
    """Run the public suites on the solutions, recording the references' answers."""
    from grader.core import Options, grade

    with Recorder() as recorder:
        report = grade(REPO_DIR / "solutions", Options(suite="public"))
    if report.errors or report.score != report.max_score:
        bad = [t.full_name for t in report.tests if t.status == "failed"]
        raise RuntimeError(f"the solutions do not pass the public suites ({bad[:3]}, "
                           f"{report.errors[:3]}): fix them before a release")
    recorder.save(dest_reference)
    return recorder


def build(out: Path, install: str | None = None) -> Path:
    from grader.exercises import EXERCISES
    from grader.notebooks import write_notebooks
    from grader.stubs import derive_all

    if out.exists() and any(out.iterdir()):
        raise FileExistsError(f"{out} is not empty")
    out.mkdir(parents=True, exist_ok=True)
    stubs = derive_all(REPO_DIR / "solutions")
    (out / "exercises").mkdir()
    for name, text in stubs.items():
        (out / "exercises" / f"{name}.py").write_text(text)
    write_notebooks(out / "notebooks", stubs, install or PACKAGE_NAME)
    _copy_package(out / "grader")
    record_public_answers(out / "grader" / "reference")
    (out / "pyproject.toml").write_text(STUDENT_PYPROJECT.format(name=PACKAGE_NAME))
    table = "\n".join(f"| `{e.name}` | {e.title} |" for e in EXERCISES.values()
                      if e.name in stubs)
    (out / "README.md").write_text(STUDENT_README.format(table=table))
    (out / ".github" / "workflows").mkdir(parents=True)
    (out / ".github" / "workflows" / "check.yml").write_text(STUDENT_WORKFLOW)
    (out / ".gitignore").write_text("__pycache__/\n*.egg-info/\n*.png\n")
    return out
