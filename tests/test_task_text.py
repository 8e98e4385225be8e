"""What every exercise's task text tells the student (issue 29, item 5): how
long it usually takes and which chapter section it comes from, said once
where the title is said once; and the slips the issue found, held fixed
(the counts in ``questions.py``, "(with fewer queries than keys)" on any
case, "1 warm-up calls")."""
from __future__ import annotations

import ast
import re

import pytest

from grader.notebooks import build_notebook
from grader.registry import EXERCISES
from tests.conftest import REPO

NUMBER_WORDS = {w: i for i, w in enumerate(
    "zero one two three four five six seven eight nine ten eleven twelve thirteen "
    "fourteen fifteen sixteen seventeen eighteen nineteen".split())}
NUMBER_WORDS.update({w: 10 * i for i, w in enumerate(
    "_ _ twenty thirty forty fifty".split()) if w != "_"})


def _number(word: str) -> int:
    """An English number of 0 to 59 ("Twenty-two") as an int."""
    return sum(NUMBER_WORDS[part] for part in word.lower().split("-"))


def _docstring(folder: str, name: str) -> str:
    return ast.get_docstring(ast.parse((REPO / folder / f"{name}.py").read_text()))


@pytest.mark.quick
@pytest.mark.author
@pytest.mark.parametrize("folder", ["exercises", "solutions"])
@pytest.mark.parametrize("name", list(EXERCISES))
def test_each_task_says_how_long_and_which_chapter_section(folder, name):
    """The paragraph after the title: "Usually takes about ..." and "From the
    chapters: ..." naming a section (a numbered one or a quoted heading)."""
    doc = _docstring(folder, name)
    intro = " ".join(doc.split("\n\n")[1].split())
    assert re.match(r"Usually takes about (\d+(\.\d+)? hours?|an hour|\d+ minutes)\b",
                    intro), f"{folder}/{name}.py: {intro!r}"
    source = intro.split("From the chapters: ", 1)
    assert len(source) == 2, f"{folder}/{name}.py names no chapter: {intro!r}"
    assert re.search(r'section \d+|"[A-Z][^"]+"', source[1]), source[1]


@pytest.mark.quick
@pytest.mark.author
@pytest.mark.parametrize("name", list(EXERCISES))
def test_the_notebook_says_the_title_once_then_the_time(name):
    """The notebook's heading is the docstring's title, not repeated below
    it, and the time and chapter come next."""
    stub = (REPO / "exercises" / f"{name}.py").read_text()
    heading, _, body = build_notebook(name, stub).cells[0].source.partition("\n")
    assert heading.startswith(f"# Exercise {EXERCISES[name].letter}"), heading
    title_line = _docstring("exercises", name).partition("\n")[0].rstrip(".")
    assert title_line.lower() not in body.lower(), body[:200]
    assert body.lstrip("\n").startswith(("Usually takes about", "Attention, its caches")), \
        body[:200]
    assert "Usually takes about" in body and "From the chapters: " in " ".join(body.split())


@pytest.mark.quick
@pytest.mark.parametrize("folder", ["exercises", "solutions"])
def test_the_questions_count_their_questions_and_not_the_exercises(folder):
    """"Twenty-two short questions ... on the exercises' material": the number
    of questions is counted, so a question added updates it; the exercises are
    not counted there, so adding an exercise touches no questions.py."""
    doc = _docstring(folder, "questions")
    said = re.search(r"([A-Z][a-z-]+) short questions of .*?on the\s+exercises'", doc, re.S)
    assert said, doc[:600]
    tree = ast.parse((REPO / folder / "questions.py").read_text())
    questions = [t.id for n in tree.body if isinstance(n, ast.Assign) for t in n.targets
                 if isinstance(t, ast.Name) and re.fullmatch(r"Q\d\d_[A-Z0-9_]+", t.id)]
    assert _number(said.group(1)) == len(questions) == 22


@pytest.mark.quick
def test_the_instructor_s_guide_counts_the_questions_too():
    tree = ast.parse((REPO / "solutions" / "questions.py").read_text())
    count = sum(1 for n in tree.body if isinstance(n, ast.Assign) for t in n.targets
                if isinstance(t, ast.Name) and re.fullmatch(r"Q\d\d_[A-Z0-9_]+", t.id))
    guide = " ".join((REPO / "docs" / "INSTRUCTOR.md").read_text().split())
    said = re.search(r"`exercises/questions.py` \(and its notebook\) holds ([a-z-]+) "
                     r"interview questions", guide)
    assert said and _number(said.group(1)) == count, said and said.group(0)


def test_the_top_left_mask_is_named_without_a_claim_on_the_case():
    """The top-left mask's diagnosis is printed on cases with more queries
    than keys too: it states the convention, not which of S_q, S_k is larger."""
    from grader.reference.secret.attention import MISTAKES

    text = MISTAKES["top_left_mask"]
    assert "S_k - S_q + i" in text
    assert not re.search(r"(fewer|more) (queries|keys) than", text), text


@pytest.mark.parametrize("warmup, repeats, said", [
    (1, 1, "expected at least 2 (1 warm-up call, then 1 timed one)"),
    (2, 5, "expected at least 7 (2 warm-up calls, then 5 timed ones)"),
])
def test_the_timer_s_call_count_is_said_in_good_english(warmup, repeats, said):
    from grader.feedback import Feedback
    from grader.suites.hidden.test_ex04_quadratic_hidden import check_calls

    with pytest.raises(Feedback) as err:
        check_calls({"calls": 0}, warmup, repeats, "time_fn")
    assert said in str(err.value), str(err.value)
