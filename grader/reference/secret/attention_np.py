"""The independent reference attention in NumPy, for the NumPy exercises (B, C).

The same functions, arguments and known mistakes as
``grader.reference.secret.attention`` (PyTorch, float64), computed in NumPy
float64, so that grading the NumPy exercises never imports PyTorch into the
grading process (over a second of every grading's start).  Outputs are
float64 arrays.  ``tests/test_reference_np.py`` holds the two to the same
answers, mistakes included.
"""
from __future__ import annotations

import ast
import math
from pathlib import Path

import numpy as np

from grader.reference.mistakes import mistakes_of  # noqa: F401  (suites call ref.mistakes_of)


def _mistake_words() -> dict[str, str]:
    """``attention.MISTAKES``, read from its source as the literal it is:
    importing that module would import PyTorch."""
    tree = ast.parse(Path(__file__).with_name("attention.py").read_text(encoding="utf-8"))
    return next(ast.literal_eval(node.value) for node in tree.body
                if isinstance(node, ast.Assign)
                and [getattr(t, "id", None) for t in node.targets] == ["MISTAKES"])


# Mistake ids -> what the feedback says (one table: ``attention.MISTAKES``).
MISTAKES = _mistake_words()


def t64(x) -> np.ndarray:
    return np.array(x, dtype=np.float64)


def softmax(x, dim=-1, mistake=None) -> np.ndarray:
    x = t64(x)
    if mistake == "softmax_over_queries":
        dim = -2 if x.ndim >= 2 else dim
    if mistake == "softmax_ignores_axis":
        dim = -1
    with np.errstate(all="ignore"):   # the mistakes' overflow and 0/0 are their point
        if mistake == "softmax_unstable":
            e = np.exp(x.astype(np.float32)).astype(np.float64)   # float32 exp overflows past ~88
            return e / e.sum(axis=dim, keepdims=True)
        if mistake == "softmax_global_max":
            e = np.exp(x - x.max())   # one shift for every row: low rows become 0/0
            total = e.sum(axis=dim, keepdims=True)
            # a solution that keeps the contract's empty rows at zero gives 0 there
            return np.where(total > 0, e / np.where(total > 0, total, 1.0), 0.0)
        m = np.amax(x, axis=dim, keepdims=True)
        m = np.where(np.isfinite(m), m, 0.0)
        e = np.power(2.0, x - m) if mistake == "softmax_base_2" else np.exp(x - m)
        s = e.sum(axis=dim, keepdims=True)
        if mistake == "empty_row_nan":
            return e / s                                  # 0/0 on a row of only -inf
        return np.where(s > 0, e / np.where(s > 0, s, 1.0), 0.0)


def causal_allowed(s_q: int, s_k: int, mistake=None) -> np.ndarray:
    """Boolean ``(s_q, s_k)``: may query i see key j (end-aligned)?"""
    i = np.arange(s_q)[:, None]
    j = np.arange(s_k)[None, :]
    offset = s_k - s_q
    if mistake == "top_left_mask":
        offset = 0
    if mistake == "diagonal_masked":
        return j < offset + i
    if mistake == "mask_wrong_triangle":
        return j >= offset + i
    if mistake == "no_mask":
        return np.ones((s_q, s_k), dtype=bool)
    return j <= offset + i


def causal_mask(s_q: int, s_k: int | None = None, mistake=None) -> np.ndarray:
    s_k = s_q if s_k is None or mistake == "mask_ignores_s_k" else s_k
    allowed = causal_allowed(s_q, s_k, mistake)
    blocked = -1e4 if mistake == "mask_neg_1e4" else -math.inf
    return np.where(allowed, 0.0, blocked).astype(np.float64)


def rope(x, positions, base=10000.0, mistake=None) -> np.ndarray:
    x = t64(x)
    d = x.shape[-1]
    if d % 2:
        raise ValueError("odd d_head")
    half = d // 2
    pos = t64(positions).reshape(-1)
    if mistake == "rope_positions_ignored":
        pos = np.arange(x.shape[-2], dtype=np.float64)
    if mistake == "rope_positions_off_by_one":
        pos = pos + 1
    if mistake == "rope_base_ignored":
        base = 10000.0
    exponent = -np.arange(half, dtype=np.float64) * (1.0 if mistake ==
                                                      "rope_wrong_frequency" else 2.0) / d
    if mistake == "rope_inverse_frequency":
        exponent = -exponent
    theta = np.outer(pos, np.power(float(base), exponent))              # (S, half)
    cos, sin = np.cos(theta), np.sin(theta)
    if mistake == "rope_wrong_direction":
        sin = -sin
    if mistake == "rope_interleaved":
        pairs = x.reshape(*x.shape[:-1], half, 2)
        a, b = pairs[..., 0], pairs[..., 1]
        return np.stack([a * cos - b * sin, b * cos + a * sin], axis=-1).reshape(x.shape)
    a, b = x[..., :half], x[..., half:]
    return np.concatenate([a * cos - b * sin, b * cos + a * sin], axis=-1)


def attention(q, k, v, *, causal=False, mask=None, scale=None, mistake=None) -> np.ndarray:
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
    scores = np.einsum("...qd,...kd->...qk", q, k) * scale
    if mask is not None:
        scores = scores + t64(mask)
    if causal:
        if mistake == "mask_after_softmax":
            allowed = causal_allowed(q.shape[-2], k.shape[-2])
            weights = softmax(scores, -1) * allowed
            return np.einsum("...qk,...kd->...qd", weights, v)
        scores = scores + causal_mask(q.shape[-2], k.shape[-2], mistake)
    weights = softmax(scores, -1, mistake)
    return np.einsum("...qk,...kd->...qd", weights, v)


def repeat_kv(x, n_rep: int, mistake=None) -> np.ndarray:
    """``(B, h_kv, S, d)`` -> ``(B, h_kv*n_rep, S, d)``; KV head j serves query heads
    ``j*n_rep .. (j+1)*n_rep - 1``."""
    x = t64(x)
    if mistake == "kv_tile":
        return np.tile(x, (1, n_rep, 1, 1))
    if mistake == "kv_repeat_seq_axis":
        return np.repeat(x, n_rep, axis=2)
    return np.repeat(x, n_rep, axis=1)


def split_heads(x, n_heads: int, mistake=None) -> np.ndarray:
    x = t64(x)
    b, s, width = x.shape
    if mistake == "split_strided":
        return x.reshape(b, s, width // n_heads, n_heads).transpose(0, 3, 1, 2)
    if mistake == "split_without_transpose":
        return x.reshape(b, n_heads, s, width // n_heads)
    return x.reshape(b, s, n_heads, width // n_heads).transpose(0, 2, 1, 3)


def merge_heads(x, mistake=None) -> np.ndarray:
    x = t64(x)
    b, h, s, d = x.shape
    if mistake == "merge_without_transpose":
        return x.reshape(b, s, h * d)
    return x.transpose(0, 2, 1, 3).reshape(b, s, h * d)


def gqa(x, w_q, w_k, w_v, w_o, n_heads, n_kv_heads=None, *, causal=True, positions=None,
        rope_base=10000.0, mistake=None) -> np.ndarray:
    """Grouped-query (and, with ``n_kv_heads == n_heads``, multi-head) attention."""
    x = t64(x)
    n_kv_heads = n_heads if n_kv_heads is None else n_kv_heads
    b, s, _ = x.shape
    pos = np.arange(s) if positions is None else t64(positions)
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
        k = np.tile(k, (n_rep, 1, 1))
    else:
        k = repeat_kv(k[None], n_rep)[0]
    if mistake == "plotted_scores":
        scores = np.einsum("hqd,hkd->hqk", q, k) / math.sqrt(q.shape[-1])
        if causal:
            scores = scores + causal_mask(q.shape[-2], k.shape[-2])
        return scores
    eye = np.eye(k.shape[-2], dtype=np.float64)
    ref_mistake = None if mistake in ("plotted_no_mask", "plotted_kv_modulo") else mistake
    causal = causal and mistake != "plotted_no_mask"
    return attention(q, k, eye, causal=causal, mistake=ref_mistake)
