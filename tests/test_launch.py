"""One launch path: every process that runs student code comes from
``grader.sandbox.launch``, is confined as the grading's isolation says,
and takes everything it started with it when its exercise ends.

Each kind of worker is tested from inside (the submission looks around at
import and reports what it saw in its error), under namespaces and in the
fallback where the fallback promises anything on this machine.
"""
from __future__ import annotations

import ast
import json
import os
import socket
import shutil
import subprocess
import sys
import tempfile
import textwrap
import time
import uuid
from pathlib import Path

import pytest

from grader.paths import HIDDEN_SUITES_DIR, PACKAGE_DIR, REPO_DIR, SOLUTIONS_DIR
from grader.sandbox import bwrap, confine, memcg, process
from grader.sandbox.client import StudentCrash, StudentModule
from tests.conftest import REPO, copy_solutions, grade_dir, launch, launcher

NAMESPACES, WHY = bwrap.usable()
needs_namespaces = pytest.mark.skipif(not NAMESPACES, reason=f"no namespaces here: {WHY}")
# In the fallback a worker is confined only by a uid of its own: as root with a
# Python an unprivileged user can run.  Elsewhere it promises nothing (the
# report says "NO ISOLATION"), and there is nothing to test from inside.
FALLBACK_CONFINES = confine.can_drop_privileges()
MODES = [pytest.param(True, id="namespaces", marks=needs_namespaces),
         pytest.param(False, id="fallback", marks=pytest.mark.skipif(
             not FALLBACK_CONFINES, reason="the fallback runs workers as the grading user "
             "here (this Python cannot be run by another user): it promises nothing"))]
EX07 = "ex07_flash_attention"
LAUNCHER = "grader/sandbox/launch.py"
# The mechanism beneath the launcher: it starts what the launcher asks for.
MECHANISM = {"grader/sandbox/process.py", "grader/sandbox/client.py", "grader/sandbox/forkserver.py"}


def _python_files():
    for folder in ("grader", "benchmarks", "tests"):
        for path in sorted((REPO / folder).rglob("*.py")):
            if "__pycache__" not in path.parts:
                yield path, path.relative_to(REPO).as_posix()


def _constructions(tree: ast.AST) -> list[tuple[str, int]]:
    """Calls that build a worker or a fork server, or start the worker program."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            name = getattr(node.func, "attr", None) or getattr(node.func, "id", None)
            if name in ("Worker", "ForkServer", "LockedWorker", "spawn"):
                found.append((name, node.lineno))
        if isinstance(node, ast.ClassDef):   # a subclass is another way to make one
            if any(getattr(b, "attr", getattr(b, "id", "")) == "Worker" for b in node.bases):
                found.append((f"class {node.name}(Worker)", node.lineno))
        if isinstance(node, ast.Constant) and node.value == "worker.py":
            found.append(("'worker.py'", node.lineno))
    return found


def test_no_code_but_the_launcher_makes_a_worker():
    """A worker, a fork server or the worker program is made in launch.py alone
    (and started by the mechanism it calls): nowhere else in the package,
    its benchmarks or its tests."""
    offenders = []
    for path, rel in _python_files():
        if rel == LAUNCHER or rel in MECHANISM or rel == "tests/test_launch.py":
            continue
        for name, line in _constructions(ast.parse(path.read_text())):
            offenders.append(f"{rel}, line {line}: {name}")
    assert not offenders, "build workers with grader.sandbox.launch:\n" + "\n".join(offenders)
    # ... and the mechanism makes them only where it is asked to.
    made = {rel: [n for n, _ in _constructions(ast.parse(path.read_text()))]
            for path, rel in _python_files() if rel in MECHANISM}
    assert made["grader/sandbox/client.py"] == ["spawn"]
    assert made["grader/sandbox/forkserver.py"] == ["spawn"]
    assert sorted(set(made["grader/sandbox/process.py"])) == ["'worker.py'"]
    launcher_made = {n for n, _ in _constructions(ast.parse((REPO / LAUNCHER).read_text()))}
    assert launcher_made == {"Worker", "ForkServer"}


def test_the_launch_takes_no_sandbox_settings():
    """No caller can ask for a weaker worker: what confines it is not a
    parameter of the launcher's ``worker`` nor of ``Limits``."""
    import dataclasses
    import inspect

    from grader.sandbox.client import Limits
    from grader.sandbox.launch import Launcher
    params = set(inspect.signature(Launcher.worker).parameters)
    fields = {f.name for f in dataclasses.fields(Limits)}
    for word in ("namespaces", "drop_privileges", "isolation", "uid", "confinement"):
        assert word not in params and word not in fields


# -- what a worker sees, from inside -------------------------------------------------
LOOK = '''
import importlib.util, json, os, socket
def look():
    seen = {{"interpret": os.environ.get("TRITON_INTERPRET")}}
    seen["grader"] = importlib.util.find_spec("grader") is not None
    seen["paths"] = [p for p in {paths!r} if os.path.exists(p)]
    readable = []
    for p in {paths!r}:
        try:
            os.listdir(p)
            readable.append(p)
        except OSError:
            pass
    seen["readable"] = readable
    seen["uid"] = os.getuid()
    host = []
    for pid in os.listdir("/proc"):
        try:
            with open(f"/proc/{{pid}}/cmdline", "rb") as f:
                if {token!r}.encode() in f.read():
                    host.append(pid)
        except OSError:
            pass
    seen["host_processes"] = host
    try:
        socket.create_connection(("127.0.0.1", {port}), timeout=1).close()
        seen["network"] = True
    except OSError:
        seen["network"] = False
    return "SEEN" + json.dumps(seen) + "NEES"
'''
# At import (a worker's load), or only where the module is imported as on a
# GPU (ex07's compile worker) and in a call (its own worker, the interpreter's).
AT_IMPORT = "raise RuntimeError(look())\n"
COMPILE_AND_CALL = ('if os.environ.get("TRITON_INTERPRET") != "1":\n    raise RuntimeError(look())\n'
                    'def flash_attention(*args, **kwargs):\n    raise RuntimeError(look())\n')


@pytest.fixture
def listener():
    """A listener on the host's loopback, and a token on this process's
    command line (``sys.argv`` is what /proc shows): what a worker must not reach."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(8)
    yield sock.getsockname()[1]
    sock.close()


def _look(port: int, tail: str = AT_IMPORT) -> str:
    paths = [str(p) for p in (PACKAGE_DIR, HIDDEN_SUITES_DIR, SOLUTIONS_DIR, REPO_DIR / "tests",
                              PACKAGE_DIR / "reference" / "secret")]
    return LOOK.format(paths=paths, token=_TOKEN, port=port) + tail


_TOKEN = f"attn-host-{uuid.uuid4().hex}"


@pytest.fixture
def host_token():
    """A process on the host whose command line holds ``_TOKEN``."""
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)", _TOKEN])
    yield proc.pid
    proc.kill()
    proc.wait()


def _seen(text: str) -> list[dict]:
    out = []
    while "SEEN" in text:
        head, _, rest = text.partition("SEEN")
        body, _, text = rest.partition("NEES")
        out.append(json.loads(body))
    return out


def _assert_blind(seen: dict, namespaces: bool = True) -> None:
    """Under namespaces the worker sees nothing; the fallback promises less
    (THREAT_MODEL's table: its own uid and the secret folders 0700, the
    machine's network and /proc shared): no secret folder it can read."""
    if namespaces:
        assert seen == {**seen, "grader": False, "paths": [], "host_processes": [],
                        "network": False}, seen
        return
    secret = {str(p) for p in confine.secret_paths()}
    assert seen["uid"] != 0 and not secret & set(seen["readable"]), seen


@pytest.mark.parametrize("namespaces", MODES)
def test_an_exercise_worker_and_the_compile_worker_see_nothing(tmp_path, namespaces,
                                                                listener, host_token):
    """Graded as a student's submission is: ex07's own worker (under the
    interpreter) and its compile worker (without) each import the module
    that looks around; neither sees the grader, a secret, a host process
    or the network."""
    sub = tmp_path / "sub"
    sub.mkdir()
    (sub / f"{EX07}.py").write_text(_look(listener, COMPILE_AND_CALL))
    report = grade_dir(sub, [EX07], suite="public",
                       isolation="strict" if namespaces else "fallback", check_cache=None,
                       fresh=True)
    seen = _seen("\n".join(t.output for t in report.tests))
    interpreters = {s["interpret"] for s in seen}
    assert interpreters == {"1", None}, seen    # both kinds of worker reported
    for s in seen:
        _assert_blind(s, namespaces)


@pytest.mark.parametrize("namespaces", MODES)
@pytest.mark.parametrize("kind", ["speed", "forked"])
def test_the_speed_worker_and_a_forked_worker_see_nothing(tmp_path, namespaces, kind,
                                                           listener, host_token):
    """ex07's speed worker (its copy of the submission read-only) and a worker
    forked by a grading's fork server, made as grading makes them."""
    sub = tmp_path / "sub"
    sub.mkdir()
    (sub / "ex05_decode_prefill.py").write_text(_look(listener))
    mode = "strict" if namespaces else "fallback"
    if not namespaces:
        confine.protect_secrets()      # a grading's first step there
    zyg = None
    if kind == "forked":
        zyg = launcher(mode).fork_server({"NumPy", "PyTorch"})
        zyg.start()
        assert zyg.alive, zyg.failed
    try:
        worker = launch(sub, "ex05_decode_prefill", namespaces=namespaces,
                        locked=kind == "speed", fork_from=zyg)
        worker.start()
        forked = getattr(worker.proc, "forked", False)
        worker.close()
    finally:
        if zyg is not None:
            zyg.close()
    assert forked == (kind == "forked")
    (seen,) = _seen(str(worker.load_error))
    _assert_blind(seen, namespaces)


# -- nothing outlives its exercise ---------------------------------------------------
DAEMON = '''
import os, subprocess, sys
def start(token, seconds):
    """A daemon: a new session, a double fork, then a program of its own."""
    if os.fork() == 0:
        os.setsid()
        if os.fork() == 0:
            os.execv(sys.executable, [sys.executable, "-c",
                                      f"import time; time.sleep({seconds})", token])
        os._exit(0)
    os.wait()
    return 1
'''


def _running(token: str) -> list[int]:
    found = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/cmdline", "rb") as f:
                if token.encode() in f.read():
                    state = confine.proc_status(entry.name) or {}
                    if not state.get("State", "").strip().startswith("Z"):
                        found.append(int(entry.name))
        except OSError:
            pass
    return found


def _daemon_modes():
    modes = [pytest.param("fallback", "cgroup", id="fallback-cgroup"),
             pytest.param("fallback", "subreaper", id="fallback-no-cgroup-no-uid")]
    if NAMESPACES:
        modes += [pytest.param("strict", "cgroup", id="namespaces-spawned"),
                  pytest.param("strict", "forked", id="namespaces-forked"),
                  pytest.param("strict", "subreaper", id="namespaces-no-cgroup")]
    return modes


def _daemon_scenario(mode: str, how: str, folder: str, token: str) -> dict:
    """Start the daemon from a worker of ``folder``, then close the worker:
    whether the daemon ran, and who of it was left.  Run in a process of its
    own (``test_a_detached_daemon_dies_with_its_exercise``): this process is the
    subreaper that adopts the daemon, and in a test process that ran other
    tests, their workers' ends sweep adopted orphans too, the daemon among them."""
    if how == "subreaper":     # neither a cgroup nor a uid of its own
        def no_cgroup(self, limit):
            raise OSError("no cgroup in this test")
        memcg.MemoryCgroup.__init__ = no_cgroup
        confine.can_drop_privileges = lambda: False
    import dataclasses

    own = launcher(mode)     # this process's own: changing it changes nothing else
    if how == "subreaper":
        own.confinement = dataclasses.replace(own.confinement, own_uids=False)
    zyg = None
    if how == "forked":
        zyg = own.fork_server({"NumPy"})
        zyg.start()
        assert zyg.alive, zyg.failed
    try:
        worker = own.worker(Path(folder), "ex02_mha", call_timeout=10, fork_from=zyg)
        assert worker.uid is None or how != "subreaper"
        assert StudentModule(worker).start(token, 120) == 1
        # It lives two minutes: a busy machine may take long to exec it.
        deadline = time.monotonic() + 60
        while not _running(token) and time.monotonic() < deadline:
            time.sleep(0.05)
        started = bool(_running(token))
        worker.close()
        return {"started": started, "left": _running(token)}
    finally:
        if zyg is not None:
            zyg.close()
        for pid in _running(token):
            os.kill(pid, 9)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux only")
@pytest.mark.parametrize("mode,how", _daemon_modes())
def test_a_detached_daemon_dies_with_its_exercise(tmp_path, mode, how):
    """A double-forked daemon in a new session is gone as soon as its worker
    ends: by its cgroup, its PID namespace, or, with neither and no uid of
    its own, as an orphan the grading (subreaper) process adopted."""
    if how != "subreaper" and memcg.base()[0] is None:
        pytest.skip("no writable cgroup here")
    sub = tmp_path / "sub"
    sub.mkdir()
    os.chmod(tmp_path, 0o755)
    (sub / "ex02_mha.py").write_text(DAEMON)
    token = f"attn-daemon-{uuid.uuid4().hex}"
    run = subprocess.run(
        [sys.executable, "-c", "import json, sys\n"
         "from tests.test_launch import _daemon_scenario\n"
         "print(json.dumps(_daemon_scenario(*sys.argv[1:], sys.stdin.read())))",
         mode, how, str(sub)],   # the token on stdin: on a command line it is a daemon's mark
        input=token, cwd=REPO, capture_output=True, text=True, timeout=300)
    try:
        assert run.returncode == 0, run.stderr[-3000:]
        seen = json.loads(run.stdout.strip().splitlines()[-1])
    finally:
        for pid in _running(token):
            os.kill(pid, 9)
    assert seen["started"], f"the daemon never started ({mode}, {how})"
    assert seen["left"] == [], f"the daemon outlived its worker ({mode}, {how})"


def test_a_daemon_cannot_rewrite_the_result(tmp_path):
    """The red team's forgery: a daemon that waits for the grader to exit,
    then rewrites ``--out``.  Run as an instructor runs it (the command line),
    in the fallback without a uid of its own (this Python is root's) where
    that is what this machine gives."""
    out = tmp_path / "result.json"
    sub = copy_solutions(tmp_path / "sub", ["ex01_by_hand"])
    os.chmod(tmp_path, 0o777)
    forged = json.dumps({"score": 999})
    code = textwrap.dedent(f'''
        import os, time
        if os.fork() == 0:
            os.setsid()
            if os.fork() == 0:
                parent = os.getppid()
                for _ in range(200):
                    time.sleep(0.05)
                try:
                    with open({str(out)!r}, "w") as f:
                        f.write({forged!r})
                except OSError:
                    pass
                os._exit(0)
            os._exit(0)
    ''')
    path = sub / "ex01_by_hand.py"
    path.write_text(code + path.read_text())
    proc = subprocess.run([str(Path(sys.executable).parent / "attn-grade"), "grade", str(sub),
                           "-e", "ex01_by_hand", "--isolation", "fallback", "--format", "json",
                           "--out", str(out)], capture_output=True, text=True, timeout=300)
    assert proc.returncode in (0, 1), proc.stderr
    before = out.read_text()
    time.sleep(12)
    assert out.read_text() == before
    assert json.loads(before)["tests"], before


# -- each worker its own temp folders and IPC ----------------------------------------
LEAVE = '''
import ctypes, os
def leave(tag):
    """A file in each temp folder and a SysV segment, left behind on purpose."""
    for folder in ("/tmp", "/var/tmp", "/dev/shm"):
        with open(f"{folder}/left-{tag}", "w") as f:
            f.write("x" * 4096)
    libc = ctypes.CDLL(None, use_errno=True)
    return libc.shmget(int(tag, 16), ctypes.c_size_t(1 << 20), 0o1666) >= 0
def find(tag):
    """What this worker sees of another's leftovers."""
    seen = [f for f in ("/tmp", "/var/tmp", "/dev/shm") if os.path.exists(f"{f}/left-{tag}")]
    with open("/proc/sysvipc/shm") as f:
        seen += ["segment" for line in f.read().splitlines()[1:]
                 if int(line.split()[0]) == int(tag, 16)]
    return seen
'''


@needs_namespaces
@pytest.mark.parametrize("forked", [True, False], ids=["forked", "spawned"])
def test_each_worker_has_its_own_temp_folders_and_ipc(tmp_path, forked):
    """ex02's worker leaves a file in /tmp, /var/tmp and /dev/shm and a SysV
    segment; ex03's worker of the same grading (forked from the same fork server,
    or spawned) sees none of them, and nothing of them is left on the machine
    once the first worker has ended."""
    sub = tmp_path / "sub"
    sub.mkdir()
    for name in ("ex02_mha", "ex03_gqa"):
        (sub / f"{name}.py").write_text(LEAVE)
    tag = f"{uuid.uuid4().int & 0x7fffffff:08x}"
    zyg = None
    if forked:
        zyg = launcher("strict").fork_server({"NumPy", "PyTorch"})
        zyg.start()
        assert zyg.alive, zyg.failed
    try:
        first = launch(sub, "ex02_mha", namespaces=True, fork_from=zyg)
        second = launch(sub, "ex03_gqa", namespaces=True, fork_from=zyg)
        assert StudentModule(first).leave(tag) is True
        assert StudentModule(first).find(tag) == ["/tmp", "/var/tmp", "/dev/shm", "segment"]
        assert StudentModule(second).find(tag) == []
        assert getattr(first.proc, "forked", False) == forked
        first.close()
        assert StudentModule(second).find(tag) == []
        second.close()
    finally:
        if zyg is not None:
            zyg.close()
    host = [f for f in ("/tmp", "/var/tmp", "/dev/shm") if Path(f, f"left-{tag}").exists()]
    with open("/proc/sysvipc/shm") as f:
        host += ["segment" for line in f.read().splitlines()[1:]
                 if int(line.split()[0]) == int(tag, 16)]
    assert host == []


def test_a_worker_gets_only_the_modules_it_can_import(tmp_path):
    """The red team's disk filler: every worker copied every helper file.  A
    worker's private copy holds its module and what it imports (ex03 imports
    ex02), not the 5 MB helper nothing imports; a module that imports by a
    name no parse can see gets every module."""
    sub = tmp_path / "sub"
    sub.mkdir()
    (sub / "ex02_mha.py").write_text("X = 1\n")
    (sub / "ex03_gqa.py").write_text("from ex02_mha import X\n")
    (sub / "padding.py").write_text("# " + "x" * (5 << 20) + "\n")
    (sub / "ex05_decode_prefill.py").write_text("import importlib\n"
                                                "m = importlib.import_module('ex02_mha')\n")

    def copied(module):
        worker = launch(sub, module)
        worker.start()
        try:
            assert worker.load_error is None, worker.load_error
            return sorted(p.name for p in (worker._dir / "submission").glob("*.py"))
        finally:
            worker.close()
    assert copied("ex02_mha") == ["ex02_mha.py"]
    assert copied("ex03_gqa") == ["ex02_mha.py", "ex03_gqa.py"]
    assert copied("ex05_decode_prefill") == sorted(p.name for p in sub.iterdir())


@needs_namespaces
def test_a_forked_worker_still_sees_a_python_installed_under_tmp(tmp_path, monkeypatch):
    """A CI's clone (and its virtual environment) may lie under /tmp, which
    each forked worker gets fresh: the sandbox's Python roots inside the
    temp folders are bound again over the fresh one, read-only."""
    root = Path(tempfile.mkdtemp(prefix="attn-fake-venv-", dir="/tmp"))
    try:
        (root / "marker.txt").write_text("here")
        os.chmod(root, 0o755)
        real = bwrap.python_roots
        monkeypatch.setattr(bwrap, "python_roots", lambda: [*real(), root])
        sub = tmp_path / "sub"
        sub.mkdir()
        (sub / "ex02_mha.py").write_text(
            "import os\n"
            "def look(path):\n"
            "    try:\n"
            "        open(os.path.join(path, 'w'), 'w')\n"
            "        writable = True\n"
            "    except OSError:\n"
            "        writable = False\n"
            "    return open(os.path.join(path, 'marker.txt')).read(), writable\n")
        zyg = launcher("strict").fork_server({"NumPy", "PyTorch"})
        zyg.start()
        assert zyg.alive, zyg.failed
        try:
            worker = launch(sub, "ex02_mha", namespaces=True, fork_from=zyg)
            assert list(StudentModule(worker).look(str(root))) == ["here", False]
            assert getattr(worker.proc, "forked", False)
            worker.close()
        finally:
            zyg.close()
    finally:
        shutil.rmtree(root, ignore_errors=True)


# -- the trusted worker holds nothing of the student's ------------------------------
def test_the_trusted_worker_holds_nothing_of_the_submission(tmp_path):
    """The red team's way in (past the intake, which now refuses it): a
    helper named after the reference kernel's module and a ``triton.py`` of
    the student's.  The trusted worker's folder is built of the grader's files
    only, so it loads the runtime's own kernel and Triton, and no folder of
    the submission's is on its ``sys.path``."""
    sub = tmp_path / "sub"
    sub.mkdir()
    (sub / "ex07_flash_attention.py").write_text("import triton\n")
    (sub / "runtime.kernels.flash.py").write_text("import triton\n")
    (sub / "triton.py").write_text("raise SystemExit('the student is in the trusted worker')\n")
    from grader.reference.flash_speed import REFERENCE_MODULE
    worker = launch(sub, REFERENCE_MODULE, call_timeout=60.0, trusted=True,
                    env={"TRITON_INTERPRET": "1"})
    try:
        worker.start()
        assert worker.load_error is None, worker.load_error
        assert list((worker._dir / "submission").iterdir()) == []
        where = worker.request({"op": "getattr", "name": "__file__"}, "where")
        assert where.endswith("runtime/kernels/flash.py"), where
    finally:
        worker.close()


# -- bounded writes ---------------------------------------------------------------
FILL = '''
import errno, os
def fill(where, kind, most):
    """Write into ``where`` until refused: 1 MB files ('bytes') or empty
    files ('files'), at most ``most`` of them; (how many, the errno's name)."""
    os.makedirs(where, exist_ok=True)
    chunk = b"x" * (1 << 20)
    for i in range(most):
        try:
            with open(os.path.join(where, f"fill-{kind}-{i}"), "wb") as f:
                if kind == "bytes":
                    f.write(chunk)
        except OSError as exc:
            return i, errno.errorcode.get(exc.errno, str(exc.errno))
    return most, None
def clear(where):
    import shutil
    shutil.rmtree(where, ignore_errors=True)
def places():
    return {"cwd": os.getcwd(), "home": os.environ["HOME"], "tmp": "/tmp",
            "tmpdir": os.environ["TMPDIR"], "var": "/var/tmp", "shm": "/dev/shm"}
'''
FILL_MODES = [pytest.param("forked", marks=needs_namespaces),
              pytest.param("spawned", marks=needs_namespaces),
              pytest.param("fallback")]


def _free_bytes() -> int:
    info = os.statvfs(tempfile.gettempdir())
    return info.f_bavail * info.f_frsize


@pytest.mark.skipif(not confine.is_root(), reason="a bounded file system is mounted as root")
@pytest.mark.parametrize("mode", FILL_MODES)
def test_a_worker_s_writes_end_in_enospc_not_on_the_disk(tmp_path, mode):
    """The red team's disk filler (1,200 MB in 11 s) and file filler (100,000
    files): a worker's folder, home and temp folders are a file system of
    ``WORKER_DISK_BYTES`` and ``WORKER_FILES`` files, so the filler is told
    ENOSPC there and the machine's disk keeps its free space.  In the
    fallback the machine's /tmp is shared (THREAT_MODEL's limits): its own
    folder, home and TMPDIR are bounded."""
    sub = tmp_path / "sub"
    sub.mkdir()
    (sub / "ex02_mha.py").write_text(FILL)
    zyg = None
    if mode == "forked":
        zyg = launcher("strict").fork_server({"NumPy"})
        zyg.start()
        assert zyg.alive, zyg.failed
    mb, files = process.WORKER_DISK_BYTES >> 20, process.WORKER_FILES
    free = _free_bytes()
    worker = launch(sub, "ex02_mha", namespaces=mode != "fallback", fork_from=zyg,
                    call_timeout=120.0)
    try:
        student = StudentModule(worker)
        places = student.places()
        wanted = ["cwd", "home", "tmpdir"] + (["tmp", "var", "shm"] if mode != "fallback" else [])
        for name in wanted:
            where = os.path.join(places[name], f"fill-{name}")
            wrote, why = student.fill(where, "bytes", 1200)
            assert why in ("ENOSPC", "EDQUOT") and wrote <= mb, (name, wrote, why)
            assert _free_bytes() > free - (256 << 20), name   # not on this disk
            made, why = student.fill(where + "-files", "files", 100_000)
            assert why in ("ENOSPC", "EDQUOT") and made <= files, (name, made, why)
            student.clear(where)
            student.clear(where + "-files")
        if mode == "forked":
            assert getattr(worker.proc, "forked", False)
    finally:
        worker.close()
        if zyg is not None:
            zyg.close()
    assert _free_bytes() > free - (256 << 20)
    assert not [m for m in Path("/proc/self/mounts").read_text().splitlines()
                if f"{process.STAGING_PREFIX}{os.getpid()}-" in m and "fork_server" not in m]


@pytest.mark.parametrize("kind, place", [("bytes", "/tmp"), ("files", "/tmp"),
                                         pytest.param("bytes", "/dev", marks=pytest.mark.skipif(
                                             not os.access("/dev", os.W_OK),
                                             reason="/dev is writable by root only"))])
def test_the_fallback_stops_a_worker_filling_the_machines_tmp(tmp_path, monkeypatch, kind,
                                                                place):
    """Without namespaces the machine's /tmp is the worker's too and no file
    system bounds it there (nor, without root, its own folder): the grader
    watches the file systems' counts while it waits, and stops the worker
    past the bound, with a sentence that says so (issue 49's disk and inode
    fillers, at a bound made small here)."""
    monkeypatch.setattr(process, "WORKER_DISK_BYTES", 24 << 20)
    monkeypatch.setattr(process, "WORKER_FILES", 300)
    sub = tmp_path / "sub"
    sub.mkdir()
    (sub / "ex02_mha.py").write_text(FILL)
    # /dev: a worker running as root (the private-Python fallback) writes any
    # local file system, and each is watched (a red team filled /dev's devtmpfs)
    where = Path(place) / f"attn-grade-test-fill-{os.getpid()}-{kind}"
    worker = launch(sub, "ex02_mha", namespaces=False, call_timeout=120.0)
    try:
        with pytest.raises(StudentCrash) as stopped:
            StudentModule(worker).fill(str(where), kind, 100_000)
        said = str(stopped.value)
        assert ("wrote more than 24 MB" if kind == "bytes" else "made more than 300 files") \
            in said, said
        # stopped within a few polls of the bound, not at the filler's end
        made = len(os.listdir(where))
        assert made < (2_000 if kind == "bytes" else 20_000), made
    finally:
        worker.close()
        shutil.rmtree(where, ignore_errors=True)


# -- graded as an instructor grades: a filler and a peeker ---------------------------
FILLER = '''

# -- the red team's filler: runs in ex02's own worker (not when ex03 imports it)
import errno as _errno, os as _os, shutil as _shutil, sys as _sys
def _fill(where, kind, most):
    _os.makedirs(where, exist_ok=True)
    chunk = b"x" * (1 << 20)
    try:
        for i in range(most):
            with open(_os.path.join(where, str(i)), "wb") as f:
                if kind == "bytes":
                    f.write(chunk)
    except OSError as exc:
        return _errno.errorcode.get(exc.errno)
    finally:
        _shutil.rmtree(where, ignore_errors=True)
    raise ImportError(f"{where} took {most} {kind}: nothing stopped the filler")
if "ex03_gqa" not in _sys.modules:
    _places = {_os.getcwd(), _os.environ["HOME"], _os.environ["TMPDIR"], "/tmp", "/var/tmp",
               "/dev/shm"}
    for _p in sorted(_places):
        _fill(_os.path.join(_p, "fill"), "bytes", 1200)
        _fill(_os.path.join(_p, "files"), "files", 100_000)
        with open(_os.path.join(_p, "ex02-left"), "w") as _f:   # for ex03 to find
            _f.write("left by ex02")
'''
PEEKER = '''

# -- and ex03 looks for what ex02's worker left, wherever a worker can look
import glob as _glob, os as _os
_bases = {_os.getcwd(), _os.path.dirname(_os.getcwd()),
          _os.path.dirname(_os.path.dirname(_os.getcwd())), _os.environ["HOME"],
          _os.environ["TMPDIR"], "/tmp", "/var/tmp", "/dev/shm", "/sandbox"}
_found = [p for b in sorted(_bases) for p in _glob.glob(_os.path.join(b, "**", "ex02-left"),
                                                          recursive=True)]
if _found:
    raise ImportError(f"found what ex02's worker left: {_found}")
'''


@needs_namespaces
@pytest.mark.skipif(not confine.is_root(), reason="a bounded file system is mounted as root")
def test_a_filler_and_a_peeker_graded_as_an_instructor_grades(tmp_path):
    """ex02's module fills its folder, home and temp folders (bytes, then
    files) and leaves a file in each; ex03's looks for those files.  Graded
    with the command line: the filler is stopped by ENOSPC in every place
    (else its import fails and ex02 loses its points), ex03 finds nothing
    (else it fails to import), the machine's disk keeps its free space, the
    result is written and all three exercises earn full marks."""
    sub = copy_solutions(tmp_path / "sub", ["ex01_by_hand", "ex02_mha", "ex03_gqa"])
    for name, tail in (("ex02_mha", FILLER), ("ex03_gqa", PEEKER)):
        path = sub / f"{name}.py"
        path.write_text(path.read_text() + tail)
    out = tmp_path / "result.json"
    free = _free_bytes()
    from click.testing import CliRunner
    from grader.cli import main
    result = CliRunner().invoke(main, ["grade", str(sub), "-e", "ex01", "-e", "ex02", "-e",
                                       "ex03", "--format", "json", "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert _free_bytes() > free - (256 << 20)
    data = json.loads(out.read_text())
    scores = data["extra_data"]["exercise_scores"]
    assert sorted(scores) == ["ex01_by_hand", "ex02_mha", "ex03_gqa"]
    assert all(s["score"] == s["max_score"] for s in scores.values()), \
        [t["output"] for t in data["tests"] if t["score"] != t["max_score"]][:3]
