"""The student edition measures the student's own code (issue 26, item 2):
exercise D's times, slope and plot, E's roofline, F's counted intensities,
H's trace, made by ``attn-grade check`` with the shipped measuring kit; and
the mistakes only a measurement shows fail there as when graded.

The edition is the one ``tests/test_release.py`` builds (built once per run);
each test runs ``check`` in it, as a student would."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.conftest import SOLUTIONS, copy_solutions
from tests.data.mutants import mutant
from tests.test_release import edition  # noqa: F401  (the session's edition)
from tests.test_release import solutions_checked

pytestmark = pytest.mark.slow


def _check(edition, folder, *names, artifacts=None):   # noqa: F811
    env = dict(os.environ, PYTHONPATH=str(edition))
    args = [sys.executable, "-m", "grader.cli", "check", "--no-fail", "--path", str(folder),
            *names]
    if artifacts is not None:
        args += ["--artifacts", str(artifacts)]
    proc = subprocess.run(args, cwd=edition, env=env, capture_output=True, text=True,
                          timeout=900)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def _block(out, exercise):
    return out.split(f"\n{exercise} ", 1)[1].split("\nex0", 1)[0].split("\nTotal", 1)[0]


def _row(block, title_start):
    """The row of the test whose title starts so, and the lines under it."""
    lines = block.splitlines()
    for i, line in enumerate(lines):
        if line[7:].startswith(title_start):
            under = []
            for more in lines[i + 1:]:
                if not more.startswith(" " * 9):
                    break
                under.append(more)
            return line, "\n".join(under)
    raise AssertionError(f"no row {title_start!r} in:\n{block}")


def test_the_solutions_are_measured_in_the_edition(edition, tmp_path_factory):  # noqa: F811
    """D, E, F and H pass for the solutions with the measurement shown, and
    D's plot is written into the artifacts folder.  Read from the one check
    of every solution in the edition, with --artifacts, that
    tests/test_release.py's test reads too."""
    out, art = solutions_checked(edition, tmp_path_factory)
    assert "not checked in the student edition" not in out, out
    assert "FAIL" not in out, out

    row, lines = _row(_block(out, "ex04_quadratic"), "measure_scaling on this machine")
    if row.startswith(("  --  ", "  WAIT ")):   # a machine too busy to judge: said so, shown
        assert "not graded: machine too noisy" in lines, lines
    else:
        assert row.startswith("  ok  ") and row.endswith("3/3"), row
    lens = [int(ln.split()[0]) for ln in lines.splitlines() if ln.split()[:1] and
            ln.split()[0].isdigit()]
    assert len(lens) >= 5 and lens == sorted(lens) and max(lens) <= 4096, lines
    assert "log-log slope: yours" in lines and "your loglog_slope of these times:" in lines
    assert "your log-log plot: ex04_scaling.png" in lines, lines
    assert (art / "ex04_scaling.png").read_bytes().startswith(b"\x89PNG")
    _, plot = _row(_block(out, "ex04_quadratic"), "plot_scaling saves a log-log plot")
    assert "dashed S**2 guide is there" in plot, plot

    row, lines = _row(_block(out, "ex05_decode_prefill"), "achieved() of prefill and decode")
    assert row.startswith("  ok  ") and "TFLOP/s" in lines and "GB/s" in lines, lines
    assert "ridge point" in lines and "compute" in lines and "memory" in lines

    row, lines = _row(_block(out, "ex06_gqa_intensity"), "intensity_table()")
    assert row.startswith("  ok  ") and row.endswith("2/2"), row
    assert "h/h_kv" in lines and "ideal" in lines and "yours" in lines, lines

    row, lines = _row(_block(out, "ex08_mla"), "mla_decode, traced")
    assert row.startswith("  ok  ") and row.endswith("2/2"), row
    assert "no per-head K or V" in lines and "Measured intensity" in lines, lines



def test_mistakes_only_a_measurement_shows_fail_in_the_edition(edition, tmp_path):  # noqa: F811
    """F's K/V copied per query head (repeat_interleave) and H's K/V rebuilt
    per head from the latent fail the public check, named as when graded."""
    sub = copy_solutions(tmp_path / "sub", ["ex06_gqa_intensity", "ex08_mla"])
    for file, name in (("ex06_gqa_intensity", "repeat_interleave"),
                       ("ex08_mla", "cache_rebuilt_kv")):
        m = mutant(file, name)
        (sub / f"{file}.py").write_text(m.apply((SOLUTIONS / f"{file}.py").read_text()))
    out = _check(edition, sub, "F", "H")
    row, lines = _row(_block(out, "ex06_gqa_intensity"), "intensity_table()")
    assert row.startswith("  FAIL"), out
    assert "This looks like: repeat_interleave" in lines, lines
    row, lines = _row(_block(out, "ex08_mla"), "mla_decode, traced")
    assert row.startswith("  FAIL"), out
    assert mutant("ex08_mla", "cache_rebuilt_kv").expect in lines, lines
