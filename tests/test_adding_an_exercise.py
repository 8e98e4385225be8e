"""Adding an exercise is what docs/AUTHORING.md says, and no more.

In a copy of the repository's tracked files, a throwaway exercise
(``ex09_scale``: its solution, a public and a hidden suite, a secret
reference with one named mistake, one mutant and its registry entry) is
added the way the section "Adding an exercise" lists it, with the copy's own
tools run as an author runs them: the stub and README.md's row are
generated, the package's checks of a new exercise pass, the solution gets
full marks, the mutant loses points and is named, and the student edition
ships the exercise without its secret (the copy's release records and checks
the new exercise's public answers only: tests/test_release.py releases the
others).  The files that changed are at most
eight and exactly the ones the section names; the ones written by hand are
exactly those it does not call generated.
"""
from __future__ import annotations

import os
import re
import runpy
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO

EX = "ex09_scale"
SECRET = "scale"
PLACEHOLDERS = {"<ex>": EX, "<secret>": SECRET}
MISTAKE = "the scores were divided by d_head instead of sqrt(d_head)"

SOLUTION = '''\
"""Exercise X: scaling the attention scores (a throwaway exercise).

Usually takes about 10 minutes.  From the chapters: section 1.
"""


def scale_scores(scores, d_head):
    """Return ``scores / sqrt(d_head)``: ``scores`` (..., S_q, S_k), a NumPy array."""
    # BEGIN SOLUTION
    return scores / d_head ** 0.5
    # END SOLUTION
'''

REFERENCE = f'''\
"""Independent reference for {EX}, with its known mistake."""
import numpy as np

from grader.reference.mistakes import mistakes_of  # noqa: F401  (the suites call it)

MISTAKES = {{"scale_by_d": {MISTAKE!r}}}


def scale_scores(scores, d_head, mistake=None):
    scores = np.asarray(scores, dtype=np.float64)
    return scores / (d_head if mistake == "scale_by_d" else np.sqrt(d_head))
'''

PUBLIC = f'''\
"""Public tests for {EX}."""
import numpy as np
import pytest

from grader.feedback import TOLERANCES, check_close
from grader.reference.secret import {SECRET} as ref

pytestmark = [pytest.mark.exercise("{EX}")]


@pytest.mark.points(1)
def test_scale_small(student):
    """scale_scores divides by sqrt(d_head)"""
    scores = np.arange(6.0).reshape(2, 3)
    atol, rtol = TOLERANCES["float64"]
    check_close(student.scale_scores(scores, 4), ref.scale_scores(scores, 4),
                what="scale_scores(scores, 4)", atol=atol, rtol=rtol,
                mistakes=ref.mistakes_of(ref.scale_scores, ["scale_by_d"], scores, 4))
'''

HIDDEN = f'''\
"""Hidden tests for {EX}."""
import numpy as np
import pytest

from grader.feedback import TOLERANCES, check_close
from grader.reference.secret import {SECRET} as ref

pytestmark = [pytest.mark.exercise("{EX}"), pytest.mark.hidden]


@pytest.mark.points(2)
@pytest.mark.parametrize("seed", [0, 1])
def test_scale_random(student, seed):
    """scale_scores on random shapes and widths"""
    rng = np.random.default_rng(seed)
    scores = rng.standard_normal((2, 3, 5, 7))
    d_head = int(rng.integers(2, 129))
    atol, rtol = TOLERANCES["float64"]
    check_close(student.scale_scores(scores, d_head), ref.scale_scores(scores, d_head),
                what=f"scale_scores(scores, {{d_head}})", atol=atol, rtol=rtol,
                mistakes=ref.mistakes_of(ref.scale_scores, ["scale_by_d"], scores, d_head))
'''

MUTANTS = f'''\
"""Mistakes in scaling the scores ({EX})."""
from tests.data.mutants import Mutant

MUTANTS = [
    Mutant("scale_by_d_head", "return scores / d_head ** 0.5", "return scores / d_head",
           "divided by d_head instead of sqrt(d_head)"),
]
'''

ENTRY = f'''    Exercise("{EX}", "X", "scaling the scores", secret=("{SECRET}",),
             in_contract=False),
]}}
'''
README_ROW = f"| `{EX}` | X: scaling the scores | nothing |"


def section_items(text: str) -> dict[str, str]:
    """{file: its item's text} of the numbered list under "Adding an
    exercise", placeholders filled."""
    section = text.split("\n## Adding an exercise\n", 1)[1].split("\n## ", 1)[0]
    items = re.findall(r"^\d+\. `([^`]+)`(.*?)(?=^\d+\. |\n\n)", section, re.M | re.S)
    out = {}
    for path, words in items:
        for placeholder, value in PLACEHOLDERS.items():
            path = path.replace(placeholder, value)
        out[path] = " ".join(words.split())
    return out


def section_files(text: str) -> list[str]:
    return list(section_items(text))


def generated_files(text: str) -> list[str]:
    """The listed files the section says are generated (never written by hand)."""
    return [path for path, words in section_items(text).items() if "generated" in words]


def snapshot(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in root.rglob("*")
            if p.is_file() and "__pycache__" not in p.parts}


def _env(root: Path) -> dict:
    return dict(os.environ, PYTHONPATH=str(root), PYTHONDONTWRITEBYTECODE="1")


def run(copy: Path, *args, timeout=600) -> subprocess.CompletedProcess:
    """``python ARGS`` in the copy, importing the copy's grader and tests."""
    return subprocess.run([sys.executable, *map(str, args)], cwd=copy, env=_env(copy),
                          capture_output=True, text=True, timeout=timeout)


def cli(copy: Path, *args, timeout=600) -> subprocess.CompletedProcess:
    return run(copy, "-m", "grader.cli", *args, timeout=timeout)


# The copy's `attn-grade release` (``sys.argv[2:]``) for the exercise
# ``sys.argv[1]`` alone, as tests/test_release.py's edition is built in an
# author's loop: its recording of the public answers grades that exercise, and
# its check that every public test checks something in the edition checks that
# exercise's; everything else (stubs, suites, replay modules, README) is the
# real command's.
RELEASE_OF_EX = """\
import dataclasses
import sys

import grader.core
import grader.release
from grader.cli import main

only, args = sys.argv[1], sys.argv[2:]
grade, unchecked = grader.core.grade, grader.release.unchecked_in_edition
grader.core.grade = lambda submission, options: grade(
    submission, dataclasses.replace(options, exercises=[only]))
grader.release.unchecked_in_edition = lambda edition, exercises=None: unchecked(
    edition, [only])
main(args)
"""


def score(output: str) -> tuple[float, float]:
    found = re.search(rf"^{EX}\s+(\S+)/(\S+)", output, re.M)
    assert found, output
    return float(found.group(1)), float(found.group(2))


def add_the_exercise(copy: Path) -> None:
    """What an author writes by hand (the stub is generated afterwards)."""
    (copy / "solutions" / f"{EX}.py").write_text(SOLUTION)
    (copy / "grader" / "reference" / "secret" / f"{SECRET}.py").write_text(REFERENCE)
    (copy / "grader" / "suites" / "public" / f"test_{EX}.py").write_text(PUBLIC)
    (copy / "grader" / "suites" / "hidden" / f"test_{EX}_hidden.py").write_text(HIDDEN)
    (copy / "tests" / "data" / "mutants" / f"{EX}.py").write_text(MUTANTS)
    registry = copy / "grader" / "registry.py"
    text = registry.read_text()
    assert text.count("\n]}\n") == 1, "the registry's list of entries no longer ends in ']}'"
    registry.write_text(text.replace("\n]}\n", "\n" + ENTRY))


@pytest.mark.slow
def test_a_new_exercise_touches_the_files_the_section_names(tmp_path):
    authoring = (REPO / "docs" / "AUTHORING.md").read_text()
    listed, generated = section_files(authoring), generated_files(authoring)
    assert listed and len(listed) <= 8, listed
    assert sorted(generated) == sorted(["README.md", f"exercises/{EX}.py"]), generated

    tracked = subprocess.run(["git", "ls-files", "-z"], cwd=REPO, capture_output=True,
                             text=True, check=True).stdout.split("\0")
    copy = tmp_path / "repo"
    for name in filter(None, tracked):
        if (REPO / name).is_file():
            (copy / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO / name, copy / name)
    before = snapshot(copy)

    add_the_exercise(copy)
    by_hand = snapshot(copy)
    written = sorted(p for p in by_hand if before.get(p) != by_hand[p])
    assert written == sorted(set(listed) - set(generated)), (
        f"the author wrote {written}; docs/AUTHORING.md's list, less what it calls "
        f"generated: {sorted(set(listed) - set(generated))}")
    stubs = cli(copy, "stubs")
    assert stubs.returncode == 0, stubs.stdout + stubs.stderr
    stub = (copy / "exercises" / f"{EX}.py").read_text()
    assert "NotImplementedError" in stub and "d_head ** 0.5" not in stub
    assert README_ROW in (copy / "README.md").read_text(), "attn-grade stubs wrote no row"

    after = snapshot(copy)
    changed = sorted(p for p in after if before.get(p) != after[p])
    assert not set(before) - set(after), "a file was removed"
    assert len(changed) <= 8, changed
    assert changed == sorted(listed), (
        f"adding an exercise changed {changed}; docs/AUTHORING.md's \"Adding an exercise\" "
        f"names {sorted(listed)}")

    # The package's checks of a new exercise, in the copy: the whole quick
    # tier (every rule docs/AUTHORING.md writes down), then the checks that
    # grade nothing but import more.
    quick = run(copy, "-m", "pytest", "-q", "-n", "0", "-p", "no:cacheprovider", "-m", "quick")
    assert quick.returncode == 0, quick.stdout[-4000:] + quick.stderr[-2000:]
    checks = run(copy, "-m", "pytest", "-q", "-n", "0", "-p", "no:cacheprovider",
                 "tests/test_manifest.py", "tests/test_stubs.py", "tests/test_mutant_corpus.py")
    assert checks.returncode == 0, checks.stdout[-4000:] + checks.stderr[-2000:]

    # The solution gets full marks; the mutant loses points and is named.
    graded = cli(copy, "grade", "solutions", "-e", EX)
    assert graded.returncode == 0, graded.stdout + graded.stderr
    got, total = score(graded.stdout)
    assert got == total == 5, graded.stdout
    [mutant] = runpy.run_path(str(copy / "tests" / "data" / "mutants" / f"{EX}.py"))["MUTANTS"]
    sub = tmp_path / "mutant"
    sub.mkdir()
    (sub / f"{EX}.py").write_text(mutant.apply(SOLUTION))
    graded = cli(copy, "grade", sub, "-e", EX)
    assert graded.returncode == 0, graded.stdout + graded.stderr
    got, total = score(graded.stdout)
    assert got < total, graded.stdout
    assert f"This looks like: {MISTAKE}" in graded.stdout, graded.stdout
    assert mutant.expect in graded.stdout

    # The student edition: the stub and the public suite, the replay module
    # in the secret reference's place, nothing of the reference or the
    # solution, no hidden suite.  The copy's release records the new
    # exercise's public answers only (RELEASE_OF_EX): recording every
    # exercise's was most of this test's time, and tests/test_release.py
    # holds the release of the others.
    edition = tmp_path / "edition"
    released = run(copy, "-c", RELEASE_OF_EX, EX, "release", edition, "--no-git", "--install",
                   "git+https://example.org/course")
    assert released.returncode == 0, released.stdout + released.stderr
    assert (edition / "exercises" / f"{EX}.py").read_text() == stub
    assert (edition / "grader" / "suites" / "public" / f"test_{EX}.py").is_file()
    assert not (edition / "grader" / "suites" / "hidden").exists()
    assert README_ROW in (edition / "README.md").read_text()
    replay = (edition / "grader" / "reference" / "secret" / f"{SECRET}.py").read_text()
    assert "replay_function" in replay and "def " not in replay
    secret_lines = [line.strip() for line in REFERENCE.splitlines()
                    if len(line.strip()) >= 24 and not line.strip().startswith(('"', "#"))]
    secret_lines.append("return scores / d_head ** 0.5")
    for path in edition.rglob("*"):
        if path.is_file() and path.suffix in (".py", ".md", ".ipynb", ".toml", ".txt"):
            text = path.read_text(errors="replace")
            leaked = [line for line in secret_lines if line in text]
            assert not leaked, f"{path.relative_to(edition)} holds {leaked}"
    # ... and its check replays the reference: the solution passes, the
    # mutant is named there too.
    for folder, full in ((copy / "solutions", True), (sub, False)):
        checked = subprocess.run([sys.executable, "-m", "grader.cli", "check", "X", "--no-fail",
                                  "--path", str(folder)], cwd=edition, env=_env(edition),
                                 capture_output=True, text=True, timeout=300)
        assert checked.returncode == 0, checked.stdout + checked.stderr
        got, total = score(checked.stdout)
        assert (got == total == 1) if full else (got == 0 and MISTAKE in checked.stdout), \
            checked.stdout
