"""Judging measurements made on a noisy machine (exercises D and E).

Pure functions of the data a probe returns, so that they can be tested
without a machine: given one attempt of a student's scaling run, each length
bracketed by two control runs of the grader's own naive attention (see
``probes.ex04_quadratic.scaling_run``), say whether it passes,
fails for a reason that noise cannot explain, or cannot be judged because the
machine was too noisy.  The rules never fail a correct submission because of
noise: noise can only ever lead to a retry or to "not graded".
"""
from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field

import numpy as np

from grader.reference.mistakes import looks_like

PASS, FAIL, RETRY_STUDENT, RETRY_NOISY = "pass", "fail", "student_out", "noisy"
ATTEMPTS = 3     # attempts with a steady control and a slope out of the band: a failure
MAX_ATTEMPTS = 6  # runs of the student's measurement before "not graded"
# Checks of a timer on sleeps: a run whose sleeps overran (a busy machine)
# decides nothing and is run again, up to this many times.
SLEEP_TRIES = 5

# A control slope outside this range means the machine did not show the
# quadratic at all during the run (a stall, a neighbour's burst): on the
# 2-core machine the control ranged 1.9-2.6 at one thread over many runs,
# and a GPU or a bigger CPU lands nearer 2.  On a loaded machine wall-clock
# slopes rise above that, for everyone at once: a 20 ms call is preempted
# by the other processes more often than a 1 ms one (with 3-4 busy
# processes per core the control measured 3.0-3.4).  The control is measured
# at the same moments as the student's times (``probes.ex04_quadratic.scaling_run``
# interleaves them length by length), so such a run is still judged, against
# the slope the machine showed then.
CONTROL_RANGE = (1.4, 4.0)
# Above this, both control slopes say the machine was busy (a quiet machine
# showed at most 2.6, above): a grade is still judged against the control,
# but a student's self-check tells them to close other programs and run it
# again, rather than pass a slope of 4 under "the slope is near 2".
QUIET_SLOPE_MAX = 2.8
# Two control runs, before and after the student's, that disagree by more
# than this were disturbed: the student's run in between cannot be judged.
CONTROL_AGREEMENT = 0.5
# The student's slope may sit this far outside [min(controls, 2), max(controls, 2)]:
# per-length noise moved a 3-point slope by up to ~0.3 on a busy 2-core machine.
# Kept for the five half-octave lengths the probe picks now (the same 4x span
# of S, more points: a steadier fit, never a narrower band).
SLOPE_MARGIN = 0.35
# A reported time must lie within the span of the calls the grader saw it
# make (any of median, mean or min of them does), widened by these factors
# for timer overheads; fabricated numbers, milliseconds or totals of all the
# repeats fall outside.
OBSERVED_SLACK = (0.8, 1.25)
# Without observed calls, the control's magnitude is the check: no honest
# naive attention in PyTorch runs 10x faster than the grader's (a slow one,
# say a mask built in Python loops, is still honest: no upper bound).
MAGNITUDE_FLOOR = 0.1
# The timer's mistakes, named in the feedback ("This looks like: ...", keyed
# by grader.insight): the times judged here, and the timers of ex04's hidden
# suite and ex05's public one.
MISTAKES = {
    "not_measured": "times that were not measured (computed or typed in): time each call "
                    "with time_fn",
    "milliseconds": "the times are in milliseconds, not seconds",
    "repeats_total": "the total of all repeats was returned instead of the time of one call "
                     "(the median)",
    "clock_stopped_early": "the clock stopped before the work finished (timing without "
                           "synchronization), or the times were not measured",
    # with what to do after it: " (call torch.cuda.synchronize() ...)"
    "no_sync": "timing without synchronization",
}
NOT_MEASURED = "\n" + looks_like(MISTAKES["not_measured"])


def time_problem(seconds) -> str | None:
    """Why a time that student code returned cannot be a measurement (not a
    number, NaN, infinite, zero or negative), or None when it can be one.

    Checked before any "too noisy" retry: NaN compares false with every
    bound, so without this it would slip past each check into "not graded"."""
    if isinstance(seconds, bool) or not isinstance(seconds, (int, float)):
        return f"a {type(seconds).__name__}, not a number of seconds"
    if math.isnan(seconds):
        return "NaN (not a number)"
    if math.isinf(seconds):
        return "an infinite time"
    if seconds <= 0:
        return f"{seconds!r} seconds; a time must be positive"
    return None


def time_feedback(seconds, what: str) -> str | None:
    """One sentence for a time that cannot be a measurement, or None."""
    problem = time_problem(seconds)
    if problem is None:
        return None
    return (f"{what} returned {problem}: a measured time is a positive, finite number of "
            "seconds (time.perf_counter() before and after the call)")


def lsq_slope(xs, ys) -> float:
    x = np.log(np.asarray(xs, dtype=np.float64))
    y = np.log(np.asarray(ys, dtype=np.float64))
    return float(np.polyfit(x, y, 1)[0])


@dataclass
class Verdict:
    status: str                  # PASS, FAIL, RETRY_STUDENT or RETRY_NOISY
    message: str = ""
    slope: float | None = None
    controls: tuple = ()
    band: tuple = ()
    rows: list = field(default_factory=list)   # (S, student s, control s)


def _ms(t: float) -> str:
    return f"{t * 1e3:.3g} ms"


def returns_one_call(run: dict) -> bool:
    """Did ``time_fn`` of a function sleeping the same time at every call
    (a ``run_timer`` probe's ``run``) return about one call's time, not a
    total of several?"""
    got, calls = run.get("result"), max(int(run.get("calls", 0)), 1)
    return isinstance(got, float) and math.isfinite(got) and got > 0 \
        and got < 1.8 * run.get("wall", 0.0) / calls + 0.005


def _why_not_measured(t: float, calls: list[float], repeats_hint: int,
                      one_call: bool = False) -> str:
    """Which known mistake a reported time ``t`` that lies outside the span of
    the watched ``calls`` looks like.

    Judged against the span of those calls as well as their median: on a
    loaded machine some calls are preempted and some not, and the median of
    all the calls watched (warm-up included) can then differ several times
    from the median of the student's repeats.  A time in milliseconds is a
    thousand times one of those calls, and a total is a sum of several, under
    any load.  ``one_call``: the student's ``time_fn`` was seen to return
    one call's time, so a total is not its mistake and is not named."""
    lo, hi = min(calls), max(calls)
    ratio = t / statistics.median(calls)

    def spans(x, low, high):
        return OBSERVED_SLACK[0] * low <= x <= OBSERVED_SLACK[1] * high

    if 300 <= ratio <= 3000 or spans(t / 1000, lo, hi):
        return looks_like(MISTAKES["milliseconds"])
    if (0.7 * repeats_hint <= ratio <= 1.5 * (repeats_hint + 2)
            or spans(t, sum(sorted(calls)[:2]), sum(calls))):
        if one_call:
            return ("These are several calls' worth, yet your time_fn returns one call's "
                    "time: does measure_scaling add up more than one call per length?")
        return looks_like(MISTAKES["repeats_total"])
    if ratio < 0.1:
        return looks_like(MISTAKES["clock_stopped_early"])
    return "These do not look measured: time the calls with time_fn."


def judge_scaling(seq_lens, attempt: dict, repeats_hint: int = 5,
                  one_call: bool = False) -> Verdict:
    """Judge one attempt from ``probes.ex04_quadratic.scaling_run``;
    ``one_call``: the student's ``time_fn`` returns one call's time
    (``returns_one_call``)."""
    seq_lens = [int(s) for s in seq_lens]
    if "bad_result" in attempt:
        return Verdict(FAIL, "measure_scaling must return a dict {S: seconds}, got a "
                             f"{attempt['bad_result']}")
    if "bad_key" in attempt:
        return Verdict(FAIL, f"measure_scaling returned a key that is not a length: "
                             f"{attempt['bad_key']} (use the lengths of seq_lens as keys)")
    got = {}
    for s, t in attempt["student"]:
        if isinstance(t, dict):
            return Verdict(FAIL, f"measure_scaling returned a {t['not_a_number']} for S={s}; "
                                 "expected seconds as a float")
        got[int(s)] = float(t)
    asked = attempt.get("asked", seq_lens)     # the probe asks for one length at a time
    if "asked" in attempt or sorted(got) != sorted(seq_lens):
        return Verdict(FAIL, f"measure_scaling was asked for lengths {asked} and returned "
                             f"times for {sorted(got)}")
    bad = [s for s in seq_lens if not (math.isfinite(got[s]) and got[s] > 0)]
    if bad:
        return Verdict(FAIL, f"measure_scaling returned {got[bad[0]]!r} seconds for S={bad[0]}; "
                             "a time must be positive")
    times = [got[s] for s in seq_lens]
    ref1, ref2 = attempt["ref_before"], attempt["ref_after"]
    control = [min(a, b) for a, b in zip(ref1, ref2)]
    rows = [(s, got[s], c) for s, c in zip(seq_lens, control)]

    # 1. Were these times measured?  Compare with the calls the grader watched.
    by_len: dict[int, list[float]] = {}
    for shape, took in attempt.get("observed", []):
        if len(shape) >= 2:
            by_len.setdefault(int(shape[-2]), []).append(float(took))
    if all(s in by_len for s in seq_lens):
        for s in seq_lens:
            lo, hi = min(by_len[s]), max(by_len[s])
            t = got[s]
            if not (OBSERVED_SLACK[0] * lo <= t <= OBSERVED_SLACK[1] * hi):
                why = _why_not_measured(t, by_len[s], repeats_hint, one_call)
                return Verdict(FAIL, f"measure_scaling reported {_ms(t)} for S={s}, but its "
                                     f"calls of naive_attention at S={s} took between "
                                     f"{_ms(lo)} and {_ms(hi)} (timed by the grader while "
                                     f"your code ran).\n{why}", rows=rows)
    else:
        wall = float(attempt.get("wall", 0.0))
        if wall < 0.9 * sum(times):
            return Verdict(FAIL, f"measure_scaling reported {_ms(sum(times))} of timings in "
                                 f"a call that took {_ms(wall)}: these times were not "
                                 "measured." + NOT_MEASURED, rows=rows)
        for s, t, c in rows:
            if t / c < MAGNITUDE_FLOOR:
                return Verdict(FAIL, f"measure_scaling reported {_ms(t)} for S={s}, but naive "
                                     f"attention of that size takes about {_ms(c)} on this "
                                     "machine: were these times measured?" + NOT_MEASURED,
                                 rows=rows)

    # 2. The slope, against the control measured around it.
    slope = lsq_slope(seq_lens, times)
    r1, r2 = lsq_slope(seq_lens, ref1), lsq_slope(seq_lens, ref2)
    controls = (r1, r2)
    lo_c, hi_c = CONTROL_RANGE
    control_ok = lo_c <= r1 <= hi_c and lo_c <= r2 <= hi_c and abs(r1 - r2) <= CONTROL_AGREEMENT
    band = (min(r1, r2, 2.0) - SLOPE_MARGIN, max(r1, r2, 2.0) + SLOPE_MARGIN)
    if not control_ok:
        return Verdict(RETRY_NOISY, f"the control slopes were {r1:.2f} and {r2:.2f}: the "
                                    "machine was too noisy to judge this run",
                       slope=slope, controls=controls, band=band, rows=rows)
    if band[0] <= slope <= band[1]:
        return Verdict(PASS, slope=slope, controls=controls, band=band, rows=rows)
    return Verdict(RETRY_STUDENT, f"your slope was {slope:.2f}; the grader's own naive "
                                  f"attention, measured just before and after, gave {r1:.2f} "
                                  f"and {r2:.2f} (accepted: {band[0]:.2f} to {band[1]:.2f})",
                   slope=slope, controls=controls, band=band, rows=rows)


def busy_machine(verdict: Verdict) -> str | None:
    """Why a passing run of a self-check proves nothing about the quadratic
    (both controls above ``QUIET_SLOPE_MAX``: the load showed, not S^2), or
    None when the machine was quiet enough."""
    if verdict.controls is None or min(verdict.controls) <= QUIET_SLOPE_MAX:
        return None
    r1, r2 = verdict.controls
    return (f"this machine was busy: the grader's own naive attention gave slopes of "
            f"{r1:.2f} and {r2:.2f} around your run, where a quiet machine gives about 2, "
            f"so your {verdict.slope:.2f} shows the load, not the quadratic. Close other "
            "programs and run the check again")


def final_scaling_verdict(verdicts: list[Verdict]) -> str:
    """After the retries: PASS if any attempt passed; FAIL on a definite failure,
    or when every attempt (at least three) had a steady control and a slope
    outside the band; otherwise the machine was too noisy ("noisy": not graded)."""
    if any(v.status == PASS for v in verdicts):
        return PASS
    if any(v.status == FAIL for v in verdicts):
        return FAIL
    if len(verdicts) >= ATTEMPTS and all(v.status == RETRY_STUDENT for v in verdicts):
        return FAIL
    return RETRY_NOISY


def scaling_decided(verdicts: list[Verdict]) -> bool:
    """Whether to stop measuring: a verdict is reached, or ``MAX_ATTEMPTS``
    were made.  A disturbed run (noisy control) is measured again rather
    than counted: on a loaded machine the next run is often a steady one."""
    return (final_scaling_verdict(verdicts) != RETRY_NOISY
            or len(verdicts) >= MAX_ATTEMPTS)


def scaling_table(verdict: Verdict, device: str, threads: str) -> str:
    lines = [f"{'S':>6}  {'your time':>11}  {'control':>11}   ({device}{threads})"]
    for s, t, c in verdict.rows:
        lines.append(f"{s:>6}  {_ms(t):>11}  {_ms(c):>11}")
    if verdict.slope is not None:
        lines.append(f"log-log slope: yours {verdict.slope:.2f}; control "
                     f"{verdict.controls[0]:.2f} before, {verdict.controls[1]:.2f} after; "
                     f"accepted {verdict.band[0]:.2f} to {verdict.band[1]:.2f} "
                     "(2 is the ideal S*S; caches can push a CPU above it)")
    return "\n".join(lines)
