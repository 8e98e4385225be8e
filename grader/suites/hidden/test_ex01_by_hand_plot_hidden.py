"""Hidden test of ex01_by_hand's picture: plot_weights on weights it has not
seen (the same for every student and seed: a picture's grade is fixed)."""
import numpy as np
import pytest

from grader.reference import heatmap_checks as hm
from grader.reference.secret import by_hand

# matplotlib's first figure in a fresh worker takes seconds on a busy machine:
# a picture gets the time limit of a measurement, not of a formula.
pytestmark = [pytest.mark.exercise("ex01_by_hand"), pytest.mark.hidden,
              pytest.mark.timeout_s(60)]


def _weights():
    scores = np.array([[0.3, -1.2, 2.0], [1.5, 0.1, -0.4], [-0.7, 0.9, 0.2]])
    return by_hand.softmax_rows(scores), by_hand.softmax_rows(scores, by_hand.CAUSAL)


@pytest.mark.points(1)
def test_plot_weights_hidden(student):
    """plot_weights draws the given weights without and with the mask, labelled"""
    full, causal = _weights()
    out = student.probe("heatmap.draw", "plot_weights", [full.tolist(), causal.tolist()],
                        {}, "hidden.png")
    hm.check_two_panels(out, full, causal)
