"""Known mistakes in ex06_gqa_intensity (see tests/data/mutants/__init__.py)."""
from tests.data.mutants import Mutant

_GROUPED = """    qg = q.reshape(b, h_kv, h // h_kv, d_head) * (1.0 / math.sqrt(d_head))   # (B, h_kv, g, d)
    scores = qg @ k_cache.transpose(-2, -1)                                  # (B, h_kv, g, S)
    out = torch.softmax(scores, dim=-1) @ v_cache                           # (B, h_kv, g, d)
    return out.reshape(b, h, 1, d_head)"""

_REPEATED = """    k = k_cache.repeat_interleave(h // h_kv, dim=1)                          # (B, h, S, d)
    v = v_cache.repeat_interleave(h // h_kv, dim=1)
    scores = q @ k.transpose(-2, -1) / math.sqrt(d_head)
    return torch.softmax(scores, dim=-1) @ v"""

_FORMULA = """    flops = 4 * batch * n_heads * seq_len * d_head
    nbytes = 2 * batch * d_head * (2 * n_heads + 2 * n_kv_heads * seq_len)
    return {"flops": flops, "bytes": nbytes, "intensity": flops / nbytes}"""

_MEASURED = """    q = torch.randn(batch, n_heads, 1, d_head, device=device, dtype=torch.float16)"""

_TILED = """    qg = q.reshape(b, h // h_kv, h_kv, d_head).transpose(1, 2) / math.sqrt(d_head)
    scores = qg @ k_cache.transpose(-2, -1)
    out = torch.softmax(scores, dim=-1) @ v_cache
    return out.transpose(1, 2).reshape(b, h, 1, d_head)"""

_TABLE_END = """            for h_kv in kv_heads}
    # END SOLUTION
"""

MUTANTS = [
    Mutant("repeat_interleave",
           _GROUPED, _REPEATED,
           "repeat_interleave"),
    Mutant("tile_grouping",
           _GROUPED, _TILED,
           "tile (0,1,0,1)"),
    # An outside corpus's slip (xFormers-style): tile's grouping, written back grouped
    Mutant("tile_grouping_regrouped",
           _GROUPED, _TILED.replace("return out.transpose(1, 2).reshape(b, h, 1, d_head)",
                                    "return out.reshape(b, h, 1, d_head)"),
           "came back out in the grouped order"),
    Mutant("no_scale",
           " * (1.0 / math.sqrt(d_head))   # (B, h_kv, g, d)",
           "   # (B, h_kv, g, d)",
           "not scaled by 1/sqrt(d_head)"),
    Mutant("no_shape_check",
           "    if s_q != 1:\n        raise ValueError",
           "    if False:\n        raise ValueError",
           "shape of q was not checked"),
    Mutant("intensity_kv_all_heads",
           "(2 * n_heads + 2 * n_kv_heads * seq_len)\n    return flops / nbytes",
           "(2 * n_heads + 2 * n_heads * seq_len)\n    return flops / nbytes",
           "counted with n_heads heads"),
    # The formula dressed as a measurement, on top of repeated K/V: must fail.
    Mutant("formula_with_repeat_interleave",
           _TABLE_END,
           _TABLE_END + "\n\ndef gqa_decode_attention(q, k_cache, v_cache):\n"
           "    b, h, s_q, d_head = q.shape\n    h_kv = k_cache.shape[1]\n" + _REPEATED +
           "\n\n\ndef measure_intensity(n_heads, n_kv_heads, seq_len, d_head, batch=1, "
           "device='cpu'):\n" + _FORMULA + "\n",
           "from the formula"),
    Mutant("formula_not_counted",
           _MEASURED,
           _FORMULA + "\n" + _MEASURED,
           "from the formula"),
    Mutant("flops_counted_twice",
           "flops = flop_counter.get_total_flops()",
           "flops = 2 * flop_counter.get_total_flops()",
           "factor of 2"),
    Mutant("intensity_flops_half", "flops = 4 * batch * n_heads * seq_len * d_head",
           "flops = 2 * batch * n_heads * seq_len * d_head", "pair costs"),
    Mutant("intensity_float_bytes",
           "nbytes = bytes_per_elem * batch * d_head * (2 * n_heads + 2 * n_kv_heads * seq_len)",
           "nbytes = 4 * batch * d_head * (2 * n_heads + 2 * n_kv_heads * seq_len)",
           "4 bytes per element"),
    Mutant("intensity_no_q_o",
           "nbytes = bytes_per_elem * batch * d_head * (2 * n_heads + 2 * n_kv_heads * seq_len)",
           "nbytes = bytes_per_elem * batch * d_head * (2 * n_kv_heads * seq_len)",
           "query read and the output write were left out"),
    Mutant("table_wrong_grouping",
           'measure_intensity(n_heads, h_kv, seq_len, d_head)["intensity"]',
           'measure_intensity(n_heads, n_heads // h_kv, seq_len, d_head)["intensity"]',
           "the wrong grouping"),
]

# Mistakes outside measure_intensity need not wait for the measured table.
ONLY = {name: "not intensity_table_measured and not measure_intensity_is_counted"
        for name in ("tile_grouping", "tile_grouping_regrouped", "no_scale", "no_shape_check",
                     "intensity_kv_all_heads")}
ONLY["table_wrong_grouping"] = "intensity_table"
# Named without the measured table (2 s of measuring): a KV copy by the
# repeat check, the counted intensity's slips by the counting tests.
ONLY["repeat_interleave"] = "no_repeated_kv"
ONLY.update({name: "measure_intensity_is_counted" for name in (
    "formula_with_repeat_interleave", "formula_not_counted", "flops_counted_twice")})
ONLY.update({"intensity_flops_half": "decode_intensity",
             "intensity_float_bytes": "decode_intensity",
             "intensity_no_q_o": "decode_intensity"})

# -- slips named since the outside review (issue 15)
MUTANTS += [
    Mutant("softmax_over_group",
           "out = torch.softmax(scores, dim=-1) @ v_cache",
           "out = torch.softmax(scores, dim=-2) @ v_cache",
           "over the query heads of a group"),
]
ONLY["softmax_over_group"] = "gqa_decode_small or gqa_decode_every_grouping"

# -- what the cache costs a server (issue 29): the slips of the counts
_KV = "return 2 * n_layers * n_kv_heads * d_head * bytes_per_elem    # K and V"
_RATIO = "return cache / weight_bytes"
_SAVED = "per_token = kv_bytes_per_token(n_layers, n_heads - n_kv_heads, d_head, bytes_per_elem)"
_CROSS = "return max(1, (ffn - projections) // core)"
MUTANTS += [
    Mutant("kv_one_of_k_v", _KV, "return n_layers * n_kv_heads * d_head * bytes_per_elem",
           "only one of K and V"),
    Mutant("kv_no_layers", _KV, "return 2 * n_kv_heads * d_head * bytes_per_elem",
           "one layer was counted"),
    Mutant("kv_fixed_2_bytes", _KV, "return 2 * n_layers * n_kv_heads * d_head * 2",
           "bytes_per_elem was ignored"),
    # An outside corpus's slip (issue 51): in 2-byte elements it gives what
    # counting only K gives; a 4-byte case tells them apart.
    Mutant("kv_in_elements", _KV, "return 2 * n_layers * n_kv_heads * d_head",
           "counted in elements, not bytes"),
    Mutant("ratio_inverted", _RATIO, "return weight_bytes / cache", "inverted"),
    Mutant("ratio_gib", _RATIO, "return cache / 2**30 / weight_bytes", "GiB"),
    Mutant("ratio_no_batch",
           "cache = batch * seq_len * kv_bytes_per_token(",
           "cache = seq_len * kv_bytes_per_token(", "batch was left out"),
    Mutant("saving_is_gqa_cache", _SAVED, _SAVED.replace("n_heads - n_kv_heads", "n_kv_heads"),
           "this is GQA's cache"),
    Mutant("saving_is_mha_cache", _SAVED, _SAVED.replace("n_heads - n_kv_heads", "n_heads"),
           "MHA's whole cache"),
    Mutant("crossover_no_projections",
           "projections = 2 * d_model * d_head * (2 * n_heads + 2 * n_kv_heads)",
           "projections = 0 * d_model * d_head * (2 * n_heads + 2 * n_kv_heads)",
           "projections (w_q, w_k, w_v, w_o) were left out"),
    Mutant("crossover_two_ffn_matrices", "ffn = 2 * 3 * d_model * d_ff",
           "ffn = 2 * 2 * d_model * d_ff", "has 3 (gate, up and down)"),
    Mutant("crossover_kv_all_heads", "(2 * n_heads + 2 * n_kv_heads)   # q, o; k, v",
           "(2 * n_heads + 2 * n_heads)   # q, o; k, v", "they have n_kv_heads (GQA)"),
    Mutant("crossover_all_pairs", _CROSS, "return max(1, (ffn - projections) // (2 * core) + 1)",
           "all n^2 (query, key) pairs were counted"),
    Mutant("crossover_pair_2_flops", "core = 2 * d_head * n_heads ",
           "core = d_head * n_heads ", "it costs 4 * d_head"),
    Mutant("crossover_last_below", _CROSS, "return max(1, (ffn - projections) // core - 1)",
           "one more"),
]
ONLY.update({name: "kv_cache_costs or kv_bytes_per_token or kv_cache_over_weights or "
                   "gqa_bytes_saved or crossover"
             for name in ("kv_one_of_k_v", "kv_no_layers", "kv_fixed_2_bytes", "kv_in_elements",
                          "ratio_inverted", "ratio_gib", "ratio_no_batch",
                          "saving_is_gqa_cache", "saving_is_mha_cache",
                          "crossover_no_projections", "crossover_two_ffn_matrices",
                          "crossover_kv_all_heads", "crossover_all_pairs",
                          "crossover_pair_2_flops", "crossover_last_below")})

# -- a third outside corpus's slip (issue 51): FLOPs counted per K/V head
MUTANTS += [
    Mutant("intensity_flops_kv_heads",
           "    flops = 4 * batch * n_heads * seq_len * d_head",
           "    flops = 4 * batch * n_kv_heads * seq_len * d_head",
           "counted for the n_kv_heads"),
]
ONLY["intensity_flops_kv_heads"] = "decode_intensity"

# -- a fourth outside corpus: measured in float32 (torch.randn's default), and
# the output write left out of decode_intensity's bytes
MUTANTS += [
    Mutant("measured_in_float32",
           "    q = torch.randn(batch, n_heads, 1, d_head, device=device, dtype=torch.float16)\n"
           "    k = torch.randn(batch, n_kv_heads, seq_len, d_head, device=device, "
           "dtype=torch.float16)",
           "    q = torch.randn(batch, n_heads, 1, d_head, device=device)\n"
           "    k = torch.randn(batch, n_kv_heads, seq_len, d_head, device=device)",
           "the measurement ran in float32"),
    Mutant("intensity_no_output_write",
           "(2 * n_heads + 2 * n_kv_heads * seq_len)",
           "(n_heads + 2 * n_kv_heads * seq_len)",
           "the output write was not counted"),
]
ONLY.update({"measured_in_float32": "measure_intensity or intensity_table",
             "intensity_no_output_write": "decode_intensity"})

# -- a fifth outside corpus: a warm-up call inside the counters (FLOPs and bytes doubled)
MUTANTS += [
    Mutant("warmup_counted",
           "    with FlopCounterMode(display=False) as flop_counter, ReadBytes() as reads:\n"
           "        gqa_decode_attention(q, k, v)",
           "    with FlopCounterMode(display=False) as flop_counter, ReadBytes() as reads:\n"
           "        gqa_decode_attention(q, k, v)   # warm-up\n"
           "        gqa_decode_attention(q, k, v)",
           "more than one call was counted"),
]
ONLY["warmup_counted"] = "measure_intensity"
