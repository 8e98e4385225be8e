"""Exercise E's roofline picture: the machine's measured roofs with the
student's prefill and decode points, kept like ex04's plot (issue 51, item 6)."""
from __future__ import annotations

import types

import pytest
from click.testing import CliRunner

from grader.cli import main
from grader.reference.roofline_plot import FILE_NAME, keep_roofline, roofline_png
from tests.conftest import SOLUTIONS

PEAKS = types.SimpleNamespace(flops=150e9, bytes_per_s=13e9)
RUN = {"prefill": {"tflops": 0.009}, "decode": {"tflops": 0.002}}


def test_the_roofline_is_a_png_with_both_points(tmp_path):
    data = roofline_png(PEAKS.flops, PEAKS.bytes_per_s, {"prefill": (64.0, 9e9),
                                                         "decode": (0.5, 2e9)})
    assert data.startswith(b"\x89PNG\r\n\x1a\n") and len(data) > 10_000
    line = keep_roofline(tmp_path / "out", PEAKS, RUN, (64.0, 0.5))
    assert line == f"your roofline: {FILE_NAME} (in the output folder)"
    assert (tmp_path / "out" / FILE_NAME).read_bytes().startswith(b"\x89PNG")


def test_without_an_output_folder_the_roofline_is_not_kept():
    assert keep_roofline(None, PEAKS, RUN, (64.0, 0.5)).startswith("(roofline not kept")


@pytest.mark.slow
def test_check_of_e_keeps_the_roofline_beside_its_table(tmp_path):
    """`attn-grade check E` on the solution: the roofline measured on this
    machine is drawn into the output folder and named under the table."""
    out = tmp_path / "out"
    result = CliRunner().invoke(main, ["check", "E", "--path", str(SOLUTIONS),
                                       "--artifacts", str(out)])
    assert "FAIL" not in result.output, result.output
    if "achieved() of prefill and decode" in result.output and \
            f"your roofline: {FILE_NAME}" in result.output:
        assert (out / FILE_NAME).read_bytes().startswith(b"\x89PNG")
    else:   # a machine too busy to judge the measurement: nothing drawn, said so
        assert "not judged" in result.output or "WAIT" in result.output, result.output


# -- D on a busy machine (issue 51, item 6) -------------------------------------

class _Student:
    """ex04's module as the slope test drives it: lengths, then one run whose
    times and controls grow like S**3.6 (the slopes of a very busy machine)."""

    LENS = [256, 362, 512, 724, 1024]

    def probe(self, name, *args):
        if name == "ex04_quadratic.pick_lengths":
            return {"seq_lens": self.LENS}
        if name == "ex04_quadratic.scaling_run":
            times = [1e-3 * (s / 256) ** 3.6 for s in self.LENS]
            return {"student": [[s, t] for s, t in zip(self.LENS, times)],
                    "ref_before": [t * 0.98 for t in times],
                    "ref_after": [t * (s / 256) ** -0.1 for s, t in zip(self.LENS, times)],
                    "wall": 10 * sum(times)}
        if name == "ex04_quadratic.plot":
            return {"no_matplotlib": True}
        if name == "ex04_quadratic.run_timer":     # a timer that returns one call's time
            (seconds,) = args[0]
            return {"result": seconds, "calls": 7, "seen": [seconds] * 7, "wall": 7 * seconds}
        raise AssertionError(name)

    def loglog_slope(self, lens, times):
        return 3.6


def _slope_test():
    import importlib
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", pytest.PytestUnknownMarkWarning)
        suite = importlib.import_module("grader.suites.public.test_ex04_quadratic")
    return suite.test_measure_scaling_shows_the_quadratic


def test_a_busy_machine_asks_a_student_to_rerun_but_a_grade_is_judged():
    """A slope of 3.6 beside controls of 3.5 and 3.6: the self-check does not
    pass it as "near 2" but asks to close other programs and run it again;
    a grade judges it against the controls, as before."""
    from grader.reference import timing
    request = types.SimpleNamespace(node=types.SimpleNamespace())
    with pytest.raises(pytest.skip.Exception) as skipped:
        _slope_test()(_Student(), request, {}, None, True)
    assert str(skipped.value.msg).startswith(
        "not graded: machine too noisy (this machine was busy: "), skipped.value
    assert "Close other programs and run the check again)" in skipped.value.msg
    assert "log-log slope: yours 3.60" in skipped.value.msg      # the measurement, shown
    _slope_test()(_Student(), request, {}, None, False)          # graded: passes
    assert "log-log slope: yours 3.60" in request.node.feedback_on_pass
    quiet = timing.Verdict(timing.PASS, slope=2.1, controls=(2.0, 2.2), band=(1.65, 2.55))
    assert timing.busy_machine(quiet) is None
