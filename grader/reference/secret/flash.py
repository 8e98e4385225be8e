"""ex07's references: exact attention with known mistakes, and the speed judge.

Written apart from ``solutions/``:

* ``reference(q, k, v, causal, sm_scale, mistake=...)``: exact attention in
  float64 (PyTorch einsum, end-aligned causal mask, GQA by
  ``repeat_interleave``), plus the wrong answers of the known mistakes for
  ``grader.feedback.check_close(mistakes=...)``; ``step_reference`` does the
  same for one online-softmax step.  These never need Triton.
* ``judge_speed``: the speed grade's verdict on what the two workers of
  ``grader/reference/flash_speed.py`` measured.

The reference Triton kernel the speed grade times lives in the worker
runtime (``grader/sandbox/runtime/kernels/flash.py``), which a trusted
worker runs where it lies; ``HAS_TRITON`` and ``NEEDS_TRITON`` come from
there.  The checks of a traced call ship with the student edition (they
judge the student's own call, not an answer) and are re-exported from
``grader/reference/flash_judge.py``.
"""
from __future__ import annotations

import math

import numpy as np
import torch

from grader.reference.flash_judge import (GPU_TOLERANCES, MAX_COMPUTE_OPS,  # noqa: F401
                                          check_authentic, check_inputs_unchanged,
                                          check_no_kv_copy, check_output, tolerance)
from grader.feedback import SEEN_WITH
from grader.reference.secret.attention import MISTAKES
from grader.sandbox.runtime.kernels.flash import HAS_TRITON, NEEDS_TRITON  # noqa: F401

# Mistakes of ex07 beyond those of grader.reference.secret.attention.MISTAKES.
FLASH_MISTAKES = {
    "no_rescale": "the online softmax does not rescale the accumulator: when a tile raises "
                  "the row maximum from m to m_new, acc (and l) must be multiplied by "
                  "exp(m - m_new)",
    "nan_masked_tile": "a fully masked tile (or a row that may see no key) produced NaN "
                       "(-inf - -inf); shift by 0 while the row maximum is still -inf, and "
                       "give rows that see no key a zero output",
    "sm_scale_ignored": "the sm_scale argument was ignored (1/sqrt(d_head) was used instead)",
    "kv_tile": None,  # the same words as grader.reference.secret.attention's
    "no_rescale_l": "the online softmax rescales acc but not l: when a tile raises the row "
                    "maximum from m to m_new, the running sum l must be multiplied by "
                    "exp(m - m_new) too",
    "exp2_no_log2e": "the online softmax used exp2 (2**x) without multiplying by log2(e): "
                     "exp(x) == exp2(x * 1.4427)",
    "tile_local_cols": "the causal mask compared the queries' positions with tile-local key "
                       "indices (0..block_size-1) instead of the keys' absolute indices "
                       "(the tile's start + j)",
    "ragged_keys_unmasked": "the last key tile was not masked to the keys that exist "
                            "(cols < S_k): its padding, loaded as 0, took softmax weight "
                            "when S_k is not a multiple of the tile",
    "ragged_tail_dropped": "the last, shorter tile of keys was skipped: when S_k is not a "
                           "multiple of block_size, the last tile holds the S_k % block_size "
                           "keys that remain",
    "loop_skips_diagonal": "the causal loop over key tiles stopped before the query tile's "
                           "diagonal tile (start_m * BLOCK_M instead of (start_m + 1) * BLOCK_M, "
                           "plus S_k - S_q): the keys a query sees nearest to itself were never "
                           "visited, and the first tile's rows saw no key at all",
    "exp_with_log2e": "the online softmax used exp (base e) with the log2(e) factor meant "
                      "for exp2: exp(x * 1.4427) is a softmax at 1.44 times the scale; use "
                      "exp2(x * log2(e)), or exp(x) without the factor",
    "loop_bound_top_left": "the causal loop over key tiles stopped at the top-left bound "
                           "(start_m + 1) * BLOCK_M: when S_q < S_k a query sits at "
                           "S_k - S_q + i, so the loop must run to S_k - S_q + (start_m + 1) "
                           "* BLOCK_M; the keys past the top-left bound were never visited",
    "causal_offset_flipped": "the causal mask's end alignment has its sign flipped: query i "
                             "sits at S_k - S_q + i (the keys before the queries come first), "
                             "not at S_q - S_k + i; with S_q != S_k the mask and the loop "
                             "bound are shifted the wrong way",
    "no_final_divide": "the output was never normalized: after the last tile, divide acc by "
                       "l (acc / l is the attention output; acc alone is a sum of "
                       "exp(score - m) * v)",
    # the step before the kernel (tile_update, tile_finish): issue 29
    "max_not_running": "the running maximum was replaced by this tile's own maximum: m_new "
                       "must be the larger of the running m and the tile's max (with the "
                       "tile's alone, a tile of low or masked scores after high ones rescales "
                       "the past by a huge exp(m_old - m_new), or wipes it)",
    "finish_no_guard": "the rows that see no key were divided by l = 0 and came out NaN: "
                       "their output is zeros (divide by 1 where l is 0)",
}
# Key-tile widths tried when naming the no-rescale mistake of a kernel whose
# tile size is unknown.
CANDIDATE_TILES = (16, 32, 64, 128)


def describe(name: str) -> str:
    """The feedback words for mistake ``name``."""
    return FLASH_MISTAKES.get(name) or MISTAKES[name]


def _t64(x) -> torch.Tensor:
    if isinstance(x, torch.Tensor):
        return x.detach().to(torch.float64)
    return torch.as_tensor(np.asarray(x), dtype=torch.float64)


# -- exact attention ---------------------------------------------------------
def allowed(s_q: int, s_k: int, causal: bool, mistake=None, device="cpu") -> torch.Tensor:
    """Boolean ``(s_q, s_k)``: may query ``i`` see key ``j``? (end-aligned)."""
    i = torch.arange(s_q, device=device)[:, None]
    j = torch.arange(s_k, device=device)[None, :]
    if not causal or mistake == "no_mask":
        return torch.ones(s_q, s_k, dtype=torch.bool, device=device)
    offset = {"top_left_mask": 0, "causal_offset_flipped": s_q - s_k}.get(mistake, s_k - s_q)
    if mistake == "diagonal_masked":
        return j < i + offset
    if mistake == "mask_wrong_triangle":
        return j >= i + offset
    return j <= i + offset


def _kv_heads(x: torch.Tensor, n_heads: int, mistake=None) -> torch.Tensor:
    """``(B, h_kv, S, d)`` -> ``(B, h, S, d)``: query head i reads KV head i // (h/h_kv)."""
    rep = n_heads // x.shape[1]
    if rep == 1:
        return x
    if mistake == "kv_tile":
        return x.repeat(1, rep, 1, 1)
    return torch.repeat_interleave(x, rep, dim=1)


def reference(q, k, v, causal: bool = True, sm_scale=None, mistake=None,
              device=None, chunk: int = 2048) -> torch.Tensor:
    """Exact attention in float64: ``q`` ``(B, h, S_q, d)``, ``k``/``v`` ``(B, h_kv, S_k, d)``.

    ``mistake`` reproduces one wrong answer (see ``FLASH_MISTAKES`` and
    ``grader.reference.secret.attention.MISTAKES``); ``no_rescale`` takes the tile
    width as ``mistake=("no_rescale", block_n)``, the causal loop bounds their
    tiles as ``(name, block_m, block_n)``.  ``device`` (default: the
    input's) and ``chunk`` (query rows at a time) keep long sequences within
    memory.  Returns a float64 tensor on the CPU.
    """
    if isinstance(mistake, tuple) and mistake[0] == "no_rescale":
        return _no_rescale(q, k, v, causal, sm_scale, mistake[1])
    if isinstance(mistake, tuple) and mistake[0] == "ragged_keys_unmasked":
        return _padded_keys(q, k, v, causal, sm_scale, mistake[1])
    bound = None           # the loop bound's query tile, with its key tile (``_loop_bounds``)
    if isinstance(mistake, tuple) and mistake[0] in ("loop_bound_top_left",
                                                     "loop_skips_diagonal"):
        mistake, bound, key_tile = mistake
    dev = device or (q.device if isinstance(q, torch.Tensor) else "cpu")
    q, k, v = (_t64(x).to(dev) for x in (q, k, v))
    d_head, s_q, s_k = q.shape[-1], q.shape[-2], k.shape[-2]
    scale = 1.0 / math.sqrt(d_head) if sm_scale is None or mistake == "sm_scale_ignored" \
        else float(sm_scale)
    if mistake == "no_scale":
        scale = 1.0
    elif mistake == "scale_by_d":
        scale = 1.0 / d_head
    elif mistake == "exp_with_log2e":        # exp(x * log2(e)): e-based, exp2's factor
        scale = scale / math.log(2.0)
    k, v = _kv_heads(k, q.shape[1], mistake), _kv_heads(v, q.shape[1], mistake)
    ok = allowed(s_q, s_k, causal, mistake, dev)                     # (S_q, S_k)
    if bound is not None:    # key tiles past the loop's bound never visited
        rows = torch.arange(s_q, device=dev)[:, None] // bound
        cols = torch.arange(s_k, device=dev)[None, :]
        end = (rows + 1) * bound if mistake == "loop_bound_top_left" \
            else rows * bound + s_k - s_q
        # ``range(0, end, BLOCK_N)`` visits whole key tiles: the last one
        # reaches past ``end`` to its tile's end (its causal mask still holds)
        end = torch.div(end.clamp(min=0) + key_tile - 1, key_tile,
                        rounding_mode="floor") * key_tile
        ok = ok & (cols < end)
    out = torch.empty_like(q)                                        # (B, h, S_q, d)
    for r0 in range(0, s_q, chunk):
        r1 = min(r0 + chunk, s_q)
        s = torch.einsum("bhqd,bhkd->bhqk", q[:, :, r0:r1], k) * scale
        s = s.masked_fill(~ok[r0:r1], -math.inf)
        m = torch.amax(s, dim=-1, keepdim=True)
        m = torch.where(torch.isfinite(m), m, torch.zeros_like(m))
        # exp2 without log2(e): 2**(x) is exp(x * ln 2), a softmax at ln 2 of the scale
        e = torch.exp2(s - m) if mistake == "exp2_no_log2e" else torch.exp(s - m)
        den = e.sum(-1, keepdim=True)
        w = e / torch.where(den > 0, den, torch.ones_like(den))      # no key: weights 0
        if mistake == "no_final_divide":                             # acc, never acc / l
            w = e
        if mistake == "nan_masked_tile":
            w = torch.where(den > 0, w, torch.full_like(w, math.nan))
        out[:, :, r0:r1] = torch.einsum("bhqk,bhkd->bhqd", w, v)
    return out.cpu()


def _padded_keys(q, k, v, causal, sm_scale, block_n: int) -> torch.Tensor:
    """Attention whose keys are padded with zeros to a multiple of ``block_n``
    and not masked: each padded key scores 0 and adds exp(0 - m) to the sum."""
    q, k, v = _t64(q).cpu(), _t64(k).cpu(), _t64(v).cpu()
    s_k = k.shape[-2]
    pad = (-s_k) % block_n
    zeros = torch.zeros(*k.shape[:-2], pad, k.shape[-1], dtype=torch.float64)
    k, v = torch.cat([k, zeros], dim=-2), torch.cat([v, zeros], dim=-2)
    return reference(q, k, v, causal, sm_scale)


def _no_rescale(q, k, v, causal, sm_scale, block_n: int) -> torch.Tensor:
    """The online softmax with key tiles of ``block_n`` that never rescales acc."""
    q, k, v = _t64(q).cpu(), _t64(k).cpu(), _t64(v).cpu()
    d_head, s_q, s_k = q.shape[-1], q.shape[-2], k.shape[-2]
    scale = 1.0 / math.sqrt(d_head) if sm_scale is None else float(sm_scale)
    k, v = _kv_heads(k, q.shape[1]), _kv_heads(v, q.shape[1])
    ok = allowed(s_q, s_k, causal)
    m = torch.full(q.shape[:-1], -math.inf, dtype=torch.float64)
    l = torch.zeros(q.shape[:-1], dtype=torch.float64)
    acc = torch.zeros_like(q)
    for j0 in range(0, s_k, block_n):
        j1 = min(j0 + block_n, s_k)
        s = torch.einsum("...qd,...kd->...qk", q, k[..., j0:j1, :]) * scale
        s = s.masked_fill(~ok[:, j0:j1], -math.inf)
        m_new = torch.maximum(m, s.amax(-1))
        shift = torch.where(torch.isinf(m_new), torch.zeros_like(m_new), m_new)
        p = torch.exp(s - shift[..., None])
        l = l * torch.exp(m - shift) + p.sum(-1)
        acc = acc + p @ v[..., j0:j1, :]               # the mistake: no exp(m - m_new)
        m = m_new
    return torch.where(l[..., None] > 0, acc / torch.where(l > 0, l, 1.0)[..., None], 0.0)


def flash_mistakes(q, k, v, causal: bool, sm_scale=None, names=None) -> dict:
    """``{description: wrong answer}`` for ``check_close(mistakes=...)``."""
    names = names or ["no_scale", "scale_by_d", "top_left_mask", "diagonal_masked",
                      "mask_wrong_triangle", "no_mask", "kv_tile", "nan_masked_tile",
                      "no_rescale", "exp2_no_log2e", "ragged_keys_unmasked",
                      "no_final_divide", "loop_bound_top_left", "exp_with_log2e",
                      "loop_skips_diagonal", "sm_scale_ignored", "causal_offset_flipped"]
    out = {}
    for name in names:
        if name in ("top_left_mask", "diagonal_masked", "mask_wrong_triangle",
                    "no_mask", "causal_offset_flipped") and not causal:
            continue
        if name == "kv_tile" and (q.shape[1] == k.shape[1] or k.shape[1] == 1):
            continue                           # tile == repeat_interleave here
        if name == "sm_scale_ignored" and sm_scale is None:
            continue
        if name == "ragged_keys_unmasked":
            if causal:
                continue      # end-aligned causal masks the padding already
            for bn in CANDIDATE_TILES:
                if k.shape[-2] % bn:
                    out[f"{describe(name)}{SEEN_WITH}tiles of {bn} keys)"] = \
                        reference(q, k, v, causal, sm_scale, ("ragged_keys_unmasked", bn))
            continue
        if name in ("loop_bound_top_left", "loop_skips_diagonal"):
            # A causal loop's bound, per query tile, over whole key tiles (of
            # at most as many keys as the query tile has rows).  The top-left
            # bound changes nothing where S_q >= S_k: its answer is the right
            # one there, listed so that a wrong answer there rules it out.
            if causal:
                out.update(_loop_bounds(q, k, v, sm_scale, name))
            continue
        if name == "no_rescale":
            for bn in CANDIDATE_TILES:
                if k.shape[-2] > bn:
                    out[f"{describe(name)}{SEEN_WITH}tiles of {bn} keys)"] = \
                        reference(q, k, v, causal, sm_scale, ("no_rescale", bn))
            continue
        out[describe(name)] = reference(q, k, v, causal, sm_scale, name)
    return out


def _loop_bounds(q, k, v, sm_scale, name) -> dict:
    """``flash_mistakes``' answers of the causal loop-bound mistake ``name``
    for every query tile of ``CANDIDATE_TILES`` and every key tile of at most
    its rows (``range(0, end, BLOCK_N)`` visits whole key tiles), each named
    by its tiles in the same words on every case: another case's evidence
    rules out a pair of tiles (``feedback.ruled_out``).  A kernel of 32-row,
    32-key tiles that stops before the diagonal visits the keys the top-left
    bound visits where S_q < S_k; a square case tells the two apart."""
    out: dict = {}
    for bm in CANDIDATE_TILES:
        for bn in sorted((t for t in CANDIDATE_TILES if t <= bm), key=lambda t: t != bm):
            tiles = f"query tiles of {bm} rows" + ("" if bn == bm else f", key tiles of {bn}")
            out[f"{describe(name)}{SEEN_WITH}{tiles})"] = \
                reference(q, k, v, True, sm_scale, (name, bm, bn))
    return out


# -- one online-softmax step ---------------------------------------------------
def step_reference(m, l, acc, scores, v, mistake=None, dtype=np.float64):
    """The exact update of ``(m, l, acc)`` by one tile, in float64 NumPy
    (``dtype=np.float32``: as a float32 kernel overflows)."""
    m, l, acc = (np.asarray(x, dtype=dtype) for x in (m, l, acc))
    scores, v = np.asarray(scores, dtype=dtype), np.asarray(v, dtype=dtype)
    m_new = scores.max(axis=-1) if mistake == "max_not_running" else \
        np.maximum(m, scores.max(axis=-1))
    shift = m_new if mistake == "nan_masked_tile" else np.where(np.isinf(m_new), 0.0, m_new)
    exp = np.exp2 if mistake == "exp2_no_log2e" else np.exp
    with np.errstate(invalid="ignore", over="ignore"):
        alpha = exp(m - shift)
        p = exp(scores - shift[..., None])
    l_new = (l if mistake == "no_rescale_l" else alpha * l) + p.sum(-1)
    if mistake == "no_rescale":
        acc_new = acc + p @ v
    else:
        acc_new = alpha[..., None] * acc + p @ v
    return m_new, l_new, acc_new


def blockwise_reference(q, k, v, block_size: int, causal: bool = True, mistake=None):
    """``blockwise_attention`` done right (or with one mistake), in float64 NumPy:
    ``q`` ``(..., S_q, d)``, ``k``/``v`` ``(..., S_k, d)``.  Step mistakes
    (``no_rescale``, ``no_rescale_l``, ``exp2_no_log2e``) go to
    ``step_reference``; ``tile_local_cols``, ``ragged_tail_dropped`` and
    ``no_final_divide`` are mistakes of the walk over the tiles."""
    q, k, v = (np.asarray(x, dtype=np.float64) for x in (q, k, v))
    s_q, s_k, d_head = q.shape[-2], k.shape[-2], q.shape[-1]
    m = np.full(q.shape[:-1], -np.inf)                               # (..., S_q)
    l = np.zeros(q.shape[:-1])
    acc = np.zeros(q.shape[:-1] + (v.shape[-1],))                    # (..., S_q, d_v)
    rows = (s_k - s_q + np.arange(s_q))[:, None]                     # absolute positions
    stop_at = s_k - s_k % block_size if mistake == "ragged_tail_dropped" else s_k
    for start in range(0, stop_at, block_size):
        stop = min(start + block_size, s_k)
        scores = q @ np.swapaxes(k[..., start:stop, :], -1, -2) / math.sqrt(d_head)
        if causal:
            cols = np.arange(stop - start) if mistake == "tile_local_cols" else \
                np.arange(start, stop)
            scores = np.where(cols[None, :] <= rows, scores, -np.inf)
        m, l, acc = step_reference(m, l, acc, scores, v[..., start:stop, :], mistake)
    if mistake == "no_final_divide":
        return acc
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(l[..., None] > 0, acc / np.where(l > 0, l, 1.0)[..., None], 0.0)


def blockwise_mistakes(q, k, v, block_size: int, causal: bool = True) -> dict:
    """``{description: wrong answer}`` of ``blockwise_attention`` for the mistakes
    of the walk over tiles and of the online-softmax step (NumPy, float64)."""
    names = ["no_rescale", "no_rescale_l", "exp2_no_log2e", "ragged_tail_dropped",
             "no_final_divide"]
    if causal:
        names.append("tile_local_cols")
    return {describe(n): blockwise_reference(q, k, v, block_size, causal, n) for n in names}


# -- the step before the kernel: query_block_attention with the student's tile_update --
QUERY_BLOCK = 16        # the given kernel's tile of keys (and of query rows)
BLOCK_MISTAKES = ("no_rescale", "no_rescale_l", "exp2_no_log2e", "max_not_running",
                  "nan_masked_tile", "no_final_divide", "finish_no_guard")


def query_block_reference(q, k, v, causal=False, sm_scale=None, mistake=None):
    """``query_block_attention`` (``q`` ``(S_q, d)``, ``k``/``v`` ``(S_k, d)``)
    done right in float64, or with one mistake of ``tile_update`` /
    ``tile_finish`` as the given kernel would make it: tiles of 16 keys, a
    guarded finish that divides NaN by 1 (a NaN row stays NaN), and the
    running-maximum slip in float32, where its exp overflows."""
    q, k, v = (_t64(x).numpy() for x in (q, k, v))
    s_q, s_k, d_head = q.shape[0], k.shape[0], q.shape[1]
    scale = 1.0 / math.sqrt(d_head) if sm_scale is None else float(sm_scale)
    dtype = np.float32 if mistake == "max_not_running" else np.float64
    m, l, acc = np.full(s_q, -np.inf), np.zeros(s_q), np.zeros((s_q, d_head))
    rows = (s_k - s_q + np.arange(s_q))[:, None]                     # absolute positions
    for start in range(0, s_k, QUERY_BLOCK):
        stop = min(start + QUERY_BLOCK, s_k)
        scores = (q @ k[start:stop].T) * scale                       # (S_q, n)
        if causal:
            scores = np.where(np.arange(start, stop)[None, :] <= rows, scores, -np.inf)
        m, l, acc = step_reference(m, l, acc, scores, v[start:stop], mistake, dtype=dtype)
    if mistake == "no_final_divide":
        return acc
    with np.errstate(invalid="ignore", divide="ignore"):
        if mistake == "finish_no_guard":
            return acc / l[:, None]
        return acc / np.where(l > 0, l, 1.0)[:, None]


def query_block_mistakes(q, k, v, causal=False, sm_scale=None) -> dict:
    """``{description: wrong answer}`` of ``query_block_attention`` for the
    slips of ``tile_update`` and ``tile_finish``."""
    out = {describe(n): query_block_reference(q, k, v, causal, sm_scale, n)
           for n in BLOCK_MISTAKES}
    if sm_scale is not None:
        out[describe("sm_scale_ignored")] = query_block_reference(q, k, v, causal)
    return out


# -- FLOPs -----------------------------------------------------------------------
def attention_flops(batch: int, n_heads: int, s_q: int, s_k: int, d_head: int,
                    causal: bool) -> float:
    """Forward FLOPs: two matmuls (q k^T and p v) of 2 * S_q * S_k * d_head each.

    4 * B * h * S_q * S_k * d_head; a causal mask skips about half of the
    (query, key) pairs, so causal counts half of that (the usual convention
    of FlashAttention benchmarks, whatever the tiles really compute).
    """
    flops = 4.0 * batch * n_heads * s_q * s_k * d_head
    return flops * 0.5 if causal else flops


# Timed shapes of the GPU suite and of `attn-grade calibrate`: the
# long-context prefill a fused kernel is for (bf16, d_head 128, 32 heads).
SPEED_CASES = [dict(batch=4, heads=32, kv_heads=32, s_q=s, s_k=s, d_head=128, causal=c,
                    dtype="bfloat16") for s, c in ((2048, False), (2048, True), (8192, True))]


def judge_speed(result: dict) -> dict:
    """Ratios of TFLOP/s (student / reference) from ``ex07_flash_attention.benchmark``'s answer.

    Raises ``Feedback`` if any timed call came back wrong (each is checked
    against the reference's output on the same inputs).  Returns the
    geometric-mean ratio, a noise margin (the reference's own relative
    spread, at most 10%) and a table for the feedback."""
    import statistics

    from grader.feedback import Feedback
    rows, ratios, spreads = [], [], []
    for r in result["cases"]:
        c = r["case"]
        if r["problems"]:
            raise Feedback(f"while timing B={c['batch']}, h={c['heads']}, S={c['s_q']}, "
                           f"causal={c['causal']}: flash_attention {', '.join(r['problems'])}; "
                           "no speed credit without a correct answer to every timed call")
        atol, _ = tolerance(c["dtype"], "cuda")
        worst = max(r["max_err"])
        if not math.isfinite(worst) or worst > 2 * atol:
            i = int(np.argmax([e if math.isfinite(e) else np.inf for e in r["max_err"]]))
            raise Feedback(f"timed call {i + 1} (S={c['s_q']}, causal={c['causal']}, "
                           f"{c['dtype']}) differs from the reference kernel's output on the "
                           f"same fresh inputs by {worst:.3g} (allowed {2 * atol:g}): every "
                           "timed output is checked, so replayed or cached outputs fail")
        flops = attention_flops(c["batch"], c["heads"], c["s_q"], c["s_k"], c["d_head"],
                                c["causal"])
        t_s, t_r = statistics.median(r["student_s"]), statistics.median(r["reference_s"])
        ratios.append(t_r / t_s)
        mad = statistics.median(abs(t - t_r) for t in r["reference_s"])
        spreads.append(mad / t_r)
        rows.append(f"  S={c['s_q']:5d} causal={str(c['causal']):5s}: yours "
                    f"{flops / t_s / 1e12:7.1f} TFLOP/s, reference {flops / t_r / 1e12:7.1f} "
                    f"TFLOP/s, ratio {t_r / t_s:.2f}")
    ratio = math.exp(sum(math.log(x) for x in ratios) / len(ratios))   # geometric mean
    return {"ratio": ratio, "margin": min(0.1, max(spreads)), "table": "\n".join(rows)}
