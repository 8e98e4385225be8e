"""The text table: one total that cannot be read as a pass, no 0/0 rows."""
import pytest

from grader.report import FAILED, NEEDS_REGRADE, NOT_RUN, PASSED, Report, to_text
from grader.report import TestResult as Result

# The quick tier (tests/conftest.py): no PyTorch import, no grading.
pytestmark = pytest.mark.quick


def _t(exercise, name, status, score, max_score, output=""):
    return Result(exercise=exercise, name=name, title=name.replace("_", " "),
                      max_score=max_score, score=score, status=status, output=output)


def test_the_total_says_failed_when_a_zero_point_check_fails():
    report = Report("sub", "public", tests=[_t("ex02_mha", "test_softmax", PASSED, 2, 2),
                           _t("ex01_by_hand", "test_scores_filled", FAILED, 0, 0, "fill it")])
    text = to_text(report, public_only=True)
    assert "Total: 2/2, but 1 test FAILED" in text, text
    assert "0/0" not in text, text
    assert "ex01_by_hand  0 of 1 checks pass (no points here)" in text, text


def test_no_zero_over_zero_rows_and_a_clean_total_when_all_pass():
    report = Report("sub", "public", tests=[_t("questions", "test_q1", PASSED, 0, 0),
                           _t("ex07_flash_attention", "test_kernel", NOT_RUN, 0, 0,
                              "not run: needs Triton (Linux)"),
                           _t("ex07_flash_attention", "test_step", PASSED, 1, 1)])
    text = to_text(report, public_only=True)
    assert "0/0" not in text and "FAILED" not in text, text
    assert "\nTotal: 1/1\n" in text and "questions  1 of 1 checks pass" in text, text
    assert not [ln for ln in text.splitlines() if ln != ln.rstrip()], text


def test_points_pending_a_regrade_are_named_in_the_total():
    report = Report("sub", "hidden", tests=[_t("ex02_mha", "test_softmax", PASSED, 2, 2),
                           _t("ex04_quadratic", "test_slope", NEEDS_REGRADE, 0, 3,
                              "not graded: machine too noisy")])
    text = to_text(report)
    assert "Total: 2/5, 3 points pending a regrade (REGR), not lost\n" in text, text


def test_the_students_text_says_not_judged_in_student_words():
    """The staff's REGR and NEEDS REGRADE become, in a student's text, a test
    not judged that the instructor regrades, its points not lost."""
    report = Report("sub", "public", tests=[_t("ex02_mha", "test_softmax", PASSED, 2, 2),
                           _t("ex04_quadratic", "test_slope", NEEDS_REGRADE, 0, 3,
                              "not graded: machine too noisy")])
    text = to_text(report, public_only=True)
    assert "REGR" not in text and "NEEDS REGRADE" not in text, text
    assert "\n  WAIT test slope" in text, text
    assert "Total: 2/5, 3 points not judged yet (WAIT), not lost\n" in text, text
    assert "not judged: 1 test(s) could not be judged on this run; your instructor " \
           "will regrade them" in text, text
    assert "REGR" in to_text(report), "the staff's text keeps its word"
