"""Checks that exercise H's public and hidden suites share (shipped with the
public suite): seeded MLA inputs, the explicit form and the absorbed decode
against the reference (dtype kept, every known mistake named), and the
mistakes each formula is checked for."""
import torch

from grader.feedback import Feedback, check_close
from grader.reference.secret import mla as ref

ATTENTION_MISTAKES = ["rope_on_latent", "scale_d_c", "scale_d_c_rope", "scale_d_nope",
                      "no_scale", "absorb_transposed", "rope_positions_unused",
                      "q_rope_position_zero", "no_rope_score", "q_rope_from_front",
                      "scale_latent_only"]
DECODE_MISTAKES = ["scale_d_c", "scale_d_c_rope", "scale_d_nope", "no_scale",
                   "absorb_transposed", "top_left_mask", "rope_positions_unused",
                   "q_rope_position_zero", "decode_position_s", "no_rope_score",
                   "q_rope_from_front", "scale_latent_only"]
CACHE_BYTES_MISTAKES = ["no_rope_key", "latent_as_k_and_v", "cache_doubled",
                        "bytes_per_elem_ignored", "fp32_cache"]
SAVING_MISTAKES = ["no_rope_key", "saving_inverted", "rope_key_per_head", "k_width_no_rope"]
# mla_decode_intensity's counting slips, tried by both suites; the hidden one
# adds bytes_per_elem_ignored, which its other element widths tell from
# flops_double (at the public case's 2 bytes both double the answer).
INTENSITY_MISTAKES = ["rope_key_per_head", "latent_per_head", "flops_scores_only",
                      "flops_double", "intensity_no_q_o", "no_rope_key", "flops_wsum_with_rope"]


def mla_inputs(seed, b, s, d, h, d_c, d_rope, d_nope, d_v, dtype=torch.float64):
    """``(x, w_q, w_dkv, w_uk, w_uv, w_kr, w_o)`` as torch tensors."""
    g = torch.Generator().manual_seed(seed)

    def w(rows, cols):
        return (torch.randn(rows, cols, generator=g, dtype=torch.float64) / cols ** 0.5) \
            .to(dtype)
    x = torch.randn(b, s, d, generator=g, dtype=torch.float64).to(dtype)
    return (x, w(h * (d_nope + d_rope), d), w(d_c, d), w(h * d_nope, d_c), w(h * d_v, d_c),
            w(d_rope, d), w(d, h * d_v))


def check_dtype(got, dtype, what):
    """Feedback when a tensor came back in another dtype than its inputs'."""
    if isinstance(got, torch.Tensor) and got.dtype != dtype:
        raise Feedback(f"{what} returned {got.dtype} for {dtype} inputs: the output keeps "
                       f"the input's dtype")


def check_attention(student, args, n_heads, *, what, atol, rtol, lazy=False, **kwargs):
    """``student.mla_attention(*args, n_heads)`` against the reference.
    ``lazy``: the known mistakes are computed for a wrong answer only (the
    hidden suites; a public suite computes them, so that release records
    them for the student edition's replay)."""
    got = student.mla_attention(*args, n_heads, **kwargs)
    check_dtype(got, args[0].dtype, what)

    def mistakes():
        return ref.mistakes_of(ref.attention, ATTENTION_MISTAKES, *args, n_heads, **kwargs)
    check_close(got, ref.attention(*args, n_heads, **kwargs), what=what, atol=atol, rtol=rtol,
                mistakes=mistakes if lazy else mistakes())


def check_decode(student, x_t, c_kv, k_rope, w_q, w_uk, w_uv, w_o, n_heads, *, what, atol,
                 rtol, lazy=False, **kwargs):
    """``student.mla_decode`` of one token against the reference (``lazy``: as
    for ``check_attention``)."""
    args = (x_t, c_kv, k_rope, w_q, w_uk, w_uv, w_o, n_heads)
    got = student.mla_decode(*args, **kwargs)
    check_dtype(got, x_t.dtype, what)

    def mistakes():
        return ref.mistakes_of(ref.decode, DECODE_MISTAKES, *args, **kwargs)
    check_close(got, ref.decode(*args, **kwargs), what=what, atol=atol, rtol=rtol,
                mistakes=mistakes if lazy else mistakes())
