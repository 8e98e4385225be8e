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
from grader.reference.mistakes import looks_like
from grader.reference.traces import materialized, read_bytes

# An unfused decode reads more than the one-pass ideal: the latent a second
# time (scores, then the weighted sum), and the (B, h) scores of each cached
# token in a few round trips (the two score parts added, scaled, softmaxed,
# read by the weighted sum).  A copy of the latent per head costs h times the
# latent and is far outside this allowance.
EXTRA_LATENT_READS = 2
EXTRA_SCORE_TRIPS = 16
FLOPS_SLACK = 0.25     # e.g. a weighted sum over [c_kv, k_rope] then sliced


CACHE = ("c_kv", "k_rope")
CACHE_NAMES = {"c_kv": "the latent", "k_rope": "the RoPE key"}
UP_PROJECTIONS = {"w_uk": "K", "w_uv": "V"}


def per_head_kv(ops, *, batch, n_heads, seq_len, d_c, d_rope, d_nope, d_v):
    """``(mistake id, sentence)`` for the first tensor that rebuilds K or V for
    the cached tokens or copies the cache for every head, or None.

    Judged from each op's provenance (``src``: the inputs its output derives
    from), never from its shape alone:

    * the latent through an up-projection without the new token (``c_kv`` and
      ``w_uk`` or ``w_uv``, no ``x_t``), one value or more per cached token: a
      rebuilt K or V (``cache_rebuilt_kv``);
    * the cache alone, at least twice the elements it derives from: the cache
      copied for every head (``latent_per_head``);
    * anything else from the latent holding a vector per head and cached
      token (an elementwise product of every head's query with the latent).

    Library copies (``library_copy``) are skipped: inside one matmul, einsum or
    bmm, PyTorch copies an operand the student broadcast over the heads (one
    latent shared by every head, a stride-0 head axis) to run the broadcast
    batched matmul as one bmm.  That is the reference's bmm by another road,
    and a fused GPU kernel would not make the copy.  A copy the student makes
    (``expand(...).contiguous()``, ``repeat``, ``repeat_interleave``) is no
    library copy."""
    entry = {"c_kv": batch * seq_len * d_c, "k_rope": batch * seq_len * d_rope}
    for op in materialized(ops, batch * seq_len):
        if op["library_copy"]:
            continue
        src, numel = set(op["src"]), max(op["out_numel"])
        made = f"{op['op']} made {op['out_shapes'][0]}"
        ups = [w for w in UP_PROJECTIONS if w in src]
        if "c_kv" in src and ups and "x_t" not in src:
            what = " and ".join(UP_PROJECTIONS[w] for w in ups)
            through = " and ".join(ups)
            return "cache_rebuilt_kv", (f"{made} from c_kv through {through}, without the new "
                                        f"token: per-head {what} of the cached tokens")
        cached = [n for n in CACHE if n in src]
        if cached and src <= set(CACHE) and numel >= 2 * sum(entry[n] for n in cached):
            what = " and ".join(CACHE_NAMES[n] for n in cached)
            return "latent_per_head", (f"{made} from {' and '.join(cached)} alone, "
                                       f"{numel / sum(entry[n] for n in cached):.0f} times their "
                                       f"size: {what} copied for every head")
        if "c_kv" in src and numel >= batch * n_heads * seq_len * min(d_nope, d_v, d_c):
            return "latent_per_head", (f"{made} from {', '.join(sorted(src))}: a tensor with a "
                                       f"vector per head and cached token")
    return None


def student_reads(ops) -> dict:
    """``read_bytes`` of the ops the student's code asked for: a library copy
    (see ``per_head_kv``) and its reshape are left out, and the bmm that reads
    it counts what it copies once (``reads``), as the reference's bmm reads
    the latent once for all heads."""
    return read_bytes([dict(o, read=sum(n for _, n in o["reads"])) for o in ops
                       if not o["library_copy"]])


def cache_reads(ops) -> int:
    """Bytes read from tensors holding the cache alone (the caches, their
    views and copies) by the student's ops that allocate."""
    return sum(n for o in ops if not (o["library_copy"] or o["is_view"] or o["aliases"])
               for src, n in o["reads"] if src and set(src) <= set(CACHE))


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
            name, what = found
            raise Feedback(f"with a cache of S={s} tokens ({shape_text}), your mla_decode "
                           f"built a tensor per head and cached token: {what}.\n"
                           + looks_like(names[name]))
    s1, s2 = lens[0], lens[-1]
    t1, t2 = traces[str(s1)], traces[str(s2)]
    ds = s2 - s1
    flops = (t2["flops"] - t1["flops"]) / ds
    r1, r2 = student_reads(t1["ops"]), student_reads(t2["ops"])
    per_token = {k: (r2[k] - r1[k]) / ds for k in r1}
    lo, hi = min(per_token.values()), max(per_token.values())
    where = f"(from two calls of mla_decode, S={s1} and S={s2}, {shape_text})"
    if abs(flops - (ideal["flops"] + rebuilt["flops"])) <= 0.02 * rebuilt["flops"] or \
            flops > (1 + FLOPS_SLACK) * ideal["flops"] + 0.5 * rebuilt["flops"]:
        raise Feedback(f"each cached token costs your mla_decode {flops:,.0f} FLOPs in matrix "
                       f"multiplies {where}; the absorbed decode needs "
                       f"2*B*h*(2*d_c + d_rope) = {ideal['flops']:,}, and rebuilding the "
                       f"token's K and V for every head adds {rebuilt['flops']:,}.\n"
                       + looks_like(names['cache_rebuilt_kv']))
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
        # Named from what the reads come from: the latent read once per head
        # (a loop over the heads) is more than an unfused decode reads.
        from_cache = (cache_reads(t2["ops"]) - cache_reads(t1["ops"])) / ds
        hint = ""
        if from_cache >= n_heads * ideal["latent_bytes"] and \
                from_cache > (1 + EXTRA_LATENT_READS) * ideal["cache_bytes"]:
            hint = (f"\nOf these, {from_cache:,.0f} bytes are read from the cache: its "
                    f"entry {from_cache / ideal['cache_bytes']:.1f} times, where an unfused "
                    f"decode reads it at most {1 + EXTRA_LATENT_READS} times.\n"
                    + looks_like(names['latent_per_head']))
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
