"""Public test of ex02_mha's picture: plot_attention_heads draws one causal
pattern per head.  ``check`` keeps the PNG in the output folder
(``--artifacts``)."""
import numpy as np
import pytest

from grader.reference import heatmap_checks as hm
from grader.reference.secret import attention_np as ref

# matplotlib's first figure in a fresh worker takes seconds on a busy machine:
# a picture gets the time limit of a measurement, not of a formula.
pytestmark = [pytest.mark.exercise("ex02_mha"),
              pytest.mark.timeout_s(60)]

# The slips a picture of the heads shows (what the heatmap looks like instead).
PLOT_MISTAKES = ["plotted_scores", "plotted_no_mask", "no_scale", "softmax_over_queries",
                 "top_left_mask"]


def check_heads_case(student, q, k, causal=True, name="heads.png"):
    """plot_attention_heads(q, k, path, causal=causal) against the reference;
    returns what the probe saw."""
    out = student.probe("heatmap.draw", "plot_attention_heads", [q, k], {"causal": causal},
                        name)
    mistakes = ref.mistakes_of(ref.head_weights, PLOT_MISTAKES if causal else
                               ["plotted_scores", "no_scale", "softmax_over_queries"],
                               q, k, causal=causal)
    hm.check_heads(out, "plot_attention_heads", ref.head_weights(q, k, causal=causal),
                   mistakes)
    return out


@pytest.mark.points(1)
def test_plot_attention_heads_one_panel_per_head(student, request, artifacts_dir):
    """plot_attention_heads: one labelled causal heatmap per head"""
    rng = np.random.default_rng(29)
    q, k = (rng.standard_normal((4, 8, 16)) * 1.5 for _ in range(2))   # (h, S, d_head)
    out = check_heads_case(student, q, k, name="ex02_heads.png")
    request.node.feedback_on_pass = hm.keep(out, artifacts_dir, "ex02_heads.png",
                                            "plot_attention_heads")
