"""The worker runtime is one folder, used as it is: nothing in it imports the
grader, nothing is assembled or written into it when a worker starts, and its
reference kernels are for trusted workers only."""
from __future__ import annotations

import ast
import filecmp
from pathlib import Path

import pytest

from grader.paths import KERNELS_DIR, RUNTIME_DIR, RUNTIME_PACKAGE
from grader.reference.flash_speed import REFERENCE_MODULE
from grader.sandbox import bwrap
from grader.sandbox.client import StudentModule
from tests.conftest import launch

NAMESPACES, WHY = bwrap.usable()
# Where a student's module finds the runtime's folder (a name split in two, so
# that grader.sandbox.reach does not take this test's submission for a forger).
LOOK = """
import os
import sys


def runtime_folder():
    return sys.modules["run" + "time"].__path__[0]


def listing(path):
    try:
        return sorted(os.listdir(path))
    except OSError as exc:
        return type(exc).__name__
"""


def _modules() -> list[Path]:
    return sorted(p for p in RUNTIME_DIR.rglob("*.py") if "__pycache__" not in p.parts)


def _escapes(node: ast.ImportFrom, path: Path) -> bool:
    """A relative import that climbs out of the runtime's folder."""
    depth = len(path.relative_to(RUNTIME_DIR).parts)     # runtime/x.py: 1
    return node.level > depth


def test_nothing_in_the_runtime_imports_the_grader():
    offenders = []
    for path in _modules():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    if _escapes(node, path):
                        offenders.append(f"{path.relative_to(RUNTIME_DIR)}, line {node.lineno}")
                    continue
                names = [node.module or ""]
            else:
                continue
            if any(n == "grader" or n.startswith("grader.") for n in names):
                offenders.append(f"{path.relative_to(RUNTIME_DIR)}, line {node.lineno}")
    assert len(_modules()) >= 10 and not offenders, offenders


def test_the_sandbox_binds_the_runtime_folder_itself(tmp_path):
    if bwrap.executable() is None:
        pytest.skip("bubblewrap is not installed")
    argv = ["python", "-I", "/sandbox/runtime/worker.py"]
    student = bwrap.command(tmp_path, argv, root=False, tmpfs_bytes=1 << 20)
    trusted = bwrap.command(tmp_path, argv, root=False, tmpfs_bytes=1 << 20, kernels=True)
    bind = ["--ro-bind", str(RUNTIME_DIR), f"{bwrap.SANDBOX}/runtime"]
    for cmd in (student, trusted):
        assert any(cmd[i:i + 3] == bind for i in range(len(cmd))), cmd
    hidden = f"{bwrap.SANDBOX}/runtime/{KERNELS_DIR.name}"
    assert hidden in student and hidden not in trusted


@pytest.mark.parametrize("namespaces", [
    pytest.param(True, marks=pytest.mark.skipif(not NAMESPACES, reason=WHY)), False])
def test_a_worker_starts_without_writing_into_the_runtime(tmp_path, namespaces):
    (tmp_path / "ex02_mha.py").write_text(LOOK)
    before = {p: p.stat().st_mtime_ns for p in RUNTIME_DIR.rglob("*")
              if "__pycache__" not in p.parts}
    worker = launch(tmp_path, "ex02_mha", namespaces=namespaces)
    try:
        student = StudentModule(worker)
        folder = student.runtime_folder()
        listed = student.listing(folder)
        kernels = student.listing(f"{folder}/{KERNELS_DIR.name}")
        installed = student.listing(str(KERNELS_DIR))
        private = sorted(p.name for p in worker._dir.iterdir())
        copy = worker._dir / "runtime"
        if not namespaces:
            # the copy is the folder, whole, but for the reference kernels
            compare = filecmp.dircmp(RUNTIME_DIR, worker._dir / "runtime",
                                     ignore=["__pycache__"])
            assert compare.left_only == [KERNELS_DIR.name] and not compare.right_only
            assert not compare.diff_files and not compare.subdirs["probes"].diff_files
    finally:
        worker.close()
    assert {p: p.stat().st_mtime_ns for p in RUNTIME_DIR.rglob("*")
            if "__pycache__" not in p.parts} == before
    expected = sorted(p.name for p in RUNTIME_DIR.iterdir() if p.name != "__pycache__")
    if namespaces:
        assert folder == f"{bwrap.SANDBOX}/runtime" and "runtime" not in private
        assert [n for n in listed if n != "__pycache__"] == expected
        assert kernels == [] and installed == "FileNotFoundError"   # nothing of the install
    else:   # a whole copy in the worker's private folder
        assert Path(folder) == copy and "runtime" in private
        assert KERNELS_DIR.name not in listed and kernels == "FileNotFoundError"


@pytest.mark.parametrize("namespaces", [
    pytest.param(True, marks=pytest.mark.skipif(not NAMESPACES, reason=WHY)), False])
def test_a_trusted_worker_runs_the_reference_kernel_where_it_lies(tmp_path, namespaces):
    pytest.importorskip("triton")
    assert REFERENCE_MODULE == f"{RUNTIME_PACKAGE}.kernels.flash"
    worker = launch(tmp_path, REFERENCE_MODULE, namespaces=namespaces, call_timeout=120,
                    env={"TRITON_INTERPRET": "1"}, trusted=True)
    try:
        assert list(StudentModule(worker).SUPPORTED_D_HEAD) == [16, 32, 64, 128]
        assert worker.load_error is None and not list(tmp_path.iterdir())
    finally:
        worker.close()


FORKS = """
import os
import time


def fork_a_child():
    if os.fork() == 0:
        time.sleep(0.5)
        raise RuntimeError("the child returns into the worker's loop")
    return os.getpid()


def reap():   # the exit code of the child forked above, once it has ended
    return os.waitstatus_to_exitcode(os.wait()[1])


def echo(x):
    return x
"""


@pytest.mark.parametrize("namespaces", [
    pytest.param(True, marks=pytest.mark.skipif(not NAMESPACES, reason=WHY)), False])
def test_a_child_the_student_forks_never_answers_for_the_worker(tmp_path, namespaces):
    """A process forked by student code has the worker's channels closed and
    leaves when it returns into the request loop: every answer after the fork
    is the worker's own, to its own request."""
    (tmp_path / "ex02_mha.py").write_text(FORKS)
    worker = launch(tmp_path, "ex02_mha", namespaces=namespaces)
    try:
        student = StudentModule(worker)
        student.fork_a_child()
        # the child raised, came back into the loop and left (a child still
        # serving the loop would never end: this call would time out)
        assert student.reap() == 0
        assert [student.echo(i) for i in range(20)] == list(range(20))
    finally:
        worker.close()
