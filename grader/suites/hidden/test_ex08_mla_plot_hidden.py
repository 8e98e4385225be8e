"""Hidden test of ex08_mla's picture: other widths (d_c unlike d_nope +
d_rope, so each wrong scale shows), given positions and a RoPE base."""
import pytest
import torch

from grader.reference import heatmap_checks as hm
from grader.reference.cases import fixed_seed
from grader.reference.secret import mla as ref

# matplotlib's first figure in a fresh worker takes seconds on a busy machine:
# a picture gets the time limit of a measurement, not of a formula.
pytestmark = [pytest.mark.exercise("ex08_mla"), pytest.mark.hidden,
              pytest.mark.timeout_s(60)]

PLOT_MISTAKES = ["scale_d_c", "scale_d_nope", "no_scale", "plotted_no_rope", "plotted_no_mask",
                 "q_rope_position_zero", "rope_positions_unused", "absorb_transposed",
                 "q_rope_from_front"]


@pytest.mark.points(1)
def test_plot_mla_heads_hidden(student):
    """plot_mla_heads with positions given: each head's weights, labelled"""
    g = torch.Generator().manual_seed(fixed_seed("ex08-plot-hidden"))
    s, d, h, d_c, d_rope, d_nope = 6, 24, 3, 12, 4, 6

    def w(*shape):
        return torch.randn(*shape, generator=g, dtype=torch.float64) * 2.0 / shape[-1] ** 0.5

    args = [torch.randn(s, d, generator=g, dtype=torch.float64) * 2.0,
            w(h * (d_nope + d_rope), d), w(d_c, d), w(h * d_nope, d_c), w(d_rope, d), h]
    kwargs = {"positions": torch.tensor([3, 5, 8, 13, 21, 34]), "rope_base": 500.0}
    out = student.probe("heatmap.draw", "plot_mla_heads", args, kwargs, "hidden.png")
    hm.check_heads(out, "plot_mla_heads", ref.head_weights(*args, **kwargs),
                   ref.mistakes_of(ref.head_weights, PLOT_MISTAKES, *args, **kwargs))
