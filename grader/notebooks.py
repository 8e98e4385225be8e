"""Notebooks: one per exercise for students, and notebook submissions.

Each notebook holds the task (markdown, from the module's docstring), an
install cell (for Colab or a fresh environment), the stub in a code cell
tagged ``attn:<exercise>`` that starts with ``%%writefile <exercise>.py``
(running it saves the module beside the notebook), and a self-check cell
that grades the saved module with the public suite and shows the table.
A notebook submission is graded from its tagged cells.
"""
from __future__ import annotations

import ast
import contextlib
import io
import os
import sys
from pathlib import Path

import nbformat

from grader.exercises import EXERCISES
from grader.submission import SubmissionError

TAG_PREFIX = "attn:"
WRITEFILE = "%%writefile"
DEFAULT_INSTALL = "attn-course-student"   # what the install cell pip-installs
# Code cells an exercise's notebook gets before its stub.
BEFORE_STUB = {
    "ex01_by_hand": (
        "# Your own Q, K and V: put your student identifier here, run this cell, and\n"
        "# set the same STUDENT_ID in the cell below.\n"
        "from grader.variants import inputs_for\n"
        "print(inputs_for(\"YOUR_ID\").text())"),
}


class NotebookError(SubmissionError):
    """A notebook that cannot be used; the text is one sentence."""


def _docstring(source: str) -> str:
    try:
        return ast.get_docstring(ast.parse(source)) or ""
    except SyntaxError:
        return ""


def build_notebook(exercise: str, stub_source: str, install: str = DEFAULT_INSTALL):
    """The student's notebook for one exercise."""
    ex = EXERCISES[exercise]
    doc = _docstring(stub_source)
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3",
                                 "language": "python"}
    nb.metadata["attn"] = {"exercise": exercise}
    nb.cells = [
        nbformat.v4.new_markdown_cell(
            f"# Exercise {ex.title}\n\n{doc}\n\n"
            "**How to work here.** Write your code in the cell tagged "
            f"`{TAG_PREFIX}{exercise}` below and run it: it saves `{exercise}.py` "
            "beside this notebook. Then run the self-check cell: it grades that file "
            "with the public tests and shows the table. The hidden tests decide the "
            "grade, so a clean self-check is a first step, not a promise."),
        nbformat.v4.new_code_cell(
            "# Installs the course's checker where it is missing (Colab, a fresh "
            "environment).\n"
            "import importlib.util, subprocess, sys\n"
            "if importlib.util.find_spec('grader') is None:\n"
            f"    subprocess.check_call([sys.executable, '-m', 'pip', 'install', '-q', "
            f"{install!r}])"),
        *([nbformat.v4.new_code_cell(BEFORE_STUB[exercise])] if exercise in BEFORE_STUB
          else []),
        nbformat.v4.new_code_cell(f"{WRITEFILE} {exercise}.py\n{stub_source}",
                                  metadata={"tags": [f"{TAG_PREFIX}{exercise}"]}),
        nbformat.v4.new_code_cell(
            "from grader.notebooks import self_check\n"
            f"self_check({exercise!r})",
            metadata={"tags": ["self-check"]}),
    ]
    nbformat.validate(nb)
    return nb


def write_notebooks(out: Path, stubs: dict[str, str], install: str = DEFAULT_INSTALL):
    out.mkdir(parents=True, exist_ok=True)
    paths = []
    for exercise, source in stubs.items():
        path = out / f"{exercise}.ipynb"
        nbformat.write(build_notebook(exercise, source, install), str(path))
        paths.append(path)
    return paths


def read(path: Path):
    try:
        nb = nbformat.read(str(path), as_version=4)
        nbformat.validate(nb)
    except (ValueError, OSError, nbformat.ValidationError) as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise NotebookError(f"{path} is not a valid notebook ({first}).") from None
    return nb


def extract_modules(path: Path) -> dict[str, str]:
    """{exercise: module source} from the code cells tagged ``attn:<exercise>``."""
    nb = read(Path(path))
    found: dict[str, list[str]] = {}
    for cell in nb.cells:
        if cell.cell_type != "code":
            continue
        for tag in cell.get("metadata", {}).get("tags", []):
            name = str(tag)[len(TAG_PREFIX):] if str(tag).startswith(TAG_PREFIX) else None
            if name in EXERCISES:
                source = cell.source
                first, _, rest = source.partition("\n")
                if first.strip().startswith(WRITEFILE):
                    source = rest
                found.setdefault(name, []).append(source)
    if not found:
        raise NotebookError(f"{path} has no code cell tagged {TAG_PREFIX}<exercise> "
                            f"(for example {TAG_PREFIX}ex02_mha), so there is nothing to "
                            "grade.")
    return {name: "\n\n".join(parts).rstrip() + "\n" for name, parts in found.items()}


def self_check(exercise: str, folder: str | os.PathLike = ".") -> str:
    """Grade the saved module with the public suite; print and return the table."""
    from grader.core import Options, grade
    from grader.report import to_text

    folder = Path(folder)
    if not (folder / f"{exercise}.py").exists():
        text = (f"{exercise}.py is not saved yet: run the cell tagged "
                f"{TAG_PREFIX}{exercise} first.")
    else:
        report = grade(folder, Options(suite="public", exercises=[exercise]))
        text = to_text(report, public_only=True)
    print(text)
    for image in sorted(folder.glob(f"{exercise}*.png")):
        with contextlib.suppress(ImportError):
            from IPython.display import Image, display
            display(Image(filename=str(image)))
    return text


def run_notebook(path: Path, cwd: Path) -> list[str]:
    """Run a notebook's code cells in order, the way Jupyter would for these
    notebooks: ``%%writefile`` cells write their file, other lines starting
    with ``%`` or ``!`` are skipped, the rest is Python run in one namespace.
    Returns each cell's printed output.  Used by tests and by instructors who
    want to execute a notebook without Jupyter."""
    nb = read(Path(path))
    outputs, namespace = [], {"__name__": "__main__"}
    old_cwd = os.getcwd()
    os.chdir(cwd)
    sys.path.insert(0, str(cwd))
    try:
        for cell in nb.cells:
            if cell.cell_type != "code":
                continue
            first, _, rest = cell.source.partition("\n")
            if first.strip().startswith(WRITEFILE):
                Path(first.split(None, 1)[1].strip()).write_text(rest)
                outputs.append("")
                continue
            code = "\n".join(line for line in cell.source.splitlines()
                             if not line.lstrip().startswith(("%", "!")))
            buf = io.StringIO()
            with contextlib.redirect_stdout(buf):
                exec(compile(code, f"<cell {len(outputs)}>", "exec"), namespace)
            outputs.append(buf.getvalue())
    finally:
        sys.path.remove(str(cwd))
        os.chdir(old_cwd)
    return outputs
