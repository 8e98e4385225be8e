"""Hidden tests for ex06_gqa_intensity: grouping for every h_kv, no repeated
K/V, counts that match what the code executes.

The decode's values are checked on a fixed case first (the same in every
grading; a known mistake fails on it under every seed), then on a random
one (``grader/reference/cases.py``)."""
import pytest

from grader.feedback import Feedback, check_close, check_equal, every_case, \
    expect_raises
from grader.reference.secret import roofline as rl
from grader.reference.cases import case_seed, fixed_seed, on_case, rng_for
from grader.reference.ex06_checks import INTENSITY_MISTAKES, MISTAKES, check_fp16, \
    check_gqa_decode, check_not_repeated, check_table, decode_inputs, judge_counts

pytestmark = [pytest.mark.exercise("ex06_gqa_intensity"), pytest.mark.hidden]


@pytest.mark.points(1)
@pytest.mark.parametrize("h_kv", [1, 2, 8, 16], ids=["mqa", "kv2", "kv8", "mha"])
def test_gqa_decode_every_grouping(student, h_kv):
    """gqa_decode_attention against the reference, 16 query heads"""
    on_case(f"B=2, h=16, h_kv={h_kv}, S=37, d_head=16", lambda: check_gqa_decode(
        student, *decode_inputs(fixed_seed("ex06-decode", h_kv), 2, 16, h_kv, 37, 16)))
    rng = rng_for("ex06-decode", h_kv)
    b, s, d = int(rng.integers(1, 4)), int(rng.integers(1, 200)), int(rng.choice([8, 16, 64]))
    on_case(f"B={b}, h=16, h_kv={h_kv}, S={s}, d_head={d}", lambda: check_gqa_decode(
        student, *decode_inputs(case_seed("ex06-decode", h_kv), b, 16, h_kv, s, d)), drawn=True)


@pytest.mark.points(1)
def test_gqa_decode_rejects_two_query_positions(student):
    """gqa_decode_attention raises ValueError for q of 2 positions"""
    q, k, v = decode_inputs(fixed_seed("ex06-errors", 1), 1, 4, 2, 5, 8)
    expect_raises(lambda: student.gqa_decode_attention(q.expand(1, 4, 2, 8).contiguous(), k, v),
                  "ValueError", what="gqa_decode_attention with q of 2 positions",
                  unchecked=MISTAKES["q_shape_unchecked"])


@pytest.mark.points(1)
def test_gqa_decode_rejects_heads_that_do_not_divide(student):
    """gqa_decode_attention raises ValueError when h % h_kv != 0"""
    q6, k4, v4 = decode_inputs(fixed_seed("ex06-errors", 2), 1, 6, 4, 5, 8)
    expect_raises(lambda: student.gqa_decode_attention(q6, k4, v4),
                  "ValueError", what="gqa_decode_attention with 6 query heads over 4 KV heads")


@pytest.mark.points(2)
@pytest.mark.parametrize("h,h_kv", [(32, 1), (16, 4)], ids=["mqa", "gqa4"])
def test_no_repeated_kv(student, h, h_kv):
    """gqa_decode_attention never materializes K/V repeated per query head"""
    b, s, d = 2, 512, 64
    info = student.probe("ex06_gqa_intensity.trace", b, h, h_kv, s, d)
    # The trace must have seen the work (fp16 K and V read in some op), then no
    # tensor of K or V repeated per query head: the public check's own judge.
    check_not_repeated(info, b=b, h=h, h_kv=h_kv, s=s, d=d, bytes_per_elem=2)


CASES = [
    dict(n_heads=32, n_kv_heads=1, seq_len=4096, d_head=128, batch=1),   # the chapter's case
    dict(n_heads=8, n_kv_heads=2, seq_len=1000, d_head=64, batch=2),
    dict(n_heads=12, n_kv_heads=12, seq_len=300, d_head=32, batch=1),
]


@pytest.mark.points(2)
@pytest.mark.parametrize("case", CASES, ids=["h32-kv1", "h8-kv2-b2", "mha"])
@pytest.mark.timeout_s(120)
def test_measure_intensity_is_counted(student, case):
    """measure_intensity agrees with the grader's count of the same call"""
    out = student.probe("ex06_gqa_intensity.intensity_run", case["n_heads"], case["n_kv_heads"],
                        case["seq_len"], case["d_head"], case["batch"])
    want = [[case["batch"], case["n_heads"], 1, case["d_head"]],
            [case["batch"], case["n_kv_heads"], case["seq_len"], case["d_head"]]]
    same_call = [c for c in out["seen"] if c["shapes"][:2] == want]
    trace = same_call[0]["trace"] if same_call else out["fresh"]
    what = "measure_intensity({n_heads}, {n_kv_heads}, {seq_len}, {d_head}, batch={batch})" \
        .format(**case)
    check_fp16(same_call, what=what)
    judge_counts(out["student"], trace, what=what, **case)


@pytest.mark.points(1)
@pytest.mark.timeout_s(120)
def test_intensity_table_hidden(student):
    """intensity_table on hidden heads and lengths: each intensity counted, rising with h / h_kv"""
    check_table(student.probe("ex06_gqa_intensity.table_run", 16, [1, 4, 16], 2048, 64), 16, (1, 4, 16),
                2048, 64)


@pytest.mark.points(1)
def test_decode_intensity_hidden(student):
    """decode_intensity on hidden parameters (batch, element width, short contexts)"""
    with every_case() as case:
        for args in [(32, 8, 8192, 128, 1, 2), (64, 8, 100, 128, 4, 2), (16, 1, 65536, 64, 2, 1),
                     (8, 8, 1, 64, 1, 4)]:
            with case:
                check_close(student.decode_intensity(*args), rl.decode_intensity(*args),
                            what=f"decode_intensity{args}", atol=0, rtol=1e-9,
                            mistakes=lambda: rl.mistakes_of(rl.decode_intensity,
                                                            INTENSITY_MISTAKES, *args))


# -- what the cache costs a server (issue 29): hidden models, element widths, batches ----
def _count_check(got, want, *, what, mistakes, how):
    """An exact count (or ratio) with the slip named, then how it is found."""
    try:
        check_equal(got, want, what=what, mistakes=mistakes)
    except Feedback as exc:
        raise Feedback(f"{exc}\nHow: {how}") from None


def _counts(student, name, cases, slips):
    with every_case() as case:
        for args in cases:
            with case:
                _count_check(getattr(student, name)(*args), getattr(rl, name)(*args),
                             what=f"{name}{args}",
                             mistakes=lambda: rl.mistakes_of(getattr(rl, name), slips, *args),
                             how=rl.how(name, *args))


@pytest.mark.points(1)
def test_kv_bytes_per_token_hidden(student):
    """kv_bytes_per_token for other models and element widths"""
    _counts(student, "kv_bytes_per_token",
            [(80, 8, 128, 2), (28, 4, 128, 1), (4, 2, 64, 4), (1, 1, 16, 2)], rl.KV_SLIPS)


@pytest.mark.points(1)
def test_kv_cache_over_weights_hidden(student):
    """kv_cache_over_weights: batches, fp8 caches, other models"""
    _counts(student, "kv_cache_over_weights",
            [(32, 8, 128, 131072, 16e9, 1, 1), (80, 8, 128, 32768, 140e9, 4, 2),
             (32, 8, 128, 8192, 8e9, 3, 4), (16, 16, 64, 2048, 2.5e9, 1, 2)], rl.RATIO_SLIPS)


@pytest.mark.points(1)
def test_gqa_bytes_saved_hidden(student):
    """gqa_bytes_saved: per token and per sequence, batches, element widths, MHA saves nothing"""
    _counts(student, "gqa_bytes_saved",
            [(80, 64, 8, 128, 131072, 1, 2), (32, 32, 8, 128, 4096, 2, 2),
             (28, 28, 4, 128, 1000, 3, 1), (16, 16, 16, 64, 100, 1, 2)], rl.SAVING_SLIPS)


@pytest.mark.points(1)
def test_attention_ffn_crossover_hidden(student):
    """attention_ffn_crossover for other models (Llama-3-70B, MHA, a small model, tiny FFNs)"""
    _counts(student, "attention_ffn_crossover",
            [(8192, 28672, 64, 8, 128), (2048, 5632, 16, 16, 128), (768, 3072, 12, 12, 64),
             (256, 1000, 4, 1, 64), (64, 16, 4, 4, 16)], rl.CROSSOVER_SLIPS)
