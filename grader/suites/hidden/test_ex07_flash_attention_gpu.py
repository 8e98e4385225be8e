"""GPU tests for ex07_flash_attention: fp16/bf16 at long sequences, then speed.

The GPU tier: graded only under ``attn-grade grade --gpu-tier`` (then in the
maximum on every machine, "needs regrade" without CUDA); otherwise not run.

Speed is graded as a ratio, never in seconds: the student's kernel and the
reference kernel (``grader/sandbox/runtime/kernels/flash.py``) run in two workers
on the same GPU, on the same fresh inputs, alternating, and the clock is in the
grading process (``grader/reference/flash_speed.py``).  The ratio of their
TFLOP/s earns tiers whose thresholds come, per GPU model, from
``grader/data/gpu_thresholds.json`` (written by ``attn-grade calibrate``).
"""
import random

import numpy as np
import pytest
import torch

from grader.gpu.calibrate import tiers_for
from grader.feedback import Feedback
from grader.reference import flash_judge
from grader.reference.secret import flash
from grader.reference.cases import fixed_rng
from grader.report import SPEED_RATIO

pytestmark = [pytest.mark.exercise("ex07_flash_attention"), pytest.mark.hidden,
              pytest.mark.skipif(not flash.HAS_TRITON, reason=flash.NEEDS_TRITON)]

CORRECTNESS_CASES = {  # id: (B, h, h_kv, S_q, S_k, d_head, causal)
    "S = 8192, causal, GQA h_kv = 2": (1, 4, 2, 8192, 8192, 128, True),
    "S = 4096, not causal, d_head 64": (1, 4, 4, 4096, 4096, 64, False),
    "decode against 8192 keys, h_kv = 1": (2, 8, 1, 1, 8192, 128, True),
    "S_q = 1000 < S_k = 3000, causal": (1, 4, 2, 1000, 3000, 64, True),
    "ragged 777, d_head 32": (2, 2, 2, 777, 777, 32, True),
    "d_head 16, S_q > S_k": (1, 2, 2, 300, 250, 16, True),
}
SPEED_CASES = flash.SPEED_CASES    # bf16, B=4, h=32, d_head=128, S 2048 and 8192
SPEED_ROUNDS = 7                       # timed requests of each side per shape


def _need_gpu():
    if not torch.cuda.is_available():
        pytest.skip("needs a GPU")


@pytest.mark.gpu
@pytest.mark.points(2)
@pytest.mark.timeout_s(600)
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_gpu_long_sequences(student, dtype, machine):
    """flash_attention in fp16/bf16 on the GPU, S up to 8192: right, and computed in your kernel"""
    _need_gpu()
    machine.setdefault("GPU", torch.cuda.get_device_name())
    for name, (b, h, h_kv, s_q, s_k, d, causal) in CORRECTNESS_CASES.items():
        rng = fixed_rng("ex07-gpu", name, dtype)
        q, k, v, q2, k2, v2 = (
            torch.from_numpy(rng.standard_normal(shape).astype(np.float32))
            .to(getattr(torch, dtype))
            for shape in ((b, h, s_q, d), (b, h_kv, s_k, d), (b, h_kv, s_k, d)) * 2)
        # replay: the call's launches again on new values in the grader's buffers
        # (on a GPU nothing counts loads and stores: this shows where the output came from)
        res = student.probe("ex07_flash_attention.run_checked", q, k, v, causal=causal,
                            replay=(q2, k2, v2))
        what = f"flash_attention in {dtype} ({name})"
        expected = flash.reference(q, k, v, causal, device="cuda")
        try:
            flash.check_output(res, q, expected, what=what)
            flash.check_authentic(res, q, k, v, what=what, causal=causal)
            flash_judge.check_replay(res, q2, flash.reference(q2, k2, v2, causal,
                                                              device="cuda"), what=what)
        except Feedback as exc:
            atol, rtol = flash.tolerance(dtype, "cuda")
            raise Feedback(f"{exc}\n(named tolerance for {dtype} on a GPU: atol={atol:g}, "
                           f"rtol={rtol:g}; accumulate in float32)") from None


@pytest.fixture(scope="module")
def speed_runs() -> dict:
    """This grading run's speed measurement (the module runs once per run),
    shared by the tier tests: measured by the first, remembered for the rest."""
    return {}


def _speed(runs: dict, launch_worker) -> dict:
    """The speed measurement, run once per grading run and shared by the tier
    tests: the student's kernel in a fresh worker whose submission folder is
    read-only, the reference in a trusted worker of its own, the clock here
    (``grader/reference/flash_speed.py``)."""
    from grader.reference import flash_speed
    from grader.sandbox.client import StudentModule
    key = "ex07_flash_attention"
    if key not in runs:
        worker = launch_worker(key, call_timeout=600, locked=True)
        try:
            with flash_speed.reference_side(launch_worker, 600) as reference:
                runs[key] = flash_speed.measure(StudentModule(worker, 600), reference,
                                                SPEED_CASES, rounds=SPEED_ROUNDS,
                                                seed=random.SystemRandom().randrange(1 << 30))
        except Exception as exc:          # remembered: every tier reports the same failure
            runs[key] = exc
        finally:
            worker.close()
    if isinstance(runs[key], Exception):
        raise runs[key]
    return runs[key]


@pytest.mark.gpu
@pytest.mark.points(1)
@pytest.mark.timeout_s(600)
# The speed feedback (the reference's TFLOP/s on this GPU) stays with
# instructors: students see the tier, not the measurements.
@pytest.mark.visibility("hidden")
@pytest.mark.parametrize("tier", [1, 2, 3])
def test_gpu_speed(request, machine, tier, speed_runs, launch_worker):
    """speed against the reference kernel, same run, same inputs (tier by TFLOP/s ratio)"""
    _need_gpu()
    result = _speed(speed_runs, launch_worker)
    gpu = result["gpu"]
    machine.setdefault("GPU", gpu)
    machine.setdefault("reference kernel", result["variant"])
    lock = result.get("lock") or {}
    # the report says the timing had the GPU to itself (batch slots share one)
    machine.setdefault("GPU held alone while timed", (
        f"yes (waited {lock.get('waited_s', 0.0):.1f} s for other gradings)"
        if lock.get("held") else "no"))
    tiers = tiers_for(gpu)
    judged = flash.judge_speed(result)
    machine.setdefault(SPEED_RATIO, round(judged["ratio"], 3))   # Gradescope's leaderboard
    need = tiers[tier - 1]
    text = (f"{judged['table']}\n  geometric mean ratio {judged['ratio']:.2f} on {gpu}; "
            f"tier {tier} needs {need:.2f} (less {judged['margin']:.0%} for timing noise)")
    if judged["ratio"] < need * (1 - judged["margin"]):
        raise Feedback(f"your kernel is correct but slower than tier {tier} asks:\n{text}\n"
                       "Ideas: larger tiles (BLOCK_M 128), exp2 with the scale folded in, "
                       "skip fully masked key tiles under the causal mask, autotune "
                       "num_warps/num_stages.")
    request.node.feedback_on_pass = text
