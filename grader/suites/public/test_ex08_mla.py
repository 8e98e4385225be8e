"""Public tests for ex08_mla: the cache, the explicit form, the absorbed decode
(traced: no per-head K/V, and its measured intensity), and the DeepSeek-V3
numbers next to this machine's ridge point."""
import pytest

from grader.feedback import LONG_CHAIN, Feedback, accuracy, check_close, check_equal
from grader.reference.secret import mla as ref
from grader.reference import mla_trace
from grader.reference.ex08_checks import CACHE_BYTES_MISTAKES, INTENSITY_MISTAKES, \
    SAVING_MISTAKES, check_attention, check_decode, mla_inputs

pytestmark = [pytest.mark.exercise("ex08_mla")]
# The precision rule (grader.feedback.accuracy): a float64 input is held to
# what float32 arithmetic reaches, ten times that for this long chain of products.
ATOL_LONG, RTOL_LONG = accuracy("float64", LONG_CHAIN)

# DeepSeek-V3's attention: 61 layers, 128 heads, d_c 512, d_rope 64, d_nope 128, d_v 128.
V3 = dict(n_layers=61, n_heads=128, d_c=512, d_rope=64, d_nope=128, d_v=128)
# The traced decode: widths all different, so a tensor's width says what it holds.
TRACE = dict(batch=2, n_heads=8, d=48, d_c=64, d_rope=8, d_nope=24, d_v=40)


@pytest.mark.points(1)
def test_mla_cache_small(student):
    """mla_cache: the latent, and the shared RoPE key rotated at its position"""
    x, _, w_dkv, _, _, w_kr, _ = mla_inputs(0, 1, 5, 12, 2, 8, 4, 6, 6)
    got = student.mla_cache(x, w_dkv, w_kr)
    if not isinstance(got, (tuple, list)) or len(got) != 2:
        raise Feedback(f"mla_cache must return (c_kv, k_rope); got {type(got).__name__}")
    want = ref.cache(x, w_dkv, w_kr)
    wrong = {n: ref.cache(x, w_dkv, w_kr, mistake=n)
             for n in ("rope_on_latent", "k_rope_unrotated", "rope_positions_unused")}
    what = "mla_cache(x (1, 5, 12), w_dkv (8, 12), w_kr (4, 12))"
    check_close(got[0], want[0], what=what + "[0], the latent c_kv", atol=ATOL_LONG,
                rtol=RTOL_LONG,
                mistakes={ref.MISTAKES["rope_on_latent"]: wrong["rope_on_latent"][0]})
    check_close(got[1], want[1], what=what + "[1], the RoPE key", atol=ATOL_LONG, rtol=RTOL_LONG,
                mistakes={ref.MISTAKES[n]: wrong[n][1]
                          for n in ("k_rope_unrotated", "rope_positions_unused")})


@pytest.mark.points(2)
def test_mla_attention_small(student):
    """mla_attention, the explicit form: 2 heads, d_c 8, d_rope 4"""
    args = mla_inputs(1, 1, 6, 12, 2, 8, 4, 6, 5)
    check_attention(student, args, 2, what="mla_attention(x (1, 6, 12), ..., n_heads=2)",
                    atol=ATOL_LONG, rtol=RTOL_LONG)


@pytest.mark.points(2)
def test_mla_decode_is_the_last_row(student):
    """mla_decode equals the last row of the explicit form"""
    x, w_q, w_dkv, w_uk, w_uv, w_kr, w_o = mla_inputs(2, 2, 7, 12, 3, 8, 4, 6, 5)
    c_kv, k_rope = ref.cache(x, w_dkv, w_kr)
    check_decode(student, x[:, -1:], c_kv, k_rope, w_q, w_uk, w_uv, w_o, 3,
                 what="mla_decode(x_t, c_kv (2, 7, 8), k_rope (2, 7, 4), ..., n_heads=3)",
                 atol=ATOL_LONG, rtol=RTOL_LONG)


@pytest.mark.points(1)
def test_deepseek_v3_constants(student):
    """DEEPSEEK_V3_MLA_BYTES_PER_TOKEN, DEEPSEEK_V3_MHA_OVER_MLA, and mla_cache_saving for GQA-8"""
    for name, want, wrong in [
            ("DEEPSEEK_V3_MLA_BYTES_PER_TOKEN", ref.cache_bytes(61, 512, 64, 1),
             ref.mistakes_of(ref.cache_bytes, CACHE_BYTES_MISTAKES, 61, 512, 64, 1)),
            ("DEEPSEEK_V3_MHA_OVER_MLA", ref.cache_saving(128, 128, 64, 128, 512),
             ref.mistakes_of(ref.cache_saving, SAVING_MISTAKES, 128, 128, 64, 128, 512))]:
        value = getattr(student, name)
        if value is None:
            raise Feedback(f"not implemented yet: {name} is still None")
        if not isinstance(value, (int, float)) or isinstance(value, bool):
            raise Feedback(f"{name} must be a number, got {value!r}")
        check_close(float(value), float(want), what=name, atol=0, rtol=2e-3, mistakes=wrong)
    # the function behind the ratio, for a GQA-8 cache at DeepSeek-V3's widths
    args = (8, 128, 64, 128, 512)
    check_close(float(student.mla_cache_saving(*args)), ref.cache_saving(*args),
                what=f"mla_cache_saving{args}", atol=0, rtol=1e-9,
                mistakes=ref.mistakes_of(ref.cache_saving, SAVING_MISTAKES, *args))


@pytest.mark.points(1)
def test_deepseek_v3_cache_bytes(student):
    """mla_cache_bytes at DeepSeek-V3's shape, S=4096 and 32768, and at 1 byte per element"""
    # Judged as one row: at the bf16 default, a cache counted twice (as a K and
    # a V) and one counted in fp32 give the same number; at bytes_per_elem=1
    # they do not.
    v = V3
    cases = [(v["n_layers"], v["d_c"], v["d_rope"], s) for s in (4096, 32768)]
    cases.append((v["n_layers"], v["d_c"], v["d_rope"], 4096, 1, 1))
    got = tuple(student.mla_cache_bytes(*args) for args in cases)
    want = tuple(ref.cache_bytes(*args) for args in cases)
    mistakes = {ref.MISTAKES[name]: tuple(ref.cache_bytes(*args, mistake=name) for args in cases)
                for name in CACHE_BYTES_MISTAKES}
    check_equal(got, want, what="(mla_cache_bytes(61, 512, 64, 4096), "
                "mla_cache_bytes(61, 512, 64, 32768), mla_cache_bytes(61, 512, 64, 4096, "
                "batch=1, bytes_per_elem=1))", mistakes=mistakes)


def check_intensity_at(student, s):
    """The student's decode intensity at DeepSeek-V3's shape, checked."""
    v = V3
    args = (v["n_heads"], s, v["d_c"], v["d_rope"])
    check_close(student.mla_decode_intensity(*args), ref.decode_intensity(*args),
                what=f"mla_decode_intensity{args}", atol=0, rtol=1e-9,
                mistakes=ref.mistakes_of(ref.decode_intensity, INTENSITY_MISTAKES, *args))


@pytest.mark.points(1)
def test_deepseek_v3_intensity_table(student, machine_peaks, request):
    """mla_decode_intensity at DeepSeek-V3's shape, S=4096 and 32768 (shown against this ridge)"""
    v = V3
    lens = (4096, 32768)
    for s in lens:
        check_intensity_at(student, s)
    peaks = machine_peaks
    d_qk = v["d_nope"] + v["d_rope"]
    rows = []
    for label, h_kv in (("MHA", 128), ("GQA-8", 8), ("MQA", 1)):
        rows.append((label, ref.kv_bytes_per_token(v["n_layers"], h_kv, d_qk, v["d_v"]),
                     [ref.kv_decode_intensity(v["n_heads"], h_kv, s, d_qk, v["d_v"])
                      for s in lens]))
    # the cache's bytes are the grader's: test_deepseek_v3_cache_bytes grades yours
    rows.append(("MLA", int(ref.cache_bytes(v["n_layers"], v["d_c"], v["d_rope"], 1)),
                 [float(student.mla_decode_intensity(v["n_heads"], s, v["d_c"], v["d_rope"]))
                  for s in lens]))
    ridge = peaks.ridge
    lines = [f"DeepSeek-V3-shaped attention (61 layers, 128 heads, K {d_qk} wide, V 128; "
             f"MLA: d_c 512 + d_rope 64), bf16 cache:",
             f"{'design':<7} {'cache/token':>12} {'vs MLA':>7} "
             f"{'intensity S=4096':>17} {'S=32768':>8}   (FLOP/byte of decode attention)"]
    mla_bytes = rows[-1][1]
    for label, nbytes, inten in rows:
        marks = ["compute" if x >= ridge else "memory" for x in inten]
        lines.append(f"{label:<7} {nbytes / 1e3:>9,.1f} kB {nbytes / mla_bytes:>6.1f}x "
                     f"{inten[0]:>9.1f} {marks[0]:>7} {inten[1]:>8.1f} {marks[1]}")
    lines.append(f"This machine's ridge point: {ridge:.1f} FLOP/byte (measured: "
                 f"{peaks.flops / 1e9:.1f} GFLOP/s matmul over {peaks.bytes_per_s / 1e9:.1f} "
                 f"GB/s copy, {peaks.device}); an H100's is about 295 (989 TFLOP/s bf16 over "
                 f"3.35 TB/s). GQA decode's intensity stays near the group size h / h_kv; "
                 f"MLA's grows with the 128 heads that share one latent.")
    request.node.feedback_on_pass = "\n".join(lines)


@pytest.mark.points(2)
@pytest.mark.timeout_s(120)
def test_mla_decode_traced(student, request):
    """mla_decode, traced: no per-head K/V of the cached tokens, absorbed work per token"""
    t = TRACE
    lens = (256, 512)
    traces = student.probe("ex08_mla.trace_decode", t["batch"], t["n_heads"], list(lens), t["d"],
                           t["d_c"], t["d_rope"], t["d_nope"], t["d_v"])
    ideal = ref.decode_core_per_token(t["n_heads"], t["d_c"], t["d_rope"], t["batch"], 4)
    rebuilt = ref.rebuilt_kv_per_token(t["n_heads"], t["d_c"], t["d_nope"], t["d_v"],
                                       t["batch"], 4)
    names = {k: ref.MISTAKES[k] for k in ("cache_rebuilt_kv", "latent_per_head")}
    result = mla_trace.judge_decode(traces, ideal=ideal, rebuilt=rebuilt, names=names, **t)
    formula = ref.decode_intensity(t["n_heads"], lens[1], t["d_c"], t["d_rope"], t["batch"], 4)
    limit = ideal["flops"] / ideal["cache_bytes"]
    request.node.feedback_on_pass = "\n".join([
        f"Traced in float32 ({mla_trace.__name__.rsplit('.', 1)[-1]}: B={t['batch']}, "
        f"h={t['n_heads']}, d_c={t['d_c']}, d_rope={t['d_rope']}): no per-head K or V.",
        f"Measured intensity of what the context adds: {result['intensity_lo']:.2f}.."
        f"{result['intensity_hi']:.2f} FLOP/byte; the chapter's formula at S={lens[1]}, "
        f"4 bytes (what mla_decode_intensity returns): {formula:.2f} (long-context limit "
        f"{limit:.2f}).",
        mla_trace.gap_text(result, ideal, bytes_per_elem=4)])
