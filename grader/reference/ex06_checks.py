"""Checks that exercise F's public and hidden suites share (shipped with the
public suite): seeded decode inputs, grouped decode against the reference,
a student's counted FLOPs, bytes and intensities against the grader's
count of the same call, and a trace's K/V never repeated per query head."""
import torch

from grader.feedback import TOLERANCES, Feedback, check_close, check_equal
from grader.reference.secret import attention as ref
from grader.reference.mistakes import looks_like
from grader.reference.secret import roofline as rl

ATOL, RTOL = TOLERANCES["float32"]
# The measuring slips named here (the counting slips are roofline.MISTAKES).
MISTAKES = {
    "bytes_from_formula": "the bytes came from the formula (attention_bytes), not from "
                          "counting what gqa_decode_attention executes",
    "intensity_from_formula": "the intensity came from the formula (decode_intensity), not "
                              "from counting",
    # with the lengths it mixed up after it: ": the value listed under h_kv=..."
    "wrong_grouping": "the wrong grouping",
    # with what to do instead after it: ". Reshape q ..."
    "kv_repeated": "repeat_interleave (or expand(...).reshape/contiguous) of the cache",
    "q_shape_unchecked": "the shape of q was not checked (decode has one query position)",
    "calls_counted": "more than one call was counted: a warm-up (or a second run) inside "
                     "FlopCounterMode and ReadBytes adds its FLOPs and bytes too (warm up "
                     "before entering the counters, then count one call)",
    "measured_fp32": "the measurement ran in float32 (torch.randn's default), not fp16: "
                     "each element read counts 4 bytes instead of 2, so the intensity comes "
                     "out halved (make q and the caches with dtype=torch.float16)",
}
# decode_intensity's counting slips (roofline.MISTAKES), tried by both suites.
INTENSITY_MISTAKES = ["flops_half", "flops_double", "bytes_kv_all_heads", "intensity_float_bytes",
                      "intensity_no_q_o", "bytes_half", "bytes_no_output", "flops_kv_heads"]
# A student's byte count may differ from each of the grader's readings of
# "a view reads nothing" by rounding-level details (a scalar tensor, say).
BYTES_SLACK = 0.03


def decode_inputs(seed, b, h, h_kv, s, d, dtype=torch.float32):
    """Seeded ``(q, k_cache, v_cache)`` of one decode step."""
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(b, h, 1, d, generator=g, dtype=dtype)
    k = torch.randn(b, h_kv, s, d, generator=g, dtype=dtype)
    v = torch.randn(b, h_kv, s, d, generator=g, dtype=dtype)
    return q, k, v


def check_gqa_decode(student, q, k, v):
    """``student.gqa_decode_attention`` against the grouped reference."""
    h, h_kv = q.shape[1], k.shape[1]
    mistakes = {}
    for name in ("kv_tile", "kv_tile_heads_regrouped", "no_scale", "softmax_over_queries",
                 "softmax_over_group"):
        words = rl.MISTAKES.get(name) or ref.MISTAKES[name]
        mistakes[words] = rl.grouped(q, k, v, causal=True, mistake=name)
    check_close(student.gqa_decode_attention(q, k, v), rl.grouped(q, k, v, causal=True),
                what=f"gqa_decode_attention(q {tuple(q.shape)}, caches {tuple(k.shape)})",
                atol=ATOL, rtol=RTOL,
                mistakes={d: w for d, w in mistakes.items() if h != h_kv or "tile" not in d})


def judge_counts(student_row, trace, *, batch, n_heads, n_kv_heads, seq_len, d_head,
                 what) -> str:
    """Hold a student's measured counts to the grader's count of the same call.
    Returns a one-line summary; raises Feedback on a mismatch."""
    if "bad_result" in student_row:
        raise Feedback(f"{what} must return a dict with 'flops', 'bytes' and 'intensity'; got "
                       f"a {student_row['bad_result']}")
    missing = [k for k in ("flops", "bytes", "intensity") if student_row.get(k) is None]
    if missing:
        raise Feedback(f"{what} must return numbers under 'flops', 'bytes' and 'intensity'; "
                       f"missing or not a number: {', '.join(missing)}")
    flops, nbytes, inten = student_row["flops"], student_row["bytes"], student_row["intensity"]
    ideal_flops = rl.attention_flops(batch, n_heads, 1, seq_len, d_head)
    kv_bytes = 2 * batch * n_kv_heads * seq_len * d_head * 2
    counted = rl.read_bytes(trace["ops"])
    lo, hi = min(counted.values()), max(counted.values())
    formula = rl.attention_bytes(batch, n_heads, n_kv_heads, 1, seq_len, d_head, 2)
    if trace["flops"] != ideal_flops:
        raise Feedback(f"your gqa_decode_attention executed {trace['flops']:,} FLOPs in matrix "
                       f"multiplies (counted by the grader) where one decode step needs "
                       f"4*B*h*S*d_head = {ideal_flops:,}")
    readings = ", ".join(f"{v:,} ({k})" for k, v in counted.items())
    calls = round(flops / trace["flops"]) if trace["flops"] else 0
    if calls >= 2 and flops == calls * trace["flops"] and \
            (1 - BYTES_SLACK) * calls * lo <= nbytes <= (1 + BYTES_SLACK) * calls * hi:
        # FLOPs and bytes both a whole multiple of one call's: calls counted, not a formula
        raise Feedback(f"{what}['flops'] = {flops:,.0f} and ['bytes'] = {nbytes:,.0f} are "
                       f"{calls} times what one call executes (the grader counted "
                       f"{trace['flops']:,} FLOPs and read {readings} in the call measured)."
                       "\n" + looks_like(MISTAKES["calls_counted"], f" ({calls} calls)"))
    check_equal(int(flops), trace["flops"],
                what=f"{what}['flops'] (the grader counted {trace['flops']:,} in the same call)",
                mistakes={rl.MISTAKES["flops_half"]: trace["flops"] // 2,
                          rl.MISTAKES["flops_double"]: trace["flops"] * 2})
    if not (1 - BYTES_SLACK) * lo <= nbytes <= (1 + BYTES_SLACK) * hi:
        hint = ""
        if abs(nbytes - formula) <= 0.005 * formula:
            hint = "\n" + looks_like(MISTAKES["bytes_from_formula"])
        elif nbytes < kv_bytes:
            hint = f"\nThat is less than the K/V cache itself ({kv_bytes:,} bytes)."
        raise Feedback(f"{what}['bytes'] = {nbytes:,.0f}, but the operations of your "
                       f"gqa_decode_attention read {readings} in the same call.{hint}")
    if nbytes < kv_bytes:
        raise Feedback(f"{what}['bytes'] = {nbytes:,.0f} is less than the K and V caches "
                       f"({kv_bytes:,} bytes), which a decode step must read")
    check_close(inten, flops / nbytes, what=f"{what}['intensity'] (flops / bytes)", atol=0,
                rtol=1e-6)
    return (f"flops {flops:,.0f} (= 4*B*h*S*d_head), bytes {nbytes:,.0f} (grader: "
            f"{lo:,}..{hi:,}; formula {formula:,}), intensity {inten:.3g}")


def _counted_as(run, value, exclude):
    """The other h_kv of the table whose counted intensity ``value`` matches, if any."""
    for key, trace in run["traces"].items():
        if int(key) == exclude:
            continue
        counted = rl.read_bytes(trace["ops"])
        lo, hi = trace["flops"] / max(counted.values()), trace["flops"] / min(counted.values())
        if lo / (1 + BYTES_SLACK) <= value <= hi / (1 - BYTES_SLACK):
            return int(key)
    return None


def check_table(run, h, kv_heads, s, d):
    """A probe's ``intensity_table`` run against the grader's count of each
    h_kv's call; returns rows (h_kv, ideal, yours, lo, hi), else Feedback."""
    what = f"intensity_table(n_heads={h}, kv_heads={tuple(kv_heads)}, seq_len={s}, d_head={d})"
    if "bad_result" in run:
        raise Feedback(f"{what} must return a dict {{h_kv: intensity}}; got a "
                       f"{run['bad_result']}")
    table = dict(run["pairs"])
    if sorted(table) != sorted(kv_heads):
        raise Feedback(f"{what} returned intensities for h_kv in {sorted(table)}; expected "
                       f"{sorted(kv_heads)}")
    rows = []
    for h_kv in sorted(kv_heads):
        counted = rl.read_bytes(run["traces"][str(h_kv)]["ops"])
        flops = run["traces"][str(h_kv)]["flops"]
        lo, hi = flops / max(counted.values()), flops / min(counted.values())
        yours = table[h_kv]
        if not (lo / (1 + BYTES_SLACK) <= yours <= hi / (1 - BYTES_SLACK)):
            ideal = rl.decode_intensity(h, h_kv, s, d)
            other = _counted_as(run, yours, exclude=h_kv)
            hint = ("\n" + looks_like(MISTAKES["intensity_from_formula"])
                    if abs(yours - ideal) <= 0.005 * ideal else
                    "\n" + looks_like(MISTAKES["measured_fp32"])
                    if lo / 2 / (1 + BYTES_SLACK) <= yours <= hi / 2 / (1 - BYTES_SLACK) else
                    "\n" + looks_like(MISTAKES["wrong_grouping"],
                                      f": the value listed under h_kv={h_kv} was measured "
                                      f"with {other} KV heads (pass each h_kv itself as "
                                      "n_kv_heads, not the group size n_heads // h_kv)")
                    if other is not None else "")
            raise Feedback(f"{what}[{h_kv}] = {yours:.4g}, but the operations of your "
                           f"gqa_decode_attention at h_kv={h_kv} give {lo:.4g}..{hi:.4g} "
                           f"FLOPs per byte (counted by the grader).{hint}")
        rows.append((h_kv, rl.decode_intensity(h, h_kv, s, d), yours, lo, hi))
    values = [r[2] for r in rows]
    if any(a <= b for a, b in zip(values, values[1:])):
        raise Feedback(f"{what}: the intensity must rise with h / h_kv (fall as h_kv grows); "
                       f"got {dict((r[0], round(r[2], 3)) for r in rows)}")
    return rows


def check_fp16(seen: list, *, what: str) -> None:
    """Feedback when the call of ``gqa_decode_attention`` that ``what`` made
    (``probes.ex06_gqa_intensity.intensity_run``'s ``seen``) was not on fp16
    inputs: the exercise measures fp16, whatever the counts agree on."""
    for call in seen:
        other = sorted({t for t in call.get("dtypes", []) if t != "float16"})
        if other:
            text = (f"{what} ran gqa_decode_attention on {', '.join(other)} inputs; the "
                    "measurement is of fp16 (q and both caches in torch.float16).")
            if other == ["float32"]:
                text += "\n" + looks_like(MISTAKES["measured_fp32"])
            raise Feedback(text)


def check_not_repeated(trace, *, b, h, h_kv, s, d, bytes_per_elem=2):
    """Feedback when the traced ``gqa_decode_attention`` (``probes.
    ex06_gqa_intensity.trace``) saw too little to judge, or allocated K or V
    repeated for every query head (a tensor of ``B*h*S*d_head`` elements)."""
    ops = trace["ops"]
    cache_bytes = 2 * (b * h_kv * s * d) * bytes_per_elem
    seen = sum(o["read"] for o in ops)
    if seen < cache_bytes:
        raise Feedback(
            f"the grader's trace of gqa_decode_attention (B={b}, h={h}, h_kv={h_kv}, S={s}, "
            f"d_head={d}) saw {seen:,} bytes read, less than K and V ({cache_bytes:,} bytes): "
            "the work ran where PyTorch's dispatch cannot see it, so the grader cannot "
            "check that K/V are not repeated. Use ordinary PyTorch ops.")
    big = rl.materialized(ops, b * h * s * d) if h_kv < h else []
    if big:
        names = ", ".join(sorted({o["op"] for o in big}))
        raise Feedback(
            f"with h={h} query heads over h_kv={h_kv} KV heads (B={b}, S={s}, d_head={d}), "
            f"your gqa_decode_attention allocated a tensor of {big[0]['out_numel'][0]:,} "
            f"elements (B*h*S*d_head = {b * h * s * d:,}; op: {names}, shape "
            f"{big[0]['out_shapes'][0]}): K or V repeated for every query head.\n"
            + looks_like(MISTAKES["kv_repeated"], ". Reshape q to (B, h_kv, h/h_kv, d_head) "
                         "instead, so that each K/V head is read once for its whole group"))
