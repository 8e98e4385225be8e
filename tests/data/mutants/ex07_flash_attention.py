"""Mistakes in the fused attention exercise (G): NumPy steps, the kernel, and cheats."""
from pathlib import Path

from tests.data.mutants import Mutant

SCALE_DEFAULT = "sm_scale = 1.0 / math.sqrt(d_head) if sm_scale is None else float(sm_scale)"
ALLOC = "    out = torch.empty_like(q)                                  # (B, h, S_q, d_head)\n"

# flash_attention's work done by PyTorch: repeat K/V, matmul, softmax.
TORCH_FALLBACK = """    rep = n_heads // n_kv
    kk, vv = k.repeat_interleave(rep, 1), v.repeat_interleave(rep, 1)
    scores = (q @ kk.transpose(-1, -2)) * sm_scale
    if causal:
        i = torch.arange(s_q)[:, None] + (s_k - s_q)
        scores = scores.masked_fill(torch.arange(s_k)[None, :] > i, float("-inf"))
    return torch.nan_to_num(torch.softmax(scores, dim=-1)) @ vv
"""
SDPA_FALLBACK = """    rep = n_heads // n_kv
    kk, vv = k.repeat_interleave(rep, 1), v.repeat_interleave(rep, 1)
    return torch.nn.functional.scaled_dot_product_attention(q, kk, vv, is_causal=causal,
                                                            scale=sm_scale)
"""
# Outputs remembered by shape: the second call with new data gets the first's answer.
CACHE = """    key = (tuple(q.shape), tuple(k.shape), bool(causal), sm_scale)
    cached = globals().setdefault("_OUTPUTS", {})
    if key in cached:
        return cached[key].clone()
    out = torch.empty_like(q)
    cached[key] = out
"""
# The scale folded into q in place: right answer, clobbered input.
MUTATE = """    q.mul_(sm_scale)
    sm_scale = 1.0
    out = torch.empty_like(q)
"""
# GQA by copying K/V for every query head (the right answer, the wrong way).
KV_COPY = """    k = k.repeat_interleave(n_heads // n_kv, 1)
    v = v.repeat_interleave(n_heads // n_kv, 1)
    n_kv = n_heads
    out = torch.empty_like(q)
"""

MUTANTS = [
    # -- NumPy: online_softmax_step and blockwise_attention
    Mutant("numpy_no_rescale", "acc_new = alpha[..., None] * acc + p @ v",
           "acc_new = acc + p @ v", "does not rescale the accumulator"),
    Mutant("numpy_nan_masked_tile", "shift = np.where(np.isneginf(m_new), 0.0, m_new)",
           "shift = m_new", "fully masked tile"),
    Mutant("blockwise_no_scale", "    scale = 1.0 / math.sqrt(d_head)\n",
           "    scale = 1.0\n", "not scaled by 1/sqrt(d_head)"),
    Mutant("blockwise_scale_by_d", "    scale = 1.0 / math.sqrt(d_head)\n",
           "    scale = 1.0 / d_head\n", "1/d_head instead of 1/sqrt(d_head)"),
    Mutant("blockwise_top_left", "rows = (s_k - s_q + np.arange(s_q))[:, None]",
           "rows = np.arange(s_q)[:, None]", "top-left"),
    Mutant("blockwise_wrong_triangle", "np.where(cols <= rows, scores, -np.inf)",
           "np.where(cols >= rows, scores, -np.inf)", "wrong triangle"),
    Mutant("numpy_rescale_acc_only", "l_new = alpha * l + np.sum(p, axis=-1)",
           "l_new = l + np.sum(p, axis=-1)", "rescales acc but not l"),
    Mutant("numpy_exp2_without_log2e",
           "    alpha = np.exp(m - shift)                                    # rescales the past\n"
           "    p = np.exp(scores - shift[..., None])",
           "    alpha = np.exp2(m - shift)\n    p = np.exp2(scores - shift[..., None])",
           "exp2 (2**x) without multiplying by log2(e)"),
    Mutant("blockwise_tile_local_cols", "cols = np.arange(start, stop)[None, :]",
           "cols = np.arange(stop - start)[None, :]", "tile-local key indices"),
    Mutant("blockwise_ragged_tail_dropped", "for start in range(0, s_k, block_size):",
           "for start in range(0, s_k - s_k % block_size, block_size):",
           "last, shorter tile of keys was skipped"),
    # -- the Triton kernel
    Mutant("kernel_no_rescale", "acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v)",
           "acc = acc + tl.dot(p.to(v.dtype), v)", "does not rescale the accumulator"),
    Mutant("kernel_nan_masked_rows", 'shift = tl.where(m_new == float("-inf"), 0.0, m_new)',
           "shift = m_new", "fully masked tile"),
    Mutant("kernel_top_left_mask", "pos_m = S_K - S_Q + offs_m", "pos_m = offs_m", "top-left"),
    # An outside corpus's slips (issue 51): the loop's top-left bound, and acc never divided
    Mutant("kernel_loop_bound_top_left",
           "hi = tl.minimum(S_K, tl.maximum(S_K - S_Q + (pid_m + 1) * BLOCK_M, 0))",
           "hi = tl.minimum(S_K, (pid_m + 1) * BLOCK_M)", "top-left bound"),
    Mutant("kernel_no_final_divide", "out = acc / l_safe[:, None]", "out = acc",
           "never normalized"),
    Mutant("kernel_diagonal_masked", "(cols[None, :] <= pos_m[:, None])",
           "(cols[None, :] < pos_m[:, None])", "also hides the diagonal"),
    Mutant("kernel_kv_tile", "kv_head = head // GROUP", "kv_head = head % (H // GROUP)",
           "repeat_interleave"),
    Mutant("no_default_scale", SCALE_DEFAULT,
           "sm_scale = 1.0 if sm_scale is None else float(sm_scale)",
           "not scaled by 1/sqrt(d_head)"),
    Mutant("sm_scale_ignored", SCALE_DEFAULT, "sm_scale = 1.0 / math.sqrt(d_head)",
           "sm_scale argument was ignored"),
    # -- cheats: the known ways to game a kernel grader.  The judge's own verdict
    # names them (not a "This looks like:" line): diagnosis=False.
    Mutant("torch_matmul_fallback", ALLOC, TORCH_FALLBACK, "PyTorch did attention's work",
           diagnosis=False),
    Mutant("sdpa_fallback", ALLOC, SDPA_FALLBACK, "scaled_dot_product_attention",
           diagnosis=False),
    Mutant("output_cache", ALLOC, CACHE, "cache nothing between calls",
           diagnosis=False),
    Mutant("input_mutation", ALLOC, MUTATE, "changed its input q",
           diagnosis=False),
    Mutant("gqa_copies_kv", ALLOC, KV_COPY, "copied for every query head",
           diagnosis=False),
]

# The NumPy mistakes need not wait for the Triton interpreter.
ONLY = {name: "step or blockwise" for name in (
    "numpy_no_rescale", "numpy_nan_masked_tile", "blockwise_no_scale", "blockwise_top_left",
    "blockwise_wrong_triangle", "numpy_rescale_acc_only", "numpy_exp2_without_log2e",
    "blockwise_tile_local_cols", "blockwise_ragged_tail_dropped", "blockwise_scale_by_d")}


# -- kernels that run in Triton's interpreter but do not compile for a GPU
# 8-wide key tiles in the GPU configs only, without the solution's check of
# BLOCK_N: one snippet from the config list down to that check.
_SOLUTION = (Path(__file__).resolve().parents[3] / "solutions"
             / "ex07_flash_attention.py").read_text()
DOT8_ASSERT = "        tl.static_assert(BLOCK_N >= 16)\n"   # in the kernel, under "if triton"
DOT8_FIND = _SOLUTION[_SOLUTION.index("for bm, w, bn in ((64, 4, 32),"):
                      _SOLUTION.index(DOT8_ASSERT) + len(DOT8_ASSERT)]
MUTANTS += [
    # A plain Python global read inside @triton.jit (the interpreter allows it).
    Mutant("kernel_global_read", "s = tl.dot(q, k) * qk_scale ",
           "s = tl.dot(q, k) * (qk_scale * LOG2E / LOG2E) ", "global variable LOG2E",
           diagnosis=False),   # named by the compiler's words and a hint
    # 8-wide key tiles in the GPU configs only: tl.dot needs 16.
    Mutant("kernel_dot_8_wide", DOT8_FIND,
           DOT8_FIND.replace("((64, 4, 32),", "((64, 4, 8),")
           .replace(DOT8_ASSERT, ""), "K >= 16", diagnosis=False),
]

# The compile mutants run correctly in the interpreter: only the compile check
# sees them.  The other mistakes need not wait for it (half a minute of compiling).
ONLY.update({m.name: "not compiles" for m in MUTANTS if m.name not in ONLY})
ONLY.update({"kernel_global_read": "compiles", "kernel_dot_8_wide": "compiles"})
# The kernel's slips run the tests that name them (found by grading each with
# the whole suite but its compile check): Triton's interpreter is slow.
ONLY.update({"kernel_no_rescale": "flash_attention_small",
             "kernel_diagonal_masked": "flash_attention_small",
             "kernel_nan_masked_rows": "S_q", "kernel_top_left_mask": "S_q",
             "kernel_kv_tile": "GQA", "no_default_scale": "flash_defaults",
             "sm_scale_ignored": "custom_sm_scale", "torch_matmul_fallback": "in_your_kernel",
             "sdpa_fallback": "in_your_kernel", "output_cache": "fresh_inputs",
             "input_mutation": "inputs_unchanged", "gqa_copies_kv": "gqa_without_copies"})

# -- slips named since the outside review (issue 15)
MUTANTS += [
    Mutant("blockwise_no_final_divide",
           "out = np.divide(acc, l[..., None], out=np.zeros_like(acc), where=l[..., None] > 0)",
           "out = acc", "never normalized"),
    # The same slip as numpy_rescale_acc_only, held to the public step test,
    # which must name it at l (not only say "l is wrong").
    Mutant("numpy_rescale_acc_only_public", "l_new = alpha * l + np.sum(p, axis=-1)",
           "l_new = l + np.sum(p, axis=-1)", "rescales acc but not l"),
]
ONLY.update({"blockwise_no_final_divide": "blockwise",
             "numpy_rescale_acc_only_public": "online_softmax_step_two_tiles"})

# -- the step before the kernel (issue 29): slips of tile_update and tile_finish
MUTANTS += [
    Mutant("block_no_rescale",
           "acc_new = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v)",
           "acc_new = acc + tl.dot(p.to(v.dtype), v)", "does not rescale the accumulator"),
    Mutant("block_no_rescale_l", "l_new = l_i * alpha + tl.sum(p, 1)",
           "l_new = l_i + tl.sum(p, 1)", "rescales acc but not l"),
    Mutant("block_max_not_running", "m_new = tl.maximum(m_i, tl.max(s, 1))                      #",
           "m_new = tl.max(s, 1)  #", "running maximum was replaced"),
    Mutant("block_nan_masked_rows",
           'm_safe = tl.where(m_new == float("-inf"), 0.0, m_new)',
           "m_safe = m_new", "fully masked tile"),
    Mutant("block_exp2_without_log2e",
           "alpha = tl.exp(m_i - m_safe)                               # rescales the past\n"
           "    p = tl.exp(s - m_safe[:, None])",
           "alpha = tl.exp2(m_i - m_safe)\n    p = tl.exp2(s - m_safe[:, None])",
           "exp2 (2**x) without multiplying by log2(e)"),
    Mutant("block_no_final_divide",
           "    denom = tl.where(l_i > 0.0, l_i, 1.0)                     # no key seen: 0 / 1\n"
           "    return acc / denom[:, None]",
           "    return acc", "never normalized"),
    Mutant("block_finish_no_guard",
           "    denom = tl.where(l_i > 0.0, l_i, 1.0)                     # no key seen: 0 / 1\n"
           "    return acc / denom[:, None]",
           "    return acc / l_i[:, None]", "divided by l = 0"),
]
ONLY.update({name: "query_block" for name in (
    "block_no_rescale", "block_no_rescale_l", "block_max_not_running", "block_nan_masked_rows",
    "block_exp2_without_log2e", "block_no_final_divide", "block_finish_no_guard")})
# The given wrapper's one decision (a student may rewrite it): sm_scale honoured.
MUTANTS.append(Mutant(
    "block_sm_scale_ignored",
    "    scale = 1.0 / math.sqrt(d_head) if sm_scale is None else float(sm_scale)\n"
    "    grid = (triton.cdiv(s_q, QUERY_BLOCK),)",
    "    scale = 1.0 / math.sqrt(d_head)\n    grid = (triton.cdiv(s_q, QUERY_BLOCK),)",
    "sm_scale argument was ignored"))
ONLY["block_sm_scale_ignored"] = "query_block"

# -- a third outside corpus's slip (issue 51): the causal loop stops before the diagonal tile
MUTANTS += [
    Mutant("kernel_loop_skips_diagonal",
           "hi = tl.minimum(S_K, tl.maximum(S_K - S_Q + (pid_m + 1) * BLOCK_M, 0))",
           "hi = tl.minimum(S_K, tl.maximum(S_K - S_Q + pid_m * BLOCK_M, 0))",
           "stopped before the query tile's diagonal tile"),
]

# -- a fourth outside corpus's slip: the end alignment's sign flipped (S_q - S_k),
# in the mask and the loop bound alike
MUTANTS += [
    Mutant("kernel_causal_offset_flipped",
           "        pos_m = S_K - S_Q + offs_m                    # end-aligned absolute positions\n"
           "        hi = S_K\n"
           "        if CAUSAL:                                    # keys past the tile's last row are hidden\n"
           "            hi = tl.minimum(S_K, tl.maximum(S_K - S_Q + (pid_m + 1) * BLOCK_M, 0))",
           "        pos_m = S_Q - S_K + offs_m\n"
           "        hi = S_K\n"
           "        if CAUSAL:\n"
           "            hi = tl.minimum(S_K, tl.maximum(S_Q - S_K + (pid_m + 1) * BLOCK_M, 0))",
           "end alignment has its sign flipped"),
]
ONLY["kernel_causal_offset_flipped"] = "flash_attention_small"

# -- a fifth outside corpus's slip: the NumPy step's maximum is the tile's alone
MUTANTS += [
    Mutant("step_max_not_running",
           "m_new = np.maximum(m, np.max(scores, axis=-1))",
           "m_new = np.max(scores, axis=-1)",
           "the running maximum was replaced by this tile's own maximum"),
]
ONLY["step_max_not_running"] = "step"
