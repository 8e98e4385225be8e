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
    "Attention lets every token build its new representation as a mixture of the other "
    "tokens' information, weighting each one by how relevant it is. Each token asks a "
    "question (its query), every token advertises what it holds (its key), and the better a "
    "key matches the query, the more of that token's content (its value) flows into the "
    "result. In a decoder a token may only look at itself and earlier tokens, so the text "
    "can be generated left to right."
)

# Q02 (text, staff-graded).  Write scaled dot-product attention as a formula,
# say what every term does (the scale factor included), and walk through it
# for one causal decoder layer: from the projections to the output.
Q02_FORMULA_AND_TERMS = (
    "Attention(Q, K, V) = softmax(Q K^T / sqrt(d_head) + M) V. Q (queries), K (keys) and V "
    "(values) are linear projections of the layer input x: Q = x W_q^T, K = x W_k^T, "
    "V = x W_v^T. Q K^T holds one dot product per (query, key) pair: how well each key "
    "matches each query. Dividing by sqrt(d_head) keeps those scores near unit variance, "
    "because a dot product of d_head random features has variance growing with d_head; "
    "without it the softmax saturates into a near one-hot choice with vanishing gradients. "
    "M is the causal mask: 0 where key j <= query i, -inf elsewhere, so no token sees the "
    "future. The softmax runs over the keys of each query row and turns scores into "
    "non-negative weights that sum to one; multiplying by V takes the weighted average of "
    "the values. For one causal decoder layer: project x to Q, K, V; split the features "
    "into h heads of d_head (reshape, then transpose); rotate q and k with RoPE at their "
    "positions (never v); compute the scaled scores per head; add the causal mask; softmax "
    "over keys; weight and sum the values; merge the heads back to (B, S, h*d_head); and "
    "apply the output projection W_o, whose result is added to the residual stream."
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
Q05_KV_CACHE_GB = 1.073741824  # 2 (K,V) * 32 layers * 8 KV heads * 128 * 8192 tokens * 2 bytes = 1,073,741,824 B

# Q06 (text, staff-graded).  Compare MHA, GQA and MQA as a model server sees
# them: what is cached per token, how large the cache is next to MHA's, what
# that buys, and what it costs.
Q06_MHA_GQA_MQA = (
    "Per token and layer the server caches a key and a value vector for every KV head. "
    "MHA has one KV head per query head, so it caches 2 * h * d_head values; GQA lets "
    "groups of h / h_kv query heads share one KV head and caches 2 * h_kv * d_head, a cache "
    "h / h_kv times smaller (Llama-3-8B: 8 KV heads for 32 query heads, 4x); MQA is the "
    "extreme h_kv = 1, h times smaller. What it buys: more sequences or longer contexts fit "
    "in GPU memory next to the weights, so the batch can grow; decode reads fewer bytes per "
    "step, and because each K/V byte read serves h / h_kv query heads the arithmetic "
    "intensity of decode attention rises by that factor, so tokens come out faster. What it "
    "costs: fewer distinct key/value projections, hence less capacity; MQA in particular can "
    "lose quality and train less stably, which is why GQA with a moderate group size is the "
    "usual compromise (close to MHA quality). With tensor parallelism, having fewer KV heads "
    "than GPUs forces KV heads to be replicated, and converting an MHA checkpoint needs "
    "mean-pooling of heads plus some uptraining."
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
Q09_SCORES_GB = 68.719476736  # 1 * 32 * 32768**2 * 2 bytes

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
Q11_KV_PASSES_INT8_WEIGHTS_AT = 61036  # floor(8e9 / 131072 bytes per token) + 1

# Q12 (text, staff-graded).  How does multi-head latent attention (MLA) make
# the KV cache smaller than GQA's, and what does it cost?
Q12_MLA = (
    "MLA caches, per token and layer, one compressed latent vector c_kv (width d_c, e.g. "
    "512) instead of per-head keys and values, plus one small RoPE key (e.g. 64 wide) shared "
    "by all heads. Each head's key and value are up-projections of that latent, and at "
    "decode time the up-projections are absorbed: W_uk folds into the query and W_uv is "
    "applied after the weighted sum over the latent, so no per-head K/V is ever rebuilt. "
    "DeepSeek-V3 caches 576 values per token and layer where MHA with 128 heads would cache "
    "40960, about 71x less, and less than typical GQA too; since all heads read the same "
    "latent, decode's arithmetic intensity grows with the number of heads. RoPE cannot be "
    "applied to the latent (a position-dependent rotation would break the absorption), "
    "hence the separate decoupled RoPE key. Costs: extra down/up projection weights and "
    "FLOPs, a more complex kernel, attention over a d_c + d_rope wide dot product per head "
    "at decode (more compute per cached token), a low-rank bottleneck on K and V that must "
    "be trained in from the start, and a design that does not drop into existing "
    "MHA/GQA kernels."
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
Q14_ATTENTION_SHARE_AT_8K = 0.1330  # 1.7594e13 attention / (1.7594e13 + 1.1469e14) total

# Q15: FFN 2 * 3 * 4096 * 14336 = 352,321,536 per token; projections 2 * 4096 * 10240 =
# 83,886,080; core 8192 * n (n + 1): 8192 (n + 1) > 268,435,456 from n = 32768.
Q15_ATTENTION_PASSES_FFN_AT = 32768
Q16_KV_CACHE_128K_GB = 17.18  # 131072 bytes per token * 131072 tokens = 1.718e10 bytes
Q17_KV_128K_OVER_WEIGHTS = 1.0737  # 1.718e10 / 1.6e10
Q18_NAIVE_MAX_SEQ_LEN_80GB = 12500  # 8 * 32 * 2 * S^2 <= 8e10  <=>  S^2 <= 1.5625e8
Q19_GQA_SAVES_MB_PER_TOKEN = 2.29376  # 2 * 80 * (64 - 8) * 128 * 2 bytes
Q20_GQA_SAVES_GB_PER_128K = 300.65  # 2,293,760 * 131072 bytes
Q21_KERNEL_FALLBACK = "B"
Q22_LONG_CONTEXT_COST = "B"
