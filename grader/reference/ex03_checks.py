"""Exercise C's sizing slips, shared by its public and hidden suites (this
module ships with the public suite): the words, and the wrong answers of
``kv_exceeds_weights_at``, in one place."""
from __future__ import annotations

# Sizing slips, in the same words for kv_cache_bytes and for the functions built
# on it: a slip in kv_cache_bytes is then named once as the root cause.
MISTAKES = {
    "only_k": "only K (or only V) was counted: the cache holds both K and V",
    "no_layers": "the layers were not counted (every layer keeps its own K and V)",
    "no_bytes": "bytes_per_elem was ignored (sizes are in bytes: multiply by the element size)",
    "no_batch": "the batch was ignored",
    "ratio_upside_down": "the ratio is upside down (MHA cache / this cache is h / h_kv)",
    "constant_upside_down": "the ratio is upside down",    # LLAMA3_70B_KV_SAVING
    "one_token_short": "the answer is one token short: the cache must be strictly larger "
                       "than the weights, which it first is at weight_bytes // per_token + 1 "
                       "tokens",
    "one_token_long": "the answer is one token too long: weight_bytes // per_token + 1 is "
                      "already the first length where the cache is larger",
    "bytes_not_passed": "bytes_per_elem was not passed on to the cache size (the default 2 "
                        "bytes was used)",
}
ONLY_K, NO_LAYERS, NO_BYTES = MISTAKES["only_k"], MISTAKES["no_layers"], MISTAKES["no_bytes"]


def exceeds_mistakes(want: int, weights: float, per_token: int, n_layers: int,
                     bpe: int) -> dict:
    """``{description: wrong answer}`` of ``kv_exceeds_weights_at`` for a case
    whose right answer is ``want`` (``per_token``: the cache's bytes per
    token).  A slip that changes nothing on this case gives ``want`` (it
    names nothing, and a passed check rules nothing out with it)."""
    return {MISTAKES["one_token_short"]: want - 1,
            MISTAKES["one_token_long"]: want + 1,
            ONLY_K: int(weights // (per_token // 2)) + 1,
            NO_LAYERS: int(weights // (per_token // n_layers)) + 1,
            NO_BYTES: int(weights // (per_token // bpe)) + 1 if bpe > 1 else want,
            MISTAKES["bytes_not_passed"]: int(weights // (per_token // bpe * 2)) + 1
            if bpe != 2 else want}
