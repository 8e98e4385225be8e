"""Public tests for ex04_quadratic: the timer, the memory wall, and your own
measurement of the quadratic on the grading machine."""
import pytest
import torch

from grader import artifacts
from grader.sandbox.runtime import measure
from grader.feedback import TOLERANCES, Feedback, check_close, check_equal
from grader.reference.secret import attention as ref
from grader.reference.secret import roofline as rl
from grader.reference import timing
from grader.reference.heatmap_checks import file_problem, png_bytes
from grader.reference.ex04_checks import (ANSWER_NAME, answer_problem, check_loglog,
                                          square_guide_note, timer_result)
from grader.sandbox.client import StudentError

pytestmark = [pytest.mark.exercise("ex04_quadratic"),
              pytest.mark.usefixtures("machine_peaks")]   # measured before the first test

ATOL, RTOL = TOLERANCES["float32"]


def _qkv(seed, shape):
    g = torch.Generator().manual_seed(seed)
    return tuple(torch.randn(*shape, generator=g) for _ in range(3))


NAIVE_MISTAKES = ["no_scale", "scale_by_d", "softmax_over_queries", "no_mask",
                  "diagonal_masked", "mask_wrong_triangle", "top_left_mask"]


@pytest.mark.points(1)
def test_naive_attention_small(student):
    """naive_attention on a small causal case, and on 3 new queries after 5 keys"""
    q, k, v = _qkv(0, (1, 2, 5, 4))
    # S_q < S_k: with a square case a mask aligned to the top-left looks right
    for q_, what in ((q, "naive_attention(q, k, v)"),
                     (q[:, :, 2:], "naive_attention(q[:, :, 2:], k, v), S_q=3, S_k=5")):
        check_close(student.naive_attention(q_, k, v, causal=True),
                    ref.attention(q_, k, v, causal=True), what=what, atol=ATOL, rtol=RTOL,
                    mistakes=rl.attention_mistakes(NAIVE_MISTAKES, q_, k, v, causal=True))


@pytest.mark.points(1)
def test_time_fn_times_a_slow_function(student):
    """time_fn of a function that sleeps 50 ms"""
    for _ in range(timing.SLEEP_TRIES):
        run = student.probe("ex04_quadratic.run_timer", [0.05])
        got = timer_result(run, "time_fn(f) where f sleeps 0.05 s per call", 0.05)
        if got <= 0.2:
            return
    pytest.skip(f"not graded: machine too noisy (a 50 ms sleep measured {got:.3g} s)")


SLOPE_MISTAKES = ["slope_endpoints", "slope_inverted", "slope_not_log", "slope_intercept"]


@pytest.mark.points(1)
def test_loglog_slope_of_a_power_law(student):
    """loglog_slope of times growing exactly like S**2, and of noisy ones (a least-squares fit)"""
    lens = [128, 256, 512, 1024]
    times = [3e-9 * s ** 2 for s in lens]
    check_close(student.loglog_slope(lens, times), 2.0, what="loglog_slope(...)",
                atol=1e-9, rtol=1e-9,
                mistakes=rl.mistakes_of(rl.loglog_slope, SLOPE_MISTAKES, lens, times))
    # noisy times: the first and last points alone give another slope than the fit
    lens = [128, 256, 512, 1024, 2048]
    times = [3e-9 * s ** 2 * f for s, f in zip(lens, (1.0, 1.3, 0.8, 1.2, 1.05))]
    check_close(student.loglog_slope(lens, times), rl.loglog_slope(lens, times),
                what=f"loglog_slope({lens}, noisy times)", atol=1e-9, rtol=1e-7,
                mistakes=rl.mistakes_of(rl.loglog_slope, SLOPE_MISTAKES, lens, times))


@pytest.mark.points(1)
def test_score_matrix_bytes_of_the_chapter(student):
    """score_matrix_bytes(8, 32, 8192): the chapter's 34.4 GB (and in fp32)"""
    # fp32 second: at the default 2 bytes a forgotten element size looks like a
    # count that is off by a factor of 2
    for args in ((8, 32, 8192), (3, 16, 3000, 4)):
        check_equal(student.score_matrix_bytes(*args), rl.score_matrix_bytes(*args),
                    what=f"score_matrix_bytes{args}",
                    mistakes=rl.mistakes_of(rl.score_matrix_bytes,
                                            ["scores_no_batch", "scores_linear",
                                             "scores_no_elem_size", "scores_double",
                                             "scores_causal_half"], *args))


@pytest.mark.points(1)
def test_max_naive_seq_len_exact_fit(student):
    """max_naive_seq_len when the chapter's score tensor fits exactly (and in fp32)"""
    for args in ((34359738368, 8, 32), (24 * 2**30, 2, 16, 4)):
        check_equal(student.max_naive_seq_len(*args), rl.max_naive_seq_len(*args),
                    what=f"max_naive_seq_len{args}",
                    mistakes=rl.mistakes_of(rl.max_naive_seq_len,
                                            ["max_len_off_by_one", "max_len_one_short",
                                             "max_len_no_elem_size", "max_len_float",
                                             "max_len_no_batch", "max_len_no_heads"], *args))


def save_plot(student, artifacts_dir, pairs) -> str:
    """Plot the student's measurement with their plot_scaling; say where it went
    (relative to the output folder)."""
    try:
        out = student.probe("ex04_quadratic.plot", pairs, "ex04_scaling.png")
    except StudentError as exc:
        return f"(no plot saved: plot_scaling failed: {str(exc).splitlines()[0]})"
    if out.get("no_matplotlib"):
        return "(no plot saved: matplotlib is not installed; pip install matplotlib)"
    problem = file_problem(out, "plot_scaling")     # kept: the figure saved at the path
    if problem:
        return f"(no plot saved: {problem})"
    data = png_bytes(out)
    if artifacts_dir is None:
        return "(plot not kept: give --artifacts DIR to keep it)"
    try:
        name = artifacts.save(artifacts_dir, "ex04_scaling.png", data)
    except (OSError, ValueError) as exc:
        return f"(no plot saved: {exc})"
    return f"your log-log plot: {name} (in the output folder)"


def your_fit(student, verdict) -> str:
    """The slope the student's own loglog_slope fits to their times (shown, not
    graded here: test_loglog_slope_of_a_power_law grades it)."""
    lens = [s for s, _, _ in verdict.rows]
    try:
        got = float(student.loglog_slope(lens, [t for _, t, _ in verdict.rows]))
    except (StudentError, TypeError, ValueError, OverflowError) as exc:
        why = (str(exc).splitlines() or [type(exc).__name__])[0]
        return f"your loglog_slope of these times: no number ({why})"
    return f"your loglog_slope of these times: {got:.3f}"


def measured_text(student, artifacts_dir, verdict, device, threads) -> str:
    """The student's own measurement: the table, their fitted slope, their plot."""
    lines = [timing.scaling_table(verdict, device, threads), your_fit(student, verdict)]
    note = save_plot(student, artifacts_dir, [[s, t] for s, t, _ in verdict.rows])
    return "\n".join(lines + ([note] if note else []))


@pytest.mark.points(3)
@pytest.mark.timeout_s(180)
@pytest.mark.nothing_to_record
def test_measure_scaling_shows_the_quadratic(student, request, machine, artifacts_dir,
                                             self_check):
    """measure_scaling on this machine: the slope is near 2"""
    device = measure.default_device()
    threads = ", 1 thread" if device == "cpu" else ""
    picked = student.probe("ex04_quadratic.pick_lengths", device)
    lens = picked["seq_lens"]
    machine.setdefault("ex04 lengths", f"{lens} on {device}{threads} (chosen where the "
                                       "quadratic dominates)")
    verdicts = []
    # what the student's timer returns for calls of 10 ms: one call's time, or
    # a total (a diagnosis below must not contradict the timer's own tests)
    one_call = timing.returns_one_call(student.probe("ex04_quadratic.run_timer", [0.01]))
    while not timing.scaling_decided(verdicts):
        attempt = student.probe("ex04_quadratic.scaling_run", lens, device)
        verdicts.append(timing.judge_scaling(lens, attempt, one_call=one_call))
    final = timing.final_scaling_verdict(verdicts)
    last = verdicts[-1]
    if final == timing.PASS:
        good = next(v for v in verdicts if v.status == timing.PASS)
        busy = timing.busy_machine(good) if self_check else None
        if busy:      # said as a noisy run is, with the measurement shown
            pytest.skip(f"not graded: machine too noisy ({busy}).\n"
                        + measured_text(student, artifacts_dir, good, device, threads))
        request.node.feedback_on_pass = measured_text(student, artifacts_dir, good, device,
                                                      threads)
        return
    if final == timing.FAIL:
        failing = next((v for v in verdicts if v.status == timing.FAIL), last)
        text = failing.message
        if failing.status != timing.FAIL:
            text = (f"in {len(verdicts)} runs the slope of your measurement stayed outside "
                    f"what this machine shows: {failing.message}.\nCheck that measure_scaling "
                    "times naive_attention at each requested length (with time_fn).")
        if failing.rows:
            text += "\n" + measured_text(student, artifacts_dir, failing, device, threads)
        raise Feedback(text)
    shown = next((v for v in reversed(verdicts) if v.rows), None)
    table = ("\n" + measured_text(student, artifacts_dir, shown, device, threads)) \
        if shown else ""
    pytest.skip(f"not graded: machine too noisy ({last.message}){table}")


@pytest.mark.points(1)
def test_plot_scaling_is_loglog(student, request):
    """plot_scaling saves a log-log plot"""
    pairs = [[256, 0.0012], [512, 0.0051], [1024, 0.021]]
    out = student.probe("ex04_quadratic.plot", pairs)
    if out.get("no_matplotlib"):
        pytest.skip("needs matplotlib on the grading machine (pip install matplotlib)")
    check_loglog(out, pairs)     # the file at the path first: a PNG of the figure saved there
    request.node.feedback_on_pass = square_guide_note(out, pairs)


@pytest.mark.points(0)
def test_slope_explained_in_words(student):
    """WHERE_THE_SLOPE_COMES_FROM: the slope's origin in your words (staff grade it)"""
    problem = answer_problem(getattr(student, ANSWER_NAME))
    if problem:
        raise Feedback(problem)
