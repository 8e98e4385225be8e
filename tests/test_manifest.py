"""The registry (``grader/registry.py``) is the one manifest of each exercise.

What is generated from it (the student edition's README, README.md's table
of exercises, the notebooks, the CLI's letters) cannot drift, and README.md's
table is held to what would be generated; what is written by hand or is a
fact of the code (README.md's count of exercises, the probe files, the
suites' imports of secret references and probes, the solutions' imports) is
held to it here, in both
directions: a row, file or import the registry does not know fails, and so
does a registered one that is missing."""
from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from grader.registry import EXERCISES, NEEDS, SHARED_PROBES, by_letter, suite_files
from grader.paths import PROBES_DIR, SECRET_REFERENCE_DIR
from grader.notebooks import BEFORE_STUB, dependencies
from grader.release import (TABLE_END, NoTable, exercise_count, exercise_table,
                            student_readme, with_exercise_table)
from tests.conftest import REPO, SOLUTIONS

# The quick tier (tests/conftest.py): no PyTorch import, no grading.
pytestmark = pytest.mark.quick

# What a module's import means for its "needs" (other imports need nothing extra).
IMPORT_NEEDS = {"numpy": "NumPy", "torch": "PyTorch", "triton": "Triton"}
# A probe named in code or docs: student.probe("mod.fn"), Func("probe:mod.fn"),
# probes.mod / probes/mod.py, from probes import mod.
PROBE_MENTION = re.compile(r"""probe\(\s*["'](\w+)\.|["']probe:(\w+)\.|"""
                           r"""\bprobes[./](\w+)|\bprobes import (\w+)""")


def _suites(ex) -> list[Path]:
    """An exercise's suites (public and hidden), and the shipped checks modules
    (grader/reference/*_checks.py) they import: what its grading runs."""
    files = suite_files(ex.name, "hidden")
    helpers = set()
    for path in files:
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module == "grader.reference":
                helpers.update(a.name for a in node.names if a.name.endswith("_checks"))
            elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith(
                    "grader.reference.") and node.module.endswith("_checks"):
                helpers.add(node.module.rsplit(".", 1)[1])
    return files + [REPO / "grader" / "reference" / f"{h}.py" for h in sorted(helpers)]


def _probes_named(text: str) -> set[str]:
    return {next(g for g in m.groups() if g) for m in PROBE_MENTION.finditer(text)}


def _top_level_imports(path: Path) -> set[str]:
    """Root names a module imports when it is imported (not inside functions)."""
    found: set[str] = set()

    def visit(nodes):
        for node in nodes:
            if isinstance(node, ast.Import):
                found.update(a.name.split(".")[0] for a in node.names)
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                found.add(node.module.split(".")[0])
            elif isinstance(node, (ast.If, ast.Try, ast.With)):
                for field in ("body", "orelse", "finalbody", "handlers"):
                    visit(getattr(node, field, []))
            elif isinstance(node, ast.ExceptHandler):
                visit(node.body)

    visit(ast.parse(path.read_text()).body)
    return found


def _secret_imports(path: Path) -> set[str]:
    """Modules of grader/reference/secret/ a suite file imports."""
    package = "grader.reference.secret"
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module == package:
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith(package + "."):
            found.add(node.module.split(".")[3])
        elif isinstance(node, ast.Import):
            found.update(a.name.split(".")[3] for a in node.names
                         if a.name.startswith(package + "."))
    return found


def test_letters_and_labels():
    letters = [ex.letter for ex in EXERCISES.values()]
    assert len(set(letters)) == len(letters), f"a letter is used twice: {letters}"
    course = [ex.letter for ex in EXERCISES.values() if ex.in_contract]
    # the course's exercises are A, B, C, ... in registry order
    assert course == [chr(ord("A") + i) for i in range(len(course))], course
    assert all(len(x) == 1 and x.isupper() for x in letters), letters
    assert EXERCISES["questions"].letter == "Q"
    assert by_letter("b") is EXERCISES["ex02_mha"] and by_letter("Z") is None
    for ex in EXERCISES.values():
        assert ex.title and not ex.title.startswith(f"{ex.letter}:"), ex.title
        assert (SOLUTIONS / f"{ex.name}.py").is_file(), f"no solutions/{ex.name}.py"


def test_every_probe_file_belongs_to_an_exercise_and_every_registered_one_exists():
    files = {p.stem for p in PROBES_DIR.glob("*.py")} - {"__init__"}
    registered = {p for ex in EXERCISES.values() for p in ex.probes}
    stray = files - registered - set(SHARED_PROBES)
    assert not stray, (f"probe files no exercise claims: {sorted(stray)}; name them in the "
                       "registry (grader/registry.py) or in SHARED_PROBES")
    missing = (registered | set(SHARED_PROBES)) - files
    assert not missing, f"registered probes without a file in {PROBES_DIR}: {sorted(missing)}"
    for ex in EXERCISES.values():
        # named like their exercise (its module's name; a helper of its probe, its
        # number first: ex07_work): one name everywhere
        number = ex.name.split("_")[0] + "_"
        assert all(p == ex.name or p.startswith(number) for p in ex.probes), (ex.name, ex.probes)


def test_every_probe_named_in_code_or_docs_is_registered():
    known = {p for ex in EXERCISES.values() for p in ex.probes} | set(SHARED_PROBES)
    # this file excepted: its comments show the forms with a made-up name
    paths = [p for folder in ("grader", "tests", "benchmarks")
             for p in (REPO / folder).rglob("*.py")
             if "__pycache__" not in p.parts and p != Path(__file__)]
    paths += [REPO / "README.md", *(REPO / "docs").glob("*.md")]
    unknown = {f"{p.relative_to(REPO)}: {name}" for p in paths
               for name in _probes_named(p.read_text()) - known}
    assert not unknown, f"probe modules that are not registered: {sorted(unknown)}"


@pytest.mark.author
@pytest.mark.parametrize("name", list(EXERCISES))
def test_suites_call_their_own_probes_and_import_the_registered_secrets(name):
    ex = EXERCISES[name]
    suites = _suites(ex)
    assert suites, f"{name} has no suite"
    called = set().union(*(_probes_named(p.read_text()) for p in suites))
    others = called - set(ex.probes) - set(SHARED_PROBES)
    assert not others, f"{name}'s suites call probes of other exercises: {sorted(others)}"
    imported = set().union(*(_secret_imports(p) for p in suites))
    assert imported == set(ex.secret), (
        f"{name}'s suites import the secret references {sorted(imported)}, the registry "
        f"says {sorted(ex.secret)}")


def test_every_secret_reference_is_used_by_a_registered_exercise():
    modules = {p.stem for p in SECRET_REFERENCE_DIR.glob("*.py")} - {"__init__"}
    registered = {m for ex in EXERCISES.values() for m in ex.secret}
    assert registered <= modules, f"no such secret reference: {sorted(registered - modules)}"
    assert modules <= registered, (f"secret references no exercise names: "
                                   f"{sorted(modules - registered)}")


@pytest.mark.author
@pytest.mark.parametrize("name", list(EXERCISES))
def test_needs_and_earlier_exercises_are_what_the_module_imports(name):
    ex = EXERCISES[name]
    solution = SOLUTIONS / f"{name}.py"
    imports = _top_level_imports(solution)
    packages = {IMPORT_NEEDS[i] for i in imports if i in IMPORT_NEEDS}
    assert packages == set(ex.needs) - {"GPU"}, (
        f"solutions/{name}.py imports {sorted(packages) or 'none of NumPy, PyTorch, Triton'}; "
        f"the registry says it needs {sorted(set(ex.needs) - {'GPU'})}")
    gpu_tests = any("mark.gpu" in p.read_text() for p in _suites(ex))
    assert gpu_tests == ("GPU" in ex.needs), (
        f"{name}: {'some' if gpu_tests else 'none'} of its tests need a GPU, "
        f"the registry says {'it does' if 'GPU' in ex.needs else 'none does'}")
    assert dependencies(solution.read_text()) == list(ex.after), \
        f"solutions/{name}.py imports {dependencies(solution.read_text())}, registry: {ex.after}"
    order = list(EXERCISES)
    assert all(order.index(e) < order.index(name) for e in ex.after), ex.after
    assert list(NEEDS) == ["NumPy", "PyTorch", "Triton", "GPU"]
    assert [n for n in NEEDS if n in ex.needs] == list(ex.needs), "needs in NEEDS' order"


def test_notebook_extras_are_for_registered_exercises():
    assert set(BEFORE_STUB) <= set(EXERCISES), sorted(set(BEFORE_STUB) - set(EXERCISES))


def test_readme_table_is_the_registry():
    """README.md's table is generated (``attn-grade stubs`` writes it): it is
    the registry's, and the count of exercises beside it is too."""
    readme = (REPO / "README.md").read_text()
    assert with_exercise_table(readme) == readme, (
        "README.md's table of exercises is not the registry's: run `attn-grade stubs`")
    assert exercise_table() in readme
    assert f"{exercise_count()} exercises on attention" in readme, (
        f"README.md does not say {exercise_count()} exercises")


def test_readme_table_notices_a_missing_row_an_unknown_one_and_a_wrong_need():
    readme = (REPO / "README.md").read_text()
    row = next(line for line in readme.splitlines() if line.startswith("| `ex03_gqa` |"))
    for stale in (readme.replace(row + "\n", ""),
                  readme.replace(row, row + "\n" + row.replace("ex03_gqa", "ex09_extra")),
                  readme.replace(row, row.replace("| NumPy |", "| PyTorch |"))):
        assert stale != readme and with_exercise_table(stale) == readme
    for name in EXERCISES.values():
        assert f"| `{name.name}` | {name.label} | {name.needs_text} |" in exercise_table()


def test_readme_without_the_tables_markers_is_refused_in_one_sentence():
    readme = (REPO / "README.md").read_text()
    with pytest.raises(NoTable, match="README.md needs the lines"):
        with_exercise_table(readme.replace(TABLE_END, ""))


def test_the_stubs_command_rewrites_and_checks_the_readme_table(tmp_path, monkeypatch):
    from click.testing import CliRunner

    from grader import cli
    (tmp_path / "solutions").mkdir()
    (tmp_path / "exercises").mkdir()
    readme = (REPO / "README.md").read_text()
    row = next(line for line in readme.splitlines() if line.startswith("| `ex02_mha` |"))
    (tmp_path / "README.md").write_text(readme.replace(row + "\n", ""))
    for name, value in (("REPO_DIR", tmp_path), ("SOLUTIONS_DIR", tmp_path / "solutions"),
                        ("EXERCISES_DIR", tmp_path / "exercises")):
        monkeypatch.setattr(cli, name, value)
    check = CliRunner().invoke(cli.main, ["stubs", "--check"])
    assert check.exit_code == 1 and "README.md's table of exercises differs" in check.output
    wrote = CliRunner().invoke(cli.main, ["stubs"])
    assert wrote.exit_code == 0, wrote.output
    assert "wrote README.md's table of exercises" in wrote.output
    assert (tmp_path / "README.md").read_text() == readme
    assert CliRunner().invoke(cli.main, ["stubs", "--check"]).exit_code == 0


def test_student_readme_lists_every_exercise_from_the_registry():
    text = student_readme(list(EXERCISES), "git+https://example.org/course")
    for ex in EXERCISES.values():
        assert f"| `{ex.name}` | {ex.label} | {ex.needs_text} |" in text
    triton = [ex.letter for ex in EXERCISES.values() if "Triton" in ex.needs]
    assert f"Exercise {', '.join(triton)} needs Triton" in text
    assert f"{exercise_count()} exercises on attention" in text
    for ex in EXERCISES.values():
        for earlier in ex.after:
            assert f"Exercise {ex.letter} imports your {EXERCISES[earlier].letter}" in text
    assert "| `ex02_mha`" not in student_readme(["ex01_by_hand", "questions"])
