"""A worker's end reads its own tree, not every process on the machine, and
still kills a detached daemon of its uid; and a grading of the NumPy
exercises A-C imports no PyTorch in the grading process."""
from __future__ import annotations

import json
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from grader.sandbox import confine
from tests.test_launch import DAEMON, _running

REPO = Path(__file__).resolve().parent.parent


def _close_scenario(folder: str, token: str) -> dict:
    """A worker with a uid of its own but no cgroup starts a daemon
    (a new session, a double fork); its close must kill it (``kill_uid``)
    without reading all of /proc (``confine._proc_table``).  Run in a process
    of its own: this process is the subreaper that adopts the daemon."""
    import os
    import time

    from grader.sandbox import memcg
    from grader.sandbox.client import StudentModule
    from grader.sandbox.launch import Launcher

    def no_cgroup(self, limit):
        raise OSError("no cgroup in this test")
    memcg.MemoryCgroup.__init__ = no_cgroup
    launcher = Launcher.here("auto")   # namespaces where they work: spawned, never forked
    worker = launcher.worker(Path(folder), "ex02_mha", call_timeout=10)
    assert StudentModule(worker).start(token, 120) == 1
    deadline = time.monotonic() + 60
    while not _running(token) and time.monotonic() < deadline:
        time.sleep(0.05)
    started, uid = bool(_running(token)), worker.uid
    if uid is None:
        worker.close()
        return {"skip": "workers get no uid of their own here"}
    scans = []
    table = confine._proc_table

    def counted():
        scans.append(1)
        return table()
    confine._proc_table = counted
    try:
        worker.close()
    finally:
        confine._proc_table = table
    left = _running(token)
    for pid in left:
        os.kill(pid, 9)
    return {"started": started, "left": left, "scans": len(scans), "uid": uid}


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux only")
def test_a_workers_close_kills_its_uids_daemon_without_scanning_proc(tmp_path):
    if not confine.is_root():
        pytest.skip("workers get no uid of their own here (not root)")
    sub = tmp_path / "sub"
    sub.mkdir()
    tmp_path.chmod(0o755)
    (sub / "ex02_mha.py").write_text(DAEMON)
    token = f"attn-daemon-{uuid.uuid4().hex}"
    run = subprocess.run(
        [sys.executable, "-c", "import json, sys\n"
         "from tests.test_worker_close import _close_scenario\n"
         "print(json.dumps(_close_scenario(sys.argv[1], sys.stdin.read())))", str(sub)],
        input=token, cwd=REPO, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-3000:]
    seen = json.loads(run.stdout.strip().splitlines()[-1])
    if "skip" in seen:
        pytest.skip(seen["skip"])
    assert seen["uid"] is not None and seen["started"], seen
    assert seen["left"] == [], "the daemon outlived its worker"
    assert seen["scans"] == 0, "the worker's close read every process's status"
