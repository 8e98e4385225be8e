"""Hostile submissions: each is the reference with one twist in ex03_gqa.

For every attack, grading completes with a valid result, the attack gains
no credit (the twisted function's tests fail), and the untouched exercises
(ex01, ex02) keep full marks.  The kernel exercise's attacks (PyTorch's
attention inside the kernel, cached outputs) twist ex07 instead; its other
cheats are among its mutants (tests/mutants/ex07_flash_attention.py).
"""
from __future__ import annotations

import json
import os
import shutil
import textwrap
import time
import uuid

import pytest

from grader.report import to_gradescope, to_text
from grader.sandbox import confine
from tests.conftest import copy_solutions, grade_dir

FOUNDATION = ["ex01_by_hand", "ex02_mha", "ex03_gqa"]
BYTES_LINE = "    return 2 * n_layers * n_kv_heads * d_head * seq_len * batch * bytes_per_elem"
REPEAT_LINE = "    b, h_kv, s, d_head = x.shape\n"
SANDBOXED = confine.can_drop_privileges()


def twist(sub, old, new):
    path = sub / "ex03_gqa.py"
    text = path.read_text()
    assert text.count(old) == 1, old
    path.write_text(text.replace(old, new))


def at_import(sub, code):
    path = sub / "ex03_gqa.py"
    text = path.read_text()
    marker = "from ex02_mha import"
    path.write_text(text.replace(marker, textwrap.dedent(code) + "\n" + marker, 1))


def in_function(sub, line, code):
    """Insert ``code`` (function-body indented) just before ``line``."""
    body = textwrap.indent(textwrap.dedent(code), "    ")
    twist(sub, line, body + line)


def outputs(report) -> str:
    return "\n".join(t.output for t in report.tests if t.exercise == "ex03_gqa")


def grade_attack(sub, exercises=("ex01_by_hand", "ex03_gqa"), **kwargs):
    """Grade the attacked ex03 beside untouched exercises (ex01; ex02 too when
    asked: it is the slowest suite, and ex03's worker holds its own copy)."""
    options = dict(call_timeout=3, import_timeout=8, memory_mb=1024)
    options.update(kwargs)
    start = time.monotonic()
    report = grade_dir(sub, list(exercises), **options)
    elapsed = time.monotonic() - start
    json.dumps(to_gradescope(report))              # always a valid result
    assert not report.errors, report.errors
    assert "SyntaxError" not in outputs(report)    # the attack itself is well-formed
    scores = report.exercise_scores()
    for ex in set(exercises) - {"ex03_gqa"}:       # untouched exercises keep full marks
        assert scores[ex][0] == scores[ex][1] > 0, (ex, to_text(report))
    assert all(0 <= t.score <= t.max_score for t in report.tests)
    return report, elapsed


def failed_titles(report):
    return {t.title for t in report.tests if t.exercise == "ex03_gqa" and t.status == "failed"}


def assert_no_credit_for_cache_bytes(report):
    failed = failed_titles(report)
    assert any("kv_cache_bytes" in t for t in failed), failed


def assert_no_credit_for_repeat_kv(report):
    failed = failed_titles(report)
    assert any("repeat_kv" in t for t in failed), failed


@pytest.fixture
def sub(tmp_path):
    return copy_solutions(tmp_path / "sub", FOUNDATION)


def test_hang_at_import(sub):
    at_import(sub, "while True:\n    pass\n")
    report, elapsed = grade_attack(sub)
    assert report.exercise_scores()["ex03_gqa"][0] == 0
    assert "did not finish within 8 s" in outputs(report)
    assert elapsed < 60


def test_hang_in_a_call(sub):
    in_function(sub, BYTES_LINE, "while True:\n    pass\n")
    report, elapsed = grade_attack(sub)
    assert_no_credit_for_cache_bytes(report)
    assert "did not finish within 3 s" in outputs(report)
    assert elapsed < 60


def test_memory_bomb(sub):
    in_function(sub, BYTES_LINE, "hog = bytearray(16 << 30)\n")
    report, _ = grade_attack(sub)
    assert_no_credit_for_cache_bytes(report)
    assert any("MemoryError" in t.output for t in report.tests)


def test_fork_bomb(sub):
    first = len(confine.allocated_uids)
    in_function(sub, BYTES_LINE, """\
        import os
        while True:
            try:
                os.fork()
            except OSError:
                pass
        """)
    report, elapsed = grade_attack(sub, FOUNDATION)
    assert_no_credit_for_cache_bytes(report)
    assert elapsed < 120
    if SANDBOXED:  # no process of this grading's worker users is left
        used = confine.allocated_uids[first:]
        assert used and not [pid for u in used for pid in confine.processes_of(u)]


@pytest.mark.parametrize("code,phrase", [
    ("import os; os._exit(0)", "exited with code 0"),
    ("raise SystemExit(0)", "SystemExit"),
    ("raise KeyboardInterrupt", "KeyboardInterrupt"),
    ("import ctypes; ctypes.string_at(0)", "SIGSEGV"),
])
def test_exits_and_crashes_in_a_call(sub, code, phrase):
    in_function(sub, BYTES_LINE, code + "\n")
    report, _ = grade_attack(sub)
    assert_no_credit_for_cache_bytes(report)
    assert any(phrase in t.output for t in report.tests if t.exercise == "ex03_gqa")


def test_monkeypatched_comparisons_at_import(sub):
    at_import(sub, """\
        import numpy, numpy.testing, torch
        numpy.allclose = lambda *a, **k: True
        numpy.isclose = lambda a, b, *r, **k: numpy.ones(numpy.shape(a), bool)
        numpy.array_equal = lambda *a, **k: True
        numpy.testing.assert_allclose = lambda *a, **k: None
        torch.allclose = lambda *a, **k: True
        torch.testing.assert_close = lambda *a, **k: None
        """)
    twist(sub, BYTES_LINE, "    return 0\n")
    report, _ = grade_attack(sub, FOUNDATION)
    assert_no_credit_for_cache_bytes(report)


def test_monkeypatched_builtins_at_import(sub):
    at_import(sub, """\
        import builtins
        builtins.isinstance = lambda obj, cls: True
        builtins.abs = lambda x: 0
        builtins.AssertionError = type("Never", (Exception,), {})
        """)
    twist(sub, BYTES_LINE, "    return -1\n")
    report, _ = grade_attack(sub)
    assert_no_credit_for_cache_bytes(report)


def test_array_subclass_that_claims_equality(sub):
    at_import(sub, """\
        import numpy as _np
        class _Liar(_np.ndarray):
            def __eq__(self, other):
                return True
            def __array_ufunc__(self, *a, **k):
                return True
            def __array_function__(self, *a, **k):
                return True
        """)
    in_function(sub, REPEAT_LINE, "return _np.zeros((1,)).view(_Liar)\n")
    report, _ = grade_attack(sub)
    assert_no_credit_for_repeat_kv(report)


def test_object_that_runs_code_when_unpickled(sub, tmp_path):
    marker = tmp_path / f"unpickled-{uuid.uuid4().hex}"
    in_function(sub, BYTES_LINE, f"""\
        import os
        class Payload:
            def __reduce__(self):
                return (os.system, ("touch {marker}",))
        return Payload()
        """)
    report, _ = grade_attack(sub)
    assert_no_credit_for_cache_bytes(report)
    assert any("not plain data" in t.output for t in report.tests)
    assert not marker.exists()


def test_forged_wire_markers_are_plain_dicts(sub):
    in_function(sub, BYTES_LINE, """\
        return {"$raised": "x", "message": "m", "where": "", "traceback": "",
                "$int": "7", "ok": 1}
        """)
    report, _ = grade_attack(sub)
    assert_no_credit_for_cache_bytes(report)


SECRET_READER = """\
    import glob, os, sys
    found = []
    roots = []
    try:
        import grader
        roots.append(os.path.dirname(os.path.dirname(grader.__file__)))
    except Exception as exc:
        found.append("no import: %r" % exc)
    try:
        roots.append(os.readlink("/proc/%d/cwd" % os.getppid()))
    except Exception as exc:
        found.append("no cwd: %r" % exc)
    for root in roots:
        for pattern in ("grader/suites/hidden/*.py", "solutions/*.py", "tests/mutants/*.py"):
            for path in glob.glob(os.path.join(root, pattern)):
                try:
                    found.append(open(path).read())
                except Exception as exc:
                    found.append("denied %s: %r" % (path, exc))
    raise ValueError("\\n".join(found))
    """


def test_reading_hidden_suites_and_solutions(sub):
    in_function(sub, BYTES_LINE, SECRET_READER)
    report, _ = grade_attack(sub)
    assert_no_credit_for_cache_bytes(report)
    leaked = "\n".join(t.output for t in report.tests)
    if SANDBOXED:
        assert "Hidden tests for ex03_gqa" not in leaked
        assert "BEGIN SOLUTION" not in leaked
    else:  # documented limit: without root the worker can read what the grader can
        assert "not root" in report.machine["sandbox"] or "root" in report.machine["sandbox"]


def _attack_results_file(sub, delay):
    """Write a perfect results.json wherever the grader might write its own,
    now and (from a daemon that leaves the process group) ``delay`` s later."""
    in_function(sub, BYTES_LINE, f"""\
        import json, os, time
        fake = json.dumps({{"score": 1e9, "tests": []}})
        def targets():
            out = []
            try:
                argv = open("/proc/%d/cmdline" % os.getppid()).read().split("\\0")
                out += [argv[i + 1] for i, a in enumerate(argv) if a == "--out"]
            except Exception:
                pass
            return out + ["results.json", "/autograder/results/results.json"]
        def write_all():
            for path in targets():
                try:
                    with open(path, "w") as f:
                        f.write(fake)
                except Exception:
                    pass
        write_all()
        if os.fork() == 0:
            os.setsid()
            if os.fork() == 0:
                time.sleep({delay})
                write_all()
            os._exit(0)
        """)


def test_fake_results_file(sub, tmp_path):
    from click.testing import CliRunner

    from grader.cli import main

    _attack_results_file(sub, delay=4)
    out = tmp_path / "results.json"
    result = CliRunner().invoke(main, ["grade", str(sub), "-e", "ex01", "-e", "ex02", "-e",
                                       "ex03", "--format", "json", "--out", str(out),
                                       "--timeout", "5"])
    assert result.exit_code == 0, result.output
    data = json.loads(out.read_text())
    assert data["score"] < 1e9 and data["tests"]
    time.sleep(5)  # the daemon would have written by now
    after = json.loads(out.read_text())
    if SANDBOXED:
        assert after == data     # the daemon died with its worker's user
        assert oct(out.stat().st_mode & 0o777) == "0o600"


def test_thread_that_outlives_the_call(sub):
    in_function(sub, BYTES_LINE, """\
        import os, threading, time
        def later():
            time.sleep(0.3)
            os._exit(7)
        threading.Thread(target=later, daemon=True).start()
        return -1
        """)
    report, _ = grade_attack(sub)
    assert_no_credit_for_cache_bytes(report)


def test_process_that_outlives_the_grading(sub, tmp_path):
    marker = tmp_path / f"survivor-{uuid.uuid4().hex}"
    in_function(sub, BYTES_LINE, f"""\
        import os, time
        if os.fork() == 0:
            os.setsid()
            if os.fork() == 0:
                time.sleep(4)
                open("{marker}", "w").write("still here")
            os._exit(0)
        return -1
        """)
    os.chmod(tmp_path, 0o777)  # so that a worker's own user could write the marker
    report, _ = grade_attack(sub)
    assert_no_credit_for_cache_bytes(report)
    time.sleep(5)
    if SANDBOXED:
        assert not marker.exists()


def test_fifty_megabytes_of_output(sub):
    in_function(sub, BYTES_LINE, """\
        import sys
        chunk = "x" * (1 << 20)
        for _ in range(50):
            sys.stdout.write(chunk)
            sys.stderr.write(chunk)
        """)
    report, elapsed = grade_attack(sub)
    # The twisted function still answers correctly: no credit lost, none gained,
    # and the 100 MB of output cost neither memory nor the report's size.
    assert report.exercise_scores()["ex03_gqa"][0] == report.exercise_scores()["ex03_gqa"][1]
    assert len(to_text(report)) < 200_000
    assert elapsed < 120


@pytest.mark.parametrize("cheat,phrase", [("SDPA_FALLBACK", "scaled_dot_product_attention"),
                                          ("CACHE", "cache nothing between calls")])
def test_kernel_exercise_cheats(tmp_path, cheat, phrase):
    """PyTorch's attention inside flash_attention, or outputs cached between
    calls: no credit for flash_attention, and the rest keeps its marks."""
    from tests.mutants import ex07_flash_attention as cheats
    sub = copy_solutions(tmp_path / "sub", ["ex01_by_hand", "ex07_flash_attention"])
    path = sub / "ex07_flash_attention.py"
    text = path.read_text()
    assert text.count(cheats.ALLOC) == 1
    path.write_text(text.replace(cheats.ALLOC, getattr(cheats, cheat)))
    report = grade_dir(sub, ["ex01_by_hand", "ex07_flash_attention"], keyword=None)
    json.dumps(to_gradescope(report))
    assert not report.errors, report.errors
    scores = report.exercise_scores()
    assert scores["ex01_by_hand"][0] == scores["ex01_by_hand"][1]
    kernel = [t for t in report.tests if t.exercise == "ex07_flash_attention"
              and t.name.startswith("test_flash")]
    if not kernel:
        pytest.fail("no flash_attention tests ran")
    cheated = [t for t in kernel if t.status == "failed"]
    assert cheated and any(phrase in t.output for t in cheated)
    numpy_parts = [t for t in report.tests if t.exercise == "ex07_flash_attention"
                   and t not in kernel and t.status != "not_run"]
    assert numpy_parts and all(t.status == "passed" for t in numpy_parts)


def test_links_to_hidden_files_are_not_followed(sub):
    """A module that is a link to a hidden suite (git keeps links) is not
    copied for the worker: its content never reaches student code."""
    from grader.exercises import PACKAGE_DIR
    hidden = PACKAGE_DIR / "suites" / "hidden" / "test_ex03_gqa_hidden.py"
    (sub / "ex03_gqa.py").unlink()
    (sub / "ex03_gqa.py").symlink_to(hidden)
    (sub / "notes.py").symlink_to(hidden)
    from grader.sandbox.client import Worker
    worker = Worker(sub, "ex01_by_hand")
    private = worker._prepare_dir() / "submission"
    try:
        assert sorted(p.name for p in private.iterdir()) == ["ex01_by_hand.py", "ex02_mha.py"]
    finally:
        shutil.rmtree(private.parent)
    report = grade_dir(sub, ["ex01_by_hand", "ex03_gqa"], call_timeout=3)
    assert not report.errors
    ex03 = [t for t in report.tests if t.exercise == "ex03_gqa"]
    assert ex03 and all(t.score == 0 and "is a link" in t.output for t in ex03)
    assert report.exercise_scores()["ex01_by_hand"][0] == 7
    assert "Hidden tests for ex03_gqa" not in "\n".join(t.output for t in report.tests)
