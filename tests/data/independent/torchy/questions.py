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
    "Attention lets every token build its new representation as a weighted "
    "mixture of the information carried by the other tokens it is allowed to "
    "see. Each token asks a question (its query), every token advertises what "
    "it holds (its key), and how well a key matches the question decides how "
    "much of that token's content (its value) flows into the answer. In a "
    "decoder the mixing only looks backwards, so each position can draw on "
    "everything that came before it but never on the future."
)

# Q02 (text, staff-graded).  Write scaled dot-product attention as a formula,
# say what every term does (the scale factor included), and walk through it
# for one causal decoder layer: from the projections to the output.
Q02_FORMULA_AND_TERMS = (
    "Attention(Q, K, V) = softmax(Q K^T / sqrt(d_head) + M) V. Q, K and V are "
    "the queries, keys and values, linear projections of the layer input x "
    "(Q = x W_q^T, K = x W_k^T, V = x W_v^T). Q K^T holds one dot product per "
    "(query, key) pair: how well each key matches each query. Dividing by "
    "sqrt(d_head) undoes the growth of the dot product's variance with the head "
    "width, keeping the scores near unit scale so the softmax does not saturate "
    "and its gradients do not vanish. M is the causal mask: 0 where query i may "
    "see key j (j <= i) and -inf for future keys, whose weights become exactly "
    "0. The softmax runs over the keys of each query row and turns scores into "
    "positive weights that sum to one. Multiplying by V takes the weighted "
    "average of the values. One causal decoder layer: project x to q, k, v; "
    "split each into h heads of width d_head (reshape then transpose); rotate q "
    "and k with RoPE at their positions (never v); compute the scaled scores per "
    "head; add the causal mask; softmax over keys; weight the values; merge the "
    "heads back to (B, S, h*d_head); and apply the output projection W_o, which "
    "mixes the heads and returns to the model width."
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
Q05_KV_CACHE_GB = 1.074  # 2 (K, V) * 32 layers * 8 KV heads * 128 * 8192 tokens * 2 B = 1.074e9 B

# Q06 (text, staff-graded).  Compare MHA, GQA and MQA as a model server sees
# them: what is cached per token, how large the cache is next to MHA's, what
# that buys, and what it costs.
Q06_MHA_GQA_MQA = (
    "Per token and layer, MHA caches a key and a value for every one of its h "
    "heads (2 * h * d_head values); GQA lets groups of h / h_kv query heads "
    "share one K/V head, so it caches 2 * h_kv * d_head values, h / h_kv times "
    "less (Llama-3-8B: 8 KV heads for 32 query heads, 4x); MQA is the extreme "
    "h_kv = 1, caching a single K/V head, h times less. For a server that "
    "smaller cache means more concurrent sequences or longer contexts in the "
    "same GPU memory, less memory traffic per decode step (decode is "
    "memory-bound, so it is faster), and a higher arithmetic intensity because "
    "each K/V byte read serves h / h_kv query heads. The cost is model "
    "capacity: fewer distinct key/value projections can lose quality (MQA "
    "noticeably, GQA with a moderate group size very little), the model must "
    "be trained or up-trained that way, and under tensor parallelism there "
    "must be enough KV heads to spread across devices, otherwise they are "
    "replicated."
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
Q08_MQA_DECODE_INTENSITY = 31.875  # 4*32*8192*128 FLOPs / (2 B * 128 * (2*32 + 2*1*8192)) bytes

# Q09 (number, GB).  Why can a naive implementation not hold the scores at
# long context?  Do the arithmetic: one layer, 32 heads, batch 1, 32,768
# tokens, fp16.  How many GB does the (B, h, S, S) score tensor take?
# Graded to 2 %.
Q09_SCORES_GB = 68.72  # 1 * 32 * 32768**2 * 2 B = 6.872e10 B

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
Q11_KV_PASSES_INT8_WEIGHTS_AT = 61036  # KV: 131072 B per token; 8e9 / 131072 = 61035.2 -> first length above is 61036

# Q12 (text, staff-graded).  How does multi-head latent attention (MLA) make
# the KV cache smaller than GQA's, and what does it cost?
Q12_MLA = (
    "Multi-head latent attention (DeepSeek-V2/V3) does not cache keys and "
    "values at all: per token and layer it caches one compressed latent "
    "vector c_kv (width d_c, e.g. 512) from which every head's key and value "
    "are rebuilt by learned up-projections, plus one small RoPE key (d_rope, "
    "e.g. 64) shared by all heads, because the rotation cannot go on the "
    "latent without breaking the trick. That is 576 values per token and layer "
    "in DeepSeek-V3 instead of 128 * (128 + 64 + 128) = 40960 for MHA with the "
    "same heads, about 71x less, and smaller than a typical GQA cache. At "
    "decode the up-projections are absorbed: W_uk moves into the query and "
    "W_uv is applied after the weighted sum over the latent, so all heads read "
    "the same cache and the arithmetic intensity grows with the number of "
    "heads. The costs: extra projection FLOPs and parameters, a low-rank "
    "bottleneck on keys and values, a more complex architecture and kernels "
    "(decoupled RoPE, separate explicit form for prefill and absorbed form "
    "for decode), and the model has to be trained with MLA from the start "
    "or converted."
)

# Q13 (number, tokens).  Where prefill FLOPs go.  A model of 32 layers with 32
# heads of d_head 128 and 7.0e9 weights that every token multiplies
# (embeddings excluded).  Prefill of n tokens costs 2 FLOPs per weight per
# token in the weight matrices, and in attention 4 * d_head FLOPs per head and
# layer for each (query, key) pair the causal mask keeps: n (n + 1) / 2 pairs.
# From which n on do attention's FLOPs exceed the weights' FLOPs?  Graded to 2 %.
Q13_ATTENTION_PASSES_WEIGHTS_AT = 53405  # 262144 * n * (n + 1) > 1.4e10 * n  <=>  n + 1 > 53405.8

# Q14 (number, a fraction between 0 and 1).  The same model and counting: for
# a prompt of n = 8,192 tokens, what fraction of all prefill FLOPs (weights
# plus attention) is attention?  Graded to 3 %.
Q14_ATTENTION_SHARE_AT_8K = 0.133  # 262144 * 8193 / (262144 * 8193 + 1.4e10)

Q15_ATTENTION_PASSES_FFN_AT = 32768  # 8192 * (n + 1) > 352321536 - 83886080
Q16_KV_CACHE_128K_GB = 17.2  # 17,179,869,184 bytes
Q17_KV_128K_OVER_WEIGHTS = 1.07  # 17.18 GB of cache over 16 GB of weights
Q18_NAIVE_MAX_SEQ_LEN_80GB = 12_500  # 512 bytes * S^2 <= 80e9
Q19_GQA_SAVES_MB_PER_TOKEN = 2.29  # 2.62 MB (MHA) - 0.33 MB (GQA)
Q20_GQA_SAVES_GB_PER_128K = 300.6  # 343.6 GB (MHA) - 42.9 GB (GQA)
Q21_KERNEL_FALLBACK = " B "
Q22_LONG_CONTEXT_COST = "B"
