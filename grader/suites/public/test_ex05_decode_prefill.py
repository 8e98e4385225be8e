"""Public tests for ex05_decode_prefill: small cases, and prefill and decode
measured on the grading machine against its peaks."""
import pytest

from grader.sandbox.runtime import measure
from grader.feedback import TOLERANCES, Feedback, check_close, check_equal
from grader.reference.secret import attention as ref
from grader.reference.secret import roofline as rl
from grader.reference import timing
from grader.reference.ex05_checks import MISTAKES, check_decode_with_cache, randn
from grader.reference.mistakes import looks_like
from grader.reference.roofline_plot import keep_roofline
from grader.sandbox.runtime.codec import Func

pytestmark = [pytest.mark.exercise("ex05_decode_prefill"),
              pytest.mark.usefixtures("machine_peaks")]   # measured before the first test

ATOL, RTOL = TOLERANCES["float32"]


FLOPS_MISTAKES = ["flops_half", "flops_double", "causal_half", "causal_ignored",
                  "causal_no_diagonal", "causal_top_left", "causal_not_clamped"]
BYTES_MISTAKES = ["bytes_no_output", "bytes_per_elem_fixed_2", "bytes_double", "bytes_half",
                  "bytes_per_elem_ignored", "bytes_kv_all_heads"]


@pytest.mark.points(1)
def test_attention_flops_small(student):
    """attention_flops of a 4x4 and a 2x5 score matrix, full and causal"""
    # 2 queries over 5 keys: with a square matrix the end-aligned causal pairs
    # and the top-left ones are the same count.
    for args in ((1, 1, 4, 4, 2), (1, 1, 2, 5, 2)):
        for causal in (False, True):
            check_equal(student.attention_flops(*args, causal=causal),
                        rl.attention_flops(*args, causal=causal),
                        what=f"attention_flops({', '.join(map(str, args))}, causal={causal})",
                        mistakes=rl.mistakes_of(rl.attention_flops, FLOPS_MISTAKES, *args,
                                                causal=causal))


@pytest.mark.points(1)
def test_attention_bytes_small(student):
    """attention_bytes of one MHA head, and of decode with 4 query heads over 2 KV heads"""
    # One MHA head of 4x4 cannot tell a forgotten V (K and V are both read) from
    # a forgotten output write, nor n_heads from n_kv_heads, nor 2 bytes per
    # element from bytes_per_elem: decode with GQA in fp32 tells them apart.
    # Judged as one row, so that each mistake is named by the case that tells it.
    cases = ((1, 1, 1, 4, 4, 2), (1, 4, 2, 1, 8, 4, 4))
    got = tuple(student.attention_bytes(*args) for args in cases)
    want = tuple(rl.attention_bytes(*args) for args in cases)
    mistakes = {rl.MISTAKES[name]: tuple(rl.attention_bytes(*args, mistake=name)
                                         for args in cases) for name in BYTES_MISTAKES}
    check_equal(got, want, what=f"(attention_bytes{cases[0]}, attention_bytes{cases[1]})",
                mistakes=mistakes)


@pytest.mark.points(1)
def test_prefill_attention_small(student):
    """prefill_attention on a small causal case"""
    q, k, v = (randn(s, 1, 2, 6, 4) for s in (1, 2, 3))
    check_close(student.prefill_attention(q, k, v), ref.attention(q, k, v, causal=True),
                what="prefill_attention(q, k, v)", atol=ATOL, rtol=RTOL,
                mistakes=rl.attention_mistakes(["no_scale", "scale_by_d", "softmax_over_queries",
                                                "no_mask", "diagonal_masked", "top_left_mask"],
                                               q, k, v, causal=True))


@pytest.mark.points(1)
def test_decode_attention_small(student):
    """decode_attention: one query sees the whole cache"""
    q, k, v = randn(4, 1, 2, 1, 4), randn(5, 1, 2, 7, 4), randn(6, 1, 2, 7, 4)
    check_close(student.decode_attention(q, k, v), ref.attention(q, k, v, causal=True),
                what="decode_attention(q, k_cache, v_cache)", atol=ATOL, rtol=RTOL,
                mistakes=rl.attention_mistakes(["top_left_mask", "mask_wrong_triangle",
                                                "no_scale", "scale_by_d"], q, k, v,
                                               causal=True))


@pytest.mark.points(1)
def test_achieved_of_a_slow_function(student):
    """achieved() of a function that sleeps 50 ms"""
    for _ in range(timing.SLEEP_TRIES):
        got = student.achieved(Func("probe:common.sleep", 0.05), [], 2e12, 3e9)
        check_achieved(got, 2e12, 3e9, "achieved(f, [], flops=2e12, nbytes=3e9)")
        if got["seconds"] < 0.049:
            raise Feedback(f"achieved(...) measured {got['seconds']:.4g} s for a function "
                           "that sleeps 0.05 s: the clock must enclose the call, in seconds")
        if got["seconds"] <= 0.2:
            return
    pytest.skip(f"not graded: machine too noisy (a 50 ms sleep measured {got['seconds']:.3g} s)")


def check_achieved(got, flops, nbytes, what):
    """The three numbers must agree with each other, in decimal units."""
    if not isinstance(got, dict) or not {"seconds", "tflops", "gbps"} <= set(got):
        raise Feedback(f"{what} must return a dict with keys 'seconds', 'tflops' and 'gbps'; "
                       f"got {got!r:.200}")
    s = got["seconds"]
    bad = timing.time_feedback(s, f"{what}['seconds']")
    if bad:  # an infinite time would pass as 0 TFLOP/s and end as "too noisy"
        raise Feedback(bad)
    check_close(got["tflops"], flops / s / 1e12, what=f"{what}['tflops'] (for its "
                f"{s:.4g} seconds)", atol=0, rtol=1e-6,
                mistakes={MISTAKES["gflops"]: flops / s / 1e9,
                          MISTAKES["tflops_binary"]: flops / s / 2**40,
                          MISTAKES["flops_per_s"]: flops / s})
    check_close(got["gbps"], nbytes / s / 1e9, what=f"{what}['gbps'] (for its {s:.4g} "
                "seconds)", atol=0, rtol=1e-6,
                mistakes={MISTAKES["mbps"]: nbytes / s / 1e6,
                          MISTAKES["gbps_binary"]: nbytes / s / 2**30,
                          MISTAKES["bytes_per_s"]: nbytes / s})


BOUND_HINT = ("The ridge point is peak_flops / peak_bytes_per_s (FLOPs per byte); an intensity "
              "at or above it is compute-bound, below it memory-bound.")


BOUND_CASES = (100.0, 1.0, 10.0, 0.05)   # around a ridge point of 10 FLOPs per byte


@pytest.mark.points(1)
def test_bound_simple(student):
    """bound() on either side of the ridge point, and exactly at it"""
    # Judged as one table: each known mistake gives its own column of verdicts
    # (an inverted ridge point of 0.1, a strict >, compute and memory swapped).
    peaks = (1e12, 1e11)
    got = tuple(student.bound(i, *peaks) for i in BOUND_CASES)
    want = tuple(rl.bound(i, *peaks) for i in BOUND_CASES)
    mistakes = {rl.MISTAKES[name]: tuple(rl.bound(i, *peaks, mistake=name) for i in BOUND_CASES)
                for name in ("bound_inverted_ridge", "bound_strict", "bound_swapped")}
    check_equal(got, want, what=f"bound(intensity, 1e12, 1e11) for intensity in {BOUND_CASES}",
                mistakes=mistakes, hint=BOUND_HINT)


@pytest.mark.points(1)
def test_decode_with_cache_small(student):
    """decode_with_cache's output and caches on a small case (2 heads, 1 KV head)"""
    check_decode_with_cache(student, seed=7, b=1, s=5, d=8, h=2, h_kv=1, d_head=4)


@pytest.mark.points(1)
def test_decode_with_cache_groups_query_heads(student):
    """decode_with_cache with 4 query heads sharing 2 KV heads: heads 0, 1 read KV head 0"""
    # With one KV head every grouping is the same: two tell repeat_interleave's
    # (0, 0, 1, 1) from tile's (0, 1, 0, 1), a common mistake (.repeat).
    check_decode_with_cache(student, seed=11, b=1, s=5, d=8, h=4, h_kv=2, d_head=4)


# -- measured on this machine ---------------------------------------------------

def roofline_shapes(device):
    """Prefill at a long context and decode against a long cache, per device.

    CPU (fp32, one thread): prefill S=512 with 8 heads of 64 is 0.27 GFLOP
    (tens of ms; intensity ~64 FLOP/byte, far above a CPU's ridge point of a
    few); decode reads a 32 MiB cache, past most L2 caches.  GPU
    (fp16): prefill S=4096 with 32 heads of 128, decode with a 1 GiB cache."""
    if device == "cuda":
        return (1, 32, 4096, 128), (8, 32, 8192, 128), "float16", 2
    return (1, 8, 512, 64), (1, 8, 8192, 64), "float32", 4


def roofline_counts(prefill_shape, decode_shape, bpe):
    b, h, s, d = prefill_shape
    pf = (rl.attention_flops(b, h, s, s, d, causal=True),
          rl.attention_bytes(b, h, h, s, s, d, bpe))
    b, h, s, d = decode_shape
    dc = (rl.attention_flops(b, h, 1, s, d), rl.attention_bytes(b, h, h, 1, s, d, bpe))
    return pf, dc


def side_of_ridge(intensity, peaks) -> str:
    """The chapter's roofline verdict on measured peaks (BOUND_HINT's rule),
    computed here: measured peaks are new in every run, so no answer recorded
    at release could be replayed for them in the student edition."""
    return "compute" if intensity >= peaks.flops / peaks.bytes_per_s else "memory"


def roofline_peaks(device, machine, peaks):
    """This machine's peaks, between decode's and prefill's intensities (measured
    once more when a burst put them outside), with the shapes and counts."""
    pshape, dshape, dtype, bpe = roofline_shapes(device)
    # Both devices' counts, whichever runs: the release (on either) records
    # them all, so the student edition replays them on a CPU and on a GPU.
    counts = {}
    for dev in ("cpu", "cuda"):
        p_shape, d_shape, _, dev_bpe = roofline_shapes(dev)
        counts[dev] = roofline_counts(p_shape, d_shape, dev_bpe)
    (pf, pb), (df, db) = counts["cuda" if device == "cuda" else "cpu"]
    i_pre, i_dec = pf / pb, df / db
    if side_of_ridge(i_pre, peaks) != "compute" or side_of_ridge(i_dec, peaks) != "memory":
        peaks = measure.machine_peaks(device)      # one re-measure: a burst may have hit it
        machine[measure.PEAKS_KEY] = peaks
        if side_of_ridge(i_pre, peaks) != "compute" or \
                side_of_ridge(i_dec, peaks) != "memory":
            pytest.skip(f"not graded: machine too noisy (measured ridge point "
                        f"{peaks.ridge:.3g} FLOP/byte is not between decode's {i_dec:.3g} "
                        f"and prefill's {i_pre:.3g})")
    return peaks, (pshape, dshape, dtype), ((pf, pb), (df, db)), (i_pre, i_dec)


@pytest.mark.points(1)
def test_prefill_compute_bound_decode_memory_bound(student, machine, machine_peaks):
    """bound() on this machine's peaks: prefill is compute-bound, decode memory-bound"""
    device = measure.default_device()
    peaks, _, _, (i_pre, i_dec) = roofline_peaks(device, machine, machine_peaks)
    for name, intensity, want in (("prefill", i_pre, "compute"), ("decode", i_dec, "memory")):
        args = (intensity, peaks.flops, peaks.bytes_per_s)
        check_equal(student.bound(*args), want,
                    what=f"bound({intensity:.4g}, {peaks.flops:.4g}, {peaks.bytes_per_s:.4g}) "
                         f"for {name} on this machine",
                    hint=BOUND_HINT)


@pytest.mark.points(1)
@pytest.mark.timeout_s(120)
def test_roofline_achieved_on_this_machine(student, request, machine, machine_peaks,
                                           artifacts_dir):
    """achieved() of prefill and decode run on this machine: consistent, within its peaks"""
    device = measure.default_device()
    peaks, (pshape, dshape, dtype), ((pf, pb), (df, db)), (i_pre, i_dec) = roofline_peaks(
        device, machine, machine_peaks)
    run = student.probe("ex05_decode_prefill.roofline_run", device, list(pshape), list(dshape),
                        dtype, [pf, pb], [df, db])
    if "bad_result" in run:
        raise Feedback(f"achieved(...) must return a dict, got a {run['bad_result']}")
    for name, (flops, nbytes) in (("prefill", (pf, pb)), ("decode", (df, db))):
        check_achieved(run[name], flops, nbytes, f"achieved({name}_attention, ...)")
        if run[name]["tflops"] * 1e12 > 3 * peaks.flops and \
                run[name]["tflops"] * 1e12 > 3 * measure.machine_peaks(device).flops:
            # (measured again first: a burst during the first probe would lower the roof)
            raise Feedback(f"achieved({name}_attention, ...) reports "
                           f"{run[name]['tflops']:.3g} TFLOP/s, more than 3x this machine's "
                           f"matmul peak ({peaks.flops / 1e12:.3g} TFLOP/s): the clock stopped "
                           "before the work was done.\n"
                           + looks_like(timing.MISTAKES["no_sync"],
                                        " (or without the call inside the clock)"))
    request.node.feedback_on_pass = (
        roofline_table(run, peaks, (pshape, dshape, dtype), (i_pre, i_dec)) + "\n"
        + keep_roofline(artifacts_dir, peaks, run, (i_pre, i_dec)))


def roofline_table(run, peaks, shapes, intensities) -> str:
    pshape, dshape, dtype = shapes
    lines = [f"{'':8}{'shape (B, h, S, d_head)':>24}  {'time':>9}  {'TFLOP/s':>9}  "
             f"{'% peak':>6}  {'GB/s':>8}  {'% peak':>6}  {'FLOP/B':>7}  bound",
             ]
    over = []      # the calls whose GB/s beat the copy peak
    for name, shape, inten in (("prefill", pshape, intensities[0]),
                               ("decode", dshape, intensities[1])):
        r = run[name]
        share = 100 * r['gbps'] * 1e9 / peaks.bytes_per_s
        if share > 100:
            over.append(name)
        lines.append(f"{name:8}{str(tuple(shape)):>24}  {r['seconds'] * 1e3:>7.3g}ms  "
                     f"{r['tflops']:>9.3g}  {100 * r['tflops'] * 1e12 / peaks.flops:>5.0f}%  "
                     f"{r['gbps']:>8.3g}  {share:>5.0f}%  "
                     f"{inten:>7.3g}  {side_of_ridge(inten, peaks)}")
    lines.append(f"peaks ({dtype}): {peaks}")
    lines.append("Prefill's intensity is far above the ridge point, so only its FLOP/s can "
                 "approach a peak; decode's is below it, so its GB/s is what to watch.")
    if over:
        # A share above 100 % is not an error in the student's timing: the copy
        # peak is measured on a buffer larger than the caches, and a smaller
        # working set is read (partly) from cache, faster than main memory.
        one = len(over) == 1
        lines.append(f"{' and '.join(over).capitalize()} beat{'s' if one else ''} the copy "
                     f"peak: {'its' if one else 'their'} data fits (partly) in this "
                     "machine's caches, which are faster than the main memory the peak was "
                     "measured on.")
    return "\n".join(lines)
