"""Mistakes in multi-head attention (exercise B)."""
from tests.data.mutants import Mutant

SCORES = "scores = q @ np.swapaxes(k, -1, -2) / d_head ** 0.5"
MASK_TEST = "np.where(j <= s_k - s_q + i, 0.0, -np.inf)"

MUTANTS = [
    Mutant("no_scale", SCORES, "scores = q @ np.swapaxes(k, -1, -2)",
           "not scaled by 1/sqrt(d_head)"),
    Mutant("scale_by_d", SCORES, "scores = q @ np.swapaxes(k, -1, -2) / d_head",
           "1/d_head instead of 1/sqrt(d_head)"),
    Mutant("softmax_over_queries", "return softmax(scores, axis=-1) @ v",
           "return softmax(scores, axis=-2) @ v", "over queries instead of keys"),
    Mutant("softmax_unstable", "m = np.where(np.isfinite(m), m, 0.0)", "m = np.zeros_like(m)",
           "not stabilized"),
    Mutant("softmax_global_max", "m = np.max(x, axis=axis, keepdims=True)",
           "m = np.max(x, keepdims=True)", "instead of each row's max"),
    Mutant("nan_on_empty_row", "return np.divide(e, s, out=np.zeros_like(e), where=s > 0)",
           "return e / s", "came out NaN (0/0)"),
    Mutant("diagonal_masked", MASK_TEST, "np.where(j < s_k - s_q + i, 0.0, -np.inf)",
           "also hides the diagonal"),
    Mutant("top_left_mask", MASK_TEST, "np.where(j <= i, 0.0, -np.inf)", "top-left"),
    Mutant("mask_wrong_triangle", MASK_TEST, "np.where(j >= s_k - s_q + i, 0.0, -np.inf)",
           "wrong triangle"),
    Mutant("no_mask", "mask = causal_mask(s).astype(x.dtype) if causal else None",
           "mask = None", "no causal mask"),
    Mutant("rope_on_values", "q, k = rope(q, positions, rope_base), rope(k, positions, rope_base)",
           "q, k = rope(q, positions, rope_base), rope(k, positions, rope_base)\n"
           "    v = rope(v, positions, rope_base)", "applied to the values"),
    Mutant("rope_interleaved",
           "x1, x2 = x[..., :half], x[..., half:]\n"
           "    return np.concatenate([x1 * cos - x2 * sin, x2 * cos + x1 * sin], axis=-1)",
           "x1, x2 = x[..., 0::2], x[..., 1::2]\n"
           "    return np.stack([x1 * cos - x2 * sin, x2 * cos + x1 * sin], axis=-1"
           ").reshape(x.shape)", "interleaved pairs"),
    Mutant("rope_positions_ignored",
           "positions = np.arange(s) if positions is None else np.asarray(positions)",
           "positions = np.arange(s)", "ignored the given positions"),
    Mutant("rope_wrong_frequency", "freq = base ** (-2.0 * np.arange(half) / d_head)",
           "freq = base ** (-1.0 * np.arange(half) / d_head)", "frequencies"),
    Mutant("split_without_transpose",
           "return x.reshape(b, s, n_heads, width // n_heads).transpose(0, 2, 1, 3)",
           "return x.reshape(b, n_heads, s, width // n_heads)", "without the transpose"),
    Mutant("scale_multiplied", SCORES, "scores = q @ np.swapaxes(k, -1, -2) * np.sqrt(d_head)",
           "multiplied by sqrt(d_head)"),
    Mutant("mask_after_softmax",
           "    if mask is not None:\n        scores = scores + mask\n"
           "    return softmax(scores, axis=-1) @ v",
           "    weights = softmax(scores, axis=-1)\n    if mask is not None:\n"
           "        weights = weights * (mask == 0)\n    return weights @ v",
           "after the softmax"),
    Mutant("rope_wrong_direction",
           "np.concatenate([x1 * cos - x2 * sin, x2 * cos + x1 * sin], axis=-1)",
           "np.concatenate([x1 * cos + x2 * sin, x2 * cos - x1 * sin], axis=-1)",
           "wrong way"),
    Mutant("merge_without_transpose", "return x.transpose(0, 2, 1, 3).reshape(b, s, h * d_head)",
           "return x.reshape(b, s, h * d_head)", "merged by a reshape without the transpose"),
    Mutant("no_output_projection", "return out @ w_o.T                             # (B, S, d)",
           "return out", "output projection"),
    # -- slips named since issue 15
    Mutant("mask_neg_1e4", MASK_TEST, "np.where(j <= s_k - s_q + i, 0.0, -1e4)",
           "-1e4 where it must hold -inf"),
    Mutant("rope_positions_off_by_one",
           "angle = np.asarray(positions, dtype=np.float64)[:, None] * freq",
           "angle = (np.asarray(positions, dtype=np.float64)[:, None] + 1) * freq",
           "positions are off by one"),
    Mutant("rope_inverse_frequency", "freq = base ** (-2.0 * np.arange(half) / d_head)",
           "freq = base ** (2.0 * np.arange(half) / d_head)", "exponent's sign is flipped"),
    Mutant("rope_base_ignored", "freq = base ** (-2.0 * np.arange(half) / d_head)",
           "freq = 10000.0 ** (-2.0 * np.arange(half) / d_head)", "ignored the base argument"),
    Mutant("softmax_ignores_axis", "    x = np.asarray(x)\n    m = np.max(x, axis=axis",
           "    x = np.asarray(x)\n    axis = -1\n    m = np.max(x, axis=axis",
           "ignored its axis argument"),
    Mutant("softmax_base_2", "e = np.exp(x - m)", "e = 2.0 ** (x - m)", "2**x instead of exp(x)"),
    # attention written out inside multi_head_attention, scaled by the model width
    Mutant("scale_by_d_model",
           "out = merge_heads(attention(q, k, v, mask))    # (B, S, h*d_head)",
           "scores = q @ np.swapaxes(k, -1, -2) / np.sqrt(x.shape[-1])\n"
           "    if mask is not None:\n        scores = scores + mask\n"
           "    out = merge_heads(softmax(scores, axis=-1) @ v)",
           "1/sqrt(d_model) instead of 1/sqrt(d_head)"),
    Mutant("rope_only_q",
           "q, k = rope(q, positions, rope_base), rope(k, positions, rope_base)",
           "q = rope(q, positions, rope_base)", "RoPE was applied to q only"),
    Mutant("no_rope",
           "    q, k = rope(q, positions, rope_base), rope(k, positions, rope_base)\n", "",
           "RoPE was not applied"),
    Mutant("mask_ignores_s_k", "    s_k = s_q if s_k is None else s_k\n    i = np.arange(s_q)",
           "    s_k = s_q\n    i = np.arange(s_q)", "ignored s_k"),
    Mutant("split_strided",
           "return x.reshape(b, s, n_heads, width // n_heads).transpose(0, 2, 1, 3)",
           "return x.reshape(b, s, width // n_heads, n_heads).transpose(0, 3, 1, 2)",
           "strided features"),
]

# -- found by the outside review (same work, same grade): float64 out of float32 in
MUTANTS += [
    Mutant("attention_float64", "    d_head = q.shape[-1]\n    # a Python float",
           "    q, k, v = (np.asarray(a, dtype=np.float64) for a in (q, k, v))\n"
           "    d_head = q.shape[-1]\n    # a Python float",
           "float64 for float32 inputs"),
]

# Each mistake is caught by the tests of the function it sits in (and, for
# the attention mistakes, multi-head attention's): no need for the whole suite.
ONLY = {
    "mask_neg_1e4": "causal_mask",
    "rope_positions_off_by_one": "rope",
    "rope_inverse_frequency": "rope",
    "rope_base_ignored": "rope",
    "softmax_ignores_axis": "softmax",
    "softmax_base_2": "softmax",
    "nan_on_empty_row": "softmax or sees_nothing",
    "scale_by_d_model": "mha",
    "rope_only_q": "mha_random",
    "mask_ignores_s_k": "causal_mask",
    "split_strided": "split",
    "no_rope": "mha_random",
    "attention_float64": "attention",
}

# -- slips in the picture (issue 29): plot_attention_heads
MUTANTS += [
    Mutant("plot_scores",
           "weights = softmax(logits, axis=-1)                             # rows sum",
           "weights = logits                             # rows sum", "scores were drawn"),
    Mutant("plot_no_mask", "logits = logits + causal_mask(s_q, k.shape[1])", "logits = logits",
           "without the causal mask"),
    Mutant("plot_top_left_mask", "logits = logits + causal_mask(s_q, k.shape[1])",
           "logits = logits + np.where(np.arange(k.shape[1]) <= np.arange(s_q)[:, None], "
           "0.0, -np.inf)", "top-left"),
    Mutant("plot_heads_concatenated",
           "    for i, ax in enumerate(axes.flat):\n        if i >= h:",
           "    image = axes[0, 0].imshow(np.concatenate(list(weights), axis=1))\n"
           "    axes[0, 0].set_xlabel('key')\n    axes[0, 0].set_ylabel('query')\n"
           "    for i, ax in enumerate(axes.flat):\n        break\n        if i >= h:",
           "concatenated"),
    Mutant("plot_unlabelled",
           '        ax.set_title(f"head {i}")\n        ax.set_xlabel("key")\n'
           '        ax.set_ylabel("query")\n',
           '        ax.set_title(f"head {i}")\n', "axes are not labelled"),
]
ONLY.update({name: "plot" for name in ("plot_scores", "plot_no_mask", "plot_top_left_mask",
                                       "plot_heads_concatenated", "plot_unlabelled")})
