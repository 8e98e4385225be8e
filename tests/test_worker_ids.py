"""Worker user ids across graders: two gradings on one machine (``batch
--jobs``, a test run's workers, two instructors' runs) never share an id.

A shared id is a lost grade: when one grader releases its id it kills every
process running as it (and removes its files), so the other grader's worker
dies mid-test ("killed by SIGKILL"), a correct submission failing."""
from __future__ import annotations

import subprocess
import sys

import pytest

from grader.paths import REPO_DIR
from grader.sandbox import confine

pytestmark = [pytest.mark.quick,
              pytest.mark.skipif(not confine.is_root() or confine.uid_registry() is None,
                                 reason="only root hands out worker ids")]

HOLD = """\
from grader.sandbox import confine
confine.UID_RANGE = ({uid}, {uid})
print(confine.fresh_uid(), flush=True)
import sys
sys.stdin.read()        # holds its id until told to go (or killed)
"""


def hold_in_another_process(uid: int) -> subprocess.Popen:
    proc = subprocess.Popen([sys.executable, "-c", HOLD.format(uid=uid)], cwd=REPO_DIR,
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == str(uid)
    return proc


def test_an_id_another_grader_holds_is_never_handed_out(monkeypatch):
    # The other grader holds 62000 without any process running as it (its
    # worker has exited, its clean-up has not run yet): the case /proc misses.
    monkeypatch.setattr(confine, "UID_RANGE", (62000, 62001))
    other = hold_in_another_process(62000)
    try:
        mine = confine.fresh_uid()
        assert mine == 62001
        with pytest.raises(RuntimeError, match="no free user id"):
            confine.fresh_uid()
        confine.release_uid(mine)
    finally:
        other.kill()        # a grader that dies frees its ids with it
        other.wait()
    again = confine.fresh_uid()
    try:
        assert again in (62000, 62001)
        with_other = confine.fresh_uid()    # both are free now
        assert {again, with_other} == {62000, 62001}
        confine.release_uid(with_other)
    finally:
        confine.release_uid(again)


def test_a_released_id_is_free_for_another_grader(monkeypatch):
    monkeypatch.setattr(confine, "UID_RANGE", (62002, 62002))
    uid = confine.fresh_uid()
    confine.release_uid(uid)
    other = hold_in_another_process(62002)      # would hang on a held lock: it cannot
    other.stdin.close()
    assert other.wait(timeout=60) == 0
