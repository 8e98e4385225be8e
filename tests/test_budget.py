"""Bounded time, whatever the submission does: crashes count toward the
cut-off as time-outs do, each exercise has a budget and the grading another,
and once one is spent the rest fails at once with one sentence, while the
result is still written."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.conftest import copy_solutions, grade_dir

# Sleeps just under the import limit, then every call sleeps and exits: the red
# team's submission that held a grading for hours (each test re-imported it).
SLOW_CRASH = '''
import os, time
time.sleep({import_s})
def __getattr__(name):
    def crash(*args, **kwargs):
        time.sleep({call_s})
        os._exit(1)
    return crash
'''


def _outputs(report, exercise):
    return [t.output for t in report.tests if t.exercise == exercise]


def test_crashes_count_toward_the_cut_off(tmp_path):
    """After four crashes no further call is tried: the rest fails at once
    with one sentence, instead of re-importing the module for every test."""
    sub = tmp_path / "sub"
    sub.mkdir()
    (sub / "ex02_mha.py").write_text(SLOW_CRASH.format(import_s=0.2, call_s=0.0))
    report = grade_dir(sub, ["ex02_mha"], import_timeout=5)
    out = _outputs(report, "ex02_mha")
    crashed = [o for o in out if "exited with code 1" in o]
    cut = [o for o in out if "ran out of time or crashed" in o]
    assert len(crashed) == 4, out
    assert len(cut) == len(out) - 4 > 10, out
    assert not report.errors and report.score == 0 and report.max_score > 0


def test_an_exercise_budget_cuts_the_rest_and_another_exercise_keeps_its_own(tmp_path):
    """ex02's calls are slow (2.5 s each, within the call limit); its
    budget of 10 s runs out and the rest of ex02 fails saying so; ex01, graded
    in the same run, keeps full marks on a budget of its own (the same 10 s:
    far more than its worker's start and its calls take on a loaded machine,
    where a budget of 3 s could be spent by ex01 itself)."""
    sub = copy_solutions(tmp_path / "sub", ["ex01_by_hand"])
    (sub / "ex02_mha.py").write_text(
        "import time\n"
        "def __getattr__(name):\n"
        "    def slow(*args, **kwargs):\n"
        "        time.sleep(2.5)\n"
        "        return 0\n"
        "    return slow\n")
    report = grade_dir(sub, ["ex01_by_hand", "ex02_mha"], exercise_budget=10)
    out = _outputs(report, "ex02_mha")
    spent = [o for o in out if "ex02_mha's time budget of 10 s is spent" in o]
    assert spent and len(spent) >= len(out) - 6, out
    assert all("--exercise-budget" in o for o in spent)
    scores = report.exercise_scores()
    assert scores["ex01_by_hand"][0] == scores["ex01_by_hand"][1] > 0
    assert not report.errors


def test_the_grading_budget_ends_the_grading_with_a_result(tmp_path):
    """The command line as an instructor runs it, on the slow-crashing
    submission in two exercises with a grading budget of 6 s: it exits as a
    grading does (not 1 with no file), the JSON is written and loads, and
    the tests after the budget say which budget was spent."""
    sub = tmp_path / "sub"
    sub.mkdir()
    for name in ("ex02_mha", "ex03_gqa"):
        (sub / f"{name}.py").write_text(SLOW_CRASH.format(import_s=1.0, call_s=0.5))
    out = tmp_path / "result.json"
    cli = Path(sys.executable).parent / "attn-grade"
    proc = subprocess.run([str(cli), "grade", str(sub), "-e", "ex02_mha", "-e", "ex03_gqa",
                           "--grading-budget", "6",
                           "--format", "json", "--out", str(out)],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    data = json.loads(out.read_text())
    texts = [t["output"] for t in data["tests"]]
    assert any("this grading's time budget of 6 s is spent" in t for t in texts), texts
    assert data["score"] == 0 and len(texts) > 20
