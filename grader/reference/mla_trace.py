"""Judging an op-level trace of ex08's ``mla_decode`` (from ``probes/ex08_mla.py``).

Judging code, not an answer: it ships with the student edition, where the
public suite reads the trace of the student's own calls.  The ideal counts
it compares with come in as arguments (from ``grader.reference.secret.mla``).

The intensity is measured per cached token: two calls whose caches differ by
``dS`` tokens, same weights and new token.  The difference of their FLOPs and
bytes is what the context adds, without the projections (``w_q``, ``w_uk``,
``w_uv``, ``w_o``), which cost the same at any length.
"""
from __future__ import annotations

from grader.feedback import Feedback
from grader.reference.traces import materialized, read_bytes

# An unfused decode reads more than the one-pass ideal: the latent a second
# time (scores, then the weighted sum), and the (B, h) scores of each cached
# token in a few round trips (the two score parts added, scaled, softmaxed,
# read by the weighted sum).  A copy of the latent per head costs h times the
# latent and is far outside this allowance.
EXTRA_LATENT_READS = 2
EXTRA_SCORE_TRIPS = 16
FLOPS_SLACK = 0.25     # e.g. a weighted sum over [c_kv, k_rope] then sliced


def per_head_kv(ops, *, batch, n_heads, seq_len, d_c, d_rope, d_nope, d_v) -> str | None:
    """A sentence naming the first tensor holding a vector per head AND per
    cached token (a rebuilt K or V, or the latent copied per head), or None."""
    big = materialized(ops, batch * n_heads * seq_len * min(d_nope, d_v, d_c))
    for op in big:
        shape = op["out_shapes"][0] if op["out_shapes"] else []
        width = shape[-1] if shape else 0
        if width in (n_heads * d_nope, n_heads * (d_nope + d_rope)):
            width //= n_heads            # (B, S, h*d_nope): all heads' K side by side
        elif width == n_heads * d_v:
            width = d_v
        kind = {d_nope: "per-head K (d_nope wide)", d_nope + d_rope: "per-head K",
                d_v: "per-head V (d_v wide)", d_c: "the latent copied for every head",
                d_c + d_rope: "the latent and RoPE key copied for every head"}.get(
            width, "a tensor with a vector per head and cached token")
        return f"{op['op']} made {shape} ({kind})"
    return None


def judge_decode(traces, *, batch, n_heads, d, d_c, d_rope, d_nope, d_v, ideal, rebuilt,
                 names) -> dict:
    """Judge ``{str(S): trace}`` of ``mla_decode``.  ``ideal``: the reference's
    ``decode_core_per_token``; ``rebuilt``: its ``rebuilt_kv_per_token``;
    ``names``: ``{mistake id: feedback text}``.  Raises ``Feedback``; returns
    the per-token figures for the report."""
    lens = sorted(int(s) for s in traces)
    shape_text = (f"B={batch}, h={n_heads}, d_c={d_c}, d_rope={d_rope}, d_nope={d_nope}, "
                  f"d_v={d_v}")
    for s in lens:
        t = traces[str(s)]
        if t.get("out_shape") != [batch, 1, d]:
            raise Feedback(f"mla_decode with a cache of S={s} tokens ({shape_text}) returned "
                           f"shape {t.get('out_shape')}; expected {[batch, 1, d]}")
        if t.get("truncated"):
            raise Feedback(f"mla_decode ran more than the traceable number of operations at "
                           f"S={s}: loop over heads or tokens with whole-tensor operations")
        found = per_head_kv(t["ops"], batch=batch, n_heads=n_heads, seq_len=s, d_c=d_c,
                            d_rope=d_rope, d_nope=d_nope, d_v=d_v)
        if found:
            name = "latent_per_head" if "latent" in found else "cache_rebuilt_kv"
            raise Feedback(f"with a cache of S={s} tokens ({shape_text}), your mla_decode "
                           f"built a tensor per head and cached token: {found}.\n"
                           f"This looks like: {names[name]}.")
    s1, s2 = lens[0], lens[-1]
    t1, t2 = traces[str(s1)], traces[str(s2)]
    ds = s2 - s1
    flops = (t2["flops"] - t1["flops"]) / ds
    r1, r2 = read_bytes(t1["ops"]), read_bytes(t2["ops"])
    per_token = {k: (r2[k] - r1[k]) / ds for k in r1}
    lo, hi = min(per_token.values()), max(per_token.values())
    where = f"(from two calls of mla_decode, S={s1} and S={s2}, {shape_text})"
    if abs(flops - (ideal["flops"] + rebuilt["flops"])) <= 0.02 * rebuilt["flops"] or \
            flops > (1 + FLOPS_SLACK) * ideal["flops"] + 0.5 * rebuilt["flops"]:
        raise Feedback(f"each cached token costs your mla_decode {flops:,.0f} FLOPs in matrix "
                       f"multiplies {where}; the absorbed decode needs "
                       f"2*B*h*(2*d_c + d_rope) = {ideal['flops']:,}, and rebuilding the "
                       f"token's K and V for every head adds {rebuilt['flops']:,}.\n"
                       f"This looks like: {names['cache_rebuilt_kv']}.")
    if not ideal["flops"] * (1 - 1e-9) <= flops <= (1 + FLOPS_SLACK) * ideal["flops"]:
        raise Feedback(f"each cached token costs your mla_decode {flops:,.0f} FLOPs in matrix "
                       f"multiplies {where}; the absorbed decode needs 2*(d_c + d_rope) per "
                       f"head for the score and 2*d_c for the weighted sum over c_kv: "
                       f"{ideal['flops']:,} in all. Compute both with matrix multiplies "
                       f"(@, einsum, bmm) against the caches as they are.")
    allowed = (1 + EXTRA_LATENT_READS) * ideal["cache_bytes"] + \
        EXTRA_SCORE_TRIPS * ideal["score_bytes"]
    readings = ", ".join(f"{v:,.0f} ({k})" for k, v in per_token.items())
    if lo < ideal["cache_bytes"] * (1 - 1e-9):
        raise Feedback(f"each cached token adds only {lo:,.0f} bytes of reads to your "
                       f"mla_decode {where}, less than its cache entry "
                       f"({ideal['cache_bytes']:,} bytes), which a decode step must read")
    if lo > allowed:
        hint = ""
        if lo >= n_heads * ideal["latent_bytes"] > allowed:
            hint = f"\nThis looks like: {names['latent_per_head']}."
        raise Feedback(f"each cached token adds {readings} bytes of reads to your mla_decode "
                       f"{where}. Its cache entry is {ideal['cache_bytes']:,} bytes; an "
                       f"unfused decode may read the latent again for the weighted sum and "
                       f"move the B*h scores ({ideal['score_bytes']:,} bytes) a few times, up "
                       f"to {allowed:,.0f} bytes in all. Every head must read the same cached "
                       f"latent, not a copy of it (a copy for a dtype conversion or a "
                       f"torch.cat of the caches is read too).{hint}")
    return {"flops": flops, "bytes_lo": lo, "bytes_hi": hi, "intensity_lo": flops / hi,
            "intensity_hi": flops / lo, "readings": per_token, "lens": (s1, s2)}


def gap_text(result, ideal, *, bytes_per_elem) -> str:
    """Why the measured intensity sits below the formula's, in numbers."""
    cache, latent, score = ideal["cache_bytes"], ideal["latent_bytes"], ideal["score_bytes"]
    extra = result["bytes_hi"] - cache
    latent_part = min(extra, latent)
    trips = (extra - latent_part) / score
    return (f"Each cached token: {result['flops']:,.0f} FLOPs (the ideal, exactly) and "
            f"{result['bytes_lo']:,.0f}..{result['bytes_hi']:,.0f} bytes read, where the "
            f"formula counts its cache entry once ({cache:,} bytes at {bytes_per_elem} bytes "
            f"per element). The gap: the weighted sum reads the latent a second time "
            f"(+{latent:,} bytes, the scores needed it first), and the B*h scores are "
            f"written and read back about {trips:.1f} times ({score:,} bytes each: the two "
            f"score parts added, scaled, softmaxed, then read by the weighted sum). A fused "
            f"kernel reads the cache once and keeps the scores on chip, which is the "
            f"intensity the formula gives.")
