"""Mistakes in grouped-query attention and KV-cache sizing (exercise C)."""
from tests.mutants import Mutant

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
    Mutant("llama_saving_upside_down", "LLAMA3_70B_KV_SAVING = 64 / 8",
           "LLAMA3_70B_KV_SAVING = 8 / 64", "upside down"),
]

# The sizing mistakes need none of the attention tests.
_SIZES = "kv_cache or kv_exceeds or llama3"
ONLY = {name: _SIZES for name in (
    "cache_counts_only_k", "saving_upside_down", "exceeds_not_strict", "exceeds_one_short",
    "exceeds_without_element_size", "cache_without_element_size", "cache_without_layers",
    "llama_saving_upside_down")}
