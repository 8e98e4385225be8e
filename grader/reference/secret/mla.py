"""Independent reference for exercise H (multi-head latent attention).

Written apart from ``solutions/ex08_mla.py``: float64, the explicit form
only (every head's K and V rebuilt, which is fine for a reference), built on
``grader.reference.secret.attention``.  Decode is the last row of the explicit form
over the cache, never the absorbed algebra, so that a mistake in the
absorption cannot hide in the reference too.  As in the other references,
each function has a ``mistake=`` switch reproducing one known wrong answer,
and ``MISTAKES`` says what the feedback calls it.
"""
from __future__ import annotations

import math

import torch

from grader.reference.mistakes import mistakes_of  # noqa: F401  (suites call ref.mistakes_of)
from grader.reference.secret import attention as ref

MISTAKES = {
    "rope_on_latent": "RoPE was applied to the latent c_kv. The latent must stay free of "
                      "positions: rotated, it can no longer be absorbed (q . W_uk R(p_j) c_j "
                      "has a different matrix for every cached token). Only the decoupled "
                      "d_rope parts of q and k are rotated",
    "rope_key_per_head": "one RoPE key per head was counted: MLA has ONE decoupled RoPE key "
                         "per token, shared by all heads (that is why it is cached once)",
    "scale_d_c": "the scores were scaled by 1/sqrt(d_c) (the absorbed query's width); the "
                 "scale is 1/sqrt(d_nope + d_rope), the width of the explicit q . k",
    "scale_d_c_rope": "the scores were scaled by 1/sqrt(d_c + d_rope) (the width of the "
                      "absorbed dot product); the scale is 1/sqrt(d_nope + d_rope), the "
                      "width of the explicit q . k, which absorbing does not change",
    "scale_d_nope": "the scores were scaled by 1/sqrt(d_nope); the scale is "
                    "1/sqrt(d_nope + d_rope), counting the RoPE part of q . k too",
    "no_scale": "the scores were not scaled by 1/sqrt(d_nope + d_rope)",
    "absorb_transposed": "w_uk was absorbed transposed: head i's block of w_uk is rows "
                         "i*d_nope..(i+1)*d_nope-1, a (d_nope, d_c) matrix W_uk_i, and the "
                         "absorbed query is q_nope_i @ W_uk_i (w_uk.view(h, d_nope, d_c)), "
                         "not a (d_c, d_nope) reading of it",
    "cache_rebuilt_kv": "the per-head K/V of the cached tokens were rebuilt (as if K/V were "
                        "cached) instead of attending to the latent: fold w_uk into the "
                        "query and apply w_uv after the weighted sum over c_kv",
    "latent_per_head": "the latent was read once per head (copied or counted h times): "
                       "every head reads the SAME c_kv, which is what makes MLA decode "
                       "intense",
    "top_left_mask": "the causal mask is aligned to the top-left in decode: the one query "
                     "saw only the first cached token; a decode query sits at the end and "
                     "sees the whole cache",
    "rope_positions_unused": "RoPE did not use the given positions",
    "no_rope_key": "the decoupled RoPE key was left out (it is cached beside the latent: "
                   "d_c + d_rope values per token and layer)",
    "latent_as_k_and_v": "the latent was counted twice, as a K and a V; it is one vector "
                         "from which both are rebuilt",
    "bytes_per_elem_ignored": "bytes_per_elem was not used (the count is in elements)",
    "saving_inverted": "the ratio is upside down (the K/V cache over the MLA cache)",
    "flops_scores_only": "only the scores' FLOPs were counted; the weighted sum over c_kv "
                         "costs 2 * d_c per head and cached token too",
    "flops_double": "the FLOPs are off by a factor of 2 (a multiply-add is 2 FLOPs, once)",
    "intensity_no_q_o": "the absorbed queries' read and the latent outputs' write were left "
                        "out of the bytes",
    "decode_position_s": "the query's default position was S, one past the newest cached "
                         "token: the cache already holds the new token's entry, so the new "
                         "token sits at position S - 1",
    "cache_doubled": "the MLA cache was counted twice, as if it held a K and a V: it holds "
                     "one latent and one RoPE key per token and layer, d_c + d_rope values",
    "fp32_cache": "the cache was counted in fp32, 4 bytes per element: DeepSeek-V3 caches "
                  "bf16, 2 bytes (the default bytes_per_elem)",
    "k_width_no_rope": "the K/V cache's K width left out d_rope: each cached K is "
                       "d_nope + d_rope wide (with MHA or GQA its RoPE part is cached per "
                       "head), so a K/V head holds d_nope + d_rope + d_v values per token",
    "k_rope_unrotated": "the cached RoPE key was not rotated: k_rope = RoPE(W_kr x_j, p_j) is "
                        "rotated at its token's position before it is cached (a decode step "
                        "reads it as it is)",
    "no_rope_score": "the RoPE part of the scores was left out: each score is q_nope . k_nope "
                     "+ q_rope . k_rope (absorbed: q_lat . c_kv + q_rope . k_rope), both "
                     "under the one scale 1/sqrt(d_nope + d_rope)",
    "plotted_no_rope": "the weights were drawn from the latent part of the scores only "
                       "(q_lat . c_kv): the RoPE part q_rope . k_rope is missing",
    "plotted_no_mask": "the weights were drawn without the causal mask (a causal pattern is "
                       "a lower triangle: later keys get weight 0)",
    "q_rope_position_zero": "the query's RoPE part was rotated at position 0 (its position "
                            "was ignored): q_rope must be rotated at the query's own position, "
                            "like k_rope at the key's, so that q . k sees their distance",
    "q_rope_from_front": "each head's query was split as [rope, nope]: RoPE went on its first "
                         "d_rope features; the RoPE part is the last d_rope (split as "
                         "[d_nope, d_rope])",
    "scale_latent_only": "only the latent part of each score was scaled: the whole score "
                         "(q_nope . k_nope + q_rope . k_rope) is multiplied by "
                         "1/sqrt(d_nope + d_rope), its RoPE part too",
    "flops_wsum_with_rope": "the weighted sum's FLOPs were counted over d_c + d_rope; the "
                            "weights multiply the latent c_kv only (2 * d_c per head and "
                            "token), the RoPE key has no value part"
}


def _pos(positions, s):
    return torch.arange(s, dtype=torch.float64) if positions is None \
        else ref.t64(positions).reshape(s)


# -- the tensors ------------------------------------------------------------

def cache(x, w_dkv, w_kr, *, positions=None, rope_base=10000.0, mistake=None):
    """``(c_kv, k_rope)`` ``(B, S, d_c)``, ``(B, S, d_rope)`` in float64."""
    x = ref.t64(x)
    s = x.shape[1]
    pos = _pos(positions, s)
    if mistake in ("rope_positions_unused", "k_rope_unrotated"):   # position 0: no turn
        pos = torch.zeros(s, dtype=torch.float64)
    c_kv = torch.einsum("bsd,cd->bsc", x, ref.t64(w_dkv))
    k_rope = ref.rope(torch.einsum("bsd,rd->bsr", x, ref.t64(w_kr)), pos, rope_base)
    if mistake == "rope_on_latent":
        c_kv = ref.rope(c_kv, pos, rope_base)      # ValueError for an odd d_c: cannot apply
    return c_kv, k_rope


def _uk_blocks(w_uk, n_heads, d_c, mistake):
    """``(h, d_nope, d_c)``: W_uk_i for each head (or the transposed misreading)."""
    w_uk = ref.t64(w_uk)
    d_nope = w_uk.shape[0] // n_heads
    if mistake == "absorb_transposed":
        # Each head's d_nope*d_c values read as a (d_c, d_nope) matrix, used transposed.
        return w_uk.reshape(n_heads, d_c, d_nope).transpose(1, 2)
    return w_uk.reshape(n_heads, d_nope, d_c)


def _scale(d_nope, d_rope, d_c, mistake):
    width = {"scale_d_c": d_c, "scale_d_c_rope": d_c + d_rope,
             "scale_d_nope": d_nope}.get(mistake, d_nope + d_rope)
    return 1.0 if mistake == "no_scale" else 1.0 / math.sqrt(width)


def _attend(q_nope, q_rope, c_kv, k_rope, w_uk, w_uv, w_o, n_heads, *, causal, mistake):
    """Explicit MLA over rebuilt K/V. ``q_*`` ``(B, h, S_q, .)``; ``c_kv``, ``k_rope``
    ``(B, S_k, .)``.  Returns ``(B, S_q, d)``."""
    b, s_k, d_c = c_kv.shape
    d_rope = k_rope.shape[-1]
    uk = _uk_blocks(w_uk, n_heads, d_c, mistake)                           # (h, dn, d_c)
    d_nope = uk.shape[1]
    uv = ref.t64(w_uv).reshape(n_heads, -1, d_c)                           # (h, dv, d_c)
    k_nope = torch.einsum("bsc,hnc->bhsn", c_kv, uk)                       # (B, h, S_k, dn)
    v = torch.einsum("bsc,hvc->bhsv", c_kv, uv)                            # (B, h, S_k, dv)
    if mistake == "no_rope_score":        # q_rope . k_rope left out of every score
        q_rope = torch.zeros_like(q_rope)
    if mistake == "scale_latent_only":    # the RoPE part's dot product left unscaled
        q_rope = q_rope / _scale(d_nope, d_rope, d_c, None)
    k = torch.cat([k_nope, k_rope[:, None].expand(b, n_heads, s_k, d_rope)], dim=-1)
    q = torch.cat([q_nope, q_rope], dim=-1)
    out = ref.attention(q, k, v, causal=causal, scale=_scale(d_nope, d_rope, d_c, mistake),
                        mistake="top_left_mask" if mistake == "top_left_mask" else None)
    return ref.merge_heads(out) @ ref.t64(w_o).T


def _queries(x, w_q, n_heads, d_nope, pos, rope_base, mistake):
    q = ref.split_heads(torch.einsum("bsd,qd->bsq", ref.t64(x), ref.t64(w_q)), n_heads)
    if mistake in ("rope_positions_unused", "q_rope_position_zero"):
        pos = torch.zeros_like(pos)
    if mistake == "q_rope_from_front":
        d_rope = q.shape[-1] - d_nope
        return q[..., d_rope:], ref.rope(q[..., :d_rope], pos, rope_base)
    return q[..., :d_nope], ref.rope(q[..., d_nope:], pos, rope_base)


def attention(x, w_q, w_dkv, w_uk, w_uv, w_kr, w_o, n_heads, *, causal=True, positions=None,
              rope_base=10000.0, mistake=None) -> torch.Tensor:
    """The explicit form, ``(B, S, d)`` float64; end-aligned causal mask."""
    x = ref.t64(x)
    s = x.shape[1]
    pos = _pos(positions, s)
    c_kv, k_rope = cache(x, w_dkv, w_kr, positions=pos, rope_base=rope_base,
                         mistake=mistake if mistake in ("rope_on_latent",
                                                        "rope_positions_unused") else None)
    d_nope = ref.t64(w_uk).shape[0] // n_heads
    q_nope, q_rope = _queries(x, w_q, n_heads, d_nope, pos, rope_base, mistake)
    return _attend(q_nope, q_rope, c_kv, k_rope, w_uk, w_uv, w_o, n_heads, causal=causal,
                   mistake=mistake)


def decode(x_t, c_kv, k_rope, w_q, w_uk, w_uv, w_o, n_heads, *, position=None,
           rope_base=10000.0, mistake=None) -> torch.Tensor:
    """One decode step ``(B, 1, d)``: the new query against the whole given cache."""
    c_kv, k_rope = ref.t64(c_kv), ref.t64(k_rope)
    s = c_kv.shape[1]
    default = s if mistake == "decode_position_s" else s - 1
    pos = torch.tensor([float(default if position is None else position)], dtype=torch.float64)
    d_nope = ref.t64(w_uk).shape[0] // n_heads
    q_nope, q_rope = _queries(x_t, w_q, n_heads, d_nope, pos, rope_base, mistake)
    return _attend(q_nope, q_rope, c_kv, k_rope, w_uk, w_uv, w_o, n_heads,
                   causal=mistake == "top_left_mask", mistake=mistake)


# -- the formulas -----------------------------------------------------------

def cache_bytes(n_layers, d_c, d_rope, seq_len, batch=1, bytes_per_elem=2, mistake=None):
    per_token = {"no_rope_key": d_c, "latent_as_k_and_v": 2 * d_c + d_rope,
                 "cache_doubled": 2 * (d_c + d_rope)}.get(mistake, d_c + d_rope)
    elems = n_layers * per_token * seq_len * batch
    if mistake == "fp32_cache" and bytes_per_elem == 2:   # the bf16 default taken as fp32
        bytes_per_elem = 4
    return elems if mistake == "bytes_per_elem_ignored" else elems * bytes_per_elem


def cache_saving(n_kv_heads, d_nope, d_rope, d_v, d_c, mistake=None) -> float:
    kv = n_kv_heads * (d_nope + (0 if mistake == "k_width_no_rope" else d_rope) + d_v)
    mla = {"no_rope_key": d_c, "rope_key_per_head": d_c + n_kv_heads * d_rope}.get(
        mistake, d_c + d_rope)
    return mla / kv if mistake == "saving_inverted" else kv / mla


def decode_intensity(n_heads, seq_len, d_c, d_rope, batch=1, bytes_per_elem=2,
                     mistake=None) -> float:
    """The absorbed decode core: scores of width d_c + d_rope and the weighted sum
    over c_kv for every (head, cached token); caches read once, absorbed queries
    read once, latent outputs written once."""
    per_pair = {"flops_scores_only": 2 * (d_c + d_rope),
                "flops_double": 4 * (2 * d_c + d_rope),
                "flops_wsum_with_rope": 4 * (d_c + d_rope)}.get(mistake, 2 * (2 * d_c + d_rope))
    flops = per_pair * batch * n_heads * seq_len
    cache_elems = seq_len * {"rope_key_per_head": d_c + n_heads * d_rope,
                             "latent_per_head": n_heads * (d_c + d_rope),
                             "no_rope_key": d_c}.get(mistake, d_c + d_rope)
    q_o = 0 if mistake == "intensity_no_q_o" else n_heads * (2 * d_c + d_rope)
    if mistake == "bytes_per_elem_ignored":
        bytes_per_elem = 1
    return flops / (batch * (cache_elems + q_o) * bytes_per_elem)


def kv_bytes_per_token(n_layers, n_kv_heads, d_qk, d_v, bytes_per_elem=2) -> int:
    """A K/V cache's bytes per token (all layers): K of width d_qk, V of width d_v."""
    return n_layers * n_kv_heads * (d_qk + d_v) * bytes_per_elem


def kv_decode_intensity(n_heads, n_kv_heads, seq_len, d_qk, d_v, batch=1,
                        bytes_per_elem=2) -> float:
    """Decode intensity of MHA/GQA/MQA with K width d_qk and V width d_v (no copies)."""
    flops = 2 * batch * n_heads * seq_len * (d_qk + d_v)
    elems = batch * (n_kv_heads * seq_len * (d_qk + d_v) + n_heads * (d_qk + d_v))
    return flops / (elems * bytes_per_elem)


def decode_core_per_token(n_heads, d_c, d_rope, batch=1, bytes_per_elem=4) -> dict:
    """What one more cached token adds to an absorbed decode step: its FLOPs, the
    bytes of its cache entry, and the bytes of one score per head (the unit of an
    unfused kernel's round trips)."""
    return {"flops": 2 * batch * n_heads * (2 * d_c + d_rope),
            "cache_bytes": batch * (d_c + d_rope) * bytes_per_elem,
            "latent_bytes": batch * d_c * bytes_per_elem,
            "score_bytes": batch * n_heads * bytes_per_elem}


def rebuilt_kv_per_token(n_heads, d_c, d_nope, d_v, batch=1, bytes_per_elem=4) -> dict:
    """What one more cached token adds when K/V are rebuilt per head (the
    ``cache_rebuilt_kv`` mistake): the up-projections' FLOPs on top of the
    attention's, and the per-head K/V written and read again."""
    return {"flops": 2 * batch * n_heads * d_c * (d_nope + d_v),
            "kv_bytes": batch * n_heads * (d_nope + d_v) * bytes_per_elem}


def head_weights(x, w_q, w_dkv, w_uk, w_kr, n_heads, *, positions=None, rope_base=10000.0,
                 mistake=None):
    """Each head's causal attention weights over one sequence ``x`` ``(S, d)``:
    ``(h, S, S)`` float64 (the explicit form's softmax; the absorbed form
    gives the same)."""
    x = ref.t64(x)[None]                                                   # (1, S, d)
    s = x.shape[1]
    pos = _pos(positions, s)
    c_kv, k_rope = cache(x, w_dkv, w_kr, positions=pos, rope_base=rope_base,
                         mistake=mistake if mistake == "rope_positions_unused" else None)
    d_c, d_rope = c_kv.shape[-1], k_rope.shape[-1]
    uk = _uk_blocks(w_uk, n_heads, d_c, mistake)                           # (h, dn, d_c)
    d_nope = uk.shape[1]
    q_nope, q_rope = _queries(x, w_q, n_heads, d_nope, pos, rope_base, mistake)
    k_nope = torch.einsum("bsc,hnc->bhsn", c_kv, uk)                       # (1, h, S, dn)
    if mistake == "plotted_no_rope":
        q, k = q_nope, k_nope
    else:
        k = torch.cat([k_nope, k_rope[:, None].expand(1, n_heads, s, d_rope)], dim=-1)
        q = torch.cat([q_nope, q_rope], dim=-1)
    scale = _scale(d_nope, d_rope, d_c, mistake)
    eye = torch.eye(s, dtype=torch.float64)
    causal = mistake != "plotted_no_mask"
    return ref.attention(q, k, eye, causal=causal, scale=scale)[0].numpy()
