"""Batch grading through one long-lived grading process per --jobs slot
(``grader.classroom.slots``): the start-up is paid once per slot, and still
nothing of one submission reaches the next, and a slot that dies costs only
its own submission.

They grade exercise A only: its grading imports no PyTorch."""
from __future__ import annotations

import csv
import json
import os
import threading
from pathlib import Path

import pytest
from click.testing import CliRunner

from grader.classroom.batch import Submission, run_batch
from grader.classroom.gradebook import Gradebook
from grader.classroom.slots import FAULT_ENV, STARTS_ENV, Slot, SlotFailed, SlotPool
from grader.cli import main
from grader.core import Options
from tests.conftest import copy_solutions, ex01_max

ONLY_A = Options(suite="hidden", exercises=["ex01_by_hand"])
MARK = "slot-hostile-mark"

# Exercise A's module that, when imported in its worker, leaves a file in
# each place a worker may write (its folder, its home, the temp folders) and
# a detached process that keeps writing more.
HOSTILE = f'''
import os, subprocess, sys, tempfile
for where in (os.getcwd(), os.path.expanduser("~"), tempfile.gettempdir(), "/tmp",
              "/var/tmp", "/dev/shm"):
    try:
        with open(os.path.join(where, "{MARK}"), "w") as f:
            f.write("left behind")
    except OSError:
        pass
subprocess.Popen([sys.executable, "-c",
                  "import time\\nwhile True:\\n"
                  " open('/tmp/{MARK}-bg', 'w').write('{MARK}')\\n time.sleep(0.2)"],
                 start_new_session=True, stdin=subprocess.DEVNULL,
                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
'''

# A correct exercise A that fails to import (and so earns nothing) if it can
# see anything the hostile one left: a file, or a process.
PEEKER = f'''
import os, tempfile
_seen = [os.path.join(w, n) for w in {{os.getcwd(), os.path.expanduser("~"),
                                       tempfile.gettempdir(), "/tmp", "/var/tmp", "/dev/shm"}}
         if os.path.isdir(w) for n in os.listdir(w) if "{MARK}" in n]
for _pid in [p for p in os.listdir("/proc") if p.isdigit()]:
    try:
        with open(f"/proc/{{_pid}}/cmdline", "rb") as _f:
            if b"{MARK}" in _f.read() and int(_pid) != os.getpid():
                _seen.append("process " + _pid)
    except OSError:
        pass
if _seen:
    raise RuntimeError("saw the previous submission: " + ", ".join(_seen))
'''


def _marked_processes() -> list[int]:
    found = []
    for pid in (p for p in os.listdir("/proc") if p.isdigit()):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                if f"{MARK}-bg".encode() in f.read():
                    found.append(int(pid))
        except OSError:
            continue
    return found


@pytest.mark.slow
def test_a_batch_starts_one_grading_process_per_slot(tmp_path, monkeypatch):
    starts = tmp_path / "starts"
    starts.mkdir()
    monkeypatch.setenv(STARTS_ENV, str(starts))
    for name in ("ann", "ben", "cat", "dan", "eve"):
        copy_solutions(tmp_path / "class" / name, ["ex01_by_hand"])
    out = tmp_path / "grades.csv"
    result = CliRunner().invoke(main, ["batch", str(tmp_path / "class"), "--out", str(out),
                                       "--jobs", "2", "-e", "ex01"])
    assert result.exit_code == 0, result.output
    assert "5 graded" in result.output
    rows = list(csv.DictReader(out.open()))
    assert len(rows) == 5 and all(float(r["total"]) == ex01_max() for r in rows), rows
    started = sorted(int(p.name) for p in starts.iterdir())
    assert 1 <= len(started) <= 2, started
    # Each slot has ended with the batch.
    assert not any(Path(f"/proc/{pid}").exists() for pid in started)


@pytest.mark.slow
def test_a_slot_keeps_its_fork_server_and_answers_each_request(tmp_path):
    sub = copy_solutions(tmp_path / "sub", ["ex01_by_hand"])
    slot = Slot()
    try:
        for i in range(2):
            code, error = slot.grade(sub, ONLY_A.argv(), tmp_path / f"r{i}.json", timeout=300)
            assert (code, error) == (0, "")
            assert json.loads((tmp_path / f"r{i}.json").read_text())["score"] == ex01_max()
        # The second grading forked its workers from the first's fork server.
        assert slot.answer["fork_servers"] == 1
        # A request the grade command refuses is its one sentence, exit 2, and the
        # slot goes on.
        code, error = slot.grade(tmp_path / "nope", ONLY_A.argv(), tmp_path / "x.json", 300)
        assert code == 2 and "does not exist" in error
        code, _ = slot.grade(sub, ONLY_A.argv(), tmp_path / "r3.json", timeout=300)
        assert code == 0
    finally:
        slot.close()
    assert slot.proc.returncode == 0


@pytest.mark.slow
def test_a_hostile_submission_leaves_nothing_for_the_next_in_its_slot(tmp_path):
    root = tmp_path / "class"
    copy_solutions(root / "a_hostile", ["ex01_by_hand"])
    (root / "a_hostile" / "ex01_by_hand.py").write_text(
        (root / "a_hostile" / "ex01_by_hand.py").read_text() + HOSTILE)
    copy_solutions(root / "b_peeker", ["ex01_by_hand"])
    (root / "b_peeker" / "ex01_by_hand.py").write_text(
        (root / "b_peeker" / "ex01_by_hand.py").read_text() + PEEKER)
    # The peeker's eyes work: in one module, after the hostile code, it sees.
    copy_solutions(root / "c_both", ["ex01_by_hand"])
    (root / "c_both" / "ex01_by_hand.py").write_text(
        (root / "c_both" / "ex01_by_hand.py").read_text() + HOSTILE + PEEKER)
    before = _marked_processes()
    book = Gradebook(tmp_path / "grades.sqlite")
    subs = [Submission(n, root / n, n) for n in ("a_hostile", "b_peeker", "c_both")]
    # One job: both in the same slot, the hostile one first.
    outcomes = {o.submission.name: o for o in
                run_batch(subs, tmp_path / "results", ONLY_A, book=book, jobs=1)}
    peeker = outcomes["b_peeker"]
    assert not peeker.error and not peeker.import_errors, (peeker.error, peeker.import_errors)
    assert peeker.scores["ex01_by_hand"] == (ex01_max(), ex01_max())
    # The hostile one ran (and earned its points: its answers are right).
    assert outcomes["a_hostile"].scores["ex01_by_hand"][0] == ex01_max()
    assert "saw the previous submission" in outcomes["c_both"].import_errors["ex01_by_hand"]
    # Its background process went with its worker; nothing of it on this machine.
    assert _marked_processes() == before
    assert not Path("/tmp", f"{MARK}-bg").exists() and not Path("/tmp", MARK).exists()


@pytest.mark.slow
def test_a_slot_that_crashes_is_replaced_and_only_its_submission_is_lost(tmp_path,
                                                                          monkeypatch):
    starts = tmp_path / "starts"
    starts.mkdir()
    monkeypatch.setenv(STARTS_ENV, str(starts))
    monkeypatch.setenv(FAULT_ENV, "b_crash")     # its slot kills itself when it gets it
    root = tmp_path / "class"
    for name in ("a_ok", "b_crash", "c_ok"):
        copy_solutions(root / name, ["ex01_by_hand"])
    book = Gradebook(tmp_path / "grades.sqlite")
    subs = [Submission(n, root / n, n) for n in ("a_ok", "b_crash", "c_ok")]
    outcomes = {o.submission.name: o for o in
                run_batch(subs, tmp_path / "results", ONLY_A, book=book, jobs=1)}
    for name in ("a_ok", "c_ok"):
        assert not outcomes[name].error
        assert outcomes[name].scores["ex01_by_hand"] == (ex01_max(), ex01_max())
    crashed = outcomes["b_crash"]
    assert "the grader exited with -9" in crashed.error
    data = json.loads(crashed.result_path.read_text())
    assert data["extra_data"]["batch_fault"] == "grader" and data["score"] == 0
    row = next(r for r in book.rows() if r.submission == "b_crash")
    assert row.grading_failed     # a regrade, not the student's zero
    # The first slot, the one that replaced it for the retry, and the one that
    # replaced that for c_ok: the crash was tried twice, never more.
    assert len(list(starts.iterdir())) == 3


@pytest.mark.slow
def test_a_stopped_pool_ends_the_grading_under_way_and_starts_no_slot(tmp_path):
    """What an interrupted batch does (``run_batch`` on Ctrl-C): the slot grading a
    submission whose import hangs is killed at once, long before the import's
    own limit (60 s) would end that grading, and no slot starts after."""
    sub = copy_solutions(tmp_path / "hang", ["ex01_by_hand"])
    (sub / "ex01_by_hand.py").write_text("while True:\n    pass\n")
    pool = SlotPool(1)
    slot = pool.acquire()
    ended: list = []

    def grade():
        try:
            ended.append(slot.grade(sub, ONLY_A.argv(), tmp_path / "r.json", timeout=600))
        except SlotFailed as exc:
            ended.append(exc)
    thread = threading.Thread(target=grade)
    thread.start()
    thread.join(timeout=5)          # under way (its worker importing, or its start)
    pool.stop()
    thread.join(timeout=45)
    assert not thread.is_alive() and isinstance(ended[0], SlotFailed), ended
    assert slot.proc.returncode is not None
    with pytest.raises(SlotFailed, match="stopped"):
        pool.acquire()
    pool.close()


@pytest.mark.slow
def test_a_slot_is_renewed_after_its_share_of_gradings(tmp_path):
    sub = copy_solutions(tmp_path / "sub", ["ex01_by_hand"])
    pool = SlotPool(1, gradings_per_slot=2)
    used = []
    try:
        for i in range(3):
            slot = pool.acquire()
            used.append(slot)
            assert slot.grade(sub, ONLY_A.argv(), tmp_path / f"r{i}.json", timeout=300) == (0, "")
            pool.release(slot)
    finally:
        pool.close()
    assert used[0] is used[1] and used[2] is not used[0] and pool.started == 2
    assert used[0].proc.returncode == 0     # closed, not killed
