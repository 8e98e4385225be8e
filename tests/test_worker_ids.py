"""Worker user ids across graders: two gradings on one machine (``batch
--jobs``, a test run's workers, two instructors' runs) never share an id.

A shared id is a lost grade: when one grader releases its id it kills every
process running as it (and removes its files), so the other grader's worker
dies mid-test ("killed by SIGKILL"), a correct submission failing."""
from __future__ import annotations

import os
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


# -- the ids of real accounts ---------------------------------------------------------
def test_an_account_s_id_is_never_handed_out(monkeypatch):
    """The passwd database is asked: an id in the range that an account has
    (a fake lookup here: 62010 is someone's) is skipped, and a range holding
    only accounts' ids has no free id."""
    import pwd
    real = pwd.getpwuid

    def getpwuid(uid):
        if uid == 62010:
            return real(0)         # any entry: the id belongs to an account
        raise KeyError(uid)
    monkeypatch.setattr(pwd, "getpwuid", getpwuid)
    monkeypatch.setattr(confine, "UID_RANGE", (62010, 62011))
    taken = [confine.fresh_uid() for _ in range(1)]
    try:
        assert taken == [62011]
        with pytest.raises(RuntimeError, match="no free user id"):
            confine.fresh_uid()
    finally:
        confine.release_uid(taken[0])
    monkeypatch.setattr(confine, "UID_RANGE", (62010, 62010))
    with pytest.raises(RuntimeError, match="no free user id"):
        confine.fresh_uid()


ACCOUNT = "attn-doors-probe"
ACCOUNT_UID = 62020


@pytest.fixture
def account(tmp_path):
    """A real account with an id in the workers' range (made with
    ``useradd``, removed afterwards), a process running as it and a file it
    owns in a shared folder."""
    import shutil
    if shutil.which("useradd") is None or shutil.which("userdel") is None:
        pytest.skip("needs useradd and userdel")
    made = subprocess.run(["useradd", "-M", "-N", "-u", str(ACCOUNT_UID), "-s", "/bin/false",
                           ACCOUNT], capture_output=True, text=True)
    if made.returncode != 0:
        pytest.skip(f"useradd could not make the account: {made.stderr.strip()}")
    shared = tmp_path / "shared"
    shared.mkdir(mode=0o1777)
    (shared / "theirs").write_text("an account's file")
    os.chown(shared / "theirs", ACCOUNT_UID, ACCOUNT_UID)
    proc = subprocess.Popen(["sleep", "300"], user=ACCOUNT_UID, group=ACCOUNT_UID,
                            extra_groups=[], cwd="/")
    try:
        yield shared, proc
    finally:
        proc.kill()
        proc.wait()
        subprocess.run(["userdel", ACCOUNT], capture_output=True)


def test_clean_up_never_touches_a_real_account(account, monkeypatch):
    """Clean-up acts only on ids this grader reserved, and never on one an
    account has: neither asked directly nor after the account appeared with
    an id the grader held (made while its worker ran)."""
    shared, proc = account
    confine.kill_uid(ACCOUNT_UID)
    assert confine.remove_leftovers(ACCOUNT_UID, folders=[shared]) == []
    confine.release_uid(ACCOUNT_UID)
    assert proc.poll() is None and (shared / "theirs").exists()
    # Held by this grader, then taken by an account: still left alone.
    monkeypatch.setattr(confine, "has_account", lambda uid: False)
    monkeypatch.setattr(confine, "UID_RANGE", (ACCOUNT_UID, ACCOUNT_UID))
    monkeypatch.setattr(confine, "_running_uids", lambda: set())
    assert confine.fresh_uid() == ACCOUNT_UID
    monkeypatch.undo()
    confine.release_uid(ACCOUNT_UID)
    assert proc.poll() is None and (shared / "theirs").exists()
    assert ACCOUNT_UID in confine._used_uids        # not freed: it is not a worker's now
    confine._used_uids.discard(ACCOUNT_UID)
    confine._unreserve(ACCOUNT_UID)
    assert os.stat(shared / "theirs").st_uid == ACCOUNT_UID
