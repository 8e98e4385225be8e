"""Public test of ex08_mla's picture: plot_mla_heads draws each head's causal
pattern, all read from one cached latent.  ``check`` keeps the PNG in the
output folder (``--artifacts``)."""
import pytest
import torch

from grader.reference import heatmap_checks as hm
from grader.reference.secret import mla as ref

# matplotlib's first figure in a fresh worker takes seconds on a busy machine:
# a picture gets the time limit of a measurement, not of a formula.
pytestmark = [pytest.mark.exercise("ex08_mla"),
              pytest.mark.timeout_s(60)]

# The slips a picture of MLA's heads shows (what the heatmap looks like instead).
PLOT_MISTAKES = ["scale_d_c", "scale_d_nope", "no_scale", "plotted_no_rope", "plotted_no_mask",
                 "q_rope_position_zero", "absorb_transposed", "q_rope_from_front"]


def mla_plot_inputs(seed, s, d, h, d_c, d_rope, d_nope):
    """``[x (S, d), w_q, w_dkv, w_uk, w_kr, n_heads]`` in float64, scaled so
    that the heads' patterns are neither flat nor one-hot."""
    g = torch.Generator().manual_seed(seed)

    def w(*shape):
        return torch.randn(*shape, generator=g, dtype=torch.float64) / shape[-1] ** 0.5

    return [torch.randn(s, d, generator=g, dtype=torch.float64) * 2.0,
            w(h * (d_nope + d_rope), d) * 2.0, w(d_c, d) * 2.0, w(h * d_nope, d_c) * 2.0,
            w(d_rope, d) * 2.0, h]


def check_mla_plot(student, args, kwargs, name):
    out = student.probe("heatmap.draw", "plot_mla_heads", args, kwargs, name)
    hm.check_heads(out, "plot_mla_heads", ref.head_weights(*args, **kwargs),
                   ref.mistakes_of(ref.head_weights, PLOT_MISTAKES, *args, **kwargs))
    return out


@pytest.mark.points(1)
def test_plot_mla_heads_one_panel_per_head(student, request, artifacts_dir):
    """plot_mla_heads: one labelled causal heatmap per head"""
    args = mla_plot_inputs(829, 8, 32, 4, 16, 8, 8)
    out = check_mla_plot(student, args, {}, "ex08_mla_heads.png")
    request.node.feedback_on_pass = hm.keep(out, artifacts_dir, "ex08_mla_heads.png",
                                            "plot_mla_heads")
