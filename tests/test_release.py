"""The student edition: complete for students, empty of answers."""
from __future__ import annotations

import ast
import os
import re
import subprocess
import sys

import nbformat
import pytest
from click.testing import CliRunner

from grader.cli import main
from grader.exercises import PACKAGE_DIR
from grader.replay import SECRET_MODULES
from tests.conftest import REPO, SOLUTIONS, copy_solutions

BEGIN, END = "# BEGIN SOLUTION", "# END SOLUTION"


@pytest.fixture(scope="module")
def edition(tmp_path_factory):
    out = tmp_path_factory.mktemp("release") / "student"
    result = CliRunner().invoke(main, ["release", str(out)])
    assert result.exit_code == 0, result.output
    return out


def edition_text(edition) -> dict:
    return {p: p.read_text(errors="replace") for p in edition.rglob("*")
            if p.is_file() and p.suffix in (".py", ".md", ".ipynb", ".toml", ".yml", ".txt")}


def significant(lines):
    """Lines specific enough to identify code: not blank, comments or short."""
    for line in lines:
        text = line.strip()
        if len(text) >= 24 and not text.startswith(("#", '"', "'")):
            yield text


def solution_lines():
    for path in SOLUTIONS.glob("*.py"):   # the exercises and the questions
        inside = False
        for line in path.read_text().splitlines():
            if line.strip() == BEGIN:
                inside = True
            elif line.strip() == END:
                inside = False
            elif inside and not line.strip().startswith("# STUB:"):
                yield path.name, line


def reference_lines():
    for short in SECRET_MODULES:
        path = PACKAGE_DIR / "reference" / f"{short}.py"
        tree = ast.parse(path.read_text())
        lines = path.read_text().splitlines()
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef):
                body = node.body[1:] if ast.get_docstring(node) else node.body
                for stmt in body:
                    for line in lines[stmt.lineno - 1:stmt.end_lineno]:
                        yield path.name, line


def public_by_design() -> str:
    """Text that is public anyway: the stubs, and the grader's own code that
    ships as it is (public suites, the measurement kit, the worker's probes,
    which run beside student code in any case).  A solution line that also
    stands there, like a call of a student function, is no secret; what is
    checked is everything made for the edition (stubs, notebooks, README,
    replay modules) and that no secret module ships."""
    secret = {PACKAGE_DIR / "reference" / f"{m}.py" for m in SECRET_MODULES}
    paths = list((REPO / "exercises").glob("*.py")) + \
        [p for p in PACKAGE_DIR.rglob("*.py") if p not in secret and "hidden" not in p.parts]
    return "\n".join(p.read_text() for p in paths)


def test_no_solution_or_reference_code_in_the_edition(edition):
    texts = edition_text(edition)
    public = public_by_design()
    checked = 0
    for source, lines in (("solutions", solution_lines()), ("reference", reference_lines())):
        for name, line in [(n, t) for n, ln in lines for t in significant([ln])]:
            if line in public:
                continue
            checked += 1
            for path, text in texts.items():
                assert line not in text, f"{source} {name}: {line!r} is in {path}"
    assert checked > 200  # the search had something to look for


def test_no_hidden_test_names_in_the_edition(edition):
    hidden = set()
    for path in (PACKAGE_DIR / "suites" / "hidden").glob("test_*.py"):
        hidden |= set(re.findall(r"^def (test_\w+)", path.read_text(), re.M))
    public = set()
    for path in (PACKAGE_DIR / "suites" / "public").glob("test_*.py"):
        public |= set(re.findall(r"^def (test_\w+)", path.read_text(), re.M))
    texts = "\n".join(edition_text(edition).values())
    leaked = [name for name in hidden - public if re.search(rf"\b{name}\b", texts)]
    assert hidden and not leaked
    assert not (edition / "grader" / "suites" / "hidden").exists()
    assert not (edition / "solutions").exists() and not (edition / "tests").exists()
    for short in SECRET_MODULES:
        text = (edition / "grader" / "reference" / f"{short}.py").read_text()
        assert "replay_function" in text and "def " not in text


def test_the_edition_has_what_students_need(edition):
    assert "attn-grade check" in (edition / "README.md").read_text()
    assert "attn-grade check" in (edition / ".github" / "workflows" / "check.yml").read_text()
    stubs = sorted(p.name for p in (edition / "exercises").glob("*.py"))
    assert stubs == sorted(p.name for p in SOLUTIONS.glob("*.py"))
    for nb in (edition / "notebooks").glob("*.ipynb"):
        nbformat.validate(nbformat.read(str(nb), as_version=4))
    assert (edition / "grader" / "suites" / "public").is_dir()


def _edition_check(edition, folder):
    env = dict(os.environ, PYTHONPATH=str(edition))
    proc = subprocess.run([sys.executable, "-m", "grader.cli", "check", "--path", str(folder)],
                          cwd=edition, env=env, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def test_the_edition_checks_stubs_and_solutions(edition, tmp_path):
    stubs = _edition_check(edition, edition / "exercises")
    assert "Total: 0/" in stubs
    sub = copy_solutions(tmp_path / "sub")
    out = _edition_check(edition, sub)
    assert "FAIL" not in out, out
    total = re.search(r"Total: (\S+)/(\S+)", out)
    assert total and total.group(1) == total.group(2) and float(total.group(2)) > 0
    for exercise in ("ex01_by_hand", "ex02_mha", "ex03_gqa", "ex08_mla"):   # fully replayed
        block = out.split(exercise, 1)[1].split("\nex0", 1)[0]
        assert "--  " not in block, block


def test_the_edition_prints_variants_but_holds_no_answer_of_them_or_the_questions(edition):
    """Students get their exercise-A inputs; the answers, for any identifier, and
    the questions' key stay with the instructors."""
    from grader import replay
    from grader.reference import questions as qref
    from grader.sandbox import codec
    from grader.variants import inputs_for

    env = dict(os.environ, PYTHONPATH=str(edition))
    proc = subprocess.run([sys.executable, "-m", "grader.cli", "variant", "alice"], cwd=edition,
                          env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert inputs_for("alice").text() in proc.stdout
    assert (edition / "grader" / "variants.py").is_file()
    replayed = (edition / "grader" / "reference" / "questions.py").read_text()
    packed = re.search(r"replay_constants\('questions', '([0-9a-f]+)'\)", replayed).group(1)
    shipped = codec.unpack(bytes.fromhex(packed))
    assert shipped["FORMS"] == qref.FORMS and "_KEY" not in shipped
    assert set(shipped) == set(replay._constants(qref, {}))   # the forms only, no key
    # The public suite calls nothing of the key, so nothing of it was recorded.
    assert re.findall(r"^(\w+) = replay_function", replayed, re.M) == ["key"]
    public_suite = PACKAGE_DIR / "suites" / "public" / "test_questions.py"
    assert ".key(" not in public_suite.read_text()
