"""Independent references for exercises D-F: counting, timing fits, roofline.

Written apart from ``solutions/`` (closed forms where the solutions loop,
float64 attention from ``grader.reference.secret.attention``).  As there, each
function has a ``mistake=`` switch reproducing one known wrong answer, and
``MISTAKES`` says what the feedback calls it.
"""
from __future__ import annotations

import math

import numpy as np
import torch

from grader.reference.mistakes import mistakes_of  # noqa: F401  (suites call ref.mistakes_of)
from grader.reference.secret import attention as ref

MISTAKES = {
    # counting
    "flops_kv_heads": "the FLOPs were counted for the n_kv_heads K/V heads: every one of the "
                      "n_heads query heads does its own scores and weighted sum (GQA saves "
                      "bytes, not FLOPs)",
    "flops_half": "the FLOPs are off by a factor of 2 (a (query, key) pair costs "
                  "4 * d_head: 2 * d_head for its score and 2 * d_head for the weighted sum "
                  "of values)",
    "flops_double": "the FLOPs are off by a factor of 2 (counted 8 * d_head per pair; a "
                    "multiply-add is 2 FLOPs, and there are 2 of them per feature)",
    "causal_top_left": "the causal pairs were counted top-left (query i seeing keys 0..i); "
                       "the mask is aligned to the end: query i sees s_k - s_q + i + 1 keys",
    "causal_half": "the causal pairs were taken as s_q * s_k / 2; count them exactly "
                   "(the diagonal is kept, and s_q may be smaller than s_k)",
    "causal_ignored": "causal=True was ignored (all s_q * s_k pairs counted)",
    "causal_no_diagonal": "the causal pairs left out the diagonal (only keys strictly "
                          "before the query were counted); a query sees its own key too: "
                          "query i sees s_k - s_q + i + 1 keys",
    "causal_not_clamped": "the causal pairs were summed as a series from s_k - s_q + 1 to "
                          "s_k keys per query without clamping at 0: when s_q > s_k the "
                          "first s_q - s_k queries see no key (never a negative count)",
    "bytes_kv_all_heads": "K and V were counted with n_heads heads; they have n_kv_heads "
                          "(that is the point of GQA)",
    "bytes_no_output": "the output write was not counted (read Q, K, V once and write O once)",
    "bytes_double": "the bytes are off by a factor of 2",
    "bytes_half": "the bytes are off by a factor of 2 (K and V are both read: "
                  "2 * n_kv_heads * s_k rows)",
    "bytes_per_elem_ignored": "bytes_per_elem was not used (the count is in elements)",
    "bytes_per_elem_fixed_2": "bytes_per_elem was ignored: the count always used 2 bytes "
                              "per element (right for fp16 only; multiply by the "
                              "bytes_per_elem given)",
    # ex04
    "scores_no_batch": "the batch was left out of the score tensor's size",
    "scores_linear": "the score tensor grows like S, not S * S",
    "scores_double": "the score tensor's bytes are off by a factor of 2",
    "scores_causal_half": "half the score tensor was counted, as if a causal mask saved "
                          "memory: naive attention materializes all S x S scores, masked "
                          "or not",
    "max_len_off_by_one": "the largest length is off by one (it must be the largest S whose "
                          "score tensor fits, exactly: S*S*B*h*bytes <= memory)",
    "max_len_float": "the length is not a whole number (return an int)",
    "scores_no_elem_size": "the element size was left out of the score tensor's bytes "
                           "(multiply the element count by bytes_per_elem)",
    "max_len_no_elem_size": "the element size was left out: the score tensor of length S "
                            "takes S*S*B*h*bytes_per_elem bytes",
    "max_len_no_batch": "the batch was left out: B sequences each keep their own "
                        "S*S*h score tensor (S*S*B*h*bytes <= memory)",
    "max_len_no_heads": "the heads were left out: each of the h heads keeps its own S*S "
                        "score matrix (S*S*B*h*bytes <= memory)",
    "max_len_one_short": "the largest length is one short (S itself still fits: "
                         "S*S*B*h*bytes <= memory)",
    "slope_endpoints": "the slope came from the first and last points only, not from a "
                       "least-squares fit over all points",
    "slope_inverted": "the fit is of log(S) on log(time) instead of log(time) on log(S)",
    "slope_not_log": "the fit is on the times themselves, not on their logarithms",
    "slope_intercept": "the fit's intercept was returned, not its slope "
                       "(np.polynomial.polynomial.polyfit lists the coefficients lowest "
                       "degree first, np.polyfit highest first)",
    # ex05 bound
    "bound_inverted_ridge": "the ridge point was taken as peak_bytes_per_s / peak_flops "
                            "(it is peak_flops / peak_bytes_per_s, in FLOPs per byte)",
    "bound_strict": "an intensity exactly at the ridge point was called memory-bound "
                    "(at or above the ridge is compute-bound)",
    "bound_swapped": "compute and memory are swapped (a high intensity is compute-bound)",
    # ex05 decode_with_cache
    "rope_after_caching": "RoPE was applied after caching: the cache holds keys that were "
                          "never rotated (rotate k at its own position, then cache it)",
    "rope_positions_unused": "RoPE did not use each token's position (every step rotated as "
                             "if at position 0, or no RoPE at all)",
    "rope_on_values": "RoPE was also applied to the values (it goes on q and k only)",
    "cache_not_grown": "the query attended only to the newest key instead of the whole "
                       "cache",
    "decode_top_left": "each step's query saw only the first cached key: its causal mask was "
                       "aligned to the top-left, but the one decode query is the newest "
                       "position and sees the whole cache (align the mask to the end)",
    "decode_positions_off_by_one": "the RoPE positions are off by one (the first token sits "
                                   "at position 0)",
    "decode_query_at_cache_length": "the new token's query was rotated at the cache's length "
                                    "after the append (t + 1); it sits at t, the position "
                                    "its own key was rotated at",
    "cache_slots_unmasked": "each step attended over the whole preallocated cache: the slots "
                            "not yet written (zeros) took softmax weight (score 0); step t "
                            "must see only the t + 1 keys cached so far",
    "cache_sequence_first": "the caches were returned sequence-first, (B, S, h_kv, d_head) as "
                            "in Llama's code, not (B, h_kv, S, d_head): move the head axis "
                            "back (transpose(1, 2))",
    # ex06
    "intensity_float_bytes": "the intensity used 4 bytes per element; the default is 2 "
                             "(fp16)",
    "intensity_no_q_o": "the query read and the output write were left out of the bytes",
    "softmax_over_group": "the softmax ran over the query heads of a group (dim -2 of the "
                          "grouped (B, h_kv, h/h_kv, S) scores) instead of over the cached "
                          "keys (dim -1)",
    # ex06: what the cache costs a server (issue 29)
    "kv_one_of_k_v": "only one of K and V was counted: the cache holds a K row and a V row "
                     "per KV head, layer and token (the factor 2)",
    "kv_no_layers": "one layer was counted: every layer keeps its own K and V (multiply by "
                    "n_layers)",
    "kv_fixed_2_bytes": "bytes_per_elem was ignored: the count always used 2 bytes per "
                        "element (multiply by the bytes_per_elem given)",
    "kv_in_elements": "the cache was counted in elements, not bytes: multiply by "
                      "bytes_per_elem (2 for fp16, 4 for fp32)",
    "kv_no_batch": "the batch was left out (each sequence keeps its own cache)",
    "kv_gib": "the cache was taken in GiB (2^30 bytes) against weights in bytes: keep both "
              "in bytes",
    "ratio_inverted": "the ratio is inverted: weights over cache instead of cache over "
                      "weights",
    "saving_is_gqa_cache": "this is GQA's cache, not what it saves: the saving is MHA's "
                           "cache (n_heads K/V heads) less GQA's (n_kv_heads)",
    "saving_is_mha_cache": "this is MHA's whole cache, not what GQA saves: subtract GQA's "
                           "cache (n_kv_heads K/V heads)",
    "saving_is_ratio": "this is the ratio n_heads / n_kv_heads, not a number of bytes",
    "crossover_no_projections": "attention's projections (w_q, w_k, w_v, w_o) were left "
                                "out: they are attention's FLOPs too, 2 per weight per token",
    "crossover_all_pairs": "all n^2 (query, key) pairs were counted: the causal mask keeps "
                           "n (n + 1) / 2",
    "crossover_two_ffn_matrices": "the FFN was counted with 2 matrices: Llama's SwiGLU FFN "
                                  "has 3 (gate, up and down), 2 * 3 * d_model * d_ff FLOPs "
                                  "per token",
    "crossover_kv_all_heads": "w_k and w_v were counted with n_heads heads: they have "
                              "n_kv_heads (GQA)",
    "crossover_pair_2_flops": "a (query, key) pair was counted as 2 * d_head FLOPs: it costs "
                              "4 * d_head (q.k, and the weighted sum of v)",
    "crossover_last_below": "this is the last length at which attention does not yet pass "
                            "the FFN (ties included); the answer is the first length at "
                            "which it does, one more",
    # ex05's decode_with_cache: the GQA grouping (the words of ex02/ex03's)
    "kv_tile": ref.MISTAKES["kv_tile"],
    "kv_tile_heads_regrouped": "the query heads were grouped in tile's order (head i with K/V "
                               "head i % h_kv) and came back out in the grouped order: "
                               "reshape q to (B, h_kv, h/h_kv, d_head), so that head i reads "
                               "K/V head i // (h/h_kv) and keeps its place",
}


# -- counting ---------------------------------------------------------------

def causal_pairs(s_q: int, s_k: int, mistake=None) -> int:
    """(query, key) pairs an end-aligned causal mask allows (closed form)."""
    if mistake == "causal_top_left":
        n = min(s_q, s_k)
        return n * (n + 1) // 2 + (s_q - n) * s_k
    if mistake == "causal_half":
        return s_q * s_k // 2
    if mistake == "causal_ignored":
        return s_q * s_k
    if mistake == "causal_no_diagonal":     # every query that sees a key loses its own
        return causal_pairs(s_q, s_k) - min(s_q, s_k)
    if mistake == "causal_not_clamped":     # the series s_k - s_q + 1 .. s_k, negatives kept
        return (2 * s_k - s_q + 1) * s_q // 2
    n = min(s_q, s_k)
    return n * (n + 1) // 2 + n * (s_k - n)


def attention_flops(batch, n_heads, s_q, s_k, d_head, causal=False, mistake=None) -> int:
    pairs = causal_pairs(s_q, s_k, mistake) if causal else s_q * s_k
    per_pair = {"flops_half": 2, "flops_double": 8}.get(mistake, 4) * d_head
    return per_pair * pairs * batch * n_heads


def attention_bytes(batch, n_heads, n_kv_heads, s_q, s_k, d_head, bytes_per_elem=2,
                    mistake=None) -> int:
    kv_heads = n_heads if mistake == "bytes_kv_all_heads" else n_kv_heads
    q_rows = batch * n_heads * s_q
    o_rows = 0 if mistake == "bytes_no_output" else batch * n_heads * s_q
    kv_rows = (1 if mistake == "bytes_half" else 2) * batch * kv_heads * s_k
    elems = (q_rows + o_rows + kv_rows) * d_head
    if mistake == "bytes_per_elem_ignored":
        return elems
    if mistake == "bytes_per_elem_fixed_2":
        return elems * 2
    if mistake == "bytes_double":
        return 2 * elems * bytes_per_elem
    return elems * bytes_per_elem


def decode_intensity(n_heads, n_kv_heads, seq_len, d_head, batch=1, bytes_per_elem=2,
                     mistake=None) -> float:
    flops = attention_flops(batch, n_kv_heads if mistake == "flops_kv_heads" else n_heads, 1,
                            seq_len, d_head,
                            mistake=mistake if mistake in ("flops_half", "flops_double") else None)
    if mistake == "intensity_float_bytes":
        bytes_per_elem = 4
    if mistake == "intensity_no_q_o":
        nbytes = 2 * batch * n_kv_heads * seq_len * d_head * bytes_per_elem
    else:
        nbytes = attention_bytes(batch, n_heads, n_kv_heads, 1, seq_len, d_head, bytes_per_elem,
                                 mistake=mistake if mistake and mistake.startswith("bytes")
                                 else None)
    return flops / nbytes


def bound(intensity, peak_flops, peak_bytes_per_s, mistake=None) -> str:
    ridge = peak_flops / peak_bytes_per_s
    if mistake == "bound_inverted_ridge":
        ridge = peak_bytes_per_s / peak_flops
    if mistake == "bound_strict":
        return "compute" if intensity > ridge else "memory"
    if mistake == "bound_swapped":
        return "memory" if intensity >= ridge else "compute"
    return "compute" if intensity >= ridge else "memory"


# -- ex04: memory wall and fits ---------------------------------------------

def score_matrix_bytes(batch, n_heads, seq_len, bytes_per_elem=2, mistake=None) -> int:
    if mistake == "scores_no_batch":
        return n_heads * seq_len ** 2 * bytes_per_elem
    if mistake == "scores_linear":
        return batch * n_heads * seq_len * bytes_per_elem
    if mistake == "scores_double":
        return 2 * batch * n_heads * seq_len ** 2 * bytes_per_elem
    if mistake == "scores_no_elem_size":
        return batch * n_heads * seq_len ** 2
    if mistake == "scores_causal_half":
        return batch * n_heads * seq_len ** 2 * bytes_per_elem // 2
    return batch * n_heads * seq_len ** 2 * bytes_per_elem


def max_naive_seq_len(memory_bytes, batch, n_heads, bytes_per_elem=2, mistake=None) -> int:
    per = ((1 if mistake == "max_len_no_batch" else batch)
           * (1 if mistake == "max_len_no_heads" else n_heads)
           * (1 if mistake == "max_len_no_elem_size" else bytes_per_elem))
    # Exact integer search (no float square root): largest s with s*s*per <= memory.
    lo, hi = 0, 1
    while hi * hi * per <= memory_bytes:
        hi *= 2
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if mid * mid * per <= memory_bytes:
            lo = mid
        else:
            hi = mid
    if mistake == "max_len_off_by_one":
        return lo + 1
    if mistake == "max_len_one_short":
        return lo - 1
    if mistake == "max_len_float":
        return math.sqrt(memory_bytes / per)
    return lo


def loglog_slope(seq_lens, times, mistake=None) -> float:
    x = np.log(np.asarray(seq_lens, dtype=np.float64))
    y = np.log(np.asarray(times, dtype=np.float64))
    if mistake == "slope_endpoints":
        return float((y[-1] - y[0]) / (x[-1] - x[0]))
    if mistake == "slope_inverted":
        x, y = y, x
    if mistake == "slope_not_log":
        x = np.asarray(seq_lens, dtype=np.float64)
        y = np.asarray(times, dtype=np.float64)
    return float(np.polyfit(x, y, 1)[1 if mistake == "slope_intercept" else 0])


# -- ex05: kernels ----------------------------------------------------------

def grouped(q, k, v, *, causal, mistake=None) -> torch.Tensor:
    """Attention with ``h_kv`` dividing ``h`` (K/V repeated in float64: fine for a
    reference), end-aligned causal mask."""
    h, h_kv = q.shape[1], k.shape[1]
    if mistake == "kv_tile_heads_regrouped":
        # tile's grouping, the heads written back group by group: output place
        # p = g * (h / h_kv) + j holds query head j * h_kv + g (an outside
        # corpus's xFormers-style reshape to (h/h_kv, h_kv) then transposed)
        out = grouped(q, k, v, causal=causal, mistake="kv_tile")
        per = h // h_kv
        order = [(p % per) * h_kv + p // per for p in range(h)]
        return out[:, order]
    k64, v64 = ref.t64(k), ref.t64(v)
    if mistake == "softmax_over_group":
        return _softmax_over_group(q, k64, v64)
    if h != h_kv:
        k64 = ref.repeat_kv(k64, h // h_kv, mistake)
        v64 = ref.repeat_kv(v64, h // h_kv, mistake)
    return ref.attention(q, k64, v64, causal=causal, mistake=mistake)


def _softmax_over_group(q, k64, v64) -> torch.Tensor:
    """Grouped decode with the softmax over a group's query heads (dim -2 of
    ``(B, h_kv, g, S)``) instead of over the keys: one decode query only."""
    b, h, s_q, d = q.shape
    h_kv = k64.shape[1]
    if s_q != 1:
        raise ValueError("the grouped layout holds one query position")
    qg = ref.t64(q).reshape(b, h_kv, h // h_kv, d)                      # (B, h_kv, g, d)
    scores = qg @ k64.transpose(-2, -1) / math.sqrt(d)                   # (B, h_kv, g, S)
    return (torch.softmax(scores, dim=-2) @ v64).reshape(b, h, 1, d)


def decode_with_cache(x, w_q, w_k, w_v, w_o, n_heads, n_kv_heads, *, rope_base=10000.0,
                      mistake=None):
    """``(out, k_cache, v_cache)`` computed all at once (full causal attention)."""
    x = ref.t64(x)
    s = x.shape[1]
    pos = torch.arange(s) + (1 if mistake == "decode_positions_off_by_one" else 0)
    k_raw = ref.split_heads(x @ ref.t64(w_k).T, n_kv_heads)
    v_raw = ref.split_heads(x @ ref.t64(w_v).T, n_kv_heads)
    k_rot = ref.rope(k_raw, pos, rope_base)
    if mistake == "rope_after_caching":
        # The cache keeps the raw keys and attention runs against it.
        q = ref.rope(ref.split_heads(x @ ref.t64(w_q).T, n_heads), pos, rope_base)
        k_att, k_cache, v_cache = k_raw, k_raw, v_raw
    elif mistake == "rope_positions_unused":
        q = ref.split_heads(x @ ref.t64(w_q).T, n_heads)
        k_att, k_cache, v_cache = k_raw, k_raw, v_raw
    elif mistake == "rope_on_values":
        q = ref.rope(ref.split_heads(x @ ref.t64(w_q).T, n_heads), pos, rope_base)
        v_rot = ref.rope(v_raw, pos, rope_base)
        k_att, k_cache, v_cache = k_rot, k_rot, v_rot
    else:
        q_pos = pos + 1 if mistake == "decode_query_at_cache_length" else pos
        q = ref.rope(ref.split_heads(x @ ref.t64(w_q).T, n_heads), q_pos, rope_base)
        k_att, k_cache, v_cache = k_rot, k_rot, v_raw
    if mistake == "cache_not_grown":
        rep = n_heads // n_kv_heads
        out = ref.repeat_kv(v_cache, rep)          # each query sees only its own key
    elif isinstance(mistake, tuple) and mistake[0] == "cache_slots_unmasked":
        # A cache of ``slots`` >= S zeros: step t's query also scores the
        # slots not yet written (key 0: score 0) and reads their value 0.
        slots = mistake[1]
        rep = n_heads // n_kv_heads
        keys, values = ref.repeat_kv(k_att, rep), ref.repeat_kv(v_cache, rep)
        scores = q @ keys.transpose(-2, -1) / math.sqrt(q.shape[-1])      # (B, h, S, S)
        written = torch.ones(s, s, dtype=torch.bool).tril()              # slots up to step t
        top = scores.masked_fill(~written, float("-inf")).amax(-1, keepdim=True).clamp(min=0)
        e = torch.exp(scores - top).masked_fill(~written, 0.0)
        empty = (slots - 1 - torch.arange(s, dtype=scores.dtype))[:, None]  # zeros at step t
        out = (e @ values) / (e.sum(-1, keepdim=True) + empty * torch.exp(-top))
    elif mistake == "decode_top_left":
        rep = n_heads // n_kv_heads                # each query sees only key 0
        out = ref.repeat_kv(v_cache[:, :, :1].expand(-1, -1, s, -1), rep)
    else:   # kv_tile: query head i reads K/V head i % h_kv (tile's grouping)
        out = grouped(q, k_att, v_cache, causal=True,
                      mistake="kv_tile" if mistake == "kv_tile" else None)
    out = ref.merge_heads(out) @ ref.t64(w_o).T
    if mistake == "cache_sequence_first":
        k_cache, v_cache = k_cache.transpose(1, 2), v_cache.transpose(1, 2)
    return out, k_cache, v_cache


def attention_mistakes(names, q, k, v, *, causal=True) -> dict:
    """``{description: wrong answer}`` for attention mistakes, as PyTorch code
    would produce them: a query row whose keys are all masked comes out NaN
    from ``torch.softmax`` (the float64 reference gives zeros there)."""
    out = {}
    s_q, s_k = q.shape[-2], k.shape[-2]
    for name in names:
        try:
            wrong = ref.attention(q, k, v, causal=causal, mistake=name)
        except (RuntimeError, ValueError):
            continue
        if causal:
            empty = ~ref.causal_allowed(s_q, s_k, name).any(dim=-1)     # (S_q,)
            if bool(empty.any()):
                wrong = wrong.clone()
                wrong[..., empty, :] = float("nan")
        out[ref.MISTAKES[name]] = wrong
    return out

# -- ex06: what the cache costs a server (closed forms and an integer search) ----

def kv_bytes_per_token(n_layers, n_kv_heads, d_head, bytes_per_elem=2, mistake=None) -> int:
    kv = 1 if mistake == "kv_one_of_k_v" else 2
    layers = 1 if mistake == "kv_no_layers" else n_layers
    width = {"kv_fixed_2_bytes": 2, "kv_in_elements": 1}.get(mistake, bytes_per_elem)
    return kv * layers * n_kv_heads * d_head * width


def kv_cache_over_weights(n_layers, n_kv_heads, d_head, seq_len, weight_bytes, batch=1,
                          bytes_per_elem=2, mistake=None) -> float:
    rows = (1 if mistake == "kv_no_batch" else batch) * seq_len
    cache = rows * kv_bytes_per_token(n_layers, n_kv_heads, d_head, bytes_per_elem, mistake)
    if mistake == "kv_gib":
        cache = cache / 2**30
    if mistake == "ratio_inverted":
        return weight_bytes / cache
    return cache / weight_bytes


def gqa_bytes_saved(n_layers, n_heads, n_kv_heads, d_head, seq_len=1, batch=1,
                    bytes_per_elem=2, mistake=None) -> int:
    def cache(heads):
        return batch * seq_len * kv_bytes_per_token(n_layers, heads, d_head, bytes_per_elem,
                                                    mistake)
    if mistake == "saving_is_gqa_cache":
        return cache(n_kv_heads)
    if mistake == "saving_is_mha_cache":
        return cache(n_heads)
    if mistake == "saving_is_ratio":
        return n_heads // n_kv_heads
    if mistake == "kv_no_batch":
        return seq_len * (kv_bytes_per_token(n_layers, n_heads, d_head, bytes_per_elem)
                          - kv_bytes_per_token(n_layers, n_kv_heads, d_head, bytes_per_elem))
    return cache(n_heads) - cache(n_kv_heads)


def layer_prefill_flops(n, d_model, d_ff, n_heads, n_kv_heads, d_head, mistake=None):
    """(attention, FFN) FLOPs of one layer in a causal prefill of ``n`` tokens."""
    ffn = 2 * (2 if mistake == "crossover_two_ffn_matrices" else 3) * d_model * d_ff * n
    kv = n_heads if mistake == "crossover_kv_all_heads" else n_kv_heads
    weights = d_model * d_head * (n_heads + kv + kv + n_heads)          # w_q, w_k, w_v, w_o
    projections = 0 if mistake == "crossover_no_projections" else 2 * weights * n
    pairs = n * n if mistake == "crossover_all_pairs" else n * (n + 1) // 2
    per_pair = (2 if mistake == "crossover_pair_2_flops" else 4) * d_head
    return projections + per_pair * n_heads * pairs, ffn


def attention_ffn_crossover(d_model, d_ff, n_heads, n_kv_heads, d_head, mistake=None) -> int:
    """Smallest n >= 1 with attention FLOPs > FFN FLOPs (their difference
    grows with n once positive: an integer bisection, no closed form)."""
    def passes(n):
        attention, ffn = layer_prefill_flops(n, d_model, d_ff, n_heads, n_kv_heads, d_head,
                                             mistake)
        return attention > ffn
    lo, hi = 1, 1
    while not passes(hi):
        hi *= 2
    while lo < hi:
        mid = (lo + hi) // 2
        if passes(mid):
            hi = mid
        else:
            lo = mid + 1
    return lo - 1 if mistake == "crossover_last_below" else lo


KV_SLIPS = ["kv_one_of_k_v", "kv_no_layers", "kv_fixed_2_bytes", "kv_in_elements"]
RATIO_SLIPS = KV_SLIPS + ["kv_no_batch", "kv_gib", "ratio_inverted"]
SAVING_SLIPS = KV_SLIPS + ["kv_no_batch", "saving_is_gqa_cache", "saving_is_mha_cache",
                           "saving_is_ratio"]
CROSSOVER_SLIPS = ["crossover_no_projections", "crossover_all_pairs",
                   "crossover_two_ffn_matrices", "crossover_kv_all_heads",
                   "crossover_pair_2_flops", "crossover_last_below"]


def how(name: str, *args) -> str:
    """The worked method of one of ex06's cache counts, with the case's numbers."""
    if name == "kv_bytes_per_token":
        layers, kv, d, width = (list(args) + [2])[:4]
        return (f"2 (K and V) x {layers} layers x {kv} KV heads x {d} (d_head) x {width} "
                f"bytes = {kv_bytes_per_token(layers, kv, d, width):,} bytes per token")
    if name == "kv_cache_over_weights":
        layers, kv, d, seq, weights, batch, width = (list(args) + [1, 2][len(args) - 5:])[:7]
        per = kv_bytes_per_token(layers, kv, d, width)
        cache = batch * seq * per
        return (f"the cache is batch {batch} x {seq:,} tokens x {per:,} bytes per token "
                f"(2 x {layers} layers x {kv} KV heads x {d} x {width} bytes) = {cache:,} "
                f"bytes ({cache / 1e9:.4g} GB); over {weights:.4g} bytes of weights: "
                f"{cache / weights:.4g}")
    if name == "gqa_bytes_saved":
        layers, h, kv, d, seq, batch, width = (list(args) + [1, 1, 2][len(args) - 4:])[:7]
        mha, gqa = (kv_bytes_per_token(layers, n, d, width) for n in (h, kv))
        return (f"per token MHA caches 2 x {layers} layers x {h} heads x {d} x {width} bytes "
                f"= {mha:,} bytes and GQA 2 x {layers} x {kv} KV heads x {d} x {width} = "
                f"{gqa:,}; GQA saves {mha - gqa:,} bytes per token, x {batch} x {seq:,} "
                f"tokens = {(mha - gqa) * batch * seq:,} bytes")
    if name == "attention_ffn_crossover":
        d_model, d_ff, h, kv, d = args
        ffn = 2 * 3 * d_model * d_ff
        proj = 2 * d_model * d * (2 * h + 2 * kv)
        return (f"per token the FFN does 2 x 3 x {d_model} x {d_ff} = {ffn:,} FLOPs and "
                f"attention's projections 2 x {d_model} x {d} x (2 x {h} + 2 x {kv}) = "
                f"{proj:,}; the core adds 4 x {d} x {h} FLOPs per kept pair, "
                f"{2 * d * h:,} x n (n + 1) for a causal prefill of n; attention passes the "
                f"FFN when {2 * d * h:,} x (n + 1) > {ffn:,} - {proj:,}, first at n = "
                f"{attention_ffn_crossover(*args):,}")
    raise KeyError(name)


# ex06's trace reading is shared with the student edition: grader/reference/traces.py
from grader.reference.traces import NO_COPY_OPS, materialized, read_bytes  # noqa: E402,F401
