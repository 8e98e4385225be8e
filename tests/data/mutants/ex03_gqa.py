"""Mistakes in grouped-query attention and KV-cache sizing (exercise C)."""
from tests.data.mutants import Mutant

MUTANTS = [
    Mutant("kv_tile",
           "return np.broadcast_to(x[:, :, None], (b, h_kv, n_rep, s, d_head)).reshape(\n"
           "        b, h_kv * n_rep, s, d_head)",
           "return np.tile(x, (1, n_rep, 1, 1))", "tile"),
    Mutant("cache_counts_only_k",
           "return 2 * n_layers * n_kv_heads * d_head * seq_len * batch * bytes_per_elem",
           "return n_layers * n_kv_heads * d_head * seq_len * batch * bytes_per_elem",
           "only K"),
    Mutant("saving_upside_down", "return n_heads / n_kv_heads", "return n_kv_heads / n_heads",
           "upside down"),
    Mutant("exceeds_not_strict", "return int(weight_bytes // per_token) + 1",
           "return int(-(-weight_bytes // per_token))", "strictly larger"),
    Mutant("no_mask_in_gqa", "    mask = causal_mask(s).astype(x.dtype) if causal else None\n"
           "    return merge_heads",
           "    mask = None\n    return merge_heads", "no causal mask"),
    Mutant("exceeds_one_short", "return int(weight_bytes // per_token) + 1",
           "return int(weight_bytes // per_token)", "one token short"),
    Mutant("exceeds_without_element_size",
           "per_token = kv_cache_bytes(n_layers, n_kv_heads, d_head, 1, 1, bytes_per_elem)",
           "per_token = kv_cache_bytes(n_layers, n_kv_heads, d_head, 1, 1)",
           "not passed on to the cache size"),
    Mutant("cache_without_element_size",
           "return 2 * n_layers * n_kv_heads * d_head * seq_len * batch * bytes_per_elem",
           "return 2 * n_layers * n_kv_heads * d_head * seq_len * batch",
           "bytes_per_elem was ignored"),
    Mutant("cache_without_layers",
           "return 2 * n_layers * n_kv_heads * d_head * seq_len * batch * bytes_per_elem",
           "return 2 * n_kv_heads * d_head * seq_len * batch * bytes_per_elem",
           "layers were not counted"),
    Mutant("gqa_rope_only_q",
           "q, k = rope(q, positions, rope_base), rope(k, positions, rope_base)",
           "q = rope(q, positions, rope_base)", "RoPE was applied to q only"),
    # attention written out inside grouped_query_attention, scaled by the model width
    Mutant("gqa_scale_by_d_model",
           "return merge_heads(attention(q, k, v, mask)) @ w_o.T",
           "scores = q @ np.swapaxes(k, -1, -2) / np.sqrt(d)\n"
           "    if mask is not None:\n        scores = scores + mask\n"
           "    e = np.exp(scores - scores.max(axis=-1, keepdims=True))\n"
           "    return merge_heads(e / e.sum(axis=-1, keepdims=True) @ v) @ w_o.T",
           "1/sqrt(d_model) instead of 1/sqrt(d_head)"),
    Mutant("gqa_no_output_projection",
           "return merge_heads(attention(q, k, v, mask)) @ w_o.T",
           "return merge_heads(attention(q, k, v, mask))", "output projection"),
    Mutant("gqa_rope_on_values",
           "q, k = rope(q, positions, rope_base), rope(k, positions, rope_base)",
           "q, k = rope(q, positions, rope_base), rope(k, positions, rope_base)\n"
           "    v = rope(v, positions, rope_base)", "applied to the values"),
    Mutant("gqa_no_rope",
           "    q, k = rope(q, positions, rope_base), rope(k, positions, rope_base)\n", "",
           "RoPE was not applied"),
    Mutant("gqa_positions_ignored",
           "positions = np.arange(s) if positions is None else np.asarray(positions)",
           "positions = np.arange(s)", "ignored the given positions"),
    Mutant("llama_saving_upside_down", "LLAMA3_70B_KV_SAVING = 64 / 8",
           "LLAMA3_70B_KV_SAVING = 8 / 64", "upside down"),
]

# The sizing mistakes need none of the attention tests.
_SIZES = "kv_cache or kv_exceeds or llama3"
ONLY = {name: _SIZES for name in (
    "cache_counts_only_k", "saving_upside_down", "exceeds_not_strict", "exceeds_one_short",
    "exceeds_without_element_size", "cache_without_element_size", "cache_without_layers",
    "llama_saving_upside_down")}
ONLY.update({name: "gqa_random" for name in (
    "gqa_rope_only_q", "gqa_scale_by_d_model", "gqa_no_output_projection",
    "gqa_rope_on_values", "gqa_no_rope", "gqa_positions_ignored")})

# -- slips in the picture (issue 29): plot_gqa_heads
MUTANTS += [
    Mutant("plot_kv_modulo", "g = i // n_rep                                   # the K/V head",
           "g = i % h_kv                                   # the K/V head", "i % h_kv"),
    Mutant("plot_no_mask", "logits = logits + causal_mask(s_q, s_k)", "logits = logits",
           "without the causal mask"),
    Mutant("plot_scores", "ax.imshow(softmax(logits, axis=-1), vmin", "ax.imshow(logits, vmin",
           "scores were drawn"),
]
ONLY.update({name: "plot" for name in ("plot_kv_modulo", "plot_no_mask", "plot_scores")})

# -- a third outside corpus's slip (issue 51): K/V repeated along the sequence axis
MUTANTS += [
    Mutant("repeat_kv_seq_axis",
           "    return np.broadcast_to(x[:, :, None], (b, h_kv, n_rep, s, d_head)).reshape(\n"
           "        b, h_kv * n_rep, s, d_head)",
           "    return np.repeat(x, n_rep, axis=2)",
           "along the sequence axis"),
]
ONLY["repeat_kv_seq_axis"] = "repeat_kv"
