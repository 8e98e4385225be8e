"""Interview questions: attention, its caches, and where the FLOPs go.

Fourteen short questions of the kind a systems or ML interview asks, on the
seven exercises' material.  Each answer is a module constant below; replace
its ``None``.  Three kinds:

- **a number** (``int`` or ``float``, in the unit the question names),
  graded automatically to a stated tolerance; a wrong number is told which
  slip it looks like and how the right one is found;
- **a letter** for multiple choice (``"A"`` .. ``"D"``), graded
  automatically, with the reason behind the right answer;
- **a few sentences** of text (between 5 and 250 words), collected for your
  course staff, who grade them with a rubric: the autograder only checks
  that an answer is there, and their points are added by the staff.

Conventions of the course: sizes are decimal (1 GB = 1e9 bytes); fp16 is 2
bytes per element; a (query, key) pair of one head costs ``4 * d_head``
FLOPs (``2 * d_head`` for q.k and as many for the weighted sum of v); a
weight matrix costs 2 FLOPs per weight per token (a multiply and an add).
Llama-3-8B: 32 layers, 32 query heads, 8 KV heads, ``d_head`` 128.
"""

# Llama-3-8B's shape, used by several answers below.
_LAYERS = 32
_Q_HEADS = 32
_KV_HEADS = 8
_D_HEAD = 128
_FP16_BYTES = 2
# K and V, for every layer and KV head, one position: 2 * 32 * 8 * 128 * 2 bytes
_KV_BYTES_PER_TOKEN = 2 * _LAYERS * _KV_HEADS * _D_HEAD * _FP16_BYTES   # 131072

# Q01 (text, staff-graded).  Explain what attention does, in at most three
# sentences and without an equation.
Q01_ATTENTION_IN_WORDS = (
    "Attention lets every token build its new representation as a weighted mix of "
    "information from the tokens it is allowed to see. Each token asks a question (its "
    "query), every token offers a label (its key) and a content (its value), and the better "
    "a key matches the query, the more of that token's content is mixed in. In a decoder a "
    "token may only look at itself and earlier tokens, which is what lets the model "
    "generate text one token at a time."
)

# Q02 (text, staff-graded).  Write scaled dot-product attention as a formula,
# say what every term does (the scale factor included), and walk through it
# for one causal decoder layer: from the projections to the output.
Q02_FORMULA_AND_TERMS = (
    "Attention(Q, K, V) = softmax(Q K^T / sqrt(d_head) + M) V. Q holds one query row per "
    "token (what it is looking for), K one key row per token (what it offers to be matched "
    "on), V one value row per token (what it passes on). Q K^T gives every query-key "
    "similarity; dividing by sqrt(d_head) keeps these scores near unit variance, because a "
    "dot product of d_head random components has variance about d_head, so the softmax does "
    "not saturate and its gradients do not vanish. M is the causal mask: 0 where query i "
    "may see key j (j <= i), minus infinity elsewhere, so future tokens get weight exactly "
    "zero. The softmax runs over the keys of each row, turning scores into weights that are "
    "positive and sum to one; multiplying by V takes the weighted average of the values. "
    "In one causal decoder layer: project the input x (B, S, d) with W_q, W_k, W_v; split "
    "the result into h heads of width d_head; rotate q and k with RoPE at their positions "
    "(never v); compute the scaled scores per head; add the causal mask; softmax over keys; "
    "weight and sum the values; concatenate (merge) the heads back to (B, S, h*d_head); and "
    "apply the output projection W_o to return to width d, which goes into the residual "
    "stream."
)

# Q03 (multiple choice).  Why are the scores divided by sqrt(d_head)?
#   A. So that each row of attention weights sums to one.
#   B. A dot product of two d_head-dimensional vectors has a variance that grows
#      with d_head; the division keeps the scores near unit scale, so the
#      softmax does not saturate into a one-hot choice.
#   C. To normalize the values V before the weighted sum.
#   D. So that the -inf of the causal mask stays finite after the softmax.
Q03_WHY_SCALE = "B"

# Q04 (multiple choice).  Why does the causal mask make a KV cache possible?
#   A. It halves the number of scores a prefill computes.
#   B. The mask itself stores the keys and values of earlier positions.
#   C. No position reads a later one, so appending a token changes nothing
#      computed for earlier positions: their keys and values, in every layer,
#      can be kept and reused.
#   D. RoPE is applied only to the positions the mask allows.
Q04_CAUSAL_MASK_AND_CACHE = "C"

# Q05 (number, GB).  How large is Llama-3-8B's KV cache (fp16) for one
# sequence of 8,192 tokens?  Graded to 2 %.
# 131072 bytes per token * 8192 tokens = 1,073,741,824 bytes = 1.0737 GB
Q05_KV_CACHE_GB = _KV_BYTES_PER_TOKEN * 8192 / 1e9

# Q06 (text, staff-graded).  Compare MHA, GQA and MQA as a model server sees
# them: what is cached per token, how large the cache is next to MHA's, what
# that buys, and what it costs.
Q06_MHA_GQA_MQA = (
    "Per token and layer, a server caches one key and one value vector of width d_head for "
    "every K/V head. MHA has as many K/V heads as query heads (h), so it caches 2*h*d_head "
    "values; GQA lets groups of h/h_kv query heads share one K/V head and caches "
    "2*h_kv*d_head, a cache h/h_kv times smaller (8x for Llama-3-70B, 64 vs 8 heads); MQA is "
    "the extreme h_kv = 1, h times smaller. What that buys: more concurrent sequences or "
    "longer contexts in the same GPU memory, and faster decode, because decode is "
    "memory-bound and every K/V byte read now serves h/h_kv query heads, raising arithmetic "
    "intensity by about that factor. What it costs: fewer independent key/value subspaces, "
    "so some quality loss, small for GQA with a moderate number of groups and larger for "
    "MQA (which can also be less stable to train); converting an MHA checkpoint requires "
    "merging heads and some uptraining; and with tensor parallelism a K/V head cannot be "
    "split, so with MQA or few KV heads the K/V must be replicated across GPUs."
)

# Q07 (multiple choice).  Why does GQA raise the arithmetic intensity of
# decode attention, and not only save memory?
#   A. Each query head does fewer FLOPs.
#   B. The softmax over the keys becomes cheaper.
#   C. It allows a larger batch, and only the batch raises intensity.
#   D. Each key and value read from memory serves h / h_kv query heads, so the
#      FLOPs per byte read grow by about h / h_kv.
Q07_WHY_GQA_RAISES_INTENSITY = "D"

# Q08 (number, FLOPs per byte).  One decode step of attention (one new token,
# batch 1) with 32 query heads sharing one KV head (MQA), d_head 128 and a
# cache of 8,192 positions in fp16.  Count FLOPs as the course does and bytes
# as the least traffic (read q, K and V once, write the output once).  What is
# its arithmetic intensity?  Graded to 3 %.
# FLOPs: 4 * 128 * 8192 pairs * 32 heads = 134,217,728
# bytes: 2 * 128 * (32 q rows + 32 output rows + 8192 K rows + 8192 V rows)
#        = 2 * 128 * 16448 = 4,210,688
# intensity: 134,217,728 / 4,210,688 = 31.875
_Q08_FLOPS = 4 * 128 * 8192 * 32
_Q08_BYTES = 2 * 128 * (2 * 32 + 2 * 1 * 8192)
Q08_MQA_DECODE_INTENSITY = _Q08_FLOPS / _Q08_BYTES

# Q09 (number, GB).  Why can a naive implementation not hold the scores at
# long context?  Do the arithmetic: one layer, 32 heads, batch 1, 32,768
# tokens, fp16.  How many GB does the (B, h, S, S) score tensor take?
# Graded to 2 %.
# 1 * 32 * 32768 * 32768 * 2 bytes = 68,719,476,736 bytes = 68.72 GB
Q09_SCORES_GB = 1 * 32 * 32768 * 32768 * 2 / 1e9

# Q10 (multiple choice).  A prompt of n tokens (prefill) against one new token
# with a cache of n (decode): which is right?
#   A. Prefill attention does O(n^2) FLOPs on O(n) data and is compute-bound;
#      decode reads the whole O(n) cache for O(n) FLOPs and is memory-bound.
#   B. Both are compute-bound; decode just does less work.
#   C. Prefill is memory-bound because the prompt is long; decode is
#      compute-bound.
#   D. Both are memory-bound; only the MLP is compute-bound.
Q10_PREFILL_VS_DECODE = "A"

# Q11 (number, tokens).  Llama-3-8B with its weights quantized to 8 bits
# (8.0e9 bytes) and its KV cache kept in fp16: what is the smallest context
# length (batch 1) at which the KV cache is larger than the weights?
# Graded to 1 %.
# 8.0e9 / 131072 bytes per token = 61035.16 -> the first length above it: 61036
Q11_KV_PASSES_INT8_WEIGHTS_AT = int(8.0e9 // _KV_BYTES_PER_TOKEN) + 1

# Q12 (text, staff-graded).  How does multi-head latent attention (MLA) make
# the KV cache smaller than GQA's, and what does it cost?
Q12_MLA = (
    "MLA (DeepSeek-V2/V3) caches, per token and layer, one compressed latent vector c_kv of "
    "width d_c (a down-projection of the hidden state) plus one small RoPE key of width "
    "d_rope shared by all heads, instead of a key and a value per K/V head. Every head's key "
    "and value are rebuilt from the latent by per-head up-projections. For DeepSeek-V3 that "
    "is 512 + 64 = 576 values per token and layer, about 70 KB per token over 61 layers in "
    "bf16, where MHA with its 128 heads would cache 40960 values, 71 times more, and even "
    "GQA with 8 KV heads several times more. At decode the up-projections are absorbed: "
    "W_uk is folded into the query and W_uv applied after the weighted sum, so all heads "
    "read the same latent and arithmetic intensity grows with the number of heads. The "
    "costs: extra projection matmuls and more complex kernels; RoPE cannot be applied to "
    "the latent (it would break the absorption), hence the separate decoupled RoPE key and "
    "query part; the absorbed form does more FLOPs per cached token (scores of width "
    "d_c + d_rope for every head), so prefill usually uses the explicit form; and the "
    "low-rank latent limits what the keys and values can express, a capacity trade-off that "
    "must be trained in from the start (or recovered by fine-tuning)."
)

# Q13 (number, tokens).  Where prefill FLOPs go.  A model of 32 layers with 32
# heads of d_head 128 and 7.0e9 weights that every token multiplies
# (embeddings excluded).  Prefill of n tokens costs 2 FLOPs per weight per
# token in the weight matrices, and in attention 4 * d_head FLOPs per head and
# layer for each (query, key) pair the causal mask keeps: n (n + 1) / 2 pairs.
# From which n on do attention's FLOPs exceed the weights' FLOPs?  Graded to 2 %.
# weights:   2 * 7.0e9 * n = 1.4e10 * n
# attention: 4 * 128 * 32 heads * 32 layers * n (n + 1) / 2 = 262144 * n (n + 1)
# 262144 * n (n + 1) > 1.4e10 * n  <=>  n + 1 > 1.4e10 / 262144 = 53405.76
# so n + 1 >= 53406: from n = 53405 on.
_Q13_ATTN_PER_PAIR = 4 * 128 * 32 * 32           # FLOPs per kept pair, all heads and layers
_Q13_WEIGHT_PER_TOKEN = 2 * 7.0e9                # FLOPs per token in the weight matrices
_Q13_THRESHOLD = 2 * _Q13_WEIGHT_PER_TOKEN / _Q13_ATTN_PER_PAIR   # n + 1 must exceed this
# the smallest whole n with n + 1 > 53405.76 is n = 53405 (rounding the threshold down)
Q13_ATTENTION_PASSES_WEIGHTS_AT = int(_Q13_THRESHOLD)

# Q14 (number, a fraction between 0 and 1).  The same model and counting: for
# a prompt of n = 8,192 tokens, what fraction of all prefill FLOPs (weights
# plus attention) is attention?  Graded to 3 %.
# attention: 524288 * 8192 * 8193 / 2 = 1.7594e13; weights: 1.4e10 * 8192 = 1.1469e14
# share: 1.7594e13 / (1.7594e13 + 1.1469e14) = 0.1330
_Q14_N = 8192
_Q14_ATTN = _Q13_ATTN_PER_PAIR * _Q14_N * (_Q14_N + 1) / 2
_Q14_WEIGHTS = _Q13_WEIGHT_PER_TOKEN * _Q14_N
Q14_ATTENTION_SHARE_AT_8K = _Q14_ATTN / (_Q14_ATTN + _Q14_WEIGHTS)

# Q15: add the per-token FLOPs of the FFN and of attention one token at a time.
_Q15_FFN_TOKEN = 2 * 3 * 4096 * 14336
_Q15_PROJ_TOKEN = 2 * 4096 * (32 * 128 + 8 * 128 + 8 * 128 + 32 * 128)
_q15_ffn = _q15_attn = 0
_q15_n = 0
while _q15_attn <= _q15_ffn:
    _q15_n += 1
    _q15_ffn += _Q15_FFN_TOKEN
    _q15_attn += _Q15_PROJ_TOKEN + 4 * 128 * 32 * _q15_n   # token n sees n keys
Q15_ATTENTION_PASSES_FFN_AT = _q15_n

_Q16_BYTES = 0
for _layer in range(32):
    _Q16_BYTES += 2 * 8 * 128 * 2 * 131072          # K and V of 8 KV heads, 131072 tokens
Q16_KV_CACHE_128K_GB = _Q16_BYTES / 1e9
Q17_KV_128K_OVER_WEIGHTS = _Q16_BYTES / 16e9

_q18 = 0
while 8 * 32 * (_q18 + 1) ** 2 * 2 <= 80e9:
    _q18 += 1
Q18_NAIVE_MAX_SEQ_LEN_80GB = _q18

_Q19_BYTES = 0
for _layer in range(80):
    _Q19_BYTES += 2 * (64 - 8) * 128 * 2            # the K/V heads GQA does not keep
Q19_GQA_SAVES_MB_PER_TOKEN = _Q19_BYTES / 1e6
Q20_GQA_SAVES_GB_PER_128K = _Q19_BYTES * 131072 / 1e9
Q21_KERNEL_FALLBACK = "B"
Q22_LONG_CONTEXT_COST = "B"
