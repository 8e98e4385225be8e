"""Public tests for ex02_mha: small cases a student can reason about."""
import numpy as np
import pytest

from grader.feedback import TOLERANCES, check_close
from grader.reference import attention as ref

pytestmark = [pytest.mark.exercise("ex02_mha")]


@pytest.mark.points(1)
def test_softmax_small(student):
    """softmax of a small matrix, over the last axis"""
    x = np.array([[1.0, 2.0, 3.0], [0.0, 0.0, 5.0]])
    check_close(student.softmax(x), ref.softmax(x), what="softmax(x)",
                atol=1e-9, rtol=1e-7,
                mistakes=ref.mistakes_of(ref.softmax, ["softmax_over_queries"], x))
