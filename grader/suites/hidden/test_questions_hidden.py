"""Hidden tests for the interview questions.

Numbers are graded to each question's relative tolerance, letters exactly;
a wrong answer is told which slip it looks like and how the answer is found.
Free-text answers earn no autograder points: they are collected, with the
rubric, for staff (``for_staff``; the batch's rubric sheet and Gradescope's
hidden entries), and fail here only when there is nothing to collect.
"""
import math

import pytest

from grader.feedback import Feedback
from grader.reference.mistakes import looks_like
from grader.reference.secret import questions as qref
from grader.rubric_line import rubric_text

pytestmark = [pytest.mark.exercise("questions"), pytest.mark.hidden]


def _names(kind):
    return [n for n, f in qref.FORMS.items() if f["kind"] == kind]


def _close(got, want, rtol) -> bool:
    return math.isclose(float(got), float(want), rel_tol=rtol, abs_tol=0.0)


@pytest.mark.points(2)
@pytest.mark.parametrize("name", _names(qref.NUMBER))
def test_number(student, name, request):
    """numeric answer is right"""
    key = qref.key(name)
    got = getattr(student, name)
    if isinstance(got, bool) or not isinstance(got, (int, float)) or not math.isfinite(got):
        raise Feedback(f"{name} must be a finite number; got {got!r}.\nHow: {key['how']}.")
    want, rtol = key["answer"], key["rtol"]
    if _close(got, want, rtol):
        request.node.feedback_on_pass = f"Right. {key['how']}."
        return
    lines = [f"{name}: got {got:.6g}, expected about {want:.4g} (graded to "
             f"{rtol:.0%}; yours is off by {abs(got - want) / abs(want):.0%})."]
    slip = next((d for d, v in key["mistakes"].values() if _close(got, v, rtol)), None)
    if slip:
        lines.append(looks_like(slip))
    lines.append(f"How: {key['how']}.")
    raise Feedback("\n".join(lines))


@pytest.mark.points(1)
@pytest.mark.parametrize("name", _names(qref.CHOICE))
def test_choice(student, name, request):
    """multiple-choice answer is right"""
    key = qref.key(name)
    got = getattr(student, name)
    letter = got.strip().upper() if isinstance(got, str) else None
    if letter == key["answer"]:
        request.node.feedback_on_pass = f"Right: {key['why']}."
        return
    if letter not in qref.LETTERS:
        raise Feedback(f"{name} must be one letter of {', '.join(qref.LETTERS)}; got {got!r}.")
    raise Feedback(f"{name}: {letter} is not right: {key['wrong'][letter]}.\n"
                   f"The answer is {key['answer']}: {key['why']}.")


@pytest.mark.points(0)
@pytest.mark.parametrize("name", _names(qref.TEXT))
def test_text_collected_for_staff(student, name, request, for_staff):
    """free-text answer is collected for staff grading"""
    key = qref.key(name)
    got = getattr(student, name)
    text = got.strip() if isinstance(got, str) else ""
    words = len(text.split())
    for_staff({"exercise": "questions", "question": name, "points": key["staff_points"],
               "answer": text, "rubric": rubric_text(key["rubric"])})
    if not qref.MIN_WORDS <= words <= qref.MAX_WORDS:
        raise Feedback(f"{name} has {words} words: staff grade a few sentences "
                       f"({qref.MIN_WORDS} to {qref.MAX_WORDS} words), so this answer will "
                       "likely earn none of its staff points.")
    request.node.feedback_on_pass = (f"Collected for your course staff ({words} words), who "
                                     f"grade it out of {key['staff_points']} with a rubric.")
