"""Independent reference attention for the suites, with known mistakes.

Written apart from ``solutions/`` (PyTorch, float64, einsum) so that a bug
in a solution is not also a bug in the reference.  Each function takes a
``mistake=`` switch that reproduces one known wrong answer from the
curriculum's list; the suites pass those wrong answers to
``grader.feedback.check_close(mistakes=...)`` so the feedback can name the
mistake.  Inputs may be NumPy arrays or tensors; outputs are float64
tensors.
"""
from __future__ import annotations

import math

import numpy as np
import torch

from grader.reference.mistakes import mistakes_of  # noqa: F401  (suites call ref.mistakes_of)

# Mistake ids -> what the feedback says.
MISTAKES = {
    "no_scale": "the scores were not scaled by 1/sqrt(d_head)",
    "scale_by_d": "the scores were scaled by 1/d_head instead of 1/sqrt(d_head)",
    "softmax_over_queries": "the softmax ran over queries instead of keys",
    "softmax_unstable": "the softmax was not stabilized (subtract the max before exp): "
                        "large logits overflow to inf and give NaN",
    "softmax_global_max": "the softmax subtracted the max of the whole array instead of each "
                          "row's max: a row far below the others underflows to 0/0",
    "no_mask": "no causal mask was applied (queries can see later keys)",
    "diagonal_masked": "the causal mask also hides the diagonal (a query must see its own key)",
    "top_left_mask": "the causal mask is aligned to the top-left instead of the end "
                     "(query i sits at position S_k - S_q + i, so the last query sees "
                     "every key)",
    "mask_wrong_triangle": "the causal mask hides the wrong triangle (the past instead of the "
                           "future)",
    "rope_on_values": "RoPE was also applied to the values (it goes on q and k only)",
    "no_rope": "RoPE was not applied",
    "rope_interleaved": "RoPE rotated interleaved pairs (2j, 2j+1) instead of rotate-half "
                        "pairs (j, j + d_head/2)",
    "rope_positions_ignored": "RoPE ignored the given positions (it used 0..S-1)",
    "rope_wrong_frequency": "the RoPE frequencies use base ** (-j / d_head) instead of "
                            "base ** (-2j / d_head)",
    "split_without_transpose": "the heads were split by a reshape without the transpose "
                               "((B, S, h, d_head) -> (B, h, S, d_head) needs a transpose)",
    "no_output_projection": "the output projection w_o was forgotten",
    "kv_repeat_seq_axis": "the K/V heads were repeated along the sequence axis (dim -2) "
                          "instead of the head axis (dim -3, or 1): (B, h_kv, S, d) must become "
                          "(B, h_kv * n_rep, S, d)",
    "kv_tile": "the K/V heads were repeated with tile (0,1,0,1) where repeat_interleave "
               "(0,0,1,1) is meant: query head i must use KV head i // (h / h_kv)",
    "no_kv_repeat": "the K/V heads were not repeated for their query groups",
    "scale_multiplied": "the scores were multiplied by sqrt(d_head) instead of divided by it",
    "mask_after_softmax": "the mask was applied after the softmax (masked weights zeroed "
                          "without renormalizing): add -inf to the scores before the softmax",
    "rope_wrong_direction": "RoPE turned the pairs the wrong way (the sin terms have the "
                            "wrong sign: out[j] = x[j]*cos - x[j+d/2]*sin)",
    "merge_without_transpose": "the heads were merged by a reshape without the transpose "
                               "((B, h, S, d_head) -> (B, S, h, d_head) needs a transpose "
                               "first)",
    "mask_neg_1e4": "the causal mask holds -1e4 where it must hold -inf (a finite "
                    "penalty still leaks weight to later keys when scores are large, and "
                    "a row that may see no key averages them)",
    "rope_positions_off_by_one": "the RoPE positions are off by one (the first token "
                                 "sits at position 0)",
    "scale_by_d_model": "the scores were scaled by 1/sqrt(d_model) instead of "
                        "1/sqrt(d_head) (the width of one head)",
    "softmax_ignores_axis": "the softmax ignored its axis argument (it always ran over "
                            "the last axis)",
    "softmax_base_2": "the softmax used 2**x instead of exp(x) (the base of the "
                      "exponent is e)",
    "empty_row_nan": "a row that may see no key came out NaN (0/0): give it zeros "
                     "(guard the sum before dividing)",
    "rope_inverse_frequency": "the RoPE frequencies use base ** (+2j / d_head): the "
                              "exponent's sign is flipped (frequencies must fall with j)",
    "rope_base_ignored": "RoPE ignored the base argument (it always used 10000)",
    "rope_only_q": "RoPE was applied to q only (k needs the same rotation, so that q.k "
                   "sees the distance between positions)",
    "mask_ignores_s_k": "the causal mask ignored s_k (it always came out square, s_q by s_q)",
    "split_strided": "each head took strided features (i, i + h, i + 2h, ...) instead of a "
                     "contiguous block of d_head features",
    "plotted_scores": "the scores were drawn, not the weights (the softmax over keys is "
                      "missing: weights are softmax(scores), each row summing to 1)",
    "plotted_no_mask": "the weights were drawn without the causal mask (a causal pattern is "
                       "a lower triangle: later keys get weight 0)",
    "plotted_kv_modulo": "each query head was drawn against K/V head i % h_kv where "
                         "i // (h / h_kv) is meant (consecutive query heads share a K/V head)",
    "float64_for_float32": "the result is float64 for float32 inputs (compute in the "
                           "inputs' dtype, or cast the result back to q.dtype; under NumPy 2 "
                           "even dividing by np.sqrt(d_head), a NumPy float64, makes float32 "
                           "scores float64: divide by math.sqrt(d_head))",
}


def t64(x) -> torch.Tensor:
    if isinstance(x, torch.Tensor):
        return x.detach().to("cpu", torch.float64)
    return torch.as_tensor(np.asarray(x), dtype=torch.float64)


def softmax(x, dim=-1, mistake=None) -> torch.Tensor:
    x = t64(x)
    if mistake == "softmax_over_queries":
        dim = -2 if x.dim() >= 2 else dim
    if mistake == "softmax_ignores_axis":
        dim = -1
    if mistake == "softmax_unstable":
        with torch.no_grad():
            e = torch.exp(x.float()).double()   # float32 exp overflows past ~88
        return e / e.sum(dim=dim, keepdim=True)
    if mistake == "softmax_global_max":
        e = torch.exp(x - x.max())   # one shift for every row: low rows become 0/0
        total = e.sum(dim=dim, keepdim=True)
        # a solution that keeps the contract's empty rows at zero gives 0 there
        return torch.where(total > 0, e / total, torch.zeros_like(e))
    m = torch.amax(x, dim=dim, keepdim=True)
    m = torch.where(torch.isfinite(m), m, torch.zeros_like(m))
    e = torch.pow(2.0, x - m) if mistake == "softmax_base_2" else torch.exp(x - m)
    s = e.sum(dim=dim, keepdim=True)
    if mistake == "empty_row_nan":
        return e / s                                  # 0/0 on a row of only -inf
    return torch.where(s > 0, e / torch.where(s > 0, s, torch.ones_like(s)), torch.zeros_like(e))


def causal_allowed(s_q: int, s_k: int, mistake=None) -> torch.Tensor:
    """Boolean ``(s_q, s_k)``: may query i see key j (end-aligned)?"""
    i = torch.arange(s_q)[:, None]
    j = torch.arange(s_k)[None, :]
    offset = s_k - s_q
    if mistake == "top_left_mask":
        offset = 0
    if mistake == "diagonal_masked":
        return j < offset + i
    if mistake == "mask_wrong_triangle":
        return j >= offset + i
    if mistake == "no_mask":
        return torch.ones(s_q, s_k, dtype=torch.bool)
    return j <= offset + i


def causal_mask(s_q: int, s_k: int | None = None, mistake=None) -> torch.Tensor:
    s_k = s_q if s_k is None or mistake == "mask_ignores_s_k" else s_k
    allowed = causal_allowed(s_q, s_k, mistake)
    blocked = -1e4 if mistake == "mask_neg_1e4" else -math.inf
    return torch.where(allowed, 0.0, blocked).to(torch.float64)


def rope(x, positions, base=10000.0, mistake=None) -> torch.Tensor:
    x = t64(x)
    d = x.shape[-1]
    if d % 2:
        raise ValueError("odd d_head")
    half = d // 2
    pos = t64(positions)
    if mistake == "rope_positions_ignored":
        pos = torch.arange(x.shape[-2], dtype=torch.float64)
    if mistake == "rope_positions_off_by_one":
        pos = pos + 1
    if mistake == "rope_base_ignored":
        base = 10000.0
    exponent = -torch.arange(half, dtype=torch.float64) * (1.0 if mistake ==
                                                           "rope_wrong_frequency" else 2.0) / d
    if mistake == "rope_inverse_frequency":
        exponent = -exponent
    theta = torch.outer(pos, torch.pow(torch.tensor(float(base), dtype=torch.float64),
                                       exponent))                        # (S, half)
    cos, sin = torch.cos(theta), torch.sin(theta)
    if mistake == "rope_wrong_direction":
        sin = -sin
    if mistake == "rope_interleaved":
        pairs = x.reshape(*x.shape[:-1], half, 2)
        a, b = pairs[..., 0], pairs[..., 1]
        return torch.stack([a * cos - b * sin, b * cos + a * sin], dim=-1).reshape(x.shape)
    a, b = x[..., :half], x[..., half:]
    return torch.cat([a * cos - b * sin, b * cos + a * sin], dim=-1)


def attention(q, k, v, *, causal=False, mask=None, scale=None, mistake=None) -> torch.Tensor:
    """``(..., S_q, d)`` x ``(..., S_k, d)``; ``causal`` is end-aligned."""
    q, k, v = t64(q), t64(k), t64(v)
    d = q.shape[-1]
    scale = 1.0 / math.sqrt(d) if scale is None else scale
    if mistake == "no_scale":
        scale = 1.0
    elif mistake == "scale_by_d":
        scale = 1.0 / d
    elif mistake == "scale_multiplied":
        scale = math.sqrt(d)
    scores = torch.einsum("...qd,...kd->...qk", q, k) * scale
    if mask is not None:
        scores = scores + t64(mask)
    if causal:
        if mistake == "mask_after_softmax":
            allowed = causal_allowed(q.shape[-2], k.shape[-2])
            weights = softmax(scores, -1) * allowed
            return torch.einsum("...qk,...kd->...qd", weights, v)
        scores = scores + causal_mask(q.shape[-2], k.shape[-2], mistake)
    weights = softmax(scores, -1, mistake)
    return torch.einsum("...qk,...kd->...qd", weights, v)


def repeat_kv(x, n_rep: int, mistake=None) -> torch.Tensor:
    """``(B, h_kv, S, d)`` -> ``(B, h_kv*n_rep, S, d)``; KV head j serves query heads
    ``j*n_rep .. (j+1)*n_rep - 1``."""
    x = t64(x)
    if mistake == "kv_tile":
        return x.repeat(1, n_rep, 1, 1)
    if mistake == "kv_repeat_seq_axis":
        return torch.repeat_interleave(x, n_rep, dim=2)
    return torch.repeat_interleave(x, n_rep, dim=1)


def split_heads(x, n_heads: int, mistake=None) -> torch.Tensor:
    x = t64(x)
    b, s, width = x.shape
    if mistake == "split_strided":
        return x.reshape(b, s, width // n_heads, n_heads).permute(0, 3, 1, 2)
    if mistake == "split_without_transpose":
        return x.reshape(b, n_heads, s, width // n_heads)
    return x.reshape(b, s, n_heads, width // n_heads).permute(0, 2, 1, 3)


def merge_heads(x, mistake=None) -> torch.Tensor:
    x = t64(x)
    b, h, s, d = x.shape
    if mistake == "merge_without_transpose":
        return x.reshape(b, s, h * d)
    return x.permute(0, 2, 1, 3).reshape(b, s, h * d)


def gqa(x, w_q, w_k, w_v, w_o, n_heads, n_kv_heads=None, *, causal=True, positions=None,
        rope_base=10000.0, mistake=None) -> torch.Tensor:
    """Grouped-query (and, with ``n_kv_heads == n_heads``, multi-head) attention."""
    x = t64(x)
    n_kv_heads = n_heads if n_kv_heads is None else n_kv_heads
    b, s, _ = x.shape
    pos = torch.arange(s) if positions is None else t64(positions)
    q = split_heads(x @ t64(w_q).T, n_heads, mistake)          # (B, h, S, d_head)
    k = split_heads(x @ t64(w_k).T, n_kv_heads, mistake)       # (B, h_kv, S, d_head)
    v = split_heads(x @ t64(w_v).T, n_kv_heads, mistake)
    if mistake != "no_rope":
        q, k = rope(q, pos, rope_base, mistake), rope(k, pos, rope_base, mistake)
        if mistake == "rope_only_q":
            k = split_heads(x @ t64(w_k).T, n_kv_heads)
        if mistake == "rope_on_values":
            v = rope(v, pos, rope_base)
    if n_kv_heads != n_heads:
        rep = n_heads // n_kv_heads
        k, v = repeat_kv(k, rep, mistake), repeat_kv(v, rep, mistake)
    # 1/sqrt(d_model) uses x's width, which need not be h * d_head.
    scale = 1.0 / math.sqrt(x.shape[-1]) if mistake == "scale_by_d_model" else None
    out = merge_heads(attention(q, k, v, causal=causal, scale=scale, mistake=mistake), mistake)
    if mistake == "no_output_projection":
        return out
    return out @ t64(w_o).T

def head_weights(q, k, *, causal=True, mistake=None) -> np.ndarray:
    """The attention weights one sequence's heads draw: ``q`` ``(h, S_q, d)``,
    ``k`` ``(h_kv, S_k, d)`` (``h_kv`` divides ``h``; query head ``i`` reads
    K/V head ``i // (h / h_kv)``).  Returns ``(h, S_q, S_k)`` float64."""
    q, k = t64(q), t64(k)
    n_rep = q.shape[0] // k.shape[0]
    if mistake == "plotted_kv_modulo":
        k = k.repeat(n_rep, 1, 1)
    else:
        k = repeat_kv(k[None], n_rep)[0]
    if mistake == "plotted_scores":
        scores = torch.einsum("hqd,hkd->hqk", q, k) / math.sqrt(q.shape[-1])
        if causal:
            scores = scores + causal_mask(q.shape[-2], k.shape[-2])
        return scores.numpy()
    eye = torch.eye(k.shape[-2], dtype=torch.float64)
    ref_mistake = None if mistake in ("plotted_no_mask", "plotted_kv_modulo") else mistake
    causal = causal and mistake != "plotted_no_mask"
    return attention(q, k, eye, causal=causal, mistake=ref_mistake).numpy()
