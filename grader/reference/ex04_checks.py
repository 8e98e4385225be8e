"""Checks that exercise D's public and hidden suites share (shipped with the
public suite): a timer's result against what its calls really took, a
plot's lines against log-log axes (and its dashed S**2 guide), and the form
of the written answer ``WHERE_THE_SLOPE_COMES_FROM``."""
import numpy as np

from grader.feedback import Feedback
from grader.reference import timing
from grader.reference.heatmap_checks import file_problem
from grader.reference.mistakes import looks_like

# The plot's and the written answer's mistakes (the timer's are timing.MISTAKES).
MISTAKES = {
    "linear_axes": "the plot has linear axes (on log-log axes a power law is a straight line "
                   "whose slope is the exponent)",
    "slope_not_words": "the slope itself instead of where it comes from: say in words which "
                       "work grows like S**2 and why the measured slope may differ",
}


# Seconds, milliseconds, microseconds, nanoseconds: the units a plot's times may have.
TIME_UNITS = (1.0, 1e3, 1e6, 1e9)


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
        hint = looks_like(timing.MISTAKES["repeats_total"]) if ratio > 2.5 else ""
        raise Feedback(f"{what}: time_fn returned {got:.4g} s, but its {run['calls']} calls "
                       f"took {run['wall']:.3g} s in all ({per_call:.3g} s each).\n{hint}")
    return got


def check_loglog(out, pairs):
    """Feedback unless the file at the path is the PNG of the figure the probe
    ``ex04.plot`` saw saved there, drawing ``pairs`` ([S, seconds]) on log-log
    axes (or their logs on linear axes), the times in seconds or in ms, us or
    ns: a unit is a constant factor, which moves a log-log line but not its
    slope."""
    problem = file_problem(out, "plot_scaling")
    if problem:
        raise Feedback(problem)
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
                for unit in TIME_UNITS:
                    if logs and np.allclose(data[:, 0], xs) and np.allclose(
                            data[:, 1], ys * unit, rtol=1e-6):
                        return
                    # Plotting log(S) against log(t) on linear axes is a log-log plot too.
                    for log in (np.log, np.log10, np.log2):
                        if np.allclose(data[:, 0], log(xs)) and np.allclose(
                                data[:, 1], log(ys * unit)):
                            return
    scales = [(ax["xscale"], ax["yscale"]) for axes in out["saved"] for ax in axes]
    linear = scales and all(scale == ("linear", "linear") for scale in scales)
    named = "\n" + looks_like(MISTAKES["linear_axes"]) if linear else ""
    raise Feedback("plot_scaling's figure has no line of time against S on log-log axes "
                   f"(axes scales found: {scales}); use ax.loglog(...) or set both scales "
                   f"to 'log'{named}")


def square_guide_note(out, pairs) -> str:
    """A line for the feedback: whether the figure draws the dashed ``S**2``
    guide the docstring asks for (advice: the log-log line is what is graded)."""
    xs = np.array(sorted(p[0] for p in pairs), dtype=float)
    for axes in out["saved"]:
        for ax in axes:
            for i, line in enumerate(ax["lines"]):
                data = np.asarray(line, dtype=float)
                if data.ndim != 2 or len(data) < 2 or (data <= 0).any():
                    continue
                slope = timing.lsq_slope(data[:, 0], data[:, 1])   # the kit's fit
                spans = data[:, 0].min() <= xs[0] and data[:, 0].max() >= xs[-1]
                style = (ax.get("styles") or [""] * len(ax["lines"]))[i]
                if abs(slope - 2) < 1e-3 and spans and style not in ("-", "solid"):
                    return "the dashed S**2 guide is there: a slope-2 line to read yours against"
    return ("tip: draw the dashed S**2 guide too (times[0] * (S / S[0])**2, linestyle '--'): "
            "a quadratic measurement runs parallel to it")


# The written answer: a few sentences, in the questions' bounds (their
# MIN_WORDS, MAX_WORDS; tests/test_ex04_06.py holds them equal); staff grade
# its content (the hidden suite collects it).
ANSWER_NAME = "WHERE_THE_SLOPE_COMES_FROM"
MIN_WORDS, MAX_WORDS = 5, 250


def answer_problem(value) -> str | None:
    """Why ``value`` is not a written answer of the right form (None: it is)."""
    if value is None:
        return f"not implemented yet: {ANSWER_NAME} is still None (answer it in a few sentences)"
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return (f"{ANSWER_NAME} must be text (a str), got the number {value!r}.\n"
                + looks_like(MISTAKES["slope_not_words"]))
    if not isinstance(value, str):
        return f"{ANSWER_NAME} must be text (a str), got {type(value).__name__}"
    words = len(value.split())
    if not MIN_WORDS <= words <= MAX_WORDS:
        return (f"{ANSWER_NAME} has {words} words; write a few sentences ({MIN_WORDS} to "
                f"{MAX_WORDS} words)")
    return None
