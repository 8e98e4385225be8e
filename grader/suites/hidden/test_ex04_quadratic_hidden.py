"""Hidden tests for ex04_quadratic: hidden data, every known mistake named.

Fixed cases first in each test (the same in every grading; a known mistake
fails on one of them under every seed), then random ones
(``grader/reference/cases.py``)."""
import numpy as np
import pytest
import torch

from grader.feedback import TOLERANCES, Feedback, check_close, check_equal, every_case
from grader.reference.secret import attention as ref
from grader.reference.secret import roofline as rl
from grader.reference import timing
from grader.reference.cases import fixed_rng, fixed_seed, on_case, rng_for
from grader.reference.mistakes import looks_like
from grader.rubric_line import rubric_text
# one definition of how a timer and a plot are judged, the public suite's
from grader.reference.ex04_checks import ANSWER_NAME, answer_problem, check_loglog, \
    timer_result

pytestmark = [pytest.mark.exercise("ex04_quadratic"), pytest.mark.hidden]

ATOL, RTOL = TOLERANCES["float32"]

# The timer's mistakes that only this suite names (grader.insight keys them;
# the others are grader.reference.timing.MISTAKES).
MISTAKES = {
    # with what to do after it: " (call fn warmup times ...)"
    "no_warmup": "timing without warm-up",
    "median_minimum": "the minimum instead of the median",
    "median_mean": "the mean instead of the median (one slow call moves a mean, not a median)",
}


ATTENTION_MISTAKES = ["no_scale", "scale_by_d", "softmax_over_queries", "no_mask",
                      "diagonal_masked", "mask_wrong_triangle", "top_left_mask"]


def _qkv(from_seed, b, h, s_q, s_k, d, dtype):
    """q, k, v drawn from a fixed case's seed or a random one's."""
    g = torch.Generator().manual_seed(from_seed)
    q = torch.randn(b, h, s_q, d, generator=g, dtype=dtype) * 2
    k, v = (torch.randn(b, h, s_k, d, generator=g, dtype=dtype) * 2 for _ in range(2))
    return q, k, v


@pytest.mark.points(1)
@pytest.mark.parametrize("key,shape,chunk,causal,dtype", [
    (11, (2, 3, 17, 17, 8), False, True, torch.float32),
    (12, (1, 4, 33, 33, 16), False, False, torch.float32),
    (13, (2, 2, 64, 64, 32), False, True, torch.float64),
    # a chunk of 5 new queries after 7 cached keys: query i sits at position 7 + i
    (14, (1, 2, 5, 12, 16), True, True, torch.float32),
], ids=["causal-fp32", "no-mask-fp32", "causal-fp64", "causal-S_q<S_k-fp32"])
def test_naive_attention_hidden(student, key, shape, chunk, causal, dtype):
    """naive_attention against the reference"""
    def check(q, k, v, drawn):
        on_case(f"q {tuple(q.shape)}, k {tuple(k.shape)}, {str(dtype)[6:]}", lambda: check_close(
            student.naive_attention(q, k, v, causal), ref.attention(q, k, v, causal=causal),
            what=f"naive_attention(q, k, v, causal={causal})", atol=ATOL, rtol=RTOL,
            mistakes=lambda: rl.attention_mistakes(ATTENTION_MISTAKES, q, k, v,
                                                   causal=causal)), drawn=drawn)

    check(*_qkv(fixed_seed("ex04-naive", key), *shape, dtype), False)
    rng = rng_for("ex04-naive", key)
    for _ in range(2):
        b, h, d = int(rng.integers(1, 4)), int(rng.integers(1, 5)), int(rng.choice([4, 8, 16]))
        s_q = int(rng.integers(1, 49))
        s_k = s_q + (int(rng.integers(1, 30)) if chunk else 0)
        check(*_qkv(int(rng.integers(2**62)), b, h, s_q, s_k, d, dtype), True)


def check_calls(run, warmup, repeats, what):
    """At least ``warmup`` untimed calls and ``repeats`` timed ones: a timer may
    warm up more often (``torch.utils.benchmark`` makes calls of its own)."""
    if run["calls"] >= warmup + repeats:
        return
    hint = ""
    if run["calls"] == repeats:
        hint = "\n" + looks_like(MISTAKES["no_warmup"],
                                 " (call fn warmup times before the timed repeats)")
    warmups = f"{warmup} warm-up call" + "s" * (warmup != 1)
    timed = f"{repeats} timed one" + "s" * (repeats != 1)
    raise Feedback(f"{what} called the function {run['calls']} times; expected at least "
                   f"{warmup + repeats} ({warmups}, then {timed}){hint}")


@pytest.mark.points(1)
def test_time_fn_warms_up(student):
    """time_fn makes warmup untimed calls, then times repeats calls"""
    # The first two calls are slow (as a first CUDA call or a cold cache
    # would be); with warmup=2 and repeats=3 the median is of fast calls only.
    # A failure is only declared when the machine was quiet during the run
    # (the calls overran their sleeps by less than 0.1 s in all), so that no
    # stall can be mistaken for a timed warm-up.
    delays = [0.25, 0.25, 0.02]
    for _ in range(timing.SLEEP_TRIES):
        run = student.probe("ex04_quadratic.run_timer", delays, warmup=2, repeats=3)
        check_calls(run, 2, 3, "time_fn(f, warmup=2, repeats=3)")
        got = timer_result(run, "time_fn(f, warmup=2, repeats=3)", 0.02)
        overrun = run["wall"] - (0.25 + 0.25 + 3 * 0.02)
        if got >= 0.2 and overrun < 0.1:
            raise Feedback(f"time_fn(f, warmup=2, repeats=3) returned {got:.3g} s where the "
                           "timed calls take 0.02 s: the slow first calls were timed.\n"
                           + looks_like(MISTAKES["no_warmup"],
                                        " (call fn warmup times before starting the clock)"))
        if got <= 0.1:
            return
    pytest.skip(f"not graded: machine too noisy (a 20 ms sleep measured {got:.3g} s)")


@pytest.mark.points(1)
def test_time_fn_takes_the_median(student):
    """time_fn returns the median of the timed calls, not their mean, minimum or total"""
    # Calls of 60, 20, 60, 60, 300, 60 ms: the five timed ones after one warm-up
    # and the first five (a timer without warm-up, judged by its own test) both
    # have median 60, mean 100, min 20.  Sleeps never end early, so a result
    # under 60 ms is wrong on any machine; one over 90 ms is judged only when
    # the calls overran their sleeps by less than 30 ms in all (a quiet run).
    delays = [0.06, 0.02, 0.06, 0.06, 0.3, 0.06]
    for _ in range(timing.SLEEP_TRIES):
        run = student.probe("ex04_quadratic.run_timer", delays, warmup=1, repeats=5)
        got = timer_result(run, "time_fn(f, warmup=1, repeats=5)", 0.02)
        overrun = run["wall"] - sum(delays[min(i, len(delays) - 1)] for i in range(run["calls"]))
        if got < 0.058:
            raise Feedback(f"time_fn returned {got:.3g} s where the timed calls took 20, 60, "
                           "60, 300 and 60 ms: the median is 60 ms.\n"
                           + looks_like(MISTAKES["median_minimum"]))
        if got < 0.09:
            return
        if overrun < 0.03:
            mean = "\n" + looks_like(MISTAKES["median_mean"]) if got < 0.13 else ""
            raise Feedback(f"time_fn returned {got:.3g} s where the timed calls took 20, 60, "
                           f"60, 300 and 60 ms: the median is 60 ms.{mean}")
    pytest.skip(f"not graded: machine too noisy (a 60 ms median measured {got:.3g} s)")


@pytest.mark.points(1)
def test_time_fn_passes_arguments(student):
    """time_fn calls fn(*args, **kwargs), never passing warmup or repeats on to fn"""
    run = student.probe("ex04_quadratic.run_timer", [0.0], warmup=1, repeats=2, call_args=[3, 4],
                        call_kwargs={"scale": 2.0})
    if not run["seen"]:
        raise Feedback("time_fn(fn, 3, 4, warmup=1, repeats=2, scale=2.0) never called fn")
    for call in run["seen"]:
        if call["args"] != [3, 4] or call["kwargs"] != ["scale"]:
            raise Feedback("time_fn(fn, 3, 4, warmup=1, repeats=2, scale=2.0) must call "
                           f"fn(3, 4, scale=2.0); fn got args {call['args']} and keyword "
                           f"arguments {call['kwargs']} (warmup and repeats are the timer's "
                           "own and must not reach fn)")


SYNC_HINT = looks_like(timing.MISTAKES["no_sync"], " (call torch.cuda.synchronize() before "
                      "starting and before stopping the clock)")


@pytest.mark.points(1)
def test_time_fn_synchronizes_the_gpu(student):
    """time_fn waits for the GPU (CUDA synchronization), on a real or a stand-in GPU"""
    if torch.cuda.is_available():
        check_sync_on_cuda(student)
        return
    # No GPU here: a stand-in whose work completes after the call returns,
    # unless the timer synchronizes.  A correct timer can only measure more
    # than the work (noise lengthens it), never less.
    out = student.probe("ex04_quadratic.time_standin_gpu", 0.05)
    if "unsupported" in out:
        pytest.skip("not graded: the synchronization could not be checked without a GPU "
                    f"({out['unsupported']}); a GPU grader checks it")
    got, work = out["result"], out["work_s"]
    if isinstance(got, dict):
        raise Feedback(f"time_fn returned a {got['not_a_number']}; expected a float")
    bad = timing.time_feedback(got, "time_fn of a stand-in GPU kernel")
    if bad:  # NaN passes the check below: it would earn the point
        raise Feedback(bad)
    if got < 0.5 * work:
        raise Feedback(
            f"time_fn returned {got:.3g} s for a GPU kernel that runs {work:.3g} s.\n"
            "A GPU runs kernels asynchronously: launching one returns at once, and the "
            "work is done only later, so a clock read right after the call times the "
            "launch, not the work. (Graded with a stand-in GPU whose kernels finish "
            f"{work:.3g} s after they are launched; your timer synchronized "
            f"{out['syncs']} times.)\n" + SYNC_HINT)


def check_sync_on_cuda(student):
    for _ in range(3):
        out = student.probe("ex04_quadratic.time_cuda")
        got, kernel = out["result"], out["kernel_s"]
        if isinstance(got, dict):
            raise Feedback(f"time_fn returned a {got['not_a_number']}; expected a float")
        bad = timing.time_feedback(got, "time_fn of a GPU kernel")
        if bad:  # NaN would pass both checks below and end as "too noisy"
            raise Feedback(bad)
        if got < 0.5 * kernel:
            raise Feedback(f"time_fn returned {got:.3g} s for a GPU kernel that runs "
                           f"{kernel:.3g} s.\n" + SYNC_HINT)
        if got <= 3 * kernel:
            return
    pytest.skip(f"not graded: machine too noisy ({got:.3g} s for a {kernel:.3g} s kernel)")


SLOPE_MISTAKES = ["slope_endpoints", "slope_inverted", "slope_not_log", "slope_intercept"]


@pytest.mark.points(1)
def test_loglog_slope_hidden(student):
    """loglog_slope is the least-squares fit of log time on log S, on noisy hidden data"""
    for gen, drawn in ((fixed_rng("ex04-slope"), False), (None, True)):
        gen = gen or rng_for("ex04-slope")
        for n in (3, 5, 6):
            lens = [int(x) for x in 128 * 2 ** np.arange(n)]
            times = [float(2e-9 * s ** 2.3 * np.exp(gen.normal(0, 0.15))) for s in lens]
            on_case(f"{n} noisy lengths", lambda: check_close(
                student.loglog_slope(lens, times), rl.loglog_slope(lens, times),
                what=f"loglog_slope({lens}, ...)", atol=1e-9, rtol=1e-7,
                mistakes=lambda: rl.mistakes_of(rl.loglog_slope, SLOPE_MISTAKES, lens,
                                                times)), drawn=drawn)


@pytest.mark.points(1)
def test_score_matrix_bytes_hidden(student):
    """score_matrix_bytes on hidden sizes and element widths"""
    with every_case() as case:
        for args in [(1, 1, 1000), (4, 16, 3000, 4), (2, 64, 131072, 2), (3, 40, 5000, 1)]:
            with case:
                check_equal(student.score_matrix_bytes(*args), rl.score_matrix_bytes(*args),
                            what=f"score_matrix_bytes{args}",
                            mistakes=lambda: rl.mistakes_of(rl.score_matrix_bytes,
                                                            ["scores_no_batch", "scores_linear",
                                                             "scores_double",
                                                             "scores_no_elem_size",
                                                             "scores_causal_half"], *args))


@pytest.mark.points(1)
def test_max_naive_seq_len_hidden(student):
    """max_naive_seq_len on hidden memory sizes (exact fits and one byte short)"""
    cases = [
        (80 * 10**9, 1, 32, 2),                 # an 80 GB GPU, one sequence, 32 heads
        (80 * 10**9, 8, 64, 2),
        (24 * 2**30, 2, 16, 4),
        (2 * 4096 * 4096 * 8 * 2, 2, 8, 2),     # fits exactly at 4096
        (2 * 4096 * 4096 * 8 * 2 - 1, 2, 8, 2),  # one byte short
        (10, 1, 1, 2),
    ]
    with every_case() as case:
        for args in cases:
            with case:
                got = student.max_naive_seq_len(*args)
                if isinstance(got, float) and not isinstance(got, bool):
                    raise Feedback(f"max_naive_seq_len{args} returned the float {got!r}; a "
                                   "length is an int (the largest whole S that fits)")
                check_equal(got, rl.max_naive_seq_len(*args), what=f"max_naive_seq_len{args}",
                            mistakes=lambda: rl.mistakes_of(rl.max_naive_seq_len,
                                                            ["max_len_off_by_one",
                                                             "max_len_one_short",
                                                             "max_len_no_elem_size",
                                                             "max_len_no_batch",
                                                             "max_len_no_heads"], *args))


@pytest.mark.points(1)
def test_plot_scaling_hidden(student):
    """plot_scaling draws the given data on log-log axes"""
    pairs = [[128, 0.0004], [256, 0.0017], [512, 0.0069], [1024, 0.031], [2048, 0.14]]
    out = student.probe("ex04_quadratic.plot", pairs, "hidden.png")
    if out.get("no_matplotlib"):
        pytest.skip("needs matplotlib on the grading machine (pip install matplotlib)")
    if not out["exists"]:
        raise Feedback("plot_scaling did not write the file at the path it was given")
    check_loglog(out, pairs)


# The written answer on the slope, for staff: their points and rubric (the
# autograder gives none, as for the questions' free text).
SLOPE_STAFF_POINTS = 2
SLOPE_RUBRIC = [      # (points, item): their sum is SLOPE_STAFF_POINTS
    (1, "names the S*S work: every query is compared with every key (the S x S score "
        "matrix, its softmax and the weights times V), so time grows like S**2 and the "
        "log-log slope is the exponent 2"),
    (1, "says why a measurement sits near but not at 2: terms linear in S (the projections "
        "are not timed here, but q, k, v and the output are S x d_head) and call overhead "
        "pull it below at short lengths; caches and memory traffic of the growing S x S "
        "tensor push a CPU above it"),
]


@pytest.mark.points(0)
def test_slope_explained_in_words_collected_for_staff(student, request, for_staff):
    """WHERE_THE_SLOPE_COMES_FROM is collected for staff grading"""
    got = getattr(student, ANSWER_NAME)
    text = got.strip() if isinstance(got, str) else ""
    for_staff({"exercise": "ex04_quadratic", "question": ANSWER_NAME,
               "points": SLOPE_STAFF_POINTS, "answer": text,
               "rubric": rubric_text(SLOPE_RUBRIC)})
    problem = answer_problem(got)
    if problem:
        first, _, rest = problem.partition("\n")
        raise Feedback(f"{first} (staff grade it out of {SLOPE_STAFF_POINTS}: an answer in "
                       f"another form will likely earn none of them)" +
                       (f"\n{rest}" if rest else ""))
    request.node.feedback_on_pass = (f"Collected for your course staff "
                                     f"({len(text.split())} words), who grade it out of "
                                     f"{SLOPE_STAFF_POINTS} with a rubric.")
