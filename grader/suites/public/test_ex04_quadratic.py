"""Public tests for ex04_quadratic: the timer, the memory wall, and your own
measurement of the quadratic on the grading machine."""
from pathlib import Path

import numpy as np
import pytest
import torch

from grader import artifacts, measure
from grader.core import PLUGIN_KEY
from grader.feedback import TOLERANCES, Feedback, check_close, check_equal
from grader.reference.secret import attention as ref
from grader.reference.secret import roofline as rl
from grader.reference import timing
from grader.sandbox.client import StudentError

pytestmark = [pytest.mark.exercise("ex04_quadratic")]

ATOL, RTOL = TOLERANCES["float32"]
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(autouse=True, scope="module")
def machine_peaks(machine):
    """The grading machine's peaks, measured once per run, top of the report."""
    return measure.grading_peaks(machine, measure.default_device())


def _qkv(seed, shape):
    g = torch.Generator().manual_seed(seed)
    return tuple(torch.randn(*shape, generator=g) for _ in range(3))


@pytest.mark.points(1)
def test_naive_attention_small(student):
    """naive_attention on a small causal case"""
    q, k, v = _qkv(0, (1, 2, 5, 4))
    check_close(student.naive_attention(q, k, v, causal=True),
                ref.attention(q, k, v, causal=True), what="naive_attention(q, k, v)",
                atol=ATOL, rtol=RTOL,
                mistakes=rl.attention_mistakes(["no_scale", "softmax_over_queries",
                                                         "no_mask", "diagonal_masked"],
                                         q, k, v, causal=True))


@pytest.mark.points(1)
def test_time_fn_times_a_slow_function(student):
    """time_fn of a function that sleeps 50 ms"""
    for _ in range(timing.SLEEP_TRIES):
        run = student.probe("ex04_quadratic.run_timer", [0.05])
        got = timer_result(run, "time_fn(f) where f sleeps 0.05 s per call", 0.05)
        if got <= 0.2:
            return
    pytest.skip(f"not graded: machine too noisy (a 50 ms sleep measured {got:.3g} s)")


def timer_result(run, what, expected):
    """The seconds a probe's ``run_timer`` got back, or Feedback when they are
    wrong in a way noise cannot explain (noise only makes sleeps longer)."""
    got = run["result"]
    if isinstance(got, dict):
        raise Feedback(f"{what}: time_fn returned a {got['not_a_number']}; expected seconds "
                       "as a float")
    bad = timing.time_feedback(got, f"{what}: time_fn")
    if bad:  # before any noise check: NaN passes every comparison as "too noisy"
        raise Feedback(bad)
    if got < 0.98 * expected:
        raise Feedback(f"{what}: expected at least {expected:g} s, got {got:.4g} s.\n"
                       "The clock must enclose the call, in seconds (time.perf_counter()), "
                       "not milliseconds or nanoseconds.")
    per_call = run["wall"] / max(run["calls"], 1)   # what each call really took, on average
    if got > 2.5 * per_call + 0.01:
        ratio = got / per_call
        hint = ("This looks like: the total of all repeats was returned instead of the "
                "time of one call (the median)." if ratio > 2.5 else "")
        raise Feedback(f"{what}: time_fn returned {got:.4g} s, but its {run['calls']} calls "
                       f"took {run['wall']:.3g} s in all ({per_call:.3g} s each).\n{hint}")
    return got


@pytest.mark.points(1)
def test_loglog_slope_of_a_power_law(student):
    """loglog_slope of times growing exactly like S**2"""
    lens = [128, 256, 512, 1024]
    times = [3e-9 * s ** 2 for s in lens]
    check_close(student.loglog_slope(lens, times), 2.0, what="loglog_slope(...)",
                atol=1e-9, rtol=1e-9)


@pytest.mark.points(1)
def test_score_matrix_bytes_of_the_chapter(student):
    """score_matrix_bytes(8, 32, 8192): the chapter's 34.4 GB"""
    args = (8, 32, 8192)
    check_equal(student.score_matrix_bytes(*args), rl.score_matrix_bytes(*args),
                what="score_matrix_bytes(8, 32, 8192)",
                mistakes=rl.mistakes_of(rl.score_matrix_bytes,
                                        ["scores_no_batch", "scores_linear", "scores_double"],
                                        *args))


@pytest.mark.points(1)
def test_max_naive_seq_len_exact_fit(student):
    """max_naive_seq_len when the chapter's score tensor fits exactly"""
    args = (34359738368, 8, 32)
    check_equal(student.max_naive_seq_len(*args), 8192, what="max_naive_seq_len(34359738368, "
                "8, 32)", mistakes=rl.mistakes_of(rl.max_naive_seq_len,
                                                  ["max_len_off_by_one", "max_len_float"],
                                                  *args))


def artifacts_dir(request) -> Path | None:
    """The grader-owned folder for files made for the student
    (``Options.artifacts_dir``), or None: never the submission's folder."""
    plugin = request.config.stash.get(PLUGIN_KEY, None)
    if plugin is None:
        return None
    folder = plugin.options.artifacts_dir or plugin.options.extra.get("artifacts_dir")
    return Path(folder) if folder else None


def save_plot(student, request, pairs) -> str:
    """Plot the student's measurement with their plot_scaling; say where it went
    (relative to the output folder)."""
    try:
        out = student.probe("ex04_quadratic.plot", pairs, "ex04_scaling.png")
    except StudentError as exc:
        return f"(no plot saved: plot_scaling failed: {str(exc).splitlines()[0]})"
    if out.get("no_matplotlib"):
        return "(no plot saved: matplotlib is not installed; pip install matplotlib)"
    data = bytes(np.asarray(out.get("png", []), dtype=np.uint8))
    if not data.startswith(PNG_MAGIC):
        return "(no plot saved: plot_scaling wrote no PNG file)"
    folder = artifacts_dir(request)
    if folder is None:
        return "(plot not kept: give --artifacts DIR to keep it)"
    try:
        name = artifacts.save(folder, "ex04_scaling.png", data)
    except (OSError, ValueError) as exc:
        return f"(no plot saved: {exc})"
    return f"your log-log plot: {name} (in the output folder)"


@pytest.mark.points(3)
@pytest.mark.timeout_s(180)
def test_measure_scaling_shows_the_quadratic(student, request, machine):
    """measure_scaling on this machine: the slope is near 2"""
    device = measure.default_device()
    threads = ", 1 thread" if device == "cpu" else ""
    picked = student.probe("ex04_quadratic.pick_lengths", device)
    lens = picked["seq_lens"]
    machine.setdefault("ex04 lengths", f"{lens} on {device}{threads} (chosen where the "
                                       "quadratic dominates)")
    verdicts = []
    while not timing.scaling_decided(verdicts):
        attempt = student.probe("ex04_quadratic.scaling_run", lens, device)
        verdicts.append(timing.judge_scaling(lens, attempt))
    final = timing.final_scaling_verdict(verdicts)
    last = verdicts[-1]
    if final == timing.PASS:
        good = next(v for v in verdicts if v.status == timing.PASS)
        table = timing.scaling_table(good, device, threads)
        pairs = [[s, t] for s, t, _ in good.rows]
        note = save_plot(student, request, pairs)
        request.node.feedback_on_pass = table + ("\n" + note if note else "")
        return
    if final == timing.FAIL:
        failing = next((v for v in verdicts if v.status == timing.FAIL), last)
        text = failing.message
        if failing.status != timing.FAIL:
            text = (f"in {len(verdicts)} runs the slope of your measurement stayed outside "
                    f"what this machine shows: {failing.message}.\nCheck that measure_scaling "
                    "times naive_attention at each requested length (with time_fn).")
        if failing.rows:
            text += "\n" + timing.scaling_table(failing, device, threads)
        raise Feedback(text)
    pytest.skip(f"not graded: machine too noisy ({last.message})")


@pytest.mark.points(1)
def test_plot_scaling_is_loglog(student):
    """plot_scaling saves a log-log plot"""
    pairs = [[256, 0.0012], [512, 0.0051], [1024, 0.021]]
    out = student.probe("ex04_quadratic.plot", pairs)
    if out.get("no_matplotlib"):
        pytest.skip("needs matplotlib on the grading machine (pip install matplotlib)")
    data = bytes(np.asarray(out["png"], dtype=np.uint8))
    if not out["exists"]:
        raise Feedback("plot_scaling did not write the file at the path it was given")
    if not data.startswith(PNG_MAGIC):
        raise Feedback("plot_scaling wrote a file that is not a PNG image (the path ends "
                       "in .png: let matplotlib's savefig pick the format from it)")
    check_loglog(out, pairs)


def check_loglog(out, pairs):
    xs = np.array([p[0] for p in pairs], dtype=float)
    ys = np.array([p[1] for p in pairs], dtype=float)
    for axes in out["saved"]:
        for ax in axes:
            for line in ax["lines"]:
                data = np.asarray(line, dtype=float)
                if data.ndim != 2 or data.shape[0] != len(xs):
                    continue
                order = np.argsort(data[:, 0])
                data = data[order]
                logs = ax["xscale"] == "log" and ax["yscale"] == "log"
                if logs and np.allclose(data[:, 0], xs) and np.allclose(data[:, 1], ys,
                                                                         rtol=1e-6):
                    return
                # Plotting log(S) against log(t) on linear axes is a log-log plot too.
                for log in (np.log, np.log10, np.log2):
                    if np.allclose(data[:, 0], log(xs)) and np.allclose(data[:, 1], log(ys)):
                        return
    scales = [(ax["xscale"], ax["yscale"]) for axes in out["saved"] for ax in axes]
    if not out["saved"]:
        raise Feedback("plot_scaling saved no matplotlib figure (use fig.savefig(path) or "
                       "plt.savefig(path))")
    linear = scales and all(scale == ("linear", "linear") for scale in scales)
    named = ("\nThis looks like: the plot has linear axes (on log-log axes a power law is a "
             "straight line whose slope is the exponent)." if linear else "")
    raise Feedback("plot_scaling's figure has no line of time against S on log-log axes "
                   f"(axes scales found: {scales}); use ax.loglog(...) or set both scales "
                   f"to 'log'{named}")
