"""A grading's fork server: workers forked from one process that imported PyTorch
once, each still with its own uid, folder, limits and fate."""
from __future__ import annotations

import os
import time

import numpy as np
import pytest

from grader.core import Options, grade
from grader.registry import PICTURES
from grader.sandbox import bwrap, confine, forkserver
from grader.sandbox.client import StudentCrash, StudentModule, StudentTimeout
from tests.conftest import SOLUTIONS, copy_solutions, launch, launcher
from tests.test_attacks import _alive

pytestmark = pytest.mark.skipif(not forkserver.supported(), reason="needs Linux")

MODES = ["fallback"] + (["namespaces"] if bwrap.usable()[0] else [])


@pytest.fixture(scope="module", params=MODES)
def namespaces(request):
    return request.param == "namespaces"


def _fork_server(namespaces, needs=("NumPy", "PyTorch")):
    z = launcher("strict" if namespaces else "fallback").fork_server(set(needs))
    z.start()
    assert z.alive, z.failed
    return z


@pytest.fixture(scope="module")
def zyg(namespaces):
    """One per mode for the module's tests (each imports PyTorch once)."""
    z = _fork_server(namespaces)
    yield z
    z.close()


def _worker(folder, module, namespaces, z, **limits):
    w = launch(folder, module, namespaces=namespaces, fork_from=z, **limits)
    w.start()
    return w


def _answers(w) -> bool:
    """ex02's softmax of two equal scores, from a worker on the solutions."""
    return np.allclose(StudentModule(w).softmax(np.array([[0.0, 0.0]])), 0.5)


def _spawned_and_answers(w) -> None:
    try:
        assert not isinstance(w.proc, forkserver.ForkedProcess)
        assert _answers(w)
    finally:
        w.close()


def test_workers_are_forked_and_answer(zyg, namespaces):
    """PyTorch is imported once, by the fork server (which says so at each fork): a
    worker of a PyTorch exercise is forked from it, not started afresh.  How
    much faster that is, is a benchmark (benchmarks/bench_isolation.py)."""
    w = _worker(SOLUTIONS, "ex05_decode_prefill", namespaces, zyg)
    try:
        assert isinstance(w.proc, forkserver.ForkedProcess) and w.load_error is None
        assert StudentModule(w).attention_flops(1, 2, 3, 5, 8) == 4 * 8 * 15 * 2
    finally:
        w.close()


def test_a_worker_that_wants_no_pytorch_is_forked_before_pytorch_is_imported(namespaces):
    """The fork server imports each preload when the first worker that wants
    it is forked: a NumPy exercise's worker (a grading asks for A's, B's and
    C's first) is forked before PyTorch is imported, and answers; a PyTorch
    exercise's worker, asked for next, gets it."""
    from grader.registry import EXERCISES
    assert "torch" not in forkserver.wanted(EXERCISES["ex02_mha"].needs,
                                            EXERCISES["ex02_mha"].preload)
    z = _fork_server(namespaces)
    workers = []
    try:
        workers.append(_worker(SOLUTIONS, "ex02_mha", namespaces, z, fork_wants=("numpy",)))
        assert isinstance(workers[0].proc, forkserver.ForkedProcess)
        assert "numpy" in z.preloaded and "torch" not in z.preloaded, z.preloaded
        assert _answers(workers[0])
        workers.append(_worker(SOLUTIONS, "ex05_decode_prefill", namespaces, z,
                               fork_wants=("torch",)))
        assert "torch" in z.preloaded, z.preloaded
        assert StudentModule(workers[1]).attention_flops(1, 2, 3, 5, 8) == 4 * 8 * 15 * 2
    finally:
        for w in workers:
            w.close()
        z.close()


def test_crash_exit_and_hang_cost_one_worker_only(zyg, namespaces, tmp_path):
    sub = tmp_path / "sub"
    sub.mkdir()
    (sub / "ex01_by_hand.py").write_text(
        "import os, signal\n"
        "def bye():\n    os._exit(3)\n"
        "def segv():\n    os.kill(os.getpid(), signal.SIGSEGV)\n"
        "def spin():\n    while True:\n        pass\n"
        "def fine():\n    return 42\n")
    os.chmod(tmp_path, 0o755)
    os.chmod(sub, 0o755)
    other = _worker(SOLUTIONS, "ex02_mha", namespaces, zyg)
    w = _worker(sub, "ex01_by_hand", namespaces, zyg, call_timeout=1.0)
    s = StudentModule(w)
    try:
        with pytest.raises(StudentCrash, match="exited with code 3"):
            s.bye()
        with pytest.raises(StudentCrash, match="killed by SIGSEGV"):
            s.segv()
        with pytest.raises(StudentTimeout):
            s.spin()
        assert s.fine() == 42        # a fresh fork after each
        assert zyg.alive
        assert _answers(other)
    finally:
        w.close()
        other.close()


@pytest.mark.skipif(not confine.is_root(), reason="needs root (a uid per worker)")
def test_forked_workers_keep_their_own_users_and_folders(zyg, namespaces, tmp_path):
    if not namespaces and not confine.can_drop_privileges():
        pytest.skip("this Python cannot be run by another user (the fallback keeps root)")
    sub = tmp_path / "sub"
    sub.mkdir()
    (sub / "ex01_by_hand.py").write_text(
        "import os\n"
        "def me():\n    return [os.getuid(), os.getcwd()]\n"
        "def peek(path):\n"
        "    try:\n        return sorted(os.listdir(path))\n"
        "    except OSError as exc:\n        return type(exc).__name__\n")
    a = _worker(sub, "ex01_by_hand", namespaces, zyg)
    b = _worker(sub, "ex01_by_hand", namespaces, zyg)
    try:
        (uid_a, cwd_a), (uid_b, cwd_b) = StudentModule(a).me(), StudentModule(b).me()
        assert uid_a != uid_b and 0 not in (uid_a, uid_b)
        assert cwd_a != cwd_b
        assert StudentModule(a).peek(cwd_b) == "PermissionError"
        if namespaces:
            assert a.cgroup is not None or b.cgroup is None
    finally:
        a.close()
        b.close()


def test_a_dead_fork_server_means_spawned_workers(namespaces):
    zyg = _fork_server(namespaces, needs=["NumPy"])   # ex02's worker needs no more
    os.killpg(zyg.proc.pid, 9)
    zyg.proc.wait()
    deadline = time.monotonic() + 5
    while zyg.alive and time.monotonic() < deadline:
        time.sleep(0.05)
    try:
        _spawned_and_answers(_worker(SOLUTIONS, "ex02_mha", namespaces, zyg))
    finally:
        zyg.close()


def test_workers_die_with_their_fork_server(namespaces):
    """Killed with the grading process, the fork server takes its workers along:
    their parent-death signal, and under namespaces the PID namespace."""
    zyg = _fork_server(namespaces, needs=["NumPy"])
    w = _worker(SOLUTIONS, "ex02_mha", namespaces, zyg)
    pid = w.proc.pid
    try:
        os.kill(pid, 0)
        os.killpg(zyg.proc.pid, 9)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and _alive(pid):
            time.sleep(0.05)
        assert not _alive(pid), "a worker outlived its fork server"
    finally:
        w.close()
        zyg.close()


def test_a_grading_forks_from_one_fork_server_and_leaves_nothing(tmp_path, monkeypatch):
    """... and that fork server has imported matplotlib for ex08's pictures
    (``Exercise.preload``), once for every worker that draws."""
    forks, roots, preloaded = [], [], []
    real_fork, real_spawn = forkserver.ForkServer.fork, forkserver.ForkServer._spawn
    real_close = forkserver.ForkServer.close

    def fork(self, cfg, on_forked=None, wants=None):
        forks.append(cfg["cwd"])
        return real_fork(self, cfg, on_forked, wants)

    def spawn(self):
        real_spawn(self)
        roots.append(self.root)

    def close(self):
        preloaded.extend(self.preloaded)   # what it had at its last fork
        real_close(self)

    monkeypatch.setattr(forkserver.ForkServer, "fork", fork)
    monkeypatch.setattr(forkserver.ForkServer, "_spawn", spawn)
    monkeypatch.setattr(forkserver.ForkServer, "close", close)
    sub = copy_solutions(tmp_path / "submission")
    report = grade(sub, Options(exercises=["ex05_decode_prefill", "ex08_mla"]))
    assert not report.errors, report.errors
    assert report.score == report.max_score > 0
    assert len(forks) >= 2 and len(roots) == 1
    assert not roots[0].exists(), "the fork server's folder was left behind"
    assert set(PICTURES) <= set(preloaded) and "torch" in preloaded, preloaded


def test_no_preload_imports_triton():
    """What the fork server preloads for the exercises (their needs' libraries
    and ``Exercise.preload``), imported as it does (``forker``), leaves Triton
    unimported: ex07's worker is forked from it and imports Triton after its
    TRITON_INTERPRET (``torch._dynamo``, which an op trace imports, would
    import it)."""
    import subprocess
    import sys

    from grader.registry import EXERCISES
    names = [forkserver.PRELOAD[n] for n in forkserver.PRELOAD] + \
        [m for e in EXERCISES.values() for m in e.preload]
    assert "torch._dynamo" in names
    code = ("import sys\nfrom grader.sandbox.runtime.fork_server_loop import _import_without_triton\n"
            f"for m in {names!r}: _import_without_triton(m)\n"
            f"assert all(m in sys.modules for m in {names!r})\n"
            "print([m for m in sys.modules if m == 'triton' or m.startswith('triton.')])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=300, cwd=str(SOLUTIONS.parent))
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == "[]", out.stdout


def test_interpreted_kernels_run_beside_the_preloaded_traces(tmp_path, monkeypatch):
    """A grading of F, G and H: its fork server preloaded F's and H's op
    traces' imports and H's matplotlib (``Exercise.preload``), and G's
    worker, forked from it, still runs its kernels in Triton's interpreter."""
    preloaded = []
    real_close = forkserver.ForkServer.close

    def close(self):
        preloaded.extend(self.preloaded)   # what it had at its last fork
        real_close(self)

    monkeypatch.setattr(forkserver.ForkServer, "close", close)
    monkeypatch.setattr(bwrap, "gpu_devices", lambda: [])
    sub = copy_solutions(tmp_path / "submission")
    report = grade(sub, Options(
        exercises=["ex06_gqa_intensity", "ex07_flash_attention", "ex08_mla"],
        keyword="test_flash_attention_small or test_intensity_table_measured "
                "or test_mla_decode_traced"))
    assert not report.errors, report.errors
    assert {t.exercise for t in report.tests if t.status == "passed"} == {
        "ex06_gqa_intensity", "ex07_flash_attention", "ex08_mla"}
    assert report.score == report.max_score > 0, [
        (t.name, t.output[:300]) for t in report.tests if t.status != "passed"]
    assert {"torch._dynamo", *PICTURES} <= set(preloaded), preloaded


def test_a_fork_server_that_cannot_start_says_why_and_workers_spawn(monkeypatch):
    def no_answer(self, timeout):
        raise forkserver.ForkServerError("no answer within 0 s")
    monkeypatch.setattr(forkserver.ForkServer, "_receive", no_answer)
    z = launcher("fallback").fork_server({"NumPy"})
    z.start()
    assert not z.alive and "no answer" in z.failed and z.root is None
    _spawned_and_answers(_worker(SOLUTIONS, "ex02_mha", False, z))


def test_a_gpu_exercise_is_not_forked_on_a_gpu_machine(monkeypatch):
    from grader.core import GradingPlugin
    from grader.registry import EXERCISES
    from grader.report import Report
    plugin = GradingPlugin(SOLUTIONS, Options(), Report(submission="x", suite="hidden",
                                                        exercises=[]))
    plugin.fork_server = object()
    monkeypatch.setattr(bwrap, "gpu_devices", lambda: ["/dev/nvidia0"])
    assert plugin._fork_server_for(EXERCISES["ex07_flash_attention"]) is None
    assert plugin._fork_server_for(EXERCISES["ex05_decode_prefill"]) is plugin.fork_server
    monkeypatch.setattr(bwrap, "gpu_devices", lambda: [])
    assert plugin._fork_server_for(EXERCISES["ex07_flash_attention"]) is plugin.fork_server


def test_a_fork_server_begun_early_has_imported_what_its_first_worker_wants(namespaces):
    """``begin(eager)``: spawned now, it imports ``eager`` of its preloads at
    once, before any worker asks (the command line begins it before its own
    imports); one not begun imports nothing before a worker wants it."""
    for eager in [("numpy",), ()]:
        z = launcher("strict" if namespaces else "fallback").fork_server({"NumPy", "PyTorch"})
        try:
            z.begin(eager)
            z.start()
            assert z.alive, z.failed
            w = _worker(SOLUTIONS, "ex02_mha", namespaces, z, fork_wants=())
            try:
                assert isinstance(w.proc, forkserver.ForkedProcess)
                assert z.preloaded == list(eager), z.preloaded   # torch: not eager, not wanted
                assert _answers(w)
            finally:
                w.close()
        finally:
            z.close()
        assert z.root is None
