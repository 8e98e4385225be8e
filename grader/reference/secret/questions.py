"""The interview questions' answer key (``exercises/questions.py``).

``FORMS`` is what a student may see: each question's kind, points and the
form its answer takes (the public suite checks it; it ships, as a replayed
constant, in the student edition).  ``_KEY`` is the answer key and stays with
the instructors (this module is one of ``grader.replay.SECRET_MODULES``, and
nothing below ``FORMS`` is an upper-case constant, which replay would ship).

Kinds: ``number`` (graded to a relative tolerance; known wrong answers are
named: ``mistakes`` maps a slip's key to its words and the answer it gives;
the key, not the words, is its id in the class's mistakes table, prefixed
``questions.``, and one slip made in several questions has one key),
``choice`` (one letter; each wrong letter has its own explanation),
``text`` (not graded here: collected with a rubric for staff, worth
``staff_points`` of theirs and no autograder points; the rubric is a list of
``(points, item)`` whose points add up to ``staff_points``, written for the
gradebook by ``grader.rubric_line.rubric_text`` and read back into items by the staff's page,
``grader.classroom.staff``).

Every number is computed here from the question's own data, not typed in.
Sizes are decimal (1 GB = 1e9 bytes), as in the course.
"""
from __future__ import annotations

import math

NUMBER, CHOICE, TEXT = "number", "choice", "text"
LETTERS = ("A", "B", "C", "D")
MIN_WORDS, MAX_WORDS = 5, 250      # a free-text answer: a few sentences

FORMS = {
    "Q01_ATTENTION_IN_WORDS": {"kind": TEXT, "points": 0, "staff_points": 3},
    "Q02_FORMULA_AND_TERMS": {"kind": TEXT, "points": 0, "staff_points": 3},
    "Q03_WHY_SCALE": {"kind": CHOICE, "points": 1},
    "Q04_CAUSAL_MASK_AND_CACHE": {"kind": CHOICE, "points": 1},
    "Q05_KV_CACHE_GB": {"kind": NUMBER, "points": 2},
    "Q06_MHA_GQA_MQA": {"kind": TEXT, "points": 0, "staff_points": 3},
    "Q07_WHY_GQA_RAISES_INTENSITY": {"kind": CHOICE, "points": 1},
    "Q08_MQA_DECODE_INTENSITY": {"kind": NUMBER, "points": 2},
    "Q09_SCORES_GB": {"kind": NUMBER, "points": 2},
    "Q10_PREFILL_VS_DECODE": {"kind": CHOICE, "points": 1},
    "Q11_KV_PASSES_INT8_WEIGHTS_AT": {"kind": NUMBER, "points": 2},
    "Q12_MLA": {"kind": TEXT, "points": 0, "staff_points": 3},
    "Q13_ATTENTION_PASSES_WEIGHTS_AT": {"kind": NUMBER, "points": 2},
    "Q14_ATTENTION_SHARE_AT_8K": {"kind": NUMBER, "points": 2},
    "Q15_ATTENTION_PASSES_FFN_AT": {"kind": NUMBER, "points": 2},
    "Q16_KV_CACHE_128K_GB": {"kind": NUMBER, "points": 2},
    "Q17_KV_128K_OVER_WEIGHTS": {"kind": NUMBER, "points": 2},
    "Q18_NAIVE_MAX_SEQ_LEN_80GB": {"kind": NUMBER, "points": 2},
    "Q19_GQA_SAVES_MB_PER_TOKEN": {"kind": NUMBER, "points": 2},
    "Q20_GQA_SAVES_GB_PER_128K": {"kind": NUMBER, "points": 2},
    "Q21_KERNEL_FALLBACK": {"kind": CHOICE, "points": 1},
    "Q22_LONG_CONTEXT_COST": {"kind": CHOICE, "points": 1},
}

# -- the models the questions use (also written out in the questions) -----
_LLAMA3_8B = dict(layers=32, heads=32, kv_heads=8, d_head=128)
_FP16 = 2


def _kv_bytes(tokens, *, layers, kv_heads, d_head, bytes_per_elem=_FP16, **_):
    return 2 * layers * kv_heads * d_head * tokens * bytes_per_elem     # K and V


def _decode_intensity(*, heads, kv_heads, d_head, cache, bytes_per_elem=_FP16,
                      flops_per_pair=4):
    flops = flops_per_pair * d_head * cache * heads
    nbytes = bytes_per_elem * (2 * heads * d_head + 2 * kv_heads * cache * d_head)  # q, o; K, V
    return flops / nbytes


def _kv_passes(weight_bytes, *, kv_factor=2, **model):
    per_token = kv_factor * model["layers"] * model["kv_heads"] * model["d_head"] * _FP16
    return math.floor(weight_bytes / per_token) + 1       # smallest n with n*per_token > weights


# Question 13's model: 32 layers of 32 heads of 128, 7.0e9 weights every token multiplies.
_PREFILL = dict(layers=32, heads=32, d_head=128, weights=7.0e9)


def _attention_flops(n, *, causal=True, flops_per_pair=4, **_):
    m = _PREFILL
    pairs = n * (n + 1) / 2 if causal else n * n
    return m["layers"] * m["heads"] * flops_per_pair * m["d_head"] * pairs


def _weight_flops(n, flops_per_weight=2):
    return flops_per_weight * _PREFILL["weights"] * n


def _crossing(**kw) -> int:
    """Smallest n with attention FLOPs > weight FLOPs (both increase; bisect)."""
    per_weight = kw.pop("flops_per_weight", 2)
    lo, hi = 1, 10**8
    while lo < hi:
        mid = (lo + hi) // 2
        if _attention_flops(mid, **kw) > _weight_flops(mid, per_weight):
            hi = mid
        else:
            lo = mid + 1
    return lo


def _share(n, **kw):
    a = _attention_flops(n, **kw)
    return a / (a + _weight_flops(n))


_GB = 1e9
_GIB = 2**30
_MB = 1e6
_MIB = 2**20

# Questions 15-22 (issue 29): the FFN against attention, the 128k cache, the naive
# memory wall, Llama-3-70B's saving in bytes.
_LLAMA3_8B_FFN = dict(d_model=4096, d_ff=14336, heads=32, kv_heads=8, d_head=128)
_LLAMA3_70B = dict(layers=80, heads=64, kv_heads=8, d_head=128)
_128K = 131072
_WEIGHTS_8B = 16e9


def _layer_flops(n, *, d_model, d_ff, heads, kv_heads, d_head, ffn_matrices=3,
                 projections=True, causal=True, flops_per_pair=4, flops_per_weight=2):
    """(attention, FFN) FLOPs of one layer in a prefill of n tokens."""
    ffn = flops_per_weight * ffn_matrices * d_model * d_ff * n
    proj = flops_per_weight * d_model * d_head * (2 * heads + 2 * kv_heads) * n
    pairs = n * (n + 1) // 2 if causal else n * n
    return (proj if projections else 0) + flops_per_pair * d_head * heads * pairs, ffn


def _ffn_crossing(**kw) -> int:
    """Smallest n with attention's FLOPs > the FFN's (bisect)."""
    model = {**_LLAMA3_8B_FFN, **{k: kw.pop(k) for k in list(kw) if k in _LLAMA3_8B_FFN}}
    lo, hi = 1, 10**8
    while lo < hi:
        mid = (lo + hi) // 2
        attention, ffn = _layer_flops(mid, **model, **kw)
        if attention > ffn:
            hi = mid
        else:
            lo = mid + 1
    return lo


def _naive_max_len(memory, *, batch=8, heads=32, bytes_per_elem=_FP16, copies=1):
    """Largest S with copies * batch * heads * S^2 * bytes <= memory (exact)."""
    per = copies * batch * heads * bytes_per_elem
    return math.isqrt(int(memory // per))


def _saved(tokens, *, layers=80, heads=64, kv_heads=8, d_head=128, bytes_per_elem=_FP16):
    return (_kv_bytes(tokens, layers=layers, kv_heads=heads, d_head=d_head,
                      bytes_per_elem=bytes_per_elem)
            - _kv_bytes(tokens, layers=layers, kv_heads=kv_heads, d_head=d_head,
                        bytes_per_elem=bytes_per_elem))

_KEY = {
    "Q01_ATTENTION_IN_WORDS": {
        "rubric": [(1, "each token builds a question (query) and compares it with a label "
                       "(key) of every token it may see"),
                   (1, "the match scores become weights that sum to one (softmax)"),
                   (1, "its output is the weighted blend of those tokens' contents (values); "
                       "several heads do this in parallel")],
    },
    "Q02_FORMULA_AND_TERMS": {
        "rubric": [(1, "softmax(Q K^T / sqrt(d_head) + M) V, with shapes"),
                   (0.5, "Q K^T: every query against every key"),
                   (0.5, "1/sqrt(d_head): keeps scores at unit scale so the softmax does "
                         "not saturate"),
                   (0.5, "M: 0 where allowed, -inf above the diagonal (causal)"),
                   (0.5, "softmax per row (over keys), then weights times V")],
    },
    "Q03_WHY_SCALE": {
        "answer": "B",
        "why": "the dot product of two d_head-dimensional vectors with unit-variance "
               "entries has variance d_head; dividing by sqrt(d_head) brings the scores "
               "back to unit scale, so the softmax stays soft (not one-hot) and its "
               "gradients do not vanish",
        "wrong": {"A": "the softmax makes the weights sum to one whatever the scale: the "
                       "scale changes how peaked they are, not their sum",
                  "C": "V is never scaled: the factor divides the scores Q K^T",
                  "D": "-inf stays -inf under any positive scale: the mask does not need it"},
    },
    "Q04_CAUSAL_MASK_AND_CACHE": {
        "answer": "C",
        "why": "with the causal mask no position reads a later one, so appending a token "
               "leaves the hidden states of every earlier position unchanged, and with "
               "them the keys and values computed from them in every layer: they can be "
               "computed once, cached and reused",
        "wrong": {"A": "the mask does skip half the pairs, but a cheaper prefill is not "
                       "what lets decode reuse old keys and values",
                  "B": "the mask holds no keys or values: it only says which pairs count",
                  "D": "RoPE rotates q and k at every position, masked or not; it is not "
                       "what makes reuse possible"},
    },
    "Q05_KV_CACHE_GB": {
        "answer": _kv_bytes(8192, **_LLAMA3_8B) / _GB,
        "rtol": 0.02,
        "how": "bytes = 2 (K and V) x 32 layers x 8 KV heads x 128 (d_head) x 8192 tokens "
               "x 2 bytes = 1,073,741,824 bytes, about 1.07 GB (128 KiB per token)",
        "mistakes": {
            "k_or_v_only": (
                "only K or only V was counted (the cache holds both)",
                _kv_bytes(8192, **_LLAMA3_8B) / 2 / _GB),
            "mha_heads_cached": (
                "all 32 query heads were cached (that is MHA; Llama-3-8B has 8 KV heads)",
                _kv_bytes(8192, **{**_LLAMA3_8B, "kv_heads": 32}) / _GB),
            "fp32_bytes": (
                "4 bytes per element were used (the cache is fp16: 2 bytes)",
                _kv_bytes(8192, **_LLAMA3_8B, bytes_per_elem=4) / _GB),
            "binary_units": (
                "the answer is in GiB (2^30 bytes); the question asks for GB (1e9 bytes)",
                _kv_bytes(8192, **_LLAMA3_8B) / _GIB),
            "one_layer": (
                "one layer was counted (every one of the 32 layers has its own cache)",
                _kv_bytes(8192, **{**_LLAMA3_8B, "layers": 1}) / _GB),
        },
    },
    "Q06_MHA_GQA_MQA": {
        "rubric": [(1, "MHA caches K and V for every head; GQA one K/V head per group of "
                       "query heads; MQA a single K/V head"),
                   (1, "cache relative to MHA: h_kv/h (e.g. 8/32 for Llama-3-8B, 1/32 for "
                       "MQA)"),
                   (0.5, "smaller cache: more concurrent sequences / longer context, fewer "
                         "bytes per decode step"),
                   (0.5, "quality: GQA close to MHA, MQA loses some")],
    },
    "Q07_WHY_GQA_RAISES_INTENSITY": {
        "answer": "D",
        "why": "decode attention reads the whole K/V cache for very few FLOPs; with GQA "
               "each key and value read serves h/h_kv query heads, so the FLOPs per byte "
               "read grow by about h/h_kv",
        "wrong": {"A": "each query head does exactly the same FLOPs as in MHA: it is the "
                       "bytes that shrink",
                  "B": "the softmax is the same size per query head",
                  "C": "a larger batch does not help decode attention (each sequence reads "
                       "its own cache); GQA raises the intensity of one sequence"},
    },
    "Q08_MQA_DECODE_INTENSITY": {
        "answer": _decode_intensity(heads=32, kv_heads=1, d_head=128, cache=8192),
        "rtol": 0.03,
        "how": "FLOPs = 4 x 128 x 8192 x 32 = 134,217,728; bytes = 2 x (q and o: 2 x 32 x "
               "128, plus K and V: 2 x 1 x 8192 x 128) = 4,210,688; about 31.9 FLOPs per "
               "byte, close to h/h_kv = 32",
        "mistakes": {
            "mha_intensity": (
                "this is MHA's intensity (32 KV heads); MQA has one",
                _decode_intensity(heads=32, kv_heads=32, d_head=128, cache=8192)),
            "gqa_intensity": (
                "this is GQA with 8 KV heads; MQA has one",
                _decode_intensity(heads=32, kv_heads=8, d_head=128, cache=8192)),
            "fp32_or_half_flops": (
                "half the answer: 4 bytes per element, or 2 FLOPs per pair instead of 4 "
                "(2 for q.k and 2 for the weighted sum of v)",
                _decode_intensity(heads=32, kv_heads=1, d_head=128, cache=8192,
                                  bytes_per_elem=4)),
        },
    },
    "Q09_SCORES_GB": {
        "answer": 32 * 32768**2 * _FP16 / _GB,
        "rtol": 0.02,
        "how": "32 heads x 32,768^2 scores x 2 bytes = 68,719,476,736 bytes, about 68.7 GB "
               "for one layer, more than most GPUs hold, before the softmax's copy",
        "mistakes": {
            "fp32_bytes": (
                "4 bytes per score were used (the scores are fp16)", 32 * 32768**2 * 4 / _GB),
            "one_head": (
                "one head was counted (all 32 heads' scores exist at once)", 32768**2 * 2 / _GB),
            "binary_units": (
                "the answer is in GiB; the question asks for GB (1e9 bytes)",
                32 * 32768**2 * _FP16 / _GIB),
            "causal_half_only": (
                "only the causal half was counted (a naive implementation stores the full "
                "S x S tensor)", 32 * 32768**2 * _FP16 / 2 / _GB),
        },
    },
    "Q10_PREFILL_VS_DECODE": {
        "answer": "A",
        "why": "prefill multiplies (n x d) by (d x n) matrices: O(n^2) FLOPs on O(n) data, "
               "compute-bound; one decode step reads the whole O(n) cache to do O(n) "
               "FLOPs, about one FLOP per byte: memory-bound",
        "wrong": {"B": "decode does far fewer FLOPs per byte it reads: it waits on memory",
                  "C": "it is the other way round: prefill reuses each loaded key for many "
                       "queries, decode uses each once",
                  "D": "prefill attention is compute-bound for long prompts: O(n^2) FLOPs "
                       "on O(n) bytes"},
    },
    "Q11_KV_PASSES_INT8_WEIGHTS_AT": {
        "answer": _kv_passes(8.0e9, **_LLAMA3_8B),
        "rtol": 0.01,
        "how": "131,072 bytes of cache per token (2 x 32 x 8 x 128 x 2); 8e9 / 131,072 = "
               "61,035.2, so the cache passes the weights at 61,036 tokens",
        "mistakes": {
            "fp16_weights_or_double": (
                "twice the answer: the fp16 weights (16 GB, the chapter's case), or a cache "
                "without one of K and V", _kv_passes(16.0e9, **_LLAMA3_8B)),
            "mha_heads_cached": (
                "all 32 heads were cached (MHA); Llama-3-8B has 8 KV heads",
                _kv_passes(8.0e9, **{**_LLAMA3_8B, "kv_heads": 32})),
            "binary_units": (
                "the weights were counted in GiB (8 x 2^30 bytes); they are 8.0e9 bytes",
                _kv_passes(8 * _GIB, **_LLAMA3_8B)),
        },
    },
    "Q12_MLA": {
        "rubric": [(1, "caches one low-rank latent vector per token per layer (DeepSeek-V3: "
                       "512 numbers plus a small decoupled RoPE key) instead of per-head K "
                       "and V"),
                   (1, "per-head keys and values are reconstructed by up-projections, which "
                       "can be folded into the query and output projections at inference"),
                   (0.5, "cache several times smaller than GQA's at similar quality"),
                   (0.5, "cost: extra projections / compute, RoPE handled separately")],
    },
    "Q13_ATTENTION_PASSES_WEIGHTS_AT": {
        "answer": _crossing(),
        "rtol": 0.02,
        "how": "attention: 32 layers x 32 heads x 4 x 128 x n(n+1)/2 = 262,144 n(n+1) "
               "FLOPs; weights: 2 x 7.0e9 x n = 1.4e10 n; equal at n + 1 = 53,405.8, so "
               "attention passes the weights from n = 53,405 on",
        "mistakes": {
            "all_pairs_counted": (
                "half the answer: all n^2 pairs were counted (the causal mask keeps about "
                "half), or 1 FLOP per weight instead of 2 (a multiply and an add)",
                _crossing(causal=False)),
            "two_flops_per_pair": (
                "twice the answer: 2 FLOPs per (query, key) pair were counted; there are 4 "
                "(q.k, and the weighted sum of v)", _crossing(flops_per_pair=2)),
        },
    },
    "Q14_ATTENTION_SHARE_AT_8K": {
        "answer": _share(8192),
        "rtol": 0.03,
        "how": "attention 262,144 x 8192 x 8193 = 1.76e13 FLOPs, weights 1.4e10 x 8192 = "
               "1.15e14: attention is 1.76e13 / 1.32e14, about 0.133 of the total",
        "mistakes": {
            "percentage": (
                "this is a percentage; the question asks for a fraction between 0 and 1",
                100 * _share(8192)),
            "attention_over_weights": (
                "this is attention / weights; the question asks attention / (attention + "
                "weights)", _attention_flops(8192) / _weight_flops(8192)),
            "all_pairs_counted": (
                "all n^2 pairs were counted; the causal mask keeps n(n+1)/2",
                _share(8192, causal=False)),
        },
    },
    "Q15_ATTENTION_PASSES_FFN_AT": {
        "answer": _ffn_crossing(),
        "rtol": 0.02,
        "how": "per token the FFN does 2 x 3 x 4096 x 14,336 = 352,321,536 FLOPs and "
               "attention's projections 2 x 4096 x (4096 + 1024 + 1024 + 4096) = 83,886,080; "
               "the core adds 4 x 128 x 32 FLOPs per kept pair, 8,192 x n (n + 1) in all; "
               "attention passes the FFN when 8,192 x (n + 1) > 268,435,456, from n = "
               "32,768 on: the chapter's 'below about 30k context the FFN dominates'",
        "mistakes": {
            "projections_left_out": (
                "attention's projections (w_q, w_k, w_v, w_o) were left out: they are "
                "attention's FLOPs too", _ffn_crossing(projections=False)),
            "all_pairs_counted": (
                "half the answer: all n^2 pairs were counted (the causal mask keeps "
                "n (n + 1) / 2), or 1 FLOP per weight instead of 2",
                _ffn_crossing(causal=False)),
            "ffn_two_matrices": (
                "the FFN was counted with 2 matrices; Llama's SwiGLU FFN has 3 (gate, up and "
                "down)", _ffn_crossing(ffn_matrices=2)),
            "kv_projections_mha": (
                "w_k and w_v were counted with 32 heads; they have 8 (GQA)",
                _ffn_crossing(kv_heads=32)),
            "two_flops_per_pair": (
                "twice the answer: 2 FLOPs per (query, key) pair and head dimension were "
                "counted; there are 4 (q.k, and the weighted sum of v)",
                _ffn_crossing(flops_per_pair=2)),
        },
    },
    "Q16_KV_CACHE_128K_GB": {
        "answer": _kv_bytes(_128K, **_LLAMA3_8B) / _GB,
        "rtol": 0.01,
        "how": "2 (K and V) x 32 layers x 8 KV heads x 128 (d_head) x 2 bytes = 131,072 "
               "bytes per token; x 131,072 tokens = 17,179,869,184 bytes, about 17.2 GB: "
               "more than the model's 16 GB of weights",
        "mistakes": {
            "binary_units": (
                "the answer is in GiB (16 GiB: 2^34 bytes); the question asks for GB (1e9 "
                "bytes), and in GB the cache is larger than the 16 GB of weights",
                _kv_bytes(_128K, **_LLAMA3_8B) / _GIB),
            "k_or_v_only": (
                "only K or only V was counted (the cache holds both)",
                _kv_bytes(_128K, **_LLAMA3_8B) / 2 / _GB),
            "mha_heads_cached": (
                "all 32 query heads were cached (that is MHA; Llama-3-8B has 8 KV heads)",
                _kv_bytes(_128K, **{**_LLAMA3_8B, "kv_heads": 32}) / _GB),
            "fp32_bytes": (
                "4 bytes per element were used (the cache is fp16: 2 bytes)",
                _kv_bytes(_128K, **_LLAMA3_8B, bytes_per_elem=4) / _GB),
            "128k_as_128000": (
                "128k was taken as 128,000 tokens; a 128k context is 131,072 (2^17)",
                _kv_bytes(128000, **_LLAMA3_8B) / _GB),
            "one_layer": (
                "one layer was counted (every one of the 32 layers has its own cache)",
                _kv_bytes(_128K, **{**_LLAMA3_8B, "layers": 1}) / _GB),
        },
    },
    "Q17_KV_128K_OVER_WEIGHTS": {
        "answer": _kv_bytes(_128K, **_LLAMA3_8B) / _WEIGHTS_8B,
        "rtol": 0.02,
        "how": "the cache is 17,179,869,184 bytes (2 x 32 x 8 x 128 x 2 bytes per token, x "
               "131,072 tokens); over 16e9 bytes of weights: about 1.07. The cache is "
               "bigger than the model",
        "mistakes": {
            "ratio_inverted": (
                "the ratio is inverted: weights over cache",
                _WEIGHTS_8B / _kv_bytes(_128K, **_LLAMA3_8B)),
            "binary_units": (
                "one side was in GiB and the other in GB (16 GiB of cache against 16 GB of "
                "weights, or the reverse): keep both in bytes",
                _kv_bytes(_128K, **_LLAMA3_8B) / _GIB / 16),
            "mha_heads_cached": (
                "all 32 query heads were cached (MHA); Llama-3-8B has 8 KV heads",
                _kv_bytes(_128K, **{**_LLAMA3_8B, "kv_heads": 32}) / _WEIGHTS_8B),
            "k_or_v_only": (
                "only K or only V was counted (the cache holds both)",
                _kv_bytes(_128K, **_LLAMA3_8B) / 2 / _WEIGHTS_8B),
        },
    },
    "Q18_NAIVE_MAX_SEQ_LEN_80GB": {
        "answer": _naive_max_len(80e9),
        "rtol": 0.01,
        "how": "the scores take batch 8 x 32 heads x S^2 x 2 bytes = 512 S^2 bytes; "
               "512 S^2 <= 80e9 gives S^2 <= 156,250,000, S = 12,500 (and the chapter's "
               "S = 8192 already takes 34.4 GB)",
        "mistakes": {
            "batch_left_out": (
                "the batch was left out: all 8 sequences' scores exist at once",
                _naive_max_len(80e9, batch=1)),
            "fp32_bytes": (
                "4 bytes per score were used (fp16 is 2), or two copies of the scores",
                _naive_max_len(80e9, bytes_per_elem=4)),
            "binary_units": (
                "the memory was taken as 80 GiB (80 x 2^30 bytes); it is 80e9 bytes",
                _naive_max_len(80 * _GIB)),
            "causal_half_only": (
                "only the causal half was counted (a naive implementation stores the full "
                "S x S tensor)", _naive_max_len(160e9)),
            "one_head": (
                "one head was counted (all 32 heads' scores exist at once)",
                _naive_max_len(80e9, heads=1)),
        },
    },
    "Q19_GQA_SAVES_MB_PER_TOKEN": {
        "answer": _saved(1) / _MB,
        "rtol": 0.02,
        "how": "per token MHA caches 2 (K and V) x 80 layers x 64 heads x 128 x 2 bytes = "
               "2,621,440 bytes and GQA 2 x 80 x 8 x 128 x 2 = 327,680; GQA saves "
               "2,293,760 bytes, about 2.29 MB per token (the ratio 8 is MHA's over GQA's)",
        "mistakes": {
            "binary_units": (
                "the answer is in MiB (2^20 bytes); the question asks for MB (1e6 bytes)",
                _saved(1) / _MIB),
            "k_or_v_only": (
                "only K or only V was counted (the cache holds both)", _saved(1) / 2 / _MB),
            "gqa_cache_not_saving": (
                "this is GQA's cache per token, not what it saves (MHA's less GQA's)",
                _kv_bytes(1, **_LLAMA3_70B) / _MB),
            "mha_cache_not_saving": (
                "this is MHA's cache per token, not what GQA saves (subtract GQA's)",
                _kv_bytes(1, **{**_LLAMA3_70B, "kv_heads": 64}) / _MB),
            "fp32_bytes": (
                "4 bytes per element were used (the cache is fp16: 2 bytes)",
                _saved(1, bytes_per_elem=4) / _MB),
            "one_layer": (
                "one layer was counted (all 80 layers keep a cache)", _saved(1, layers=1) / _MB),
        },
    },
    "Q20_GQA_SAVES_GB_PER_128K": {
        "answer": _saved(_128K) / _GB,
        "rtol": 0.01,
        "how": "2,293,760 bytes saved per token (MHA's 2,621,440 less GQA's 327,680) x "
               "131,072 tokens = 300,647,710,720 bytes, about 300.6 GB per sequence: MHA "
               "would need 343.6 GB for one 128k sequence, GQA needs 42.9 GB",
        "mistakes": {
            "binary_units": (
                "the answer is in GiB (2^30 bytes); the question asks for GB (1e9 bytes)",
                _saved(_128K) / _GIB),
            "128k_as_128000": (
                "128k was taken as 128,000 tokens; a 128k context is 131,072 (2^17)",
                _saved(128000) / _GB),
            "k_or_v_only": (
                "only K or only V was counted (the cache holds both)", _saved(_128K) / 2 / _GB),
            "mha_cache_not_saving": (
                "this is MHA's cache, not what GQA saves (subtract GQA's)",
                _kv_bytes(_128K, **{**_LLAMA3_70B, "kv_heads": 64}) / _GB),
            "gqa_cache_not_saving": (
                "this is GQA's cache, not what it saves (MHA's less GQA's)",
                _kv_bytes(_128K, **_LLAMA3_70B) / _GB),
            "fp32_bytes": (
                "4 bytes per element were used (the cache is fp16: 2 bytes)",
                _saved(_128K, bytes_per_elem=4) / _GB),
        },
    },
    "Q21_KERNEL_FALLBACK": {
        "answer": "B",
        "why": "a fast attention kernel is built for a support matrix (head dims, dtypes, "
               "lengths, GPUs); outside it most frameworks pick a slower backend without an "
               "error (the chapter: perhaps 5x slower). Check the support matrix against "
               "the model, log which kernel runs, and benchmark at the production shapes",
        "wrong": {"A": "most frameworks do not fail: they dispatch to another, slower "
                       "backend, and say so in a debug log at most",
                  "C": "the fast kernel's tiles are fixed when it is built; it is not "
                       "chosen for an unsupported d_head, and padding would cost work anyway",
                  "D": "d_head sets the tile shapes, the registers and shared memory, and "
                       "whether the fast kernel applies at all"},
    },
    "Q22_LONG_CONTEXT_COST": {
        "answer": "B",
        "why": "the cache grows with the context (16 x: 17.2 GB against 1.07 GB) and is held "
               "for the whole generation, crowding out other sequences; every decode step "
               "reads all of it (16 x the bytes); prefill attention grows with n^2 (256 x "
               "for its core): the chapter puts a 128k request at about 20 times the "
               "resources of an 8k one",
        "wrong": {"A": "prefill attention grows with n^2, not n, and the held cache crowds "
                       "out other requests: not everything is linear",
                  "C": "GQA shrinks the cache by h / h_kv, but it still grows with every "
                       "token of context",
                  "D": "each decode step reads the whole cache: at 128k, 16 times the bytes "
                       "of the 8k request's step"},
    },
}


def key(name: str) -> dict:
    """A question's entry of the answer key (hidden suite only)."""
    return {**FORMS[name], **_KEY[name]}
