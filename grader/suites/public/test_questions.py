"""Public tests for the interview questions: each answer's form, and whether
each number and letter is right (never the right value).

Worth no points: the hidden suite grades numbers and letters, and staff
grade the free text.  Right or wrong comes from the sealed key
(``grader/reference/questions_checks.py`` says what it may reveal).
"""
import math

import pytest

from grader.feedback import Feedback
from grader.reference import questions_checks
from grader.reference.mistakes import looks_like
from grader.reference.secret import questions as forms

pytestmark = [pytest.mark.exercise("questions")]


def answer_form_problem(name, value) -> str | None:
    """Why ``value`` is not an answer of the right form (None: it is)."""
    kind = forms.FORMS[name]["kind"]
    if value is None:
        return f"{name} is still None: answer it"
    if kind == forms.NUMBER:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            return f"{name} must be a number (int or float), got {type(value).__name__}"
        if not math.isfinite(value):
            return f"{name} must be a finite number, got {value!r}"
    elif kind == forms.CHOICE:
        if not isinstance(value, str) or value.strip().upper() not in forms.LETTERS:
            return f"{name} must be one letter of {', '.join(forms.LETTERS)}, got {value!r}"
    else:
        if not isinstance(value, str):
            return f"{name} must be text (a str), got {type(value).__name__}"
        words = len(value.split())
        if not forms.MIN_WORDS <= words <= forms.MAX_WORDS:
            return (f"{name} has {words} words; write a few sentences "
                    f"({forms.MIN_WORDS} to {forms.MAX_WORDS} words)")
    return None


@pytest.mark.points(0)
@pytest.mark.parametrize("name", list(forms.FORMS))
def test_answered_in_the_right_form(student, name):
    """answer is filled in, in the right form"""
    problem = answer_form_problem(name, getattr(student, name))
    if problem:
        raise Feedback(problem)


def _graded(kind) -> list[str]:
    return [n for n, f in forms.FORMS.items() if f["kind"] == kind]


def _answer(student, name, kind):
    """The student's answer, or a skip when its form is wrong (its own check
    says so)."""
    value = getattr(student, name)
    if answer_form_problem(name, value) or forms.FORMS[name]["kind"] != kind:
        pytest.skip(f"{name} is not in the right form yet (see its own check)")
    return value


@pytest.mark.points(0)
@pytest.mark.parametrize("name", _graded(forms.NUMBER))
def test_number_is_right(student, name):
    """numeric answer is right (the check says right or wrong, never the value)"""
    got = _answer(student, name, forms.NUMBER)
    key = questions_checks.sealed()
    right, slip = questions_checks.judge_number(key, name, got)
    rtol = key["numbers"][name]["rtol"]
    if right:
        return
    raise Feedback(f"{name} = {got:.6g} is not right (graded to {rtol:.0%})."
                   + ("\n" + looks_like(slip) if slip else ""))


@pytest.mark.points(0)
@pytest.mark.parametrize("name", _graded(forms.CHOICE))
def test_choice_is_right(student, name):
    """multiple-choice answer is right (the check says right or wrong)"""
    letter = _answer(student, name, forms.CHOICE).strip().upper()
    right, why = questions_checks.judge_choice(questions_checks.sealed(), name, letter)
    if right:
        return
    raise Feedback(f"{name}: {letter} is not right" + (f": {why}." if why else "."))
