"""Public tests for the interview questions: the form of each answer only.

Worth no points: the hidden suite grades numbers and letters, and staff
grade the free text.
"""
import math

import pytest

from grader.feedback import Feedback
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
