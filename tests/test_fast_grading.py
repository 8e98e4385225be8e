"""What makes a grading and a check fast holds what they promise.

Functional only: no test here asserts a wall-clock time (the figures are
``benchmarks/bench_class.py`` and ``benchmarks/bench_check_loop.py``).

* The report says where the time went: seconds per exercise and per phase,
  in the text and in the JSON.
* Exercise G's compile check begins in the background when a grading
  starts; the exercises that time the submission run only once it ended; the
  report keeps the course order.
* A comment-only edit of ex07 keeps check's compile answer (its lines moved
  with the code); a change to the code does not.
* `check` keeps an unchanged exercise's results and checks a changed one.
* The second grading for root causes runs the failing tests only.
* A worker's descendants are found by walking down from it.
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from grader import core
from grader.report import FAILED, PASSED, to_gradescope, to_text
from grader.report import TestResult as Result
from tests.conftest import FOUNDATION, copy_solutions, grade_dir, graded_solutions


def test_report_gives_seconds_per_exercise(tmp_path_factory):
    report = graded_solutions(tmp_path_factory, "public")   # A-C, graded once a run
    assert report.score == report.max_score > 0
    assert list(report.exercise_seconds) == FOUNDATION
    assert all(s > 0 for s in report.exercise_seconds.values())
    assert report.phase_seconds["start and collection"] > 0
    text = to_text(report)
    assert "Time: ex01_by_hand " in text and " s, ex02_mha " in text
    assert "start and collection" in to_text(report, public_only=True)
    seconds = to_gradescope(report)["extra_data"]["seconds"]
    assert set(seconds["exercises"]) == set(FOUNDATION)
    assert "start and collection" in seconds["phases"]


class _SlowCompiler:
    """Stands in for ex07's compile worker: records when it compiled."""
    events: list = []

    def __init__(self, launch_worker):
        self._worker = self

    def close(self):
        pass

    _ensure = close   # started at once

    def probe(self, name):
        type(self).events.append(("compile began", time.monotonic()))
        time.sleep(1.0)
        type(self).events.append(("compile ended", time.monotonic()))
        return {"targets": []}


class _Order:
    """A pytest plugin that records when each test began."""

    def __init__(self):
        self.began: list = []

    def pytest_runtest_logstart(self, nodeid, location):
        self.began.append((nodeid, time.monotonic()))


def test_compile_begins_early_and_timed_exercises_wait_for_it(tmp_path, monkeypatch):
    pytest.importorskip("triton")
    from grader.reference import flash_judge
    from grader.suites import conftest as suites_conftest

    monkeypatch.setattr(flash_judge, "compile_worker", _SlowCompiler)
    _SlowCompiler.events = []
    order = _Order()
    real_main = core.pytest.main
    monkeypatch.setattr(core.pytest, "main",
                        lambda args, plugins=(): real_main(args, plugins=[*plugins, order]))
    sub = copy_solutions(tmp_path / "sub", ["ex01_by_hand", "ex04_quadratic",
                                            "ex07_flash_attention"])
    report = grade_dir(sub, ["ex01_by_hand", "ex04_quadratic", "ex07_flash_attention"],
                       suite="public", check_cache=None,
                       keyword="causal_weights_hide or naive_attention_small or kernel_compiles")
    events = dict(_SlowCompiler.events)
    began = {nodeid.split("::")[-1].split("[")[0]: t for nodeid, t in order.began}
    assert set(began) == {"test_causal_weights_hide_the_future", "test_naive_attention_small",
                          "test_kernel_compiles_for_sm80_and_sm90"}
    # begun before its own test, which takes its answer up (one compile)
    assert events["compile began"] < began["test_kernel_compiles_for_sm80_and_sm90"]
    assert [e for e, _ in _SlowCompiler.events] == ["compile began", "compile ended"]
    # the timed exercise ran once the compile had ended, after the others
    assert began["test_naive_attention_small"] >= events["compile ended"]
    assert [nodeid.split("/")[-1].split("::")[0] for nodeid, _ in order.began][-1] == \
        "test_ex04_quadratic.py"
    # the report in course order, the compile's own time among the phases
    assert [t.exercise for t in report.tests] == ["ex01_by_hand", "ex04_quadratic",
                                                  "ex07_flash_attention"]
    assert report.phase_seconds[suites_conftest.EARLY_PHASE] >= 1.0
    assert not report.errors


def test_early_compile_not_taken_up_is_ended(tmp_path, monkeypatch):
    """A compile begun for a test that never asked for it (its setup failed,
    say) is ended with the grading, not left running."""
    pytest.importorskip("triton")
    from grader.reference import flash_judge

    stop = threading.Event()

    class Hanging(_SlowCompiler):
        killed = False

        def kill(self):
            type(self).killed = True
            stop.set()

        def probe(self, name):
            stop.wait(30)
            return {"targets": []}

    monkeypatch.setattr(flash_judge, "compile_worker", Hanging)
    sub = copy_solutions(tmp_path / "sub", ["ex07_flash_attention"])
    early = flash_judge.compile_early(sub, None)
    time.sleep(0.2)
    began = time.monotonic()
    assert flash_judge.forget_early(sub) is early
    assert Hanging.killed and time.monotonic() - began < 30
    assert flash_judge.forget_early(sub) is None


class _FakeCompiler:
    """Its plan: one launch, which fails at the kernel's ``def``; counts the plans."""
    calls = 0

    def __init__(self, *args):
        self._worker = self

    def close(self):
        pass

    _ensure = kill = close   # started at once; ended

    def probe(self, name, *args, **kwargs):
        if name.endswith("compile_plan"):
            type(self).calls += 1
            return {"targets": [{"target": "sm_80 (A100)", "capability": 80,
                                 "dtype": "float16", "rows": [
                                     {"kernel": "_flash_fwd", "config": "",
                                      "in_submission": True, "key": None}]}]}
        line = next(i for i, text in enumerate(self.source().splitlines(), start=1)
                    if "def _flash_fwd" in text)
        return {"ok": False, "error": "CompilationError: no", "file": "ex07_flash_attention.py",
                "line": line}

    source = staticmethod(lambda: "")


def test_comment_only_edit_compiles_nothing(tmp_path, monkeypatch):
    from grader.reference import flash_judge

    monkeypatch.setattr(flash_judge, "compile_worker", _FakeCompiler)
    _FakeCompiler.calls = 0
    sub = copy_solutions(tmp_path / "sub", ["ex07_flash_attention"])
    path = sub / "ex07_flash_attention.py"
    monkeypatch.setattr(_FakeCompiler, "source", staticmethod(path.read_text))
    cache = tmp_path / "cache"
    first, cached = flash_judge.compile_results(sub, None, cache)
    assert not cached and _FakeCompiler.calls == 1
    line = first["targets"][0]["rows"][0]["line"]
    text = path.read_text()
    # a comment changed, a comment line and a blank line added above the
    # kernel, a trailing comment: the same code
    edited = text.replace("# 1/ln(2)", "# one over ln 2", 1).replace(
        "    @triton.autotune(", "    # the kernel\n\n    @triton.autotune(", 1)
    edited = edited.replace("LOG2E = 1.4426950408889634",
                            "LOG2E = 1.4426950408889634  # log2(e)", 1)
    assert edited != text
    path.write_text(edited)
    again, cached = flash_judge.compile_results(sub, None, cache)
    assert cached and _FakeCompiler.calls == 1
    # the kept answer's line follows the kernel two lines down
    assert again["targets"][0]["rows"][0]["line"] == line + 2
    assert "def _flash_fwd" in path.read_text().splitlines()[line + 2 - 1]
    # a change to the code compiles again
    path.write_text(edited.replace("LOG2E = 1.4426950408889634", "LOG2E = 1.44269504", 1))
    _, cached = flash_judge.compile_results(sub, None, cache)
    assert not cached and _FakeCompiler.calls == 2


def test_check_keeps_unchanged_exercises(tmp_path):
    from grader.checkcache import KEPT_NOTE, grade_cached

    sub = copy_solutions(tmp_path / "sub", ["ex01_by_hand", "ex02_mha"])
    asked = []

    def counting(folder, options):
        asked.append(list(options.exercises))
        return core.grade(folder, options)

    options = core.Options(suite="public", exercises=["ex01_by_hand", "ex02_mha"],
                           check_cache=tmp_path / "cache")
    first = grade_cached(sub, options, counting)
    assert asked == [["ex01_by_hand", "ex02_mha"]]
    again = grade_cached(sub, options, counting)
    assert asked == [["ex01_by_hand", "ex02_mha"]]        # nothing graded again
    assert [(t.name, t.status, t.score, t.output) for t in again.tests] == \
        [(t.name, t.status, t.score, t.output) for t in first.tests]
    assert KEPT_NOTE.format(n=2, names="ex01_by_hand, ex02_mha") in again.notes
    assert "kept from an earlier check" in to_text(again, public_only=True)
    # a change to ex02 checks ex02 again, and ex01 stays kept
    mha = sub / "ex02_mha.py"
    mha.write_text(mha.read_text().replace("def softmax(", "def _softmax_unused(x):\n"
                                           "    return x\n\n\ndef softmax(", 1))
    third = grade_cached(sub, options, counting)
    assert asked[-1] == ["ex02_mha"]
    assert [t.exercise for t in third.tests] == [t.exercise for t in first.tests]
    # a failure is kept as a failure
    mha.write_text("def softmax(x, axis=-1):\n    return x\n")
    failing = grade_cached(sub, options, counting)
    kept = grade_cached(sub, options, counting)
    assert asked[-1] == ["ex02_mha"] and len(asked) == 3
    assert any(t.status == FAILED for t in kept.tests if t.exercise == "ex02_mha")
    assert [t.status for t in kept.tests] == [t.status for t in failing.tests]


def test_a_comment_edit_keeps_the_results_and_moved_code_checks_again(tmp_path):
    """check's key is the code and where each token sits, not the bytes: a
    comment edited in place (on its own line, at a line's end) keeps the
    results; a line added above the code moves every line the feedback
    names, and the code itself changed: both check again."""
    from grader import checkcache

    sub = copy_solutions(tmp_path / "sub", ["ex02_mha"])
    mha = sub / "ex02_mha.py"
    original = mha.read_text()
    assert "\nimport numpy as np\n" in original

    def key(text):
        mha.write_text(text)
        return checkcache.keys(sub, core.Options(suite="public"), ["ex02_mha"])["ex02_mha"]

    first = key(original)
    own_line = original.replace("\nimport numpy as np\n", "\n# my notes\nimport numpy as np\n", 1)
    assert key(own_line) != first                   # a line more: the code moved
    assert key(own_line.replace("# my notes", "# my notes, edited: see the chapter")) \
        == key(own_line)                            # the same comment line, edited
    assert key(original.replace("\nimport numpy as np\n",
                                "\nimport numpy as np  # arrays\n", 1)) == first
    assert key(original.replace("\nimport numpy as np\n", "\nimport numpy as np;\n", 1)) \
        != first                                    # a token more
    assert key(original.replace("import numpy as np", "import numpy  as np", 1)) != first
    broken = original + "\ndef broken(:\n"        # no tokens: its bytes count
    assert key(broken) != key(broken + "# x\n")


def test_second_grading_runs_only_the_failing_tests(tmp_path, monkeypatch):
    sub = copy_solutions(tmp_path / "sub", ["ex02_mha", "ex03_gqa"])
    mha = sub / "ex02_mha.py"
    mha.write_text(mha.read_text() + "\n# not the reference's file\n")
    asked = []

    def regrade(report, submission, options, jobs, start, fork_server=None, *, grade):
        asked.extend((exercise, sorted(files), keyword)
                     for exercise, (files, keyword) in jobs.items())
        return set()

    from grader import rootcause
    monkeypatch.setattr(rootcause, "regrade", regrade)
    report = core.Report(submission=str(sub), suite="hidden", exercises=["ex03_gqa"])
    report.tests = [
        Result("ex03_gqa", "test_gqa_small[a]", "t", 1, 0, FAILED),
        Result("ex03_gqa", "test_gqa_small[b]", "t", 1, 0, FAILED),
        Result("ex03_gqa", "test_gqa_equals_mha", "t", 1, 1, PASSED),
    ]
    rootcause.upstream_evidence(report, {}, sub, core.Options(), time.perf_counter(),
                                grade=core.grade)
    assert asked and asked[0] == ("ex03_gqa", ["ex02_mha.py"], "test_gqa_small")


def test_descendants_walk_down_as_the_scan_finds_them():
    from grader.sandbox import process

    proc = subprocess.Popen(["bash", "-c", "sleep 30 & (sleep 30 & wait) & wait"])
    try:
        deadline = time.monotonic() + 10
        while len(process._descendants_by_scan(proc.pid)) < 3 and time.monotonic() < deadline:
            time.sleep(0.05)
        scanned = sorted(process._descendants_by_scan(proc.pid))
        assert len(scanned) >= 3   # sleep, the subshell and its sleep
        assert sorted(process.descendants(proc.pid)) == scanned
    finally:
        for pid in process.descendants(proc.pid):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        proc.kill()
        proc.wait()
    assert process.descendants(proc.pid) == []


def test_the_compile_test_is_named_where_the_conftest_looks():
    """The suites' conftest finds G's compile check by its name."""
    from grader.paths import SUITES_DIR
    from grader.suites import conftest as suites_conftest

    text = (SUITES_DIR / "public" / "test_ex07_flash_attention.py").read_text()
    assert f"def {suites_conftest.COMPILE_TEST_NAME}(" in text
    assert "flash_judge.compile_results(" in text
    assert suites_conftest.TIMED == ("ex04_quadratic", "ex05_decode_prefill")
    assert Path(SUITES_DIR / "public" / "test_ex04_quadratic.py").is_file()


def test_only_timed_suites_measure_the_peaks_themselves():
    """A test outside the timed exercises reads the machine's peaks through
    the ``machine_peaks`` fixture, which sorts it after the background
    compile (``_quiet``), never by measuring them itself beside it."""
    import re

    from grader.paths import SUITES_DIR
    from grader.suites import conftest as suites_conftest

    readers = []
    for path in sorted(SUITES_DIR.glob("*/test_*.py")):
        text = path.read_text()
        exercise = re.search(r'mark\.exercise\("(\w+)"\)', text)
        if exercise and exercise.group(1) in suites_conftest.TIMED:
            continue
        if re.search(r"\b(grading_peaks|machine_peaks|matmul_flops|copy_bandwidth)\(", text):
            readers.append(path.name)
    assert readers == []
    assert any("machine_peaks" in p.read_text() for p in SUITES_DIR.glob("public/test_ex06*.py"))


def test_the_compile_test_waits_last_and_is_reported_in_its_place(monkeypatch):
    """Where G compiles in the background, its compile test (which waits for
    the answer) runs after every other test that measures nothing, just
    before the timed exercises and the tests that read the machine's peaks
    (measured then, with nothing beside them): the rest run while it
    compiles.  The report keeps the course order with each exercise's tests
    as collected."""
    from types import SimpleNamespace

    from grader.report import Report
    from grader.suites import conftest as suites_conftest

    class Item:
        def __init__(self, exercise, name, fixturenames=()):
            self.exercise, self.name, self.nodeid = exercise, name, f"{exercise}::{name}"
            self.fixturenames = list(fixturenames)

        def get_closest_marker(self, mark):
            return SimpleNamespace(args=[self.exercise]) if mark == "exercise" else None

    compile_test = suites_conftest.COMPILE_TEST_NAME
    items = [Item("ex01_by_hand", "a"), Item("ex04_quadratic", "timed"),
             Item("ex05_decode_prefill", "timed_too"), Item("ex07_flash_attention", "b"),
             Item("ex06_gqa_intensity", "peaks", ["student", "machine_peaks"]),
             Item("ex07_flash_attention", compile_test), Item("ex07_flash_attention", "c"),
             Item("ex08_mla", "d")]
    plugin = core.GradingPlugin(Path("."), core.Options(),
                                Report(submission="x", suite="hidden", exercises=[]))
    plugin.pytest_collection_modifyitems(items)
    monkeypatch.setattr(suites_conftest, "_compiles_early", lambda session: True)
    run = list(items)
    suites_conftest.pytest_collection_modifyitems(None, None, run)
    assert [i.name for i in run] == ["a", "b", "c", "d", compile_test, "timed", "timed_too",
                                     "peaks"]
    plugin.plan = {i.nodeid: core.Planned(1.0, True) for i in run}
    plugin.items = {i.nodeid: i for i in run}
    for i in run:   # recorded as they ran
        plugin.results[i.nodeid] = Result(exercise=i.exercise, name=i.name, title=i.name,
                                          max_score=1.0, score=1.0, status=PASSED)
        plugin.report.tests.append(plugin.results[i.nodeid])
    plugin.unrecorded()
    assert [t.name for t in plugin.report.tests] == ["a", "timed", "timed_too", "peaks", "b",
                                                     compile_test, "c", "d"]


def test_checks_keep_each_launch_that_compiled(tmp_path, monkeypatch):
    """`check` keeps each launch that compiled (by Triton's key of the kernel,
    the arguments, the config and the target): an edit of the host code
    compiles none of them again; a grading keeps nothing and compiles all."""
    pytest.importorskip("triton")
    if os.environ.get("TRITON_INTERPRET"):
        pytest.skip("the kernels must be JITFunctions (no TRITON_INTERPRET)")
    import importlib.util

    from grader.reference import flash_judge
    from grader.sandbox.runtime.probes import ex07_flash_attention as probe
    from grader.sandbox.runtime.probes import gpu_compile
    compiled = []

    def fake_compile(fn, args, kwargs, capability, front_end_only=False):
        if front_end_only:
            return {"ok": True, "front_end": True}
        compiled.append((capability, kwargs["BLOCK_M"], kwargs["BLOCK_N"],
                         kwargs.get("num_stages")))
        return {"ok": True, "registers": 100, "spill_bytes": 0, "shared_bytes": 1024,
                "fits": True, "wgmma": capability >= 90, "tma": False,
                "num_warps": kwargs.get("num_warps"), "num_stages": kwargs.get("num_stages")}
    monkeypatch.setattr(gpu_compile, "compile_launch", fake_compile)
    sub = copy_solutions(tmp_path / "sub", ["ex07_flash_attention"])
    spec = importlib.util.spec_from_file_location("ex07_flash_attention",
                                                  sub / "ex07_flash_attention.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    monkeypatch.chdir(sub)
    plan = probe.compile_plan(module)
    assert all(r["key"] for t in plan["targets"] for r in t["rows"]) and not compiled

    class Replay:
        """The compile worker, answering as the probe does in-process."""

        def __init__(self, launch_worker):
            self._worker = self

        def close(self):
            pass

        _ensure = close   # started at once

        def kill(self):
            pass

        def probe(self, name, *args, **kwargs):
            return getattr(probe, name.split(".")[-1])(module, *args, **kwargs)
    monkeypatch.setattr(flash_judge, "compile_worker", Replay)
    cache = tmp_path / "cache"
    res, _ = flash_judge.compile_results(sub, None, cache)
    done = {(t["capability"], r["config"]) for t in res["targets"] for r in t["rows"]
            if not r.get("front_end")}
    assert len(done) >= 2 and len(compiled) >= 2
    # a one-line edit of the host code: what compiled before is kept
    path = sub / "ex07_flash_attention.py"
    path.write_text(path.read_text().replace("LOG2E = 1.4426950408889634",
                                             "LOG2E = 1.442695040888963", 1))
    before = list(compiled)
    again, cached = flash_judge.compile_results(sub, None, cache)
    assert not cached and not set(compiled[len(before):]) & set(before)
    rows = [(t["capability"], r) for t in again["targets"] for r in t["rows"]]
    assert {(c, r["config"]) for c, r in rows if r.get("kept")} >= done
    assert all(r.get("kept") for c, r in rows if (c, r["config"]) in done)
    assert again["targets"][0]["rows"][-1]["registers"] == 100
    # a grading keeps nothing and compiles every launch
    compiled.clear()
    graded, _ = flash_judge.compile_results(sub, None, None)
    rows = [r for t in graded["targets"] for r in t["rows"]]
    assert len(compiled) == len(rows) == 12
    assert not any(r.get("kept") or r.get("pending") for r in rows)


FONTS = '''
import matplotlib.font_manager as fm
def names():
    return sorted({f.name for f in fm.fontManager.ttflist})
'''


@pytest.mark.parametrize("mode", ["strict", "fallback"])
def test_the_fork_server_takes_checks_font_list_instead_of_scanning(tmp_path, mode):
    """matplotlib's font list is built once, by the grader's own Python, in
    `check`'s cache, and the fork server imports matplotlib with it: a font
    only the kept list names (it was added to it here) is what the forked
    worker's matplotlib knows; without a cache it scans the machine itself."""
    import json
    from grader.sandbox import bwrap, fonts
    from grader.sandbox.client import StudentModule
    from tests.conftest import launcher
    if not sys.platform.startswith("linux"):
        pytest.skip("a fork server is Linux only")
    if mode == "strict" and not bwrap.usable()[0]:
        pytest.skip("no namespaces here")
    pytest.importorskip("matplotlib")
    cache = tmp_path / "cache"
    kept = fonts.font_list(cache)
    assert kept is not None and kept.parent.parent == cache, kept
    assert fonts.font_list(cache) == kept      # kept: found, not built again
    listed = json.loads(kept.read_text())
    planted = dict(listed["ttflist"][0], name="AttnGradeKeptFont")
    listed["ttflist"].append(planted)
    kept.write_text(json.dumps(listed))
    sub = tmp_path / "sub"
    sub.mkdir()
    os.chmod(tmp_path, 0o755)
    (sub / "ex02_mha.py").write_text(FONTS)
    own = launcher(mode)
    for cache_given, expected in ((cache, True), (None, False)):
        zyg = own.fork_server({"NumPy"}, ("matplotlib", "matplotlib.font_manager"),
                              font_cache=cache_given)
        zyg.start()
        try:
            assert zyg.alive, zyg.failed
            worker = own.worker(sub, "ex02_mha", call_timeout=60, fork_from=zyg)
            try:
                known = StudentModule(worker).names()
                assert getattr(worker.proc, "forked", False)
            finally:
                worker.close()
        finally:
            zyg.close()
        assert ("AttnGradeKeptFont" in known) == expected, (cache_given, known[:5])


def test_check_begins_its_fork_server_before_the_core_and_leaves_nothing(tmp_path, monkeypatch):
    """`attn-grade check B`: the command line begins the grading's fork server
    before it imports the grader's core (``launch.begin_fork_server``), and
    the grading forks B's worker from that one: one fork server in all,
    begun with what B's worker wants, given check's font list with --no-cache
    too, gone with its folder afterwards.  A check that grades nothing (B
    kept) closes the one it began; the fallback begins none (its secret
    folders are protected first, by the grading)."""
    from click.testing import CliRunner
    from grader.cli import main
    from grader.registry import EXERCISES
    from grader.sandbox import bwrap, confine, forkserver, launch
    if not (forkserver.supported() and bwrap.usable()[0] and confine.is_root()):
        pytest.skip("a fork server under namespaces needs Linux, bubblewrap and root")
    spawned, begun, forked_from = [], [], []
    real_spawn, real_begin = forkserver.ForkServer._spawn, forkserver.ForkServer.begin
    real_fork = forkserver.ForkServer.fork

    def spawn(self):
        real_spawn(self)
        spawned.append(self)

    def begin(self, eager=()):
        begun.append((self, tuple(eager)))
        real_begin(self, eager)

    def fork(self, cfg, on_forked=None, wants=None):
        forked_from.append(self)
        return real_fork(self, cfg, on_forked, wants)

    monkeypatch.setattr(forkserver.ForkServer, "_spawn", spawn)
    monkeypatch.setattr(forkserver.ForkServer, "begin", begin)
    monkeypatch.setattr(forkserver.ForkServer, "fork", fork)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    sub = copy_solutions(tmp_path / "sub", ["ex02_mha"])

    def check(*flags):
        result = CliRunner().invoke(main, ["check", "--path", str(sub), "B", "--artifacts",
                                           str(tmp_path / "out"), *flags])
        assert result.exit_code == 0, result.output
        return result.output

    check("--no-cache")
    ex = EXERCISES["ex02_mha"]
    assert len(spawned) == 1 and [s for s, _ in begun] == spawned
    assert begun[0][1] == forkserver.wanted(ex.needs, ex.preload)
    assert forked_from and all(f is spawned[0] for f in forked_from)
    assert spawned[0].font_cache == tmp_path / "xdg" / "attn-grade"
    assert spawned[0].root is None and spawned[0].proc.poll() is not None
    assert launch._begun == []
    check()                                     # graded, and kept
    assert "kept from an earlier check" in check()   # nothing graded: begun, closed
    assert len(spawned) == len(begun) == 3 and len(set(map(id, forked_from))) == 2
    assert spawned[-1].root is None and spawned[-1].proc.poll() is not None
    check("--no-cache", "--isolation", "fallback")
    assert len(begun) == 3 and len(spawned) == 4 and forked_from[-1] is spawned[-1]
    assert launch._begun == []


def test_a_fork_server_that_fails_to_begin_costs_the_check_nothing(tmp_path, monkeypatch):
    """The early start is a head start, never a condition: where beginning
    the fork server raises, the grading starts its own and the check passes."""
    from click.testing import CliRunner
    from grader.cli import main
    from grader.sandbox import forkserver, launch

    def broken(self, eager=()):
        raise RuntimeError("no head start today")

    monkeypatch.setattr(forkserver.ForkServer, "begin", broken)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    sub = copy_solutions(tmp_path / "sub", ["ex02_mha"])
    result = CliRunner().invoke(main, ["check", "--path", str(sub), "B", "--no-cache",
                                       "--artifacts", str(tmp_path / "out")])
    assert result.exit_code == 0, result.output
    assert "FAIL" not in result.output and launch._begun == []
