"""Hostile submissions: each is the reference with one twist in ex03_gqa.

For every attack, grading completes with a valid result, the attack gains
no credit (the twisted function's tests fail), and the untouched exercises
(ex01, ex02) keep full marks.  The kernel exercise's attacks (PyTorch's
attention inside the kernel, cached outputs) twist ex07 instead; its other
cheats are among its mutants (tests/data/mutants/ex07_flash_attention.py).
"""
from __future__ import annotations

import json
import os
import shutil
import tempfile
import textwrap
import time
import uuid
from pathlib import Path

import pytest

from grader.report import NEEDS_REGRADE, to_gradescope, to_text
from grader.sandbox import bwrap, confine
from grader.sandbox.process import WORKER_PROGRAM
from tests.conftest import copy_solutions, grade_dir, ex01_max

FOUNDATION = ["ex01_by_hand", "ex02_mha", "ex03_gqa"]
BYTES_LINE = "    return 2 * n_layers * n_kv_heads * d_head * seq_len * batch * bytes_per_elem"
REPEAT_LINE = "    b, h_kv, s, d_head = x.shape\n"
NAMESPACES, NO_NAMESPACES_WHY = bwrap.usable()
# Workers confined to what their own user can read: under namespaces, or in
# the fallback as root with a Python an unprivileged user can run.
SANDBOXED = NAMESPACES or confine.can_drop_privileges()

# Each attack added with issue 10 runs under both: "strict" (namespaces, or
# skipped saying why) and "fallback" (the older confinement).
ISOLATIONS = [pytest.param("strict", marks=pytest.mark.skipif(
                  not NAMESPACES, reason=f"bubblewrap cannot run here: {NO_NAMESPACES_WHY}")),
              "fallback"]
# The same, where the default run holds the attack under the best isolation
# here and the other one is the corpus tier (``--corpus``): attacks whose
# defence is the grading process's, not the sandbox's.
BEST_ISOLATION_FIRST = [ISOLATIONS[0],
                        pytest.param("fallback", marks=[pytest.mark.corpus] if NAMESPACES else [])]


def fallback_is_loud(report) -> bool:
    """The fallback's report says at its top what the workers could reach."""
    first = to_text(report).splitlines()[0]
    return first.startswith("Isolation:") and ("WEAK" in first or "NO ISOLATION" in first) \
        and report.to_dict()["isolation"] != "namespaces"


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


# Of ex03's tests that call kv_cache_bytes, the two that call it directly:
# an attack that spins (a hang, a fork bomb, a search of the disk) costs
# a call's time limit in each, and two show that each call is cut off and
# that the worker after it starts afresh.
TWO_CALLS = "not kv_exceeds_weights"
# The time limit of a call for the attacks that spin until cut off: each such
# call keeps a core (a fork bomb both) busy that long, and the calls they
# share a grading with finish in milliseconds.
SPIN_TIMEOUT = 1.5


def grade_attack(sub, exercises=("ex01_by_hand", "ex03_gqa"), **kwargs):
    """Grade the attacked ex03 beside untouched exercises (ex01; ex02 too when
    asked: it is the slowest suite, and ex03's worker holds its own copy)."""
    options = dict(call_timeout=3, import_timeout=8, memory_mb=1024)
    options.update(kwargs)
    start = time.monotonic()
    report = grade_dir(sub, list(exercises), **options, fresh=True)
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


@pytest.mark.slow
def test_hang_at_import(sub):
    at_import(sub, "while True:\n    pass\n")
    report, _ = grade_attack(sub, import_timeout=3)
    assert report.exercise_scores()["ex03_gqa"][0] == 0
    assert "did not finish within 3 s" in outputs(report)


@pytest.mark.slow
def test_hang_in_a_call(sub):
    in_function(sub, BYTES_LINE, "while True:\n    pass\n")
    report, _ = grade_attack(sub, keyword=TWO_CALLS, call_timeout=SPIN_TIMEOUT)
    assert_no_credit_for_cache_bytes(report)
    hung = [t for t in report.tests if f"did not finish within {SPIN_TIMEOUT:g} s" in t.output]
    assert len(hung) == 2, outputs(report)


def test_memory_bomb(sub):
    in_function(sub, BYTES_LINE, "hog = bytearray(16 << 30)\n")
    report, _ = grade_attack(sub)
    assert_no_credit_for_cache_bytes(report)
    assert any("MemoryError" in t.output for t in report.tests)


@pytest.mark.slow
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
    report, _ = grade_attack(sub, FOUNDATION, keyword=TWO_CALLS,
                                   call_timeout=SPIN_TIMEOUT)
    assert_no_credit_for_cache_bytes(report)
    if SANDBOXED:  # no process of this grading's worker users is left
        used = confine.allocated_uids[first:]
        assert used and not [pid for u in used for pid in confine.processes_of(u, everywhere=True)]


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
        for pattern in ("grader/suites/hidden/*.py", "solutions/*.py", "tests/data/mutants/*.py"):
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
    else:  # documented limit, said at the top of the report
        assert fallback_is_loud(report)


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
    report, _ = grade_attack(sub)
    # The twisted function still answers correctly: no credit lost, none gained,
    # and the 100 MB of output cost neither memory nor the report's size.
    assert report.exercise_scores()["ex03_gqa"][0] == report.exercise_scores()["ex03_gqa"][1]
    assert len(to_text(report)) < 200_000


@pytest.mark.parametrize("cheat,phrase", [("SDPA_FALLBACK", "scaled_dot_product_attention"),
                                          ("CACHE", "cache nothing between calls")])
def test_kernel_exercise_cheats(tmp_path, cheat, phrase):
    """PyTorch's attention inside flash_attention, or outputs cached between
    calls: no credit for flash_attention, and the rest keeps its marks."""
    from tests.data.mutants import ex07_flash_attention as cheats
    sub = copy_solutions(tmp_path / "sub", ["ex01_by_hand", "ex07_flash_attention"])
    path = sub / "ex07_flash_attention.py"
    text = path.read_text()
    assert text.count(cheats.ALLOC) == 1
    path.write_text(text.replace(cheats.ALLOC, getattr(cheats, cheat)))
    # Not the GPU compile check: a cheat compiles like the solution (test_ex07_flash).
    report = grade_dir(sub, ["ex01_by_hand", "ex07_flash_attention"], keyword="not compiles",
                       fresh=True)
    json.dumps(to_gradescope(report))
    assert not report.errors, report.errors
    scores = report.exercise_scores()
    assert scores["ex01_by_hand"][0] == scores["ex01_by_hand"][1]
    kernel = [t for t in report.tests if t.exercise == "ex07_flash_attention"
              and t.name.startswith(("test_flash", "test_kernel"))]
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
    from grader.paths import PACKAGE_DIR
    hidden = PACKAGE_DIR / "suites" / "hidden" / "test_ex03_gqa_hidden.py"
    (sub / "ex03_gqa.py").unlink()
    (sub / "ex03_gqa.py").symlink_to(hidden)
    (sub / "notes.py").symlink_to(hidden)
    from tests.conftest import launch
    worker = launch(sub, "ex03_gqa")
    private = worker._prepare_dir() / "submission"
    try:   # the link is not copied, nor what ex03's worker cannot import
        assert sorted(p.name for p in private.iterdir()) == []
    finally:   # a file system of its own where the grader is root
        from grader.sandbox import process
        process.remove_staging(private.parent)
        assert not private.parent.exists()
    report = grade_dir(sub, ["ex01_by_hand", "ex03_gqa"], call_timeout=3, fresh=True)
    assert not report.errors
    ex03 = [t for t in report.tests if t.exercise == "ex03_gqa"]
    assert ex03 and all(t.score == 0 and "is a link" in t.output for t in ex03)
    assert report.exercise_scores()["ex01_by_hand"][0] == ex01_max()
    assert "Hidden tests for ex03_gqa" not in "\n".join(t.output for t in report.tests)


# -- issue 10: the machine around the worker ------------------------------------

PNG_SCRIPT = b"\x89PNG\r\n\x1a\n#!/bin/sh\necho owned\n"


@pytest.mark.parametrize("isolation", BEST_ISOLATION_FIRST)
def test_link_write_never_reaches_its_target(tmp_path, isolation):
    """A submission holding a link named like the ex04 plot, and a plot_scaling
    writing a script with PNG magic: nothing is written through the link, and
    the script, no figure savefig wrote, is kept nowhere (tests/test_plot_forge.py)."""
    sub = copy_solutions(tmp_path / "sub", ["ex04_quadratic"])
    target = tmp_path / "precious.sh"
    target.write_text("original\n")
    (sub / "ex04_scaling.png").symlink_to(target)
    path = sub / "ex04_quadratic.py"
    text = path.read_text()
    head = "def plot_scaling(results, path):\n"
    assert text.count(head) == 1
    path.write_text(text.replace(head, head + f"    open(path, 'wb').write({PNG_SCRIPT!r})\n"
                                 "    return\n"))
    before = sorted(p.name for p in sub.iterdir())
    out = tmp_path / "out"
    report = grade_dir(sub, ["ex04_quadratic"], suite="public", keyword="measure_scaling_shows",
                       artifacts_dir=out, isolation=isolation, fresh=True)
    assert not report.errors, report.errors
    assert target.read_text() == "original\n"
    assert sorted(p.name for p in sub.iterdir()) == before and (sub / "ex04_scaling.png").is_symlink()
    [test] = [t for t in report.tests if t.name.startswith("test_measure_scaling")]
    assert str(tmp_path) not in test.output and str(out) not in to_text(report)
    if test.status == "passed":   # a noisy machine may leave it to a regrade
        assert not (out / "ex04_scaling.png").exists()
        assert "(no plot saved: plot_scaling saved no matplotlib figure" in test.output


def test_artifacts_are_not_written_through_links(tmp_path):
    from grader import artifacts
    target = tmp_path / "target"
    target.write_text("keep")
    out = tmp_path / "out"
    out.mkdir()
    (out / "plot.png").symlink_to(target)
    assert artifacts.save(out, "plot.png", b"new") == "plot.png"
    assert target.read_text() == "keep" and not (out / "plot.png").is_symlink()
    assert (out / "plot.png").read_bytes() == b"new"
    linked = tmp_path / "linked-out"
    linked.symlink_to(tmp_path / "elsewhere", target_is_directory=True)
    (tmp_path / "elsewhere").mkdir()
    with pytest.raises(artifacts.ArtifactError):
        artifacts.save(linked, "plot.png", b"new")
    assert not list((tmp_path / "elsewhere").iterdir())
    with pytest.raises(ValueError):
        artifacts.save(out, "../escape.png", b"x")


SIBLING_READER = """\
    import glob, os
    found = []
    places = [{sibling!r}]
    for pid in (os.getppid(), 1):
        try:
            argv = open("/proc/%d/cmdline" % pid).read().split("\\0")
            places += [os.path.dirname(a) for a in argv if a.startswith("/")]
            places.append(os.readlink("/proc/%d/cwd" % pid))
        except Exception as exc:
            found.append("no parent: %r" % exc)
    for place in places:
        for path in glob.glob(os.path.join(place, "**", "*.py"), recursive=True):
            try:
                found.append(open(path).read())
            except Exception:
                pass
    raise ValueError("\\n".join(found)[-3000:] or "nothing")
    """


@pytest.mark.slow
@pytest.mark.parametrize("isolation", ISOLATIONS)
def test_students_cannot_read_each_other(tmp_path, isolation):
    """A worker looks for the batch folder (through its parent's command line,
    or a path it knows) and reads the other students' modules."""
    klass = tmp_path / "class"
    other = copy_solutions(klass / "other", ["ex01_by_hand"])
    (other / "ex01_by_hand.py").write_text("SECRET_OF_OTHER = 'sibling-secret-4711'\n")
    sub = copy_solutions(klass / "me", FOUNDATION)
    in_function(sub, BYTES_LINE, SIBLING_READER.format(sibling=str(other)))
    report, _ = grade_attack(sub, isolation=isolation, keyword=TWO_CALLS)
    assert_no_credit_for_cache_bytes(report)
    leaked = "\n".join(t.output for t in report.tests)
    if isolation == "strict":
        assert "sibling-secret-4711" not in leaked
        assert "Hidden tests for ex03_gqa" not in leaked
    elif not SANDBOXED:   # the fallback as root or as the grading user reads them: loudly
        assert fallback_is_loud(report)


@pytest.mark.parametrize("isolation", BEST_ISOLATION_FIRST)
def test_colliding_batch_names_each_get_their_own_grade(tmp_path, isolation):
    """s1/ and s1!.zip, and two names differing in an accent: four results,
    none skipped as "already graded", the CSV keeps the original names."""
    import csv
    import zipfile

    from grader.classroom.batch import discover, run_batch
    from grader.classroom.gradebook import Gradebook
    from grader.classroom.views import grades_csv
    from grader.core import Options
    root = tmp_path / "class"
    copy_solutions(root / "s1", ["ex01_by_hand"])
    (root / "s1" / "ex01_by_hand.py").write_text("SCORES = None\n")       # no points
    with zipfile.ZipFile(root / "s1!.zip", "w") as z:
        z.write(copy_solutions(tmp_path / "z", ["ex01_by_hand"]) / "ex01_by_hand.py",
                "ex01_by_hand.py")
    copy_solutions(root / "Jos\u00e9", ["ex01_by_hand"])
    copy_solutions(root / "Jos\u00e8", ["ex01_by_hand"])
    subs = discover(root)
    assert len({s.key for s in subs}) == 4
    book = Gradebook(tmp_path / "grades.sqlite")
    outcomes = run_batch(subs, tmp_path / "results",
                         Options(suite="hidden", exercises=["ex01_by_hand"], isolation=isolation),
                         book=book)
    assert not any(o.skipped for o in outcomes)
    rows = {r["submission"]: r for r in csv.DictReader(grades_csv(book.rows(), book.exercises())
                                                       .splitlines())}
    assert set(rows) == {"s1", "s1!", "Jos\u00e9", "Jos\u00e8"}
    assert float(rows["s1"]["total"]) < float(rows["s1!"]["total"])
    assert len({o.result_path for o in outcomes}) == 4
    assert all(rows[n]["isolation"] == ("namespaces" if isolation == "strict" else
                                        rows[n]["isolation"]) for n in rows)


NAN_TIMER = '''
def time_fn(fn, *args, warmup=2, repeats=5, **kwargs):
    import time
    for _ in range(warmup + repeats):
        fn(*args, **kwargs)
    time.sleep(0.3)
    return float("nan")
'''


# Judging a time is the grading process's work, whatever the isolation: each
# value under the best isolation here, and one under the fallback as well.
BAD_TIMES = ["float('nan')", "float('inf')", "-1.0", "0.0"]
# (inf and a negative time are the corpus tier's: NaN and zero fail the same
# checks in the default run.)
BAD_TIME_CASES = ([pytest.param(v, "strict" if NAMESPACES else "fallback",
                                marks=[pytest.mark.corpus] if v in ("float('inf')", "-1.0") else [])
                   for v in BAD_TIMES]
                  + ([(BAD_TIMES[0], "fallback")] if NAMESPACES else []))


@pytest.mark.parametrize("value,isolation", BAD_TIME_CASES)
def test_a_non_finite_time_fails_and_is_never_too_noisy(tmp_path, isolation, value):
    """A time_fn returning NaN, inf, a negative time or zero fails each timer
    test with feedback: never "not graded" (needs regrade), never a full mark."""
    sub = copy_solutions(tmp_path / "sub", ["ex04_quadratic"])
    path = sub / "ex04_quadratic.py"
    path.write_text(path.read_text() + NAN_TIMER.replace('float("nan")', value))
    report = grade_dir(sub, ["ex04_quadratic"], keyword="time_fn and not passes_arguments",
                       isolation=isolation, fresh=True)
    assert not report.errors, report.errors
    timers = [t for t in report.tests if t.status != "not_run"]
    assert len(timers) >= 3
    assert all(t.status == "failed" for t in timers), to_text(report)
    assert not any(t.status == NEEDS_REGRADE for t in report.tests)
    assert report.score == 0 and report.max_score > 0
    assert all("positive" in t.output or "NaN" in t.output or "infinite" in t.output
               or "expected at least" in t.output for t in timers), to_text(report)


SHM_BOMBS = {
    "dev_shm_file": """\
        for part in range(8):   # 8 x 192 MB: each file under the file-size limit
            with open("/dev/shm/attn-bomb-{tag}-%d" % part, "wb") as f:
                for _ in range(192):
                    f.write(b"x" * (1 << 20))
        """,
    "sysv_segment": """\
        import ctypes
        libc = ctypes.CDLL(None, use_errno=True)
        libc.shmat.restype = ctypes.c_void_p
        shmid = libc.shmget(0x{tag}, ctypes.c_size_t(1536 << 20), 0o1600)
        assert shmid >= 0, ctypes.get_errno()
        addr = libc.shmat(shmid, None, 0)
        assert addr not in (None, ctypes.c_void_p(-1).value), ctypes.get_errno()
        ctypes.memset(addr, 1, 1536 << 20)
        """,
    "shared_mmap": """\
        import mmap
        m = mmap.mmap(-1, 1536 << 20, flags=mmap.MAP_SHARED)
        for i in range(0, 1536 << 20, 4096):
            m[i] = 1
        """,
}


def _bomb_left_on_host(tag: str) -> list[str]:
    """This bomb's SysV segment (its key) or /dev/shm files on the machine."""
    segments = open("/proc/sysvipc/shm").read().splitlines()[1:]
    left = [f"segment {line.split()[0]}" for line in segments
            if int(line.split()[0]) == int(tag, 16)]
    return left + [f for f in os.listdir("/dev/shm") if f"attn-bomb-{tag}" in f]


# A call limit that only a bomb the memory limit failed to stop reaches.
BOMB_CALL_S = 60


@pytest.mark.parametrize("bomb", sorted(SHM_BOMBS))
def test_shared_memory_bombs_are_capped_and_leave_nothing(tmp_path, bomb, monkeypatch):
    """1.5 GB of shared memory (a /dev/shm file, a SysV segment, a shared mmap)
    under a 512 MB limit: stopped inside the worker, and no segment, file or
    process of it is left on the machine."""
    if not NAMESPACES:
        pytest.skip(f"bubblewrap cannot run here: {NO_NAMESPACES_WHY}")
    import tempfile

    from grader.sandbox import memcg
    tag = f"{uuid.uuid4().int & 0x7fffffff:08x}"
    sub = copy_solutions(tmp_path / "sub", FOUNDATION)
    in_function(sub, BYTES_LINE, SHM_BOMBS[bomb].format(tag=tag))
    staging = tmp_path / "staging"   # where this grading's private folders go
    staging.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(staging))
    # The memory limit must stop the bomb, not the time limit: touching 1.5 GB
    # takes well over grade_attack's 3 s on a loaded machine, and a time-out
    # says nothing about memory.  BOMB_CALL_S is far beyond any machine's load.
    report, _ = grade_attack(sub, memory_mb=512, isolation="strict", call_timeout=BOMB_CALL_S)
    assert_no_credit_for_cache_bytes(report)
    assert not list(staging.iterdir())          # no private folder is left
    parent = memcg.base()[0]
    if parent is not None:                      # nor a cgroup of this process
        assert not list(parent.glob(f"attn-grade-{os.getpid()}-*"))
    assert not [p for p in _descendants(os.getpid()) if _alive(p)]   # nor a process
    text = outputs(report)
    assert ("memory limit of 512 MB" in text or "No space left" in text
            or "MemoryError" in text or "Cannot allocate" in text), text
    assert not _bomb_left_on_host(tag)


def test_shared_memory_bombs_in_the_fallback_say_so(tmp_path):
    """Without namespaces a small shared segment outlives its worker unless the
    worker had its own user; the report says the isolation is weak."""
    tag = f"{uuid.uuid4().int & 0x7fffffff:08x}"
    sub = copy_solutions(tmp_path / "sub", FOUNDATION)
    in_function(sub, BYTES_LINE, SHM_BOMBS["dev_shm_file"].format(tag=tag)
                .replace("range(8)", "range(1)").replace("range(192)", "range(4)"))
    try:
        report, _ = grade_attack(sub, memory_mb=512, isolation="fallback")
        assert fallback_is_loud(report)
    finally:
        if os.path.exists(f"/dev/shm/attn-bomb-{tag}-0"):
            os.unlink(f"/dev/shm/attn-bomb-{tag}-0")


KILLED_GRADER = """\
import sys
from grader.core import Options, grade
grade(sys.argv[1], Options(exercises=["ex01_by_hand", "ex02_mha", "ex03_gqa"],
                           call_timeout=600, isolation=sys.argv[2]))
"""


def _descendants(pid: int) -> set[int]:
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                fields = open(f"/proc/{entry}/stat").read().rsplit(")", 1)[1].split()
                children.setdefault(int(fields[1]), []).append(int(entry))
            except (OSError, IndexError, ValueError):
                pass
    out, todo = set(), [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            out.add(child)
            todo.append(child)
    return out


def _ppid(pid: int) -> int:
    try:
        return int(open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[1])
    except (OSError, IndexError, ValueError):
        return -1


def _spinning_worker(pid: int) -> bool:
    try:
        state = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[0]
        return state == "R" and WORKER_PROGRAM in open(f"/proc/{pid}/cmdline").read()
    except (OSError, IndexError):
        return False


def _alive(pid: int) -> bool:
    try:
        state = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


@pytest.mark.parametrize("isolation", BEST_ISOLATION_FIRST)
def test_workers_die_with_a_killed_grader(sub, tmp_path, isolation):
    """kill -9 of the grading process (a CI time-out): its workers, and what
    they started, are gone within seconds, not running on at full CPU."""
    import signal
    import subprocess
    import sys
    from tests.conftest import REPO
    in_function(sub, BYTES_LINE, """\
        import os
        if os.fork() == 0:
            os.setsid()
            while True:
                pass
        while True:
            pass
        """)
    env = dict(os.environ, PYTHONPATH=str(REPO))
    grader = subprocess.Popen([sys.executable, "-c", KILLED_GRADER, str(sub), isolation],
                              env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        spinning = set()
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and len(spinning) < 2:
            time.sleep(0.5)
            spinning = {p for p in _descendants(grader.pid) if _spinning_worker(p)}
        assert len(spinning) >= 2, "the attack never started"
        workers = _descendants(grader.pid)
        direct = {p for p in workers if _ppid(p) == grader.pid}
    finally:
        grader.send_signal(signal.SIGKILL)
        grader.wait()
    # The fallback promises the worker (and its fork server: test_forkserver), not a
    # detached child of it: wait for those only.
    must_die = workers if isolation == "strict" else direct
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and any(_alive(p) for p in must_die):
        time.sleep(0.2)
    left = [p for p in workers if _alive(p)]
    try:
        if isolation == "strict":
            assert not left
        else:  # the fallback: the worker dies with its grader (parent-death signal);
            # a detached child of it may not, which the report says (weak isolation)
            assert direct and not [p for p in direct if _alive(p)]
    finally:
        for p in left:
            try:
                os.kill(p, signal.SIGKILL)
            except OSError:
                pass
    # What it could not remove, the next grader does (here without waiting
    # the ten minutes that keep another PID namespace's folders safe).
    from grader.sandbox.process import STAGING_PREFIX, remove_stale_staging
    tmp = Path(tempfile.gettempdir())
    staged = list(tmp.glob(f"{STAGING_PREFIX}{grader.pid}-*"))
    assert staged, "the killed grader staged nothing"
    removed = remove_stale_staging(min_age_s=0)
    assert set(staged) <= set(removed) and not any(p.exists() for p in staged)


@pytest.mark.parametrize("bomb", sorted(SHM_BOMBS))
def test_shared_memory_bombs_without_a_cgroup(tmp_path, bomb, monkeypatch):
    """Where no memory cgroup is writable, the address-space limit and the
    tmpfs sizes stop the same bombs inside the worker."""
    if not NAMESPACES:
        pytest.skip(f"bubblewrap cannot run here: {NO_NAMESPACES_WHY}")
    from grader.sandbox import memcg
    monkeypatch.setattr(memcg, "_base", (None, "", "no cgroup in this test"))
    tag = f"{uuid.uuid4().int & 0x7fffffff:08x}"
    sub = copy_solutions(tmp_path / "sub", FOUNDATION)
    in_function(sub, BYTES_LINE, SHM_BOMBS[bomb].format(tag=tag))
    report, _ = grade_attack(sub, memory_mb=512, isolation="strict")
    assert_no_credit_for_cache_bytes(report)
    assert "address-space limit" in report.isolation_text
    text = outputs(report)
    assert ("No space left" in text or "MemoryError" in text or "Cannot allocate" in text
            or "mmap" in text or "AssertionError" in text), text
    assert not _bomb_left_on_host(tag)


def test_the_fallback_removes_a_worker_users_leftovers(tmp_path):
    """In the fallback (no namespaces) a worker with its own uid leaves SysV
    segments and files in shared temp folders; releasing the uid removes them,
    so a later worker given the same uid inherits nothing."""
    import shutil
    import subprocess
    if not confine.is_root() or shutil.which("ipcmk") is None:
        pytest.skip("needs root (to act as a worker's uid) and ipcmk")
    uid = confine.fresh_uid()
    shared = tmp_path / "shm"
    shared.mkdir(mode=0o1777)
    shared.chmod(0o1777)
    try:
        made = subprocess.run(["ipcmk", "-M", "4096"], user=uid, group=uid, extra_groups=[],
                              capture_output=True, text=True, cwd="/")
        assert made.returncode == 0, made.stderr
        ident = made.stdout.split()[-1]
        (shared / "left").write_text("x")
        os.chown(shared / "left", uid, uid)
        (shared / "other").write_text("not the worker's")
        # a folder anyone may write, made by someone else: what the uid left
        # inside is found too (ex03's worker read ex02's file there)
        (shared / "anyones").mkdir()
        (shared / "anyones").chmod(0o1777)
        (shared / "anyones" / "left-inside").write_text("x")
        os.chown(shared / "anyones" / "left-inside", uid, uid)
        removed = confine.remove_leftovers(uid, folders=[shared])
        assert f"shm {ident}" in removed and str(shared / "left") in removed
        assert str(shared / "anyones" / "left-inside") in removed
        assert list((shared / "anyones").iterdir()) == []
        segments = [line.split()[1] for line in
                    open("/proc/sysvipc/shm").read().splitlines()[1:]]
        assert ident not in segments
        assert sorted(p.name for p in shared.iterdir()) == ["anyones", "other"]
    finally:
        confine.release_uid(uid)
