"""`attn-grade check` keeps exercise G's compile check for unchanged files.

Compiling every config of a kernel for two GPUs takes most of a check of all
exercises; the answer depends only on the files, so a student's second check
reuses it.  Grading never does.
"""
from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from grader.feedback import Feedback
from grader.reference import flash_judge
from tests.conftest import copy_solutions
from tests.data.mutants.ex07_flash_attention import MUTANTS

triton = pytest.importorskip("triton")


class _FakeCompiler:
    """Stands in for the compile worker: counts the probes it answers."""
    calls = 0

    def __init__(self, *args):
        self._worker = self

    def close(self):
        pass

    _ensure = kill = close   # started at once; ended

    def probe(self, name):
        type(self).calls += 1
        return {"targets": [{"target": "sm_80 (A100)", "rows": [], "n": type(self).calls}]}


def test_cache_reused_while_files_unchanged(tmp_path, monkeypatch):
    monkeypatch.setattr(flash_judge, "compile_worker", _FakeCompiler)
    _FakeCompiler.calls = 0
    sub = copy_solutions(tmp_path / "sub", ["ex07_flash_attention"])
    cache = tmp_path / "cache"
    first, cached = flash_judge.compile_results(sub, None, cache)
    assert not cached and _FakeCompiler.calls == 1
    again, cached = flash_judge.compile_results(sub, None, cache)
    assert cached and again == first and _FakeCompiler.calls == 1
    # Another exercise, or a file ex07 does not import, changes nothing.
    (sub / "ex02_mha.py").write_text("def softmax(x):\n    return x\n")
    (sub / "notes.py").write_text("X = 1\n")
    _, cached = flash_judge.compile_results(sub, None, cache)
    assert cached and _FakeCompiler.calls == 1
    # A change to ex07, or to a module it imports (and that one's imports), compiles again.
    path = sub / "ex07_flash_attention.py"
    path.write_text("import helpers\n" + path.read_text())
    (sub / "helpers.py").write_text("from deeper import Y\n")
    (sub / "deeper.py").write_text("Y = 1\n")
    _, cached = flash_judge.compile_results(sub, None, cache)
    assert not cached and _FakeCompiler.calls == 2
    (sub / "deeper.py").write_text("Y = 2\n")
    _, cached = flash_judge.compile_results(sub, None, cache)
    assert not cached and _FakeCompiler.calls == 3


def test_imports_that_cannot_be_read_count_every_file(tmp_path):
    sub = copy_solutions(tmp_path / "sub", ["ex07_flash_attention", "ex02_mha"])
    path = sub / "ex07_flash_attention.py"
    assert [p.name for p in flash_judge.compile_inputs(sub)] == ["ex07_flash_attention.py"]
    path.write_text("import importlib\nhelp = importlib.import_module('ex02_mha')\n"
                    + path.read_text())
    assert flash_judge.compile_inputs(sub) is None
    # A module that does not parse imports nothing: its own bytes are the key
    # (and its syntax error is what the student sees).
    path.write_text("def broken(:\n")
    assert [p.name for p in flash_judge.compile_inputs(sub)] == ["ex07_flash_attention.py"]


def test_grading_never_uses_a_cache(tmp_path, monkeypatch):
    monkeypatch.setattr(flash_judge, "compile_worker", _FakeCompiler)
    _FakeCompiler.calls = 0
    sub = copy_solutions(tmp_path / "sub", ["ex07_flash_attention"])
    for _ in range(2):
        _, cached = flash_judge.compile_results(sub, None, None)
        assert not cached
    assert _FakeCompiler.calls == 2


def test_unwritable_cache_only_costs_time(tmp_path, monkeypatch):
    monkeypatch.setattr(flash_judge, "compile_worker", _FakeCompiler)
    sub = copy_solutions(tmp_path / "sub", ["ex07_flash_attention"])
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    res, cached = flash_judge.compile_results(sub, None, blocker / "cache")
    assert not cached and res["targets"]


@pytest.mark.slow
def test_check_twice_reuses_the_compile_answer(tmp_path, monkeypatch):
    """As a student runs it: the second check of the same files says the
    answer was kept (no compile the second time); a failing kernel stays failing."""
    sub = copy_solutions(tmp_path / "sub", ["ex07_flash_attention"])
    mutant = next(m for m in MUTANTS if m.name == "kernel_global_read")
    path = sub / "ex07_flash_attention.py"
    path.write_text(path.read_text().replace(mutant.find, mutant.replace, 1))
    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path / "xdg")}
    cmd = [sys.executable, "-m", "grader.cli", "check", "ex07", "--path", str(sub),
           "--artifacts", str(tmp_path / "out")]
    runs = []
    for _ in range(2):
        done = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=600)
        runs.append((None, done))
    for _, done in runs:
        assert done.returncode == 1, done.stdout + done.stderr
        assert "global variable LOG2E" in done.stdout
    assert list((tmp_path / "xdg" / "attn-grade").glob("compile-*.json"))
    assert "kept from an earlier check" not in runs[0][1].stdout
    assert "kept from an earlier check" in runs[1][1].stdout
    # The second answer costs no compile: no compile worker is started for it
    # (how much faster that is depends on the machine: a benchmark, not a test).
    from tests.conftest import launcher
    started = []
    real = flash_judge.compile_worker

    def counting(launch_worker):
        started.append(1)
        return real(launch_worker)
    monkeypatch.setattr(flash_judge, "compile_worker", counting)
    answers = []
    for _ in range(2):
        answers.append(flash_judge.compile_results(sub, launcher().binder(sub),
                                                   tmp_path / "direct"))
        answers[-1] += (len(started),)
    assert [(cached, n) for _, cached, n in answers] == \
        [(False, flash_judge._n_workers()), (True, flash_judge._n_workers())]
    assert answers[0][0] == answers[1][0]


def test_no_cache_checks_without_the_user_cache(tmp_path, monkeypatch):
    """``check --no-cache`` grades with no cache (then every check compiles:
    ``test_grading_never_uses_a_cache``); plain ``check`` uses the user's."""
    from click.testing import CliRunner

    from grader import cli
    seen = []

    def fake_run(path, options):
        seen.append(options.check_cache)
        raise SystemExit(0)

    monkeypatch.setattr(cli, "_run", fake_run)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    sub = copy_solutions(tmp_path / "sub", ["ex07_flash_attention"])
    for flags in ([], ["--no-cache"], ["--cache"]):
        result = CliRunner().invoke(cli.main, ["check", "G", "--path", str(sub), *flags])
        assert result.exit_code == 0, result.output
    assert seen == [tmp_path / "xdg" / "attn-grade", None, tmp_path / "xdg" / "attn-grade"]


# -- what `check` compiles before it answers, and what a grading compiles ------------
LARGEST = "BLOCK_M=128, BLOCK_N=64, num_warps=8, num_stages=3"
ALL_CONFIGS = [f"BLOCK_M={bm}, BLOCK_N={bn}, num_warps={w}, num_stages={s}"
               for bm, w, bn in ((64, 4, 32), (128, 8, 32), (128, 8, 64)) for s in (2, 3)]
EVERY = sorted((c, x) for c in (80, 90) for x in ALL_CONFIGS)


class _InProcess:
    """The compile worker, answering as the probes do but in this process
    (the solution imported as on a GPU), with ``gpu_compile.compile_launch``
    replaced by ``fake_compile``.  ``kill`` releases a compile held at the gate."""
    module = None
    release = None
    threads: set = set()      # the threads that compiled fully

    def __init__(self, launch_worker):
        self._worker = self

    def close(self):
        pass

    _ensure = close   # started at once

    def kill(self):
        type(self).release.set()

    def probe(self, name, *args, **kwargs):
        from grader.sandbox.runtime.probes import ex07_flash_attention as probe
        return getattr(probe, name.split(".")[-1])(type(self).module, *args, **kwargs)


@pytest.fixture
def in_process(tmp_path, monkeypatch):
    """``(compiled, fronts, broken)``: the launches compiled fully and by the
    front end only, as ``(capability, config)``; ``broken``: config ->
    "front" or "full", where it fails.  A full compile of a config that is
    not ``LARGEST`` waits until ``_InProcess.release`` is set (`check`'s
    later compiles)."""
    if os.environ.get("TRITON_INTERPRET"):
        pytest.skip("the kernels must be JITFunctions (no TRITON_INTERPRET)")
    import importlib.util

    from grader.sandbox.runtime.probes import gpu_compile
    sub = copy_solutions(tmp_path / "sub", ["ex07_flash_attention"])
    spec = importlib.util.spec_from_file_location("ex07_flash_attention",
                                                  sub / "ex07_flash_attention.py")
    _InProcess.module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(_InProcess.module)
    _InProcess.release = threading.Event()
    _InProcess.threads = set()
    monkeypatch.chdir(sub)
    monkeypatch.setattr(flash_judge, "compile_worker", _InProcess)
    compiled, fronts, broken = [], [], {}

    def fake_compile(fn, args, kwargs, capability, front_end_only=False):
        config = gpu_compile._config_text(_Config(kwargs))
        failure = {"ok": False, "error": "CompilationError: at 1:2: AssertionFailure",
                   "file": "ex07_flash_attention.py", "line": 300}
        if front_end_only:
            fronts.append((capability, config))
            return failure if broken.get(config) == "front" else \
                {"ok": True, "front_end": True}
        if config != LARGEST:
            _InProcess.release.wait(30)
        time.sleep(0.05)        # a compile takes a while: the other worker takes the next
        compiled.append((capability, config))
        _InProcess.threads.add(threading.current_thread().name)
        if broken.get(config) == "front":
            return failure
        shared = kwargs["BLOCK_N"] * kwargs["D_HEAD"] * 4 * kwargs["num_stages"]
        if broken.get(config) == "full":
            shared = 300 * 1024
        return {"ok": True, "registers": 128, "spill_bytes": 0, "shared_bytes": shared,
                "fits": shared <= gpu_compile.SHARED_LIMIT[capability],
                "wgmma": capability >= 90, "tma": False,
                "num_warps": kwargs["num_warps"], "num_stages": kwargs["num_stages"]}
    monkeypatch.setattr(gpu_compile, "compile_launch", fake_compile)
    yield compiled, fronts, broken
    _InProcess.release.set()


class _Config:
    """What ``gpu_compile._config_text`` reads of an autotuner's config."""

    def __init__(self, kwargs):
        self.kwargs = {k: kwargs[k] for k in ("BLOCK_M", "BLOCK_N")}
        self.num_warps, self.num_stages = kwargs["num_warps"], kwargs["num_stages"]


def _rows(res, *, front_end=None) -> list:
    """``(capability, config)`` of the rows answered (``front_end``: True,
    by the front end only; False, fully)."""
    return sorted((t["capability"], r["config"]) for t in res["targets"] for r in t["rows"]
                  if not r.get("pending")
                  and (front_end is None or bool(r.get("front_end")) == front_end))


def test_check_answers_once_the_likeliest_failures_compiled(in_process):
    """`check` waits for the config with the most shared memory compiled
    fully for each GPU and every other config through Triton's front end;
    it says so, then compiles the others fully into its cache."""
    compiled, fronts, _ = in_process
    kept = []
    early = flash_judge.CompileEarly(None, {}, quick=True, keep=kept.extend)
    try:
        res = early.result()
        assert _rows(res, front_end=False) == sorted(compiled) == [(80, LARGEST), (90, LARGEST)]
        assert _rows(res, front_end=True) == sorted(fronts) == \
            [j for j in EVERY if j[1] != LARGEST]
        text = flash_judge.judge_compile(res)
        assert text.count(" registers, ") == 2
        assert "checked by Triton's front end only, not yet compiled fully (10 of 12)" in text
        assert "your grade compiles all 12 fully" in text and "--no-cache" in text
        listed = text.split("front end only")[1].splitlines()[1:]
        assert len(listed) == 10 and not any(LARGEST in line for line in listed)
        _InProcess.release.set()
        early.wait()          # the others, after the answer, into the cache
        assert sorted((c, r["config"]) for c, r in kept) == sorted(compiled) == EVERY
        assert _rows(early.result(), front_end=False) == EVERY
        assert len(_InProcess.threads) == flash_judge._n_workers()   # side by side
    finally:
        early.close()


def test_the_cache_fills_and_ranks_the_next_check(in_process, tmp_path):
    """Each launch that compiled is kept with the shared memory it needed: a
    check after a kernel edit ranks its launches by those figures."""
    _InProcess.release.set()
    cache = tmp_path / "cache"
    flash_judge.compile_early(Path.cwd(), None, cache)
    flash_judge.compile_results(Path.cwd(), None, cache)
    flash_judge._early[str(Path.cwd())].wait()      # every launch, after the answer
    flash_judge.forget_early(Path.cwd())
    known = flash_judge._known(cache)
    assert len(known) == 12 and all(k["of"][2] in ALL_CONFIGS for k in known.values())
    history = flash_judge._history(known)
    assert history[(90, "_flash_fwd", LARGEST)] == 64 * 128 * 4 * 3
    # the last check's figures outrank the tile sizes: say a small config
    # needed the most shared memory last time
    plan = {"targets": [{"capability": 80, "rows": [
        {"kernel": "k", "config": c, "in_submission": True, "tiles": t, "num_stages": 2}
        for c, t in (("a", 4096), ("b", 1024), ("c", 8192))]}]}
    assert flash_judge.first_launches(plan, {}) == [(0, 2)]
    last = {(80, "k", "a"): 9000, (80, "k", "b"): 100_000, (80, "k", "c"): 5000}
    assert flash_judge.first_launches(plan, last) == [(0, 1)]
    # one launch without figures: all ranked by tiles
    assert flash_judge.first_launches(plan, {k: v for k, v in last.items()
                                             if k[2] != "c"}) == [(0, 2)]


def test_a_timed_test_ends_checks_later_compiles(in_process, tmp_path):
    """Before a timed exercise measures, `check`'s compile stops once its
    answer is ready: its later compiles do not run beside the timing."""
    compiled, _, _ = in_process
    early = flash_judge.compile_early(Path.cwd(), None, tmp_path / "cache")
    flash_judge.wait_early(Path.cwd())
    # ended: at most the compiles in flight when it stopped finished after its answer
    assert not early._live and len(compiled) <= 2 + flash_judge._n_workers()
    assert {(80, LARGEST), (90, LARGEST)} <= set(_rows(early.result(), front_end=False))
    flash_judge.forget_early(Path.cwd())


def test_a_config_list_broken_in_the_front_end_fails_check_as_graded(in_process):
    """A config whose tile rule fails (a tl.static_assert, tl.dot's 16) fails
    `check` through the front end with the words the grading gives."""
    _, _, broken = in_process
    bad = "BLOCK_M=128, BLOCK_N=32, num_warps=8, num_stages=2"
    broken[bad] = "front"
    _InProcess.release.set()
    said = []
    for quick in (True, False):
        early = flash_judge.CompileEarly(None, {}, quick=quick)
        try:
            with pytest.raises(Feedback) as exc:
                flash_judge.judge_compile(early.result())
        finally:
            early.close()
        said.append(str(exc.value))
    assert said[0] == said[1] and f"config {bad}" in said[0] and "sm_80" in said[0]


def test_grading_compiles_every_config_and_fails_one_check_did_not(in_process):
    """A config that only a full compile shows broken (too much shared
    memory), and that `check` took through the front end only, passes the
    check, which says so; the grading compiles every config of both GPUs
    fully and fails it."""
    compiled, _, broken = in_process
    bad = "BLOCK_M=128, BLOCK_N=32, num_warps=8, num_stages=3"
    broken[bad] = "full"
    early = flash_judge.CompileEarly(None, {}, quick=True)
    try:
        text = flash_judge.judge_compile(early.result())
        assert f"sm_80 (A100)         _flash_fwd [{bad}]" in text.split("front end only")[1]
    finally:
        early.close()
    _InProcess.release.set()
    compiled.clear()
    graded = flash_judge.CompileEarly(None)
    try:
        res = graded.result()
    finally:
        graded.close()
    assert not any(r.get("kept") or r.get("front_end") for t in res["targets"]
                   for r in t["rows"])
    with pytest.raises(Feedback) as exc:
        flash_judge.judge_compile(res)
    assert f"config {bad}" in str(exc.value) and "sm_80" in str(exc.value)
    assert "shared memory" in str(exc.value)
    # every config up to the failure compiled fully for both GPUs
    for capability in (80, 90):
        assert {(capability, c) for c in ALL_CONFIGS[:4]} <= set(compiled)
    # and without a failure, all twelve
    broken.clear()
    compiled.clear()
    _InProcess.threads.clear()
    graded = flash_judge.CompileEarly(None)
    try:
        res = graded.result()
    finally:
        graded.close()
    assert sorted(compiled) == EVERY
    assert len(_InProcess.threads) == 1    # a grading's one compile worker, as before
    assert flash_judge.judge_compile(res).count(" registers, ") == 12
    assert "front end" not in flash_judge.judge_compile(res)


def test_a_long_config_list_is_compiled_for_both_gpus_and_said_cut():
    """301 launches (a red team's): the cap is shared out between the GPUs,
    and what was not compiled is said, never 'no kernel of your own file'."""
    launches = [(t, i) for t in (0, 1) for i in range(301)]
    within = flash_judge.within_cap(launches, 2, 40)
    assert len(within) == 40 and {t for t, _ in within} == {0, 1}
    assert [j for j in within if j[0] == 1] == [(1, i) for i in range(20)]
    row = {"kernel": "_fwd", "config": "BLOCK=16", "in_submission": True, "ok": True,
           "registers": 80, "spill_bytes": 0, "shared_bytes": 4096, "fits": True}
    res = {"targets": [{"capability": c, "target": name, "dtype": "float16", "truncated": 281,
                        "rows": [dict(row) for _ in range(20)]}
                       for c, name in ((80, "sm_80 (A100)"), (90, "sm_90a (H100/H200)"))]}
    text = flash_judge.judge_compile(res)
    assert "not compiled at all" in text and "281 more launches" in text
    assert text.count(" registers, ") == 40
