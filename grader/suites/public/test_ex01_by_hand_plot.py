"""Public test of ex01_by_hand's picture: plot_weights draws the worked
example's weights, without and with the mask.  Worth no points, like the
other public tests of A (the hidden suite grades the picture); ``check``
keeps the PNG, drawn from your own WEIGHTS_FULL and WEIGHTS_CAUSAL, in the
output folder (``--artifacts``)."""
import numpy as np
import pytest

from grader.reference import heatmap_checks as hm
from grader.reference.secret import by_hand

# matplotlib's first figure in a fresh worker takes seconds on a busy machine:
# a picture gets the time limit of a measurement, not of a formula.
pytestmark = [pytest.mark.exercise("ex01_by_hand"),
              pytest.mark.timeout_s(60)]

# What is drawn when the student's own constants are not yet weights.
EXAMPLE = by_hand.exact()


def _own(student, name):
    """The student's constant when it is a 3 x 3 matrix of numbers, else the
    worked example's (so that the picture can be drawn at all)."""
    try:
        value = np.asarray(getattr(student, name), dtype=np.float64)
    except (TypeError, ValueError):
        value = None
    if value is None or value.shape != (3, 3) or not np.all(np.isfinite(value)):
        return np.asarray(EXAMPLE[name], dtype=np.float64)
    return value


@pytest.mark.points(0)
def test_plot_weights_draws_both_patterns(student, request, artifacts_dir):
    """plot_weights draws the weights without and with the mask, labelled"""
    full = np.asarray(EXAMPLE["WEIGHTS_FULL"], dtype=np.float64)
    causal = np.asarray(EXAMPLE["WEIGHTS_CAUSAL"], dtype=np.float64)
    out = student.probe("heatmap.draw", "plot_weights", [full.tolist(), causal.tolist()])
    hm.check_two_panels(out, full, causal)
    own_full, own_causal = _own(student, "WEIGHTS_FULL"), _own(student, "WEIGHTS_CAUSAL")
    own = student.probe("heatmap.draw", "plot_weights",
                        [own_full.tolist(), own_causal.tolist()], {}, "ex01_weights.png")
    hm.check_two_panels(own, own_full, own_causal)    # the picture kept is one checked
    request.node.feedback_on_pass = hm.keep(own, artifacts_dir, "ex01_weights.png",
                                            "plot_weights")

