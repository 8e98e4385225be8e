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
