"""Checks that exercise D's public and hidden suites share (shipped with the
public suite): a timer's result against what its calls really took, and a
plot's lines against log-log axes."""
import numpy as np

from grader.feedback import Feedback
from grader.reference import timing


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


def check_loglog(out, pairs):
    """Feedback unless a figure the probe ``ex04.plot`` saw saved draws
    ``pairs`` ([S, seconds]) on log-log axes (or their logs on linear axes)."""
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
