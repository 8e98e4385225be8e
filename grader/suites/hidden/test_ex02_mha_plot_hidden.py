"""Hidden tests of ex02_mha's picture: fewer queries than keys (a chunk of a
longer prompt: the end-aligned mask), no mask, and three heads."""
import pytest

from grader.reference.cases import fixed_rng
from grader.reference import heatmap_checks as hm
from grader.reference.secret import attention_np as ref

# matplotlib's first figure in a fresh worker takes seconds on a busy machine:
# a picture gets the time limit of a measurement, not of a formula.
pytestmark = [pytest.mark.exercise("ex02_mha"), pytest.mark.hidden,
              pytest.mark.timeout_s(60)]

PLOT_MISTAKES = ["plotted_scores", "plotted_no_mask", "no_scale", "softmax_over_queries",
                 "top_left_mask"]


@pytest.mark.points(1)
@pytest.mark.parametrize("causal", [True, False])
def test_plot_attention_heads_hidden(student, causal):
    """plot_attention_heads with S_q < S_k (end-aligned mask), or without a mask"""
    rng = fixed_rng("ex02-plot-hidden")
    q = rng.standard_normal((3, 4, 8)) * 2.0          # 4 queries: the last of 9 positions
    k = rng.standard_normal((3, 9, 8)) * 2.0
    out = student.probe("heatmap.draw", "plot_attention_heads", [q, k], {"causal": causal},
                        "hidden.png")
    names = PLOT_MISTAKES if causal else ["plotted_scores", "no_scale", "softmax_over_queries"]
    hm.check_heads(out, "plot_attention_heads", ref.head_weights(q, k, causal=causal),
                   ref.mistakes_of(ref.head_weights, names, q, k, causal=causal))
