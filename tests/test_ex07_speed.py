"""ex07's speed grade (grader/reference/flash_speed.py), on the CPU.

The logic runs against fake sides and a fake clock (what a GPU would time
is simulated exactly); the plumbing runs for real with two workers under
Triton's interpreter on tiny shapes (the numbers mean nothing there).
"""
from __future__ import annotations

import pytest
import torch

from grader.feedback import Feedback
from grader.reference import flash_speed
from grader.reference.secret import flash
from grader.sandbox.client import StudentModule
from grader.sandbox.runtime.kernels import flash as kernel
from tests.conftest import copy_solutions, launcher

EX = "ex07_flash_attention"
CASE = dict(batch=1, heads=2, kv_heads=1, s_q=20, s_k=20, d_head=16, causal=True,
            dtype="float32")


class Clock:
    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now


class FakeSide:
    """A worker as the grader sees it: each request advances the clock.

    ``call_s``: seconds per kernel call; ``draw_s``: seconds to draw one
    call's inputs; ``collect_s``: seconds to hand over outputs; ``answer``:
    the output rows for a (seed, call, rows) pick."""

    def __init__(self, clock, call_s, draw_s=0.001, collect_s=0.0005, files=None,
                 forbidden=None, answer=None, empty_extra_s=0.0):
        self.clock, self.call_s, self.draw_s, self.collect_s = clock, call_s, draw_s, collect_s
        self.files = {"ex07_flash_attention.py": 1} if files is None else files
        self.forbidden = forbidden or {}
        self.answer = answer or (lambda seed, i, rows: torch.full((1, 2, len(rows), 16),
                                                                   float(seed % 97 + i)))
        self.empty_extra_s = empty_extra_s
        self.seed = None

    def probe(self, name, *args, run_kernel=True, on=None, **kwargs):
        if name == "ex07_flash_attention.speed_prepare":
            return {"variant": "pointers", "gpu": "Fake GPU"}
        if name == "ex07_flash_attention.speed_run":
            case, n, seed = args
            self.seed = seed
            self.clock.now += n * self.draw_s + (n * self.call_s if run_kernel
                                                 else self.empty_extra_s)
            return {"n": n, "own_file": "ex07_flash_attention.py",
                    "launched_files": dict(self.files), "kernels": ["_k"],
                    "forbidden": dict(self.forbidden)}
        if name == "ex07_flash_attention.speed_collect":
            picks, rows = args
            self.clock.now += self.collect_s
            return [{"rows": self.answer(self.seed, i, rows), "shape": [1, 2, 20, 16],
                     "dtype": "float32"} for i in picks]
        raise AssertionError(name)


def _measure(student, reference, clock, **kwargs):
    return flash_speed.measure(student, reference, [CASE], rounds=4, clock=clock, **kwargs)


def test_ratio_is_the_kernels_time_ratio_with_the_overhead_removed():
    clock = Clock()
    result = _measure(FakeSide(clock, 0.004), FakeSide(clock, 0.002), clock)
    (case,) = result["cases"]
    assert case["problems"] == [] and max(case["max_err"]) == 0
    assert case["student_s"] == pytest.approx([0.004] * 4)     # the draw time is removed
    assert case["reference_s"] == pytest.approx([0.002] * 4)
    assert flash.judge_speed(result)["ratio"] == pytest.approx(0.5)
    assert result["variant"] == "pointers" and result["gpu"] == "Fake GPU"


def test_the_overhead_comes_from_the_trusted_side_only():
    """A student whose empty requests are slow gains nothing: the overhead
    subtracted is the reference worker's."""
    clock = Clock()
    slow_empty = FakeSide(clock, 0.004, empty_extra_s=5.0)
    result = _measure(slow_empty, FakeSide(clock, 0.002), clock)
    assert flash.judge_speed(result)["ratio"] == pytest.approx(0.5)


def test_a_wrong_timed_output_fails():
    clock = Clock()
    wrong = FakeSide(clock, 0.001, answer=lambda seed, i, rows: torch.zeros(1, 2, len(rows), 16))
    with pytest.raises(Feedback, match="every timed output is checked"):
        flash.judge_speed(_measure(wrong, FakeSide(clock, 0.002), clock))


def test_outputs_computed_after_the_clock_stopped_fail():
    """Doing nothing while timed and computing the picked outputs on request
    (or skipping the synchronize) makes the hand-over slow: no credit."""
    clock = Clock()
    lazy = FakeSide(clock, 0.0, collect_s=0.0005 + 2 * 0.002)
    with pytest.raises(Feedback, match="after the clock stopped"):
        flash.judge_speed(_measure(lazy, FakeSide(clock, 0.002), clock))


@pytest.mark.parametrize("files,forbidden,expect", [
    ({"ex07_flash_attention.py": 1, "ex07_reference_kernel.py": 1}, {}, "only your own"),
    ({"flash.py": 1}, {}, "only your own"),
    ({}, {}, "launched no Triton kernel"),
    ({"ex07_flash_attention.py": 1}, {"scaled_dot_product_attention": 1}, "PyTorch"),
])
def test_only_the_students_own_kernels_may_run_while_timed(files, forbidden, expect):
    clock = Clock()
    cheat = FakeSide(clock, 0.001, files=files, forbidden=forbidden)
    with pytest.raises(Feedback, match=expect):
        flash.judge_speed(_measure(cheat, FakeSide(clock, 0.002), clock))


# -- for real, two workers under the interpreter ---------------------------------------
INTERPRET = {"TRITON_INTERPRET": "1"}


def _sides(sub):
    """The student's locked worker and the trusted reference side, as the
    speed grade makes them (the launcher's ``launch_worker``)."""
    launch_worker = launcher().binder(sub)
    student = launch_worker(EX, call_timeout=120, env=INTERPRET, locked=True)
    return student, flash_speed.reference_side(
        lambda module, **kw: launch_worker(module, **{**kw, "env": INTERPRET}), 120)


@pytest.mark.skipif(not flash.HAS_TRITON, reason=flash.NEEDS_TRITON)
def test_two_workers_on_the_cpu(tmp_path):
    sub = copy_solutions(tmp_path / "sub", [EX])
    worker, side = _sides(sub)
    try:
        with side as reference:
            result = flash_speed.measure(StudentModule(worker), reference, [CASE], calls=2,
                                         rounds=2, on="cpu")
    finally:
        worker.close()
    (case,) = result["cases"]
    assert result["variant"] == "pointers" and result["gpu"] == "cpu (interpreter)"
    assert case["problems"] == [] or case["problems"][0].startswith("took"), case
    assert max(case["max_err"]) < 1e-4 and len(case["student_s"]) == 2
    assert list(sub.iterdir()) == [sub / f"{EX}.py"]       # nothing left in the submission


HELPER_KERNEL = '''
import triton
import triton.language as tl


@triton.jit
def _copy(X, Y, N, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.store(Y + offs, tl.load(X + offs, mask=offs < N), mask=offs < N)
'''
CALLS_A_HELPER = '''
_own = flash_attention


def flash_attention(q, k, v, *, causal=True, sm_scale=None):
    from ex07_helper import _copy
    scratch = torch.empty(16)
    _copy[(1,)](scratch, torch.empty(16), 16, BLOCK=16)
    try:                                     # leave a mark in its own file
        with open(__file__, "a") as f:
            f.write("# changed")
    except OSError:
        pass
    return _own(q, k, v, causal=causal, sm_scale=sm_scale)
'''


@pytest.mark.skipif(not flash.HAS_TRITON, reason=flash.NEEDS_TRITON)
def test_a_kernel_from_another_file_and_a_changed_file_are_named(tmp_path):
    sub = copy_solutions(tmp_path / "sub", [EX])
    (sub / "ex07_helper.py").write_text(HELPER_KERNEL)
    path = sub / f"{EX}.py"
    path.write_text(path.read_text() + CALLS_A_HELPER)
    worker, side = _sides(sub)
    try:
        with side as reference:
            result = flash_speed.measure(StudentModule(worker), reference, [CASE], calls=1,
                                         rounds=1, on="cpu")
        dropped = worker.uid is not None
    finally:
        worker.close()
    problems = result["cases"][0]["problems"]
    assert any("ex07_helper.py" in p for p in problems), problems
    # Read-only where the worker runs as an unprivileged user; a worker that
    # runs as the grading user can write, and the change is named.
    changed = any("changed the files" in p for p in problems)
    assert changed != dropped, (dropped, problems)
    assert path.read_text().endswith("sm_scale=sm_scale)\n")   # never the original


# -- calibrate: merged thresholds, the variant recorded, no silent fallback -------------
def _fake_gpu(monkeypatch, failure=None):
    from grader.gpu import calibrate as cal
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda *a: "Fake H200")
    rows = [{"s": 2048, "causal": c, "variant": "descriptors", "reference_tflops": 500.0,
             "plain_tflops": 250.0, "sdpa_tflops": 450.0, "sdpa_backend": "CUDNN_ATTENTION"}
            for c in (False, True)]
    monkeypatch.setattr(cal, "measure", lambda repeats: {"cases": rows})
    monkeypatch.setattr(kernel, "DESCRIPTOR_FAILURE", list(failure or []))


@pytest.mark.skipif(not flash.HAS_TRITON, reason=flash.NEEDS_TRITON)
def test_calibrate_merges_and_records_the_variant(tmp_path, monkeypatch):
    import json

    from click.testing import CliRunner

    from grader.cli import main
    out = tmp_path / "t.json"
    out.write_text(json.dumps({"about": "x", "default": {"tiers": [0.1, 0.2, 0.3]},
                               "models": {"Other GPU": {"tiers": [0.2, 0.4, 0.6]}}}))
    _fake_gpu(monkeypatch)
    res = CliRunner().invoke(main, ["calibrate", "--out", str(out)])
    assert res.exit_code == 0, res.output
    data = json.loads(out.read_text())
    assert set(data["models"]) == {"Other GPU", "Fake H200"}        # merged, not replaced
    assert data["models"]["Fake H200"]["reference_variant"] == "descriptors"
    assert "descriptors" in res.output


@pytest.mark.skipif(not flash.HAS_TRITON, reason=flash.NEEDS_TRITON)
def test_calibrate_refuses_a_silent_fallback(tmp_path, monkeypatch):
    from click.testing import CliRunner

    from grader.cli import main
    out = tmp_path / "t.json"
    _fake_gpu(monkeypatch, failure=["RuntimeError: TMA descriptor rejected"])
    res = CliRunner().invoke(main, ["calibrate", "--out", str(out)])
    assert res.exit_code == 1 and "fell back to pointers" in res.output, res.output
    assert not out.exists()
