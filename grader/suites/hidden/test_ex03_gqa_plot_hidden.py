"""Hidden tests of ex03_gqa's picture: three query heads per K/V head, fewer
queries than keys, and multi-query attention (one K/V head for all)."""
import pytest

from grader.reference.cases import fixed_rng
from grader.reference import heatmap_checks as hm
from grader.reference.secret import attention_np as ref

# matplotlib's first figure in a fresh worker takes seconds on a busy machine:
# a picture gets the time limit of a measurement, not of a formula.
pytestmark = [pytest.mark.exercise("ex03_gqa"), pytest.mark.hidden,
              pytest.mark.timeout_s(60)]

PLOT_MISTAKES = ["plotted_kv_modulo", "plotted_scores", "plotted_no_mask", "no_scale",
                 "top_left_mask"]


@pytest.mark.points(1)
@pytest.mark.parametrize("h, h_kv", [(6, 2), (3, 1)])
def test_plot_gqa_heads_hidden(student, h, h_kv):
    """plot_gqa_heads with S_q < S_k: panels, titles and weights of each query head"""
    rng = fixed_rng("ex03-plot-hidden", h)
    q = rng.standard_normal((h, 3, 8)) * 2.0          # 3 queries: the last of 7 positions
    k = rng.standard_normal((h_kv, 7, 8)) * 2.0
    out = student.probe("heatmap.draw", "plot_gqa_heads", [q, k], {"causal": True},
                        "hidden.png")
    hm.check_gqa_heads(out, "plot_gqa_heads", ref.head_weights(q, k), h_kv,
                       ref.mistakes_of(ref.head_weights, PLOT_MISTAKES, q, k))
