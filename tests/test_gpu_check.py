"""benchmarks/gpu_check.py on the CPU: every section under --smoke, the JSON
written after every section (a run cut by a signal keeps what it measured),
the budget check, the environment's fields, and the compile warm-up's cache
hits (for sm_90a, ahead of time)."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from grader.reference.secret import flash
from tests.conftest import REPO

SCRIPT = REPO / "benchmarks" / "gpu_check.py"
SECTIONS = ("environment", "worker_launch", "correctness", "calibration", "speed",
            "grader_verdict")
ENVIRONMENT_FIELDS = ("python", "torch", "cuda", "cudnn", "triton", "ptxas", "numpy",
                      "numpy_with_torch", "python_h", "c_compiler", "bubblewrap",
                      "sandbox_works", "sandbox_why_not", "isolation", "driver", "gpu",
                      "capability", "click", "blocks_launch")
needs_triton = pytest.mark.skipif(not flash.HAS_TRITON, reason=flash.NEEDS_TRITON)


def _module():
    sys.path.insert(0, str(SCRIPT.parent))
    import gpu_check
    return gpu_check


def _env(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    return {**env, "PYTHONPATH": ""}        # the script finds its package by itself


def _run(tmp_path, *args, timeout=600):
    return subprocess.run([sys.executable, str(SCRIPT), "--smoke", "--cache",
                           str(tmp_path / "cache"), *args], cwd=tmp_path, env=_env(tmp_path),
                          capture_output=True, text=True, timeout=timeout)


@pytest.mark.slow
@needs_triton
def test_gpu_check_smoke(tmp_path):
    out, thresholds = tmp_path / "check.json", tmp_path / "thresholds.json"
    done = _run(tmp_path, "--out", str(out), "--thresholds", str(thresholds))
    assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
    data = json.loads(out.read_text())
    assert data["finished"] is True
    assert all(data[s]["status"] == "ok" for s in SECTIONS), {s: data[s] for s in SECTIONS}
    assert all(data[s]["estimate_s"] > 0 and "seconds" in data[s] for s in SECTIONS)
    kernels = {r["cell"].split()[0] for r in data["correctness"]["rows"]}
    assert kernels == {"reference/pointers", "reference/descriptors", "solution"}
    assert data["warmup"]["done"] == data["warmup"]["submitted"] >= 1, data["warmup"]
    assert data["warmup"]["failed"] == 0, data["warmup"]
    measured = data["calibration"]["measured"]
    assert measured["overhead_s"] > 0 and "spread" in measured["cases"][0]
    entry = json.loads(thresholds.read_text())["models"][data["calibration"]["model"]]
    assert entry["tiers"] == data["calibration"]["entry"]["tiers"]
    assert json.loads(thresholds.read_text())["default"]     # started from the package's file
    verdicts = data["grader_verdict"]["verdicts"]
    assert verdicts["solution"]["verdict"] == "credited"
    assert verdicts["solution"]["timing"]["cases"][0]["overhead_s"] > 0
    assert verdicts["calls another kernel"]["verdict"] == "refused"
    assert "ex07_reference_copy.py" in verdicts["calls another kernel"]["feedback"]


def test_gpu_check_without_cuda_is_a_usage_error(tmp_path):
    import torch
    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    done = subprocess.run([sys.executable, str(SCRIPT), "--out", str(tmp_path / "x.json"),
                           "--cache", str(tmp_path / "cache")], capture_output=True,
                          text=True, timeout=120, env=_env(tmp_path))
    assert done.returncode == 2 and "--smoke" in done.stderr


def test_the_environment_section_has_every_field(tmp_path):
    out = tmp_path / "env.json"
    done = _run(tmp_path, "--only", "environment", "--out", str(out), timeout=180)
    assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
    data = json.loads(out.read_text())
    env = data["environment"]
    assert env["status"] == "ok", env
    missing = [f for f in ENVIRONMENT_FIELDS if f not in env]
    assert not missing, missing
    assert env["python_h"]["exists"] in (True, False) and env["python_h"]["path"].endswith(
        "Python.h")
    assert isinstance(env["blocks_launch"], str) and env["blocks_launch"]
    assert all(data[s]["status"] == "not selected" for s in SECTIONS[1:])


def test_sections_that_do_not_fit_the_budget_are_skipped(tmp_path):
    out = tmp_path / "short.json"
    # 12 s: the environment (5 s) fits with the final 5 s held back, and then
    # less than the smallest other estimate (8 s) is left, however fast it ran
    done = _run(tmp_path, "--budget", "12", "--out", str(out), timeout=180)
    assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
    data = json.loads(out.read_text())
    assert data["environment"]["status"] == "ok" and data["finished"] is True
    for name in SECTIONS[1:]:
        status = data[name]["status"]
        assert status.startswith(f"skipped: needs {data[name]['estimate_s']:.0f} s, "), status
        assert status.endswith(" s left"), status
    assert "warmup" not in data            # nothing left that it would serve


def test_a_run_cut_by_a_signal_keeps_what_it_measured(tmp_path):
    """As a command's time limit ends it (``timeout`` sends SIGTERM): every
    section finished is in a valid file, and the one it was in says so.
    (A third section after the one it waits for: on a quick machine the
    second can end between the look and the signal.)"""
    out = tmp_path / "cut.json"
    proc = subprocess.Popen([sys.executable, str(SCRIPT), "--smoke", "--only",
                             "environment,worker_launch,correctness", "--out", str(out), "--cache",
                             str(tmp_path / "cache")], cwd=tmp_path, env=_env(tmp_path),
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 120
    try:
        while time.monotonic() < deadline:
            data = json.loads(out.read_text()) if out.exists() else {}
            if data.get("worker_launch", {}).get("status") == "running":
                break
            time.sleep(0.05)
        else:
            pytest.fail("the check never got to its second section")
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == 124, proc.stdout.read()[-2000:]
    finally:
        if proc.poll() is None:
            proc.kill()
    data = json.loads(out.read_text())
    assert data["environment"]["status"] == "ok" and data["environment"]["torch"]
    status = data["worker_launch"]["status"]
    if status == "ok":      # it ended between the look and the signal: the next one was cut
        status = data.get("correctness", {}).get("status", "")
    assert status.startswith("cut: signal 15 at "), data
    assert data["finished"] is False
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]


def test_the_budget_check_and_each_part(tmp_path):
    gpu_check = _module()
    assert gpu_check.skip_reason(10, 10.5) == ""
    assert gpu_check.skip_reason(40, 12.4) == "skipped: needs 40 s, 12 s left"
    assert gpu_check.skip_reason(40, -3) == "skipped: needs 40 s, 0 s left"
    _, args = gpu_check._parse(["--smoke", "--budget", "100", "--out", str(tmp_path / "x")])
    check = gpu_check.Check(args)
    assert list(check.parts("speed", ["a", "b"])) == ["a", "b"] and not check.left_out
    check.end = time.monotonic() + gpu_check.FINAL_S + 0.5     # half a second left
    assert list(check.parts("speed", ["a", "b"])) == []
    assert check.left_out == ["a: skipped: needs 1 s, 0 s left",
                              "b: skipped: needs 1 s, 0 s left"]
    check.end = time.monotonic() + 100                       # the budget has time,
    check.section_end = time.monotonic() + 0.5               # the section's share has not
    assert list(check.parts("speed", ["a"])) == [] and check.left_out


def test_the_json_is_written_whole_and_strict(tmp_path):
    gpu_check = _module()
    out = tmp_path / "r.json"
    gpu_check.write_json(out, {"a": float("nan"), "b": [float("inf"), 1.5], "c": (1, 2)})
    assert json.loads(out.read_text()) == {"a": None, "b": [None, 1.5], "c": [1, 2]}
    assert [p.name for p in tmp_path.iterdir()] == ["r.json"]


def test_workers_share_the_cache_only_where_they_can_see_it(tmp_path):
    gpu_check = _module()
    _, args = gpu_check._parse(["--cache", str(tmp_path / "c"), "--out", str(tmp_path / "x")])
    check = gpu_check.Check(args)
    assert gpu_check.worker_env(check, namespaces=False) == {
        "TRITON_CACHE_DIR": str(tmp_path / "c")}
    assert gpu_check.worker_env(check, namespaces=True) == {}    # its private /tmp cache
    assert "private" in gpu_check.cache_note(True) and "shared" in gpu_check.cache_note(False)


@pytest.mark.slow
@needs_triton
def test_a_warmed_launch_is_a_cache_hit(tmp_path, monkeypatch):
    """The warm-up's processes compile for sm_90a ahead of time; the same
    launch made here afterwards (another copy of the module, as a section
    or a worker has) finds it in the cache instead of compiling."""
    from triton.runtime import driver

    from grader.sandbox.runtime.probes import gpu_compile
    gpu_check = _module()
    cache = tmp_path / "cache"
    monkeypatch.setenv("TRITON_CACHE_DIR", str(cache))
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    spec = ("reference", (("variant", "pointers"),), "float16", (1, 2, 1, 64, 64, 16), True)
    warm = gpu_check.Warmer([("correctness", spec)], ("cuda", 90, 32), procs=1, limit=1)
    try:
        assert warm.wait("correctness", 300)["not_done"] == 0
        assert warm.summary()["failed"] == 0, warm.summary()
    finally:
        warm.close()
    entries = set(os.listdir(cache))
    assert entries
    module = gpu_compile.load_for_gpu(str(gpu_check.KERNEL), "_another_reference_copy")
    saved = driver._active
    driver.set_active(gpu_check._Target("cuda", 90, 32))
    try:
        gpu_check._host.cache_clear()
        monkeypatch.setattr(gpu_check, "_host", lambda name: module.flash_attention)
        fn, args, kwargs, _ = gpu_check.launches_of(spec, 90)[0]
        fn.run(*args, grid=(1,), warmup=True, **kwargs)
    finally:
        driver._active = saved
    assert set(os.listdir(cache)) == entries, "the launch compiled again instead of loading"


@pytest.mark.slow
@needs_triton
def test_a_sandboxed_worker_finds_the_checks_compiles(tmp_path, monkeypatch):
    """Inside a sandbox a worker sees only the worker runtime's folder of the
    host's: ``shared_cache`` copies the check's cache there with a cache
    manager that reads it first; a launch made with that manager and an
    empty private cache loads the warm-up's compile (nothing compiled
    again), and both are removed after."""
    from triton.runtime import driver

    from grader.sandbox.runtime.probes import gpu_compile
    gpu_check = _module()
    cache, runtime, private = tmp_path / "cache", tmp_path / "runtime", tmp_path / "private"
    runtime.mkdir()
    monkeypatch.setenv("TRITON_CACHE_DIR", str(cache))
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    spec = ("reference", (("variant", "pointers"),), "float16", (1, 2, 1, 64, 64, 16), True)
    warm = gpu_check.Warmer([("grader_verdict", spec)], ("cuda", 90, 32), procs=1, limit=1)
    try:
        assert warm.wait("grader_verdict", 300)["not_done"] == 0
        assert warm.summary()["failed"] == 0, warm.summary()
    finally:
        warm.close()
    _, args = gpu_check._parse(["--cache", str(cache), "--out", str(tmp_path / "x")])
    check = gpu_check.Check(args)
    with gpu_check.shared_cache(check, True, runtime) as (env, note):
        assert "shared" in note
        assert env["TRITON_CACHE_MANAGER"] == "runtime._gpu_check_cache:SharedFirst"
        # as a worker would: its own empty cache, the manager (here imported
        # from the runtime's folder by its own name)
        monkeypatch.syspath_prepend(str(runtime))
        monkeypatch.setenv("TRITON_CACHE_MANAGER", "_gpu_check_cache:SharedFirst")
        monkeypatch.setenv("TRITON_CACHE_DIR", str(private))
        module = gpu_compile.load_for_gpu(str(gpu_check.KERNEL), "_sandboxed_reference_copy")
        saved = driver._active
        driver.set_active(gpu_check._Target("cuda", 90, 32))
        try:
            gpu_check._host.cache_clear()
            monkeypatch.setattr(gpu_check, "_host", lambda name: module.flash_attention)
            fn, args_, kwargs, _ = gpu_check.launches_of(spec, 90)[0]
            fn.run(*args_, grid=(1,), warmup=True, **kwargs)
        finally:
            driver._active = saved
    compiled = [p.name for p in private.rglob("*") if p.suffix in (".cubin", ".ptx")]
    assert not compiled, f"compiled again instead of loading the check's: {compiled}"
    assert list(runtime.iterdir()) == []
