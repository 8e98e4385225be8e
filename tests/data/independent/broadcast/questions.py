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

# Q01 (text, staff-graded).  Explain what attention does, in at most three
# sentences and without an equation.
Q01_ATTENTION_IN_WORDS = (
    "Attention lets every token build its new representation as a weighted mix of "
    "information from the other tokens it is allowed to see. Each token asks a question "
    "(its query), every token advertises what it contains (its key), and the better a key "
    "matches the question, the more of that token's content (its value) flows into the "
    "answer. The weights are learned comparisons that are recomputed for every input, so "
    "the model decides, token by token, where to look."
)

# Q02 (text, staff-graded).  Write scaled dot-product attention as a formula,
# say what every term does (the scale factor included), and walk through it
# for one causal decoder layer: from the projections to the output.
Q02_FORMULA_AND_TERMS = (
    "Attention(Q, K, V) = softmax(Q K^T / sqrt(d_head) + M) V. Q holds one query row per "
    "token (what it looks for), K one key row per token (what it offers to be matched "
    "against), V one value row per token (what it hands over). Q K^T gives every "
    "query-key dot product, a similarity score. Dividing by sqrt(d_head) keeps the scores "
    "near unit variance (a dot product of d_head features has variance growing with "
    "d_head), so the softmax does not saturate into a one-hot choice. M is the causal mask: 0 where key j <= query i, -inf elsewhere, so a "
    "token never sees the future. The softmax over each row (over the keys) turns scores "
    "into weights that are positive and sum to one, and multiplying by V takes the "
    "weighted average of the values. In one causal decoder layer: project the input x "
    "(B, S, d) with W_q, W_k, W_v; split the result into h heads of width d_head (reshape "
    "and move the head axis in front of the sequence axis); rotate q and k with RoPE at "
    "their positions (never v); compute the scaled scores per head; add the causal mask; "
    "softmax over keys; weight and sum the values; merge the heads back to (B, S, h*d_head); "
    "and apply the output projection W_o to return to width d."
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
Q05_KV_CACHE_GB = 1.074  # 2 (K, V) * 32 layers * 8 KV heads * 128 * 8192 tokens * 2 bytes = 1.0737e9 bytes

# Q06 (text, staff-graded).  Compare MHA, GQA and MQA as a model server sees
# them: what is cached per token, how large the cache is next to MHA's, what
# that buys, and what it costs.
Q06_MHA_GQA_MQA = (
    "Per token and layer the server caches one key and one value vector per KV head. MHA "
    "has a KV head for every query head (h of them); GQA lets groups of h / h_kv query heads "
    "share one of h_kv KV heads; MQA keeps a single KV head for all query heads. The cache "
    "is therefore h_kv / h of MHA's: Llama-3-8B's GQA (32 query heads, 8 KV heads) caches a "
    "quarter, 128 KiB per token in fp16, and MQA would cache 1/32. What that buys: more "
    "sequences or longer contexts fit in the same GPU memory (bigger batches, higher "
    "throughput), and decode, which is memory-bound and must read the whole cache for every "
    "new token, reads h / h_kv times fewer bytes, so each byte serves h / h_kv query heads "
    "and the arithmetic intensity rises by that factor. Tensor-parallel sharding also gets "
    "simpler with a few KV heads per GPU (though MQA must replicate its single head). What "
    "it costs: fewer independent key/value subspaces, so some quality loss, small for GQA "
    "with 8 groups and larger for MQA, which can also be less stable to train; models are "
    "trained that way or uptrained from MHA checkpoints. Compute per query head stays the "
    "same, and prefill, which is compute-bound, hardly gets faster."
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
Q08_MQA_DECODE_INTENSITY = 31.875  # 4*32*8192*128 FLOPs / (2*128*(2*32 + 2*1*8192)) bytes

# Q09 (number, GB).  Why can a naive implementation not hold the scores at
# long context?  Do the arithmetic: one layer, 32 heads, batch 1, 32,768
# tokens, fp16.  How many GB does the (B, h, S, S) score tensor take?
# Graded to 2 %.
Q09_SCORES_GB = 68.72  # 1 * 32 * 32768**2 * 2 bytes = 6.872e10 bytes

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
Q11_KV_PASSES_INT8_WEIGHTS_AT = 61036  # 131072 bytes per token (2*32*8*128*2); 8e9 / 131072 = 61035.2, so the next token

# Q12 (text, staff-graded).  How does multi-head latent attention (MLA) make
# the KV cache smaller than GQA's, and what does it cost?
Q12_MLA = (
    "GQA shrinks the cache by sharing whole K/V heads; MLA (DeepSeek-V2/V3) instead caches, "
    "per token and layer, one low-rank latent vector c_kv (width d_c, 512 in DeepSeek-V3) "
    "from which every head's key and value are reconstructed by per-head up-projections, "
    "plus one small decoupled RoPE key (64 wide) shared by all heads. That is 576 values "
    "per token and layer instead of 128 heads * (128 + 64 + 128) for MHA, about 71 times "
    "less, and still less than most GQA configurations, while every head keeps its own "
    "keys and values. At decode time the up-projections are absorbed: W_uk folds into the "
    "query and W_uv is applied after the weighted sum over the latent, so all heads read "
    "the same latent cache and decode's arithmetic intensity grows with the number of "
    "heads, near a GPU's ridge point. The costs: extra projection matmuls and parameters "
    "(down- and up-projections, and the absorbed per-head queries of width d_c, so more "
    "FLOPs per cached token than GQA), a more complex kernel, the low-rank bottleneck as a "
    "modelling constraint, and RoPE cannot be put on the latent (the rotation would break "
    "the absorption), which is why a separate, decoupled RoPE key and query part are needed."
)

# Q13 (number, tokens).  Where prefill FLOPs go.  A model of 32 layers with 32
# heads of d_head 128 and 7.0e9 weights that every token multiplies
# (embeddings excluded).  Prefill of n tokens costs 2 FLOPs per weight per
# token in the weight matrices, and in attention 4 * d_head FLOPs per head and
# layer for each (query, key) pair the causal mask keeps: n (n + 1) / 2 pairs.
# From which n on do attention's FLOPs exceed the weights' FLOPs?  Graded to 2 %.
Q13_ATTENTION_PASSES_WEIGHTS_AT = 53405  # 262144 * n * (n + 1) > 1.4e10 * n  <=>  n + 1 > 53405.76

# Q14 (number, a fraction between 0 and 1).  The same model and counting: for
# a prompt of n = 8,192 tokens, what fraction of all prefill FLOPs (weights
# plus attention) is attention?  Graded to 3 %.
Q14_ATTENTION_SHARE_AT_8K = 0.133  # A = 262144 * 8192 * 8193, W = 1.4e10 * 8192: A / (A + W)

# Q15-Q22: the FFN against attention, the 128k cache, the naive wall, 70B's saving.
Q15_ATTENTION_PASSES_FFN_AT = (6 * 4096 * 14336 - 2 * 4096 * 128 * 80) // (2 * 128 * 32)
Q16_KV_CACHE_128K_GB = 2 * 32 * 8 * 128 * 2 * 131072 / 1e9
Q17_KV_128K_OVER_WEIGHTS = Q16_KV_CACHE_128K_GB / 16
Q18_NAIVE_MAX_SEQ_LEN_80GB = int((80e9 / (8 * 32 * 2)) ** 0.5)
Q19_GQA_SAVES_MB_PER_TOKEN = 2 * 80 * 128 * 2 * (64 - 8) / 1e6
Q20_GQA_SAVES_GB_PER_128K = Q19_GQA_SAVES_MB_PER_TOKEN * 1e6 * 131072 / 1e9
Q21_KERNEL_FALLBACK = "b"
Q22_LONG_CONTEXT_COST = "B"
