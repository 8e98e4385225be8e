"""Known mistakes in ex08_mla (see tests/data/mutants/__init__.py): one per MLA
mistake of the curriculum's list."""
from tests.data.mutants import Mutant

_ABSORBED = """    w_uk_heads = w_uk.view(n_heads, d_nope, d_c)                         # W_uk_i: (dn, d_c)
    q_lat = torch.einsum("bhn,hnc->bhc", q_nope, w_uk_heads)              # (B, h, d_c)
    scores = (q_lat @ c_kv.transpose(1, 2) + q_rope @ k_rope.transpose(1, 2)) \\
        / math.sqrt(d_nope + d_rope)                                      # (B, h, S)
    o_lat = torch.softmax(scores, dim=-1) @ c_kv                         # (B, h, d_c)
    w_uv_heads = w_uv.view(n_heads, d_v, d_c)                            # W_uv_i: (dv, d_c)
    out = torch.einsum("bhc,hvc->bhv", o_lat, w_uv_heads)                # (B, h, dv)
"""

# Decode as the explicit form: every head's K and V rebuilt from the cached
# latent at each step, as if K/V were what is cached.
_REBUILT = """    k_nope = (c_kv @ w_uk.T).view(b, s, n_heads, d_nope).transpose(1, 2)   # (B, h, S, dn)
    v = (c_kv @ w_uv.T).view(b, s, n_heads, d_v).transpose(1, 2)           # (B, h, S, dv)
    k = torch.cat([k_nope, k_rope[:, None].expand(b, n_heads, s, d_rope)], dim=-1)
    q = torch.cat([q_nope, q_rope], dim=-1)[:, :, None]                    # (B, h, 1, dn+dr)
    w = torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(d_nope + d_rope), dim=-1)
    out = (w @ v)[:, :, 0]                                                 # (B, h, dv)
"""

MUTANTS = [
    Mutant("rope_on_latent",
           "    c_kv = x @ w_dkv.T                                            # (B, S, d_c)",
           "    c_kv = _rope(x @ w_dkv.T, pos, rope_base)                     # (B, S, d_c)",
           "RoPE was applied to the latent"),
    Mutant("rope_key_per_head",
           "    elems = batch * (seq_len * (d_c + d_rope) + n_heads",
           "    elems = batch * (seq_len * (d_c + n_heads * d_rope) + n_heads",
           "one RoPE key per head"),
    Mutant("scale_d_c",
           "    scores = (q_lat @ c_kv.transpose(1, 2) + q_rope @ k_rope.transpose(1, 2)) \\\n"
           "        / math.sqrt(d_nope + d_rope)",
           "    scores = (q_lat @ c_kv.transpose(1, 2) + q_rope @ k_rope.transpose(1, 2)) \\\n"
           "        / math.sqrt(d_c)",
           "1/sqrt(d_c)"),
    Mutant("scale_d_nope",
           "scores = q @ k.transpose(-2, -1) / math.sqrt(d_nope + d_rope)          # (B, h, S, S)",
           "scores = q @ k.transpose(-2, -1) / math.sqrt(d_nope)          # (B, h, S, S)",
           "1/sqrt(d_nope)"),
    Mutant("absorb_transposed",
           """    w_uk_heads = w_uk.view(n_heads, d_nope, d_c)                         # W_uk_i: (dn, d_c)
    q_lat = torch.einsum("bhn,hnc->bhc", q_nope, w_uk_heads)              # (B, h, d_c)""",
           """    w_uk_heads = w_uk.view(n_heads, d_c, d_nope)
    q_lat = torch.einsum("bhn,hcn->bhc", q_nope, w_uk_heads)""",
           "absorbed transposed"),
    Mutant("cache_rebuilt_kv",
           _ABSORBED, _REBUILT,
           "instead of attending to the latent"),
    Mutant("top_left_mask_in_decode",
           "        / math.sqrt(d_nope + d_rope)                                      # (B, h, S)\n",
           "        / math.sqrt(d_nope + d_rope)                                      # (B, h, S)\n"
           "    seen = torch.ones(1, s, dtype=torch.bool).tril()                     # top-left\n"
           "    scores = scores.masked_fill(~seen, float('-inf'))\n",
           "top-left"),
]

# Formula and scale mistakes need not wait for the traced decodes.
ONLY = {name: "not traced" for name in ("rope_on_latent", "rope_key_per_head", "scale_d_c",
                                        "scale_d_nope", "absorb_transposed",
                                        "top_left_mask_in_decode")}

# Sizing slips, one per sized function and constant (tests/test_mutant_corpus.py
# wants every function and constant of the contract touched by a mutant).
MUTANTS += [
    Mutant("cache_bytes_no_rope_key",
           "return n_layers * (d_c + d_rope) * seq_len * batch * bytes_per_elem",
           "return n_layers * d_c * seq_len * batch * bytes_per_elem",
           "decoupled RoPE key was left out"),
    Mutant("cache_saving_inverted",
           "return n_kv_heads * (d_nope + d_rope + d_v) / (d_c + d_rope)",
           "return (d_c + d_rope) / (n_kv_heads * (d_nope + d_rope + d_v))",
           "upside down"),
    Mutant("deepseek_bytes_no_rope_key",
           "DEEPSEEK_V3_MLA_BYTES_PER_TOKEN = 61 * (512 + 64) * 2",
           "DEEPSEEK_V3_MLA_BYTES_PER_TOKEN = 61 * 512 * 2", "decoupled RoPE key was left out"),
    Mutant("deepseek_ratio_inverted",
           "DEEPSEEK_V3_MHA_OVER_MLA = 128 * (128 + 64 + 128) / (512 + 64)",
           "DEEPSEEK_V3_MHA_OVER_MLA = (512 + 64) / (128 * (128 + 64 + 128))", "upside down"),
]
ONLY.update({"cache_bytes_no_rope_key": "cache_bytes", "cache_saving_inverted": "cache_saving",
             "deepseek_bytes_no_rope_key": "deepseek_v3_constants",
             "deepseek_ratio_inverted": "deepseek_v3_constants"})

# -- slips named since the outside review (issue 15)
MUTANTS += [
    Mutant("decode_default_position_s",
           "pos = torch.tensor([s - 1 if position is None else int(position)]",
           "pos = torch.tensor([s if position is None else int(position)]",
           "default position was S"),
    Mutant("cache_bytes_doubled",
           "return n_layers * (d_c + d_rope) * seq_len * batch * bytes_per_elem",
           "return 2 * n_layers * (d_c + d_rope) * seq_len * batch * bytes_per_elem",
           "counted twice, as if it held a K and a V"),
    Mutant("cache_saving_k_without_rope",
           "return n_kv_heads * (d_nope + d_rope + d_v) / (d_c + d_rope)",
           "return n_kv_heads * (d_nope + d_v) / (d_c + d_rope)",
           "K width left out d_rope"),
    Mutant("q_rope_at_position_0",
           "return q[..., :d_nope], _rope(q[..., d_nope:], positions, rope_base)",
           "return q[..., :d_nope], _rope(q[..., d_nope:], positions * 0, rope_base)",
           "rotated at position 0"),
]
# An outside corpus's slip (issue 51): absorbed decode scores from the latent only.
MUTANTS += [
    Mutant("decode_no_rope_score",
           "scores = (q_lat @ c_kv.transpose(1, 2) + q_rope @ k_rope.transpose(1, 2)) \\",
           "scores = (q_lat @ c_kv.transpose(1, 2)) \\",
           "RoPE part of the scores was left out"),
]
MUTANTS += [
    Mutant("cache_k_rope_unrotated",
           "k_rope = _rope(x @ w_kr.T, pos, rope_base)                    # (B, S, d_rope)",
           "k_rope = x @ w_kr.T                                           # (B, S, d_rope)",
           "cached RoPE key was not rotated"),
]
ONLY["cache_k_rope_unrotated"] = "mla_cache"
ONLY["decode_no_rope_score"] = "mla_decode"
ONLY.update({"decode_default_position_s": "mla_decode_is_the_last_row",
             "cache_bytes_doubled": "cache_bytes",
             "cache_saving_k_without_rope": "cache_saving",
             "q_rope_at_position_0": "mla_attention_small or mla_decode_is_the_last_row"})

# -- slips in the picture (issue 29): plot_mla_heads
MUTANTS += [
    Mutant("plot_scale_d_c",
           "+ q_rope @ k_rope[:, None].transpose(-2, -1)) / math.sqrt(d_nope + d_rope)",
           "+ q_rope @ k_rope[:, None].transpose(-2, -1)) / math.sqrt(d_c)", "1/sqrt(d_c)"),
    Mutant("plot_no_rope_part", "\n              + q_rope @ k_rope[:, None].transpose(-2, -1))",
           ")", "RoPE part"),
    Mutant("plot_no_mask",
           'weights = torch.softmax(scores.masked_fill(~allowed, float("-inf")), dim=-1)[0]',
           "weights = torch.softmax(scores, dim=-1)[0]", "without the causal mask"),
    Mutant("plot_unlabelled",
           '        ax.set_title(f"head {i}")\n        ax.set_xlabel("key")\n'
           '        ax.set_ylabel("query")\n',
           '        ax.set_title(f"head {i}")\n', "axes are not labelled"),
]
ONLY.update({name: "plot" for name in ("plot_scale_d_c", "plot_no_rope_part", "plot_no_mask",
                                       "plot_unlabelled")})

# -- a fourth outside corpus: the query split as [rope, nope], and the weighted
# sum's FLOPs counted over the RoPE width too
MUTANTS += [
    Mutant("q_rope_from_front",
           "    return q[..., :d_nope], _rope(q[..., d_nope:], positions, rope_base)",
           "    return q[..., q.shape[-1] - d_nope:], _rope(q[..., :q.shape[-1] - d_nope],\n"
           "                                                positions, rope_base)",
           "split as [rope, nope]"),
    Mutant("intensity_wsum_with_rope",
           "flops = 2 * batch * n_heads * seq_len * (2 * d_c + d_rope)",
           "flops = 2 * batch * n_heads * seq_len * (2 * d_c + 2 * d_rope)",
           "counted over d_c + d_rope"),
]
ONLY.update({"q_rope_from_front": "mla_attention_small or mla_decode_is_the_last_row",
             "intensity_wsum_with_rope": "decode_intensity"})

# -- a fifth outside corpus: the absorbed decode scales the latent part of the score only
MUTANTS += [
    Mutant("decode_scale_latent_only",
           "    scores = (q_lat @ c_kv.transpose(1, 2) + q_rope @ k_rope.transpose(1, 2)) \\\n"
           "        / math.sqrt(d_nope + d_rope)",
           "    scores = q_lat @ c_kv.transpose(1, 2) / math.sqrt(d_nope + d_rope) \\\n"
           "        + q_rope @ k_rope.transpose(1, 2)",
           "only the latent part of each score was scaled"),
]
ONLY["decode_scale_latent_only"] = "mla_decode_is_the_last_row"
