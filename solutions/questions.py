"""Interview questions: attention, its caches, and where the FLOPs go.

Usually takes about an hour.  From the chapters: "Attention from First
Principles", section 11 (Interview questions) with sections 5 to 8 behind
them; "Attention" (chapter 03), its "Interview check".

Twenty-two short questions of the kind a systems or ML interview asks, on the
exercises' material.  Each answer is a module constant below; replace
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
# BEGIN SOLUTION
Q01_ATTENTION_IN_WORDS = (
    "Every token asks a question (its query) and compares it with a label (the key) "
    "of each token it is allowed to see. The match scores are turned into weights "
    "that add up to one, so the best matches count most. The token's output is the "
    "weighted blend of those tokens' contents (their values), and several heads do "
    "this side by side, each looking for something different.")
# END SOLUTION

# Q02 (text, staff-graded).  Write scaled dot-product attention as a formula,
# say what every term does (the scale factor included), and walk through it
# for one causal decoder layer: from the projections to the output.
# BEGIN SOLUTION
Q02_FORMULA_AND_TERMS = (
    "out = softmax(Q K^T / sqrt(d_head) + M) V. Q, K and V are the token vectors "
    "projected by W_q, W_k and W_v and split into heads; Q K^T scores every query "
    "against every key; dividing by sqrt(d_head) keeps the scores at unit scale so "
    "the softmax does not saturate; M is the causal mask, 0 where a query may look "
    "and -inf above the diagonal; the softmax runs over each row (over the keys) "
    "and the weights multiply V. The heads are merged and projected by W_o.")
# END SOLUTION

# Q03 (multiple choice).  Why are the scores divided by sqrt(d_head)?
#   A. So that each row of attention weights sums to one.
#   B. A dot product of two d_head-dimensional vectors has a variance that grows
#      with d_head; the division keeps the scores near unit scale, so the
#      softmax does not saturate into a one-hot choice.
#   C. To normalize the values V before the weighted sum.
#   D. So that the -inf of the causal mask stays finite after the softmax.
# BEGIN SOLUTION
Q03_WHY_SCALE = "B"
# END SOLUTION

# Q04 (multiple choice).  Why does the causal mask make a KV cache possible?
#   A. It halves the number of scores a prefill computes.
#   B. The mask itself stores the keys and values of earlier positions.
#   C. No position reads a later one, so appending a token changes nothing
#      computed for earlier positions: their keys and values, in every layer,
#      can be kept and reused.
#   D. RoPE is applied only to the positions the mask allows.
# BEGIN SOLUTION
Q04_CAUSAL_MASK_AND_CACHE = "C"
# END SOLUTION

# Q05 (number, GB).  How large is Llama-3-8B's KV cache (fp16) for one
# sequence of 8,192 tokens?  Graded to 2 %.
# BEGIN SOLUTION
Q05_KV_CACHE_GB = 1.074
# END SOLUTION

# Q06 (text, staff-graded).  Compare MHA, GQA and MQA as a model server sees
# them: what is cached per token, how large the cache is next to MHA's, what
# that buys, and what it costs.
# BEGIN SOLUTION
Q06_MHA_GQA_MQA = (
    "MHA caches a key and a value for every query head; GQA shares one K/V head "
    "between a group of query heads, MQA one K/V head between all of them. The "
    "cache shrinks to h_kv/h of MHA's: 8/32 for Llama-3-8B, 1/32 with MQA. A smaller "
    "cache means more sequences or longer contexts in memory and fewer bytes read "
    "per decode step; GQA keeps the quality close to MHA's, MQA loses some.")
# END SOLUTION

# Q07 (multiple choice).  Why does GQA raise the arithmetic intensity of
# decode attention, and not only save memory?
#   A. Each query head does fewer FLOPs.
#   B. The softmax over the keys becomes cheaper.
#   C. It allows a larger batch, and only the batch raises intensity.
#   D. Each key and value read from memory serves h / h_kv query heads, so the
#      FLOPs per byte read grow by about h / h_kv.
# BEGIN SOLUTION
Q07_WHY_GQA_RAISES_INTENSITY = "D"
# END SOLUTION

# Q08 (number, FLOPs per byte).  One decode step of attention (one new token,
# batch 1) with 32 query heads sharing one KV head (MQA), d_head 128 and a
# cache of 8,192 positions in fp16.  Count FLOPs as the course does and bytes
# as the least traffic (read q, K and V once, write the output once).  What is
# its arithmetic intensity?  Graded to 3 %.
# BEGIN SOLUTION
Q08_MQA_DECODE_INTENSITY = 31.9
# END SOLUTION

# Q09 (number, GB).  Why can a naive implementation not hold the scores at
# long context?  Do the arithmetic: one layer, 32 heads, batch 1, 32,768
# tokens, fp16.  How many GB does the (B, h, S, S) score tensor take?
# Graded to 2 %.
# BEGIN SOLUTION
Q09_SCORES_GB = 68.7
# END SOLUTION

# Q10 (multiple choice).  A prompt of n tokens (prefill) against one new token
# with a cache of n (decode): which is right?
#   A. Prefill attention does O(n^2) FLOPs on O(n) data and is compute-bound;
#      decode reads the whole O(n) cache for O(n) FLOPs and is memory-bound.
#   B. Both are compute-bound; decode just does less work.
#   C. Prefill is memory-bound because the prompt is long; decode is
#      compute-bound.
#   D. Both are memory-bound; only the MLP is compute-bound.
# BEGIN SOLUTION
Q10_PREFILL_VS_DECODE = "A"
# END SOLUTION

# Q11 (number, tokens).  Llama-3-8B with its weights quantized to 8 bits
# (8.0e9 bytes) and its KV cache kept in fp16: what is the smallest context
# length (batch 1) at which the KV cache is larger than the weights?
# Graded to 1 %.
# BEGIN SOLUTION
Q11_KV_PASSES_INT8_WEIGHTS_AT = 61036
# END SOLUTION

# Q12 (text, staff-graded).  How does multi-head latent attention (MLA) make
# the KV cache smaller than GQA's, and what does it cost?
# BEGIN SOLUTION
Q12_MLA = (
    "MLA caches one low-rank latent vector per token and layer (512 numbers in "
    "DeepSeek-V3, plus a small separate key for RoPE) instead of a key and a value "
    "per head. Each head's keys and values are rebuilt from the latent by "
    "up-projections, which at inference can be folded into the query and output "
    "projections. The cache becomes several times smaller than GQA's at similar "
    "quality; the price is extra projection work and a separate path for RoPE.")
# END SOLUTION

# Q13 (number, tokens).  Where prefill FLOPs go.  A model of 32 layers with 32
# heads of d_head 128 and 7.0e9 weights that every token multiplies
# (embeddings excluded).  Prefill of n tokens costs 2 FLOPs per weight per
# token in the weight matrices, and in attention 4 * d_head FLOPs per head and
# layer for each (query, key) pair the causal mask keeps: n (n + 1) / 2 pairs.
# From which n on do attention's FLOPs exceed the weights' FLOPs?  Graded to 2 %.
# BEGIN SOLUTION
Q13_ATTENTION_PASSES_WEIGHTS_AT = 53405
# END SOLUTION

# Q14 (number, a fraction between 0 and 1).  The same model and counting: for
# a prompt of n = 8,192 tokens, what fraction of all prefill FLOPs (weights
# plus attention) is attention?  Graded to 3 %.
# BEGIN SOLUTION
Q14_ATTENTION_SHARE_AT_8K = 0.133
# END SOLUTION

# Q15 (number, tokens).  Where a layer's FLOPs go: attention or the FFN?
# Llama-3-8B: d_model 4096, a SwiGLU FFN of width 14,336 (three matrices of
# 4096 x 14,336: gate, up and down), 32 query heads and 8 KV heads of d_head
# 128.  In a causal prefill of n tokens, count attention as its four
# projections (w_q and w_o of 4096 x 4096, w_k and w_v of 4096 x 1024; 2
# FLOPs per weight per token) plus 4 * d_head FLOPs per head for each of the
# n (n + 1) / 2 (query, key) pairs the mask keeps, and the FFN as 2 FLOPs per
# weight per token.  From which n on does attention do more FLOPs than the
# FFN?  Graded to 2 %.
# BEGIN SOLUTION
Q15_ATTENTION_PASSES_FFN_AT = 32768
# END SOLUTION

# Q16 (number, GB).  Llama-3-8B's KV cache (fp16) for one sequence of
# 131,072 tokens (a 128k context).  Graded to 1 %.
# BEGIN SOLUTION
Q16_KV_CACHE_128K_GB = 17.18
# END SOLUTION

# Q17 (number, a ratio).  The same cache over Llama-3-8B's weights (16 GB in
# fp16, 16e9 bytes): how many times the weights is it?  Graded to 2 %.
# BEGIN SOLUTION
Q17_KV_128K_OVER_WEIGHTS = 1.074
# END SOLUTION

# Q18 (number, tokens).  At what S does memory stop a naive implementation?
# One layer's (B, h, S, S) score tensor in fp16, batch 8, 32 heads, on a GPU
# with 80 GB (80e9 bytes), counting nothing else: the largest S whose scores
# fit.  Graded to 1 %.
# BEGIN SOLUTION
Q18_NAIVE_MAX_SEQ_LEN_80GB = 12500
# END SOLUTION

# Q19 (number, MB per token).  Llama-3-70B (80 layers, 64 query heads, 8 KV
# heads, d_head 128, fp16 cache): how many MB (1e6 bytes) of KV cache per
# token does GQA save over MHA (a K/V head for every query head)?  Graded to 2 %.
# BEGIN SOLUTION
Q19_GQA_SAVES_MB_PER_TOKEN = 2.294
# END SOLUTION

# Q20 (number, GB).  The same saving for one sequence of 131,072 tokens.
# Graded to 1 %.
# BEGIN SOLUTION
Q20_GQA_SAVES_GB_PER_128K = 300.6
# END SOLUTION

# Q21 (multiple choice).  A server's fast attention kernel supports d_head up
# to 128, fp16 and bf16, and sequence lengths up to 64k.  A new model has
# d_head 256.  What is most likely to happen, and what should you do?
#   A. The model fails to load with a clear error, so nothing needs checking.
#   B. The framework quietly dispatches to a slower path (an unfused or
#      generic kernel, often several times slower, maybe materializing the
#      scores): check the kernel's support matrix against the model's shapes
#      and dtypes, log which kernel actually runs, and benchmark at the
#      production shapes.
#   C. The fast kernel pads d_head to 128 and runs at the same speed.
#   D. Nothing changes: attention's speed does not depend on d_head.
# BEGIN SOLUTION
Q21_KERNEL_FALLBACK = "B"
# END SOLUTION

# Q22 (multiple choice).  Llama-3-8B serves a 128k-token request and an
# 8k-token one.  Which is right?
#   A. The 128k request costs 16 times the 8k one: everything is linear in
#      the number of tokens.
#   B. Its KV cache is 16 times larger (17.2 GB against 1.07 GB), held for the
#      whole generation, so fewer other sequences fit beside it; each decode
#      step reads 16 times the bytes; and its prefill's attention FLOPs grow
#      with n^2 (256 times): it costs many times an 8k request, so long
#      context is priced and capped.
#   C. It costs about the same per token: GQA makes long context free.
#   D. Only its prefill costs more; every decode step costs the same as the
#      8k request's.
# BEGIN SOLUTION
Q22_LONG_CONTEXT_COST = "B"
# END SOLUTION
