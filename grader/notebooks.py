"""Notebooks: one per exercise for students, and their self-check.

Each notebook holds the task (markdown, from the module's docstring), an
install cell (for Colab or a fresh environment), the stub in a code cell
tagged ``attn:<exercise>`` that starts with ``%%writefile <exercise>.py``
(running it saves the module beside the notebook), and a self-check cell
that grades the saved module with the public suite and shows one table
(HTML in Jupyter, text elsewhere) and the pictures the check drew with the
student's code (exercise D's log-log plot, measured again at every check).
An exercise that imports an earlier one (C uses B's ``ex02_mha``) has a
cell that says so and loads the earlier module: from its ``.py`` beside the
notebook, from the earlier notebook beside it, or (in Colab) from an upload.  Reading a notebook submission (its
tagged cells, or the ``%%writefile exNN_name.py`` ones) is intake's:
``grader.submission``.
"""
from __future__ import annotations

import ast
import contextlib
import html
import io
import os
import sys
from pathlib import Path

import nbformat

from grader.registry import EXERCISES
# Built here, read at intake: the tagged ``%%writefile`` cells of an exercise.
from grader.submission import (TAG_PREFIX, WRITEFILE, SubmissionError, extract_modules,
                               read_notebook)

# What the install cell pip-installs when no URL was given: nothing that
# pip can find (the student package is not on PyPI), so the cell says so
# instead of failing; ``release --install URL`` records the real place.
DEFAULT_INSTALL = ""


def dependencies(source: str) -> list[str]:
    """Earlier exercises a module imports (``from ex02_mha import ...``)."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return []
    out = []
    for node in ast.walk(tree):
        names = [node.module] if isinstance(node, ast.ImportFrom) and node.module else \
            [a.name for a in node.names] if isinstance(node, ast.Import) else []
        out += [n for n in names if n in EXERCISES and n not in out]
    return out


def install_cell(install: str) -> str:
    head = ("# Installs the course's checker where it is missing (Colab, a fresh "
            "environment).\n"
            "import importlib.util, subprocess, sys\n"
            "if importlib.util.find_spec('grader') is None:\n")
    if install:
        return head + (f"    subprocess.check_call([sys.executable, '-m', 'pip', 'install', "
                       f"'-q', {install!r}])")
    return head + ("    print('The checker (grader) is not installed here, and this notebook '\n"
                   "          'was made without an install address: pip install your '\n"
                   "          'course repository (ask your instructor for its URL).')")


# Code cells an exercise's notebook gets before its stub.
BEFORE_STUB = {
    "ex01_by_hand": (
        "# Your own Q, K and V: put your student identifier here, run this cell, and\n"
        "# set the same STUDENT_ID in the cell below.\n"
        "from grader.variants import inputs_for\n"
        "print(inputs_for(\"YOUR_ID\").text())"),
}


def _docstring(source: str) -> str:
    try:
        return ast.get_docstring(ast.parse(source)) or ""
    except SyntaxError:
        return ""


def _heading(ex, doc: str) -> tuple[str, str]:
    """The notebook's title (the registry's label) and the task text below it,
    the title said once: a docstring's opening "Exercise B: ..." line is the
    title restated and is left out; one that opens with the exercise's title
    ("Interview questions: ...") keeps only what follows it."""
    first, _, rest = doc.partition("\n")
    if first.startswith(f"Exercise {ex.letter}:"):
        return f"Exercise {ex.label}", rest.lstrip("\n")
    if first.lower().startswith(ex.title.lower() + ": "):
        tail = first[len(ex.title) + 2:]
        first = tail[:1].upper() + tail[1:]
    return f"Exercise {ex.label}", "\n".join(filter(None, [first, rest]))


def build_notebook(exercise: str, stub_source: str, install: str = DEFAULT_INSTALL):
    """The student's notebook for one exercise."""
    ex = EXERCISES[exercise]
    title, doc = _heading(ex, _docstring(stub_source))
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3",
                                 "language": "python"}
    nb.metadata["attn"] = {"exercise": exercise}
    cells = [
        nbformat.v4.new_markdown_cell(
            f"# {title}\n\n{doc}\n\n"
            "**How to work here.** Write your code in the cell tagged "
            f"`{TAG_PREFIX}{exercise}` below and run it: it saves `{exercise}.py` "
            "beside this notebook. Then run the self-check cell: it grades that file "
            "with the public tests and shows the table. The hidden tests decide the "
            "grade, so a clean self-check is a first step, not a promise."),
        nbformat.v4.new_code_cell(install_cell(install)),
        *([nbformat.v4.new_code_cell(BEFORE_STUB[exercise])] if exercise in BEFORE_STUB
          else []),
    ]
    earlier = list(ex.after)   # the registry's; tests/test_manifest.py checks the imports
    if earlier:
        named = ", ".join(f"`{n}.py` (exercise {EXERCISES[n].letter})"
                          for n in earlier)
        cells += [
            nbformat.v4.new_markdown_cell(
                f"**This exercise builds on your earlier work:** it imports {named}. "
                "The next cell loads it: from the `.py` file beside this notebook, else "
                "from that exercise's notebook beside this one (its tagged cell), else, "
                "in Colab, it asks you to upload one of them."),
            nbformat.v4.new_code_cell(
                "from grader.notebooks import load_earlier\n"
                f"load_earlier({earlier!r})", metadata={"tags": ["load-earlier"]}),
        ]
    cells += [
        nbformat.v4.new_code_cell(f"{WRITEFILE} {exercise}.py\n{stub_source}",
                                  metadata={"tags": [f"{TAG_PREFIX}{exercise}"]}),
        nbformat.v4.new_code_cell(
            "from grader.notebooks import self_check\n"
            f"self_check({exercise!r})",
            metadata={"tags": ["self-check"]}),
    ]
    nb.cells = cells
    nbformat.validate(nb)
    return nb


def write_notebooks(out: Path, stubs: dict[str, str], install: str = DEFAULT_INSTALL,
                    force: bool = False):
    """One notebook per exercise in ``out``; an existing notebook (a student's
    work, maybe) is never replaced unless ``force``."""
    out = Path(out)
    paths = [out / f"{exercise}.ipynb" for exercise in stubs]
    existing = [p for p in paths if p.exists()]
    if existing and not force:
        raise FileExistsError(f"{existing[0]} exists (and {len(existing) - 1} more): "
                              "pass --force to overwrite" if len(existing) > 1 else
                              f"{existing[0]} exists: pass --force to overwrite it")
    out.mkdir(parents=True, exist_ok=True)
    for (exercise, source), path in zip(stubs.items(), paths):
        nbformat.write(build_notebook(exercise, source, install), str(path))
    return paths


def _in_colab() -> bool:
    return "google.colab" in sys.modules


def load_earlier(names: list[str], folder: str | os.PathLike = ".") -> list[str]:
    """Make sure the earlier exercises' modules sit in ``folder``: kept when
    there, else taken from a notebook beside (``<name>.ipynb`` first, then any
    notebook with the tagged cell), else uploaded in Colab.  Prints one line
    per module; returns those still missing (never raises: the self-check
    then says what is missing)."""
    folder = Path(folder)
    missing = []
    for name in names:
        target = folder / f"{name}.py"
        if target.exists():
            print(f"{name}.py: found beside this notebook")
            continue
        books = sorted(folder.glob("*.ipynb"), key=lambda p: p.stem != name)
        for book in books:
            try:
                source = extract_modules(book).get(name)
            except SubmissionError:
                continue
            if source:
                target.write_text(source)
                print(f"{name}.py: written from the cell tagged {TAG_PREFIX}{name} "
                      f"in {book.name}")
                break
        else:
            if _in_colab():   # pragma: no cover - Colab only
                from google.colab import files
                print(f"Upload {name}.py or {name}.ipynb (your earlier exercise):")
                for uploaded in files.upload():
                    if uploaded.endswith(".ipynb"):
                        source = extract_modules(folder / uploaded).get(name)
                        if source:
                            target.write_text(source)
            if not target.exists():
                missing.append(name)
                print(f"{name}.py is missing: put your {name}.py, or your {name}.ipynb, "
                      "beside this notebook and run this cell again.")
    return missing


class CheckResult:
    """The self-check's table: HTML in Jupyter, the text table elsewhere
    (``repr`` is the text itself, so a console shows it once, as lines)."""

    def __init__(self, text: str, report=None):
        self.text, self.report = text, report

    def __str__(self) -> str:
        return self.text

    __repr__ = __str__

    def _repr_html_(self) -> str:
        if self.report is None:
            return f"<pre>{html.escape(self.text)}</pre>"
        from grader.report import FAILED, PASSED
        rows = []
        for exercise, tests in self.report.by_exercise().items():
            got, total = self.report.exercise_scores()[exercise]
            rows.append(f"<tr><th colspan=3 style='text-align:left'>{html.escape(exercise)} "
                        f"&nbsp; {got:g}/{total:g}</th></tr>")
            for t in tests:
                mark = {PASSED: "&#10004;", FAILED: "&#10008;"}.get(t.status, "&ndash;")
                rows.append(f"<tr><td>{mark}</td><td style='text-align:left'>"
                            f"{html.escape(t.title)}<pre style='margin:0'>"
                            f"{html.escape(t.output.rstrip())}</pre></td>"
                            f"<td>{t.score:g}/{t.max_score:g}</td></tr>")
        return (f"<table>{''.join(rows)}</table><p><b>Total: {self.report.score:g}/"
                f"{self.report.max_score:g}</b> (public tests only: the hidden tests decide "
                "the grade)</p>")


# Where a notebook's self-check writes the files made for the student (the
# ex04 plot): beside the notebook, as ``attn-grade check`` writes them beside
# the course folder.
ARTIFACTS = "attn-grade-output"
# The picture each exercise's public check draws with the student's code (in
# the check's sandbox, kept in ARTIFACTS): D's log-log plot, the heatmaps.
PICTURES = {"ex01_by_hand": ("ex01_weights.png",), "ex02_mha": ("ex02_heads.png",),
            "ex03_gqa": ("ex03_gqa_heads.png",), "ex04_quadratic": ("ex04_scaling.png",),
            "ex08_mla": ("ex08_mla_heads.png",)}


def _stamps(exercise: str, folder: Path) -> dict:
    """{picture: (inode, modification time)} of the exercise's pictures now
    (None where there is none): a picture the check writes is renamed into
    place (``grader.artifacts``), so a new one has a new stamp."""
    out = {}
    for name in PICTURES.get(exercise, ()):
        try:
            st = (folder / ARTIFACTS / name).stat()
            out[name] = (st.st_ino, st.st_mtime_ns)
        except OSError:
            out[name] = None
    return out


def _show_pictures(exercise: str, folder: Path, before: dict) -> list[Path]:
    """Show inline the pictures this self-check drew (the ex04 plot of the
    student's own measurement, drawn by their plot_scaling in the check's
    sandbox), never one left from an earlier run (``before``: ``_stamps``
    taken before it): after an edit, the picture is the new code's.
    Returns those shown."""
    after = _stamps(exercise, folder)
    fresh = [folder / ARTIFACTS / name for name, stamp in after.items()
             if stamp is not None and stamp != before.get(name)]
    try:
        from IPython import get_ipython
        from IPython.display import Image, display
    except ImportError:
        return fresh
    if get_ipython() is None:   # a plain console: the text table names the file
        return fresh
    for image in fresh:
        display(Image(filename=str(image)))
    return fresh


def self_check(exercise: str, folder: str | os.PathLike = ".") -> CheckResult:
    """Grade the saved module with the public suite; the table comes back as a
    ``CheckResult`` (a notebook shows it as HTML, a console as text), and the
    pictures the check drew (exercise D's plot, the heatmaps of A, B, C and H,
    in ``attn-grade-output`` beside the notebook) are shown inline."""
    from grader.core import Options, grade
    from grader.report import to_text

    folder = Path(folder)
    if not (folder / f"{exercise}.py").exists():
        return CheckResult(f"{exercise}.py is not saved yet: run the cell tagged "
                           f"{TAG_PREFIX}{exercise} first.")
    missing = [n for n in dependencies((folder / f"{exercise}.py").read_text())
               if not (folder / f"{n}.py").exists()]
    if missing:
        return CheckResult(f"{exercise}.py imports {', '.join(missing)}, which is not beside "
                           "this notebook: run the cell that loads your earlier exercise.")
    before = _stamps(exercise, folder)
    report = grade(folder, Options(suite="public", exercises=[exercise],
                                   artifacts_dir=folder / ARTIFACTS))
    report.submission = f"{exercise}.py"
    _show_pictures(exercise, folder, before)
    return CheckResult(to_text(report, public_only=True), report)


def run_notebook(path: Path, cwd: Path) -> list[str]:
    """Run a notebook's code cells in order, the way Jupyter would for these
    notebooks: ``%%writefile`` cells write their file, other lines starting
    with ``%`` or ``!`` are skipped, the rest is Python run in one namespace.
    Returns each cell's printed output.  Used by tests and by instructors who
    want to execute a notebook without Jupyter."""
    nb = read_notebook(Path(path))
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
            tree = ast.parse(code)
            last = tree.body.pop() if tree.body and isinstance(tree.body[-1], ast.Expr) \
                else None
            buf = io.StringIO()
            name = f"<cell {len(outputs)}>"
            with contextlib.redirect_stdout(buf):
                exec(compile(tree, name, "exec"), namespace)
                if last is not None:   # shown like Jupyter shows a cell's value
                    value = eval(compile(ast.Expression(last.value), name, "eval"), namespace)
                    if value is not None:
                        print(repr(value))
            outputs.append(buf.getvalue())
    finally:
        sys.path.remove(str(cwd))
        os.chdir(old_cwd)
    return outputs
