"""Public test of ex03_gqa's picture: plot_gqa_heads draws every query
head's causal pattern and names the K/V head it shares.  ``check`` keeps the
PNG in the output folder (``--artifacts``)."""
import numpy as np
import pytest

from grader.reference import heatmap_checks as hm
from grader.reference.secret import attention_np as ref

# matplotlib's first figure in a fresh worker takes seconds on a busy machine:
# a picture gets the time limit of a measurement, not of a formula.
pytestmark = [pytest.mark.exercise("ex03_gqa"),
              pytest.mark.timeout_s(60)]

PLOT_MISTAKES = ["plotted_kv_modulo", "plotted_scores", "plotted_no_mask", "no_scale",
                 "top_left_mask"]


@pytest.mark.points(1)
def test_plot_gqa_heads_marks_the_shared_kv_heads(student, request, artifacts_dir):
    """plot_gqa_heads: a heatmap per query head, titled with the K/V head it reads"""
    rng = np.random.default_rng(329)
    q = rng.standard_normal((4, 8, 16)) * 1.5        # h = 4 query heads
    k = rng.standard_normal((2, 8, 16)) * 1.5        # h_kv = 2: two query heads per K/V head
    out = student.probe("heatmap.draw", "plot_gqa_heads", [q, k], {"causal": True},
                        "ex03_gqa_heads.png")
    hm.check_gqa_heads(out, "plot_gqa_heads", ref.head_weights(q, k), 2,
                       ref.mistakes_of(ref.head_weights, PLOT_MISTAKES, q, k))
    request.node.feedback_on_pass = hm.keep(out, artifacts_dir, "ex03_gqa_heads.png",
                                            "plot_gqa_heads")
