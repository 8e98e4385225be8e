"""`--fail-on-lost-points`: exit status 1 when a point was lost (for CI jobs)."""
from __future__ import annotations

import shutil

from click.testing import CliRunner

from grader.cli import main
from tests.conftest import EXERCISES_DIR, copy_solutions

EX = "ex01_by_hand"


def test_grade_exit_status_follows_lost_points(tmp_path):
    good = copy_solutions(tmp_path / "good", [EX])
    bad = tmp_path / "bad"
    bad.mkdir()
    shutil.copy(EXERCISES_DIR / f"{EX}.py", bad / f"{EX}.py")      # the stub: all lost
    runner = CliRunner()
    ok = runner.invoke(main, ["grade", str(good), "-e", EX, "--fail-on-lost-points"])
    assert ok.exit_code == 0, ok.output
    lost = runner.invoke(main, ["grade", str(bad), "-e", EX, "--fail-on-lost-points"])
    assert lost.exit_code == 1, lost.output
    assert "points lost" in lost.output
    plain = runner.invoke(main, ["grade", str(bad), "-e", EX])        # without the flag
    assert plain.exit_code == 0, plain.output


def test_batch_exit_status_follows_lost_points(tmp_path):
    subs = tmp_path / "subs"
    copy_solutions(subs / "alice", [EX])
    (subs / "bob").mkdir()
    shutil.copy(EXERCISES_DIR / f"{EX}.py", subs / "bob" / f"{EX}.py")
    res = CliRunner().invoke(main, ["batch", str(subs), "-e", EX, "--out",
                                    str(tmp_path / "g.csv"), "--fail-on-lost-points"])
    assert res.exit_code == 1, res.output
    shutil.rmtree(subs / "bob")
    res = CliRunner().invoke(main, ["batch", str(subs), "-e", EX, "--out",
                                    str(tmp_path / "g.csv"), "--fail-on-lost-points"])
    assert res.exit_code == 0, res.output


def test_help_documents_the_flag():
    for cmd in ("grade", "batch"):
        out = CliRunner().invoke(main, [cmd, "--help"]).output
        assert "--fail-on-lost-points" in out and "status 1" in out
