"""Known mistakes in ex05_decode_prefill (see tests/data/mutants/__init__.py)."""
from tests.data.mutants import Mutant

MUTANTS = [
    Mutant("no_scale",
           "scores = qg @ k.transpose(-2, -1) / math.sqrt(d_head)",
           "scores = qg @ k.transpose(-2, -1)",
           "not scaled by 1/sqrt(d_head)"),
    Mutant("diagonal_masked",
           ".tril(s_k - s_q)",
           ".tril(s_k - s_q - 1)",
           "also hides the diagonal"),
    Mutant("decode_mask_top_left",
           "return _attend(q, k_cache, v_cache, causal=False)",
           "return _attend(q, k_cache, v_cache, causal=False) if False else "
           "_attend_top_left(q, k_cache, v_cache)\n\n\n"
           "def _attend_top_left(q, k, v):\n"
           "    s = k.shape[2]\n"
           "    mask = torch.full((1, s), float('-inf')).triu(1)  # top-left: query 0 sees key 0\n"
           "    p = torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1]) + mask, -1)\n"
           "    return p @ v",
           "aligned to the top-left"),
    Mutant("flops_factor_2",
           "return 4 * d_head * pairs * batch * n_heads",
           "return 2 * d_head * pairs * batch * n_heads",
           "factor of 2"),
    Mutant("causal_pairs_top_left",
           "pairs = sum(min(s_k, max(0, s_k - s_q + i + 1)) for i in range(s_q))",
           "pairs = sum(min(s_k, i + 1) for i in range(s_q))",
           "counted top-left"),
    Mutant("bytes_kv_all_heads",
           "k_and_v = 2 * batch * n_kv_heads * s_k * d_head",
           "k_and_v = 2 * batch * n_heads * s_k * d_head",
           "counted with n_heads heads"),
    Mutant("bytes_no_output",
           "q_and_o = 2 * batch * n_heads * s_q * d_head",
           "q_and_o = batch * n_heads * s_q * d_head",
           "output write was not counted"),
    Mutant("achieved_gflops",
           '"tflops": flops / seconds / 1e12',
           '"tflops": flops / seconds / 1e9',
           "GFLOP/s instead of TFLOP/s"),
    Mutant("bound_strict",
           'return "compute" if intensity >= peak_flops / peak_bytes_per_s else "memory"',
           'return "compute" if intensity > peak_flops / peak_bytes_per_s else "memory"',
           "exactly at the ridge point"),
    Mutant("bound_inverted_ridge",
           'return "compute" if intensity >= peak_flops / peak_bytes_per_s else "memory"',
           'return "compute" if intensity >= peak_bytes_per_s / peak_flops else "memory"',
           "peak_bytes_per_s / peak_flops"),
    Mutant("rope_after_caching",
           "k_cache[:, :, t:t + 1] = k\n",
           "k_cache[:, :, t:t + 1] = _heads(xt @ w_k.T, n_kv_heads)\n",
           "RoPE was applied after caching"),
    Mutant("rope_positions_unused",
           "pos = torch.tensor([t], device=x.device)",
           "pos = torch.tensor([0], device=x.device)",
           "did not use each token's position"),
    Mutant("rope_on_values",
           "v = _heads(xt @ w_v.T, n_kv_heads)",
           "v = _rope(_heads(xt @ w_v.T, n_kv_heads), pos, rope_base)",
           "RoPE was also applied to the values"),
    Mutant("cache_not_used",
           "o = decode_attention(q, k_cache[:, :, :t + 1], v_cache[:, :, :t + 1])",
           "o = decode_attention(q, k_cache[:, :, t:t + 1], v_cache[:, :, t:t + 1])",
           "only to the newest key"),
    # Each step's one query masked as if it were query 0 of t + 1 (top-left).
    Mutant("decode_with_cache_top_left",
           "o = decode_attention(q, k_cache[:, :, :t + 1], v_cache[:, :, :t + 1])",
           "top_left = torch.ones(1, t + 1, dtype=torch.bool, device=x.device).tril()\n"
           "        qg = q.reshape(b, n_kv_heads, n_heads // n_kv_heads, d_head)\n"
           "        sc = qg @ k_cache[:, :, :t + 1].transpose(-2, -1) / math.sqrt(d_head)\n"
           "        sc = sc.masked_fill(~top_left, float('-inf'))\n"
           "        o = (torch.softmax(sc, -1) @ v_cache[:, :, :t + 1]).reshape("
           "b, n_heads, 1, d_head)",
           "aligned to the top-left, but the one decode query"),
    Mutant("decode_positions_off_by_one", "pos = torch.tensor([t], device=x.device)",
           "pos = torch.tensor([t + 1], device=x.device)", "positions are off by one"),
    Mutant("flops_factor_8",
           "return 4 * d_head * pairs * batch * n_heads",
           "return 8 * d_head * pairs * batch * n_heads", "factor of 2"),
    Mutant("causal_pairs_half",
           "pairs = sum(min(s_k, max(0, s_k - s_q + i + 1)) for i in range(s_q))",
           "pairs = s_q * s_k // 2", "s_q * s_k / 2"),
    Mutant("flops_causal_ignored",
           "    if causal:\n        pairs = sum(", "    if False:\n        pairs = sum(",
           "causal=True was ignored"),
    Mutant("bytes_kv_once",
           "k_and_v = 2 * batch * n_kv_heads * s_k * d_head",
           "k_and_v = batch * n_kv_heads * s_k * d_head", "K and V are both read"),
    Mutant("bound_swapped",
           'return "compute" if intensity >= peak_flops / peak_bytes_per_s else "memory"',
           'return "memory" if intensity >= peak_flops / peak_bytes_per_s else "compute"',
           "are swapped"),
    Mutant("prefill_scale_by_d",
           "scores = qg @ k.transpose(-2, -1) / math.sqrt(d_head)",
           "scores = qg @ k.transpose(-2, -1) / d_head",
           "1/d_head instead of 1/sqrt(d_head)"),
    Mutant("bytes_without_element_size", "return (q_and_o + k_and_v) * bytes_per_elem",
           "return q_and_o + k_and_v", "bytes_per_elem was not used"),
]

# None of these needs the roofline run on the machine's measured peaks.
_NO_ROOFLINE = "not prefill_compute_bound and not roofline_achieved"
ONLY = {m.name: _NO_ROOFLINE for m in MUTANTS}
# The newer mistakes need only the tests of their own function.
ONLY.update({"decode_with_cache_top_left": "decode_with_cache",
             "decode_positions_off_by_one": "decode_with_cache",
             "bytes_without_element_size": "attention_bytes"})
ONLY.update({"flops_causal_ignored": "attention_flops", "flops_factor_8": "attention_flops",
             "causal_pairs_half": "attention_flops",
             "bytes_kv_once": "attention_bytes",
             "bound_swapped": f"bound and {_NO_ROOFLINE}",
             "prefill_scale_by_d": "prefill_attention"})

# -- slips named since the outside review (issue 15)
MUTANTS += [
    Mutant("causal_pairs_no_diagonal",
           "pairs = sum(min(s_k, max(0, s_k - s_q + i + 1)) for i in range(s_q))",
           "pairs = sum(min(s_k, max(0, s_k - s_q + i)) for i in range(s_q))",
           "left out the diagonal"),
    # Right for fp16 only: named for what it is, not as "off by a factor of 2".
    Mutant("bytes_fixed_2_per_elem", "return (q_and_o + k_and_v) * bytes_per_elem",
           "return (q_and_o + k_and_v) * 2", "always used 2 bytes per element"),
]
ONLY.update({"causal_pairs_no_diagonal": "attention_flops",
             "bytes_fixed_2_per_elem": "attention_bytes"})

# -- GQA grouped by .repeat (tile: 0, 1, 0, 1), issue 26: a case with one KV
# head cannot see it; the public case with 4 query heads over 2 KV heads does.
MUTANTS += [
    Mutant("decode_with_cache_kv_repeat",
           "o = decode_attention(q, k_cache[:, :, :t + 1], v_cache[:, :, :t + 1])",
           "rep = n_heads // n_kv_heads\n"
           "        o = decode_attention(q, k_cache[:, :, :t + 1].repeat(1, rep, 1, 1),\n"
           "                             v_cache[:, :, :t + 1].repeat(1, rep, 1, 1))",
           "repeated with tile (0,1,0,1)"),
]
ONLY.update({"decode_with_cache_kv_repeat": "decode_with_cache"})

# -- a fourth outside corpus: the causal pairs as an unclamped series (negative
# when S_q > S_k), and the caches returned in Llama's sequence-first layout
MUTANTS += [
    Mutant("causal_pairs_not_clamped",
           "pairs = sum(min(s_k, max(0, s_k - s_q + i + 1)) for i in range(s_q))",
           "pairs = (2 * s_k - s_q + 1) * s_q // 2",
           "without clamping at 0"),
    Mutant("caches_sequence_first", "    return out, k_cache, v_cache\n",
           "    return out, k_cache.transpose(1, 2), v_cache.transpose(1, 2)\n",
           "returned sequence-first"),
]
ONLY.update({"causal_pairs_not_clamped": "attention_flops",
             "caches_sequence_first": "decode_with_cache"})

# -- a fifth outside corpus: each step attends over the whole preallocated cache
MUTANTS += [
    Mutant("decode_unwritten_slots",
           "o = decode_attention(q, k_cache[:, :, :t + 1], v_cache[:, :, :t + 1])",
           # the slots after t as a zero-filled preallocated cache holds them
           "unwritten = x.new_zeros(b, n_kv_heads, s - t - 1, d_head)\n"
           "        o = decode_attention(q, torch.cat([k_cache[:, :, :t + 1], unwritten], 2),\n"
           "                             torch.cat([v_cache[:, :, :t + 1], unwritten], 2))",
           "the slots not yet written (zeros) took softmax weight"),
]
ONLY["decode_unwritten_slots"] = "decode_with_cache"
