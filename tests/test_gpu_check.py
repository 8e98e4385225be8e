"""benchmarks/gpu_check.py --smoke: every section of the prepared GPU check runs on the CPU."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from grader.reference.secret import flash
from tests.conftest import REPO


@pytest.mark.slow
@pytest.mark.skipif(not flash.HAS_TRITON, reason=flash.NEEDS_TRITON)
def test_gpu_check_smoke(tmp_path):
    out = tmp_path / "check.json"
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    done = subprocess.run([sys.executable, str(REPO / "benchmarks" / "gpu_check.py"),
                           "--smoke", "--out", str(out)], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
    data = json.loads(out.read_text())
    sections = ("environment", "worker_launch", "correctness", "reference_configs", "speed",
                "grader_verdict")
    assert all(data[s]["status"] == "ok" for s in sections), {s: data[s] for s in sections}
    kernels = {r["kernel"] for r in data["correctness"]["rows"]}
    assert kernels == {"reference/pointers", "reference/descriptors", "solution"}
    verdicts = data["grader_verdict"]["verdicts"]
    assert verdicts["solution"]["verdict"] == "credited"
    assert verdicts["calls another kernel"]["verdict"] == "refused"
    assert "ex07_reference_copy.py" in verdicts["calls another kernel"]["feedback"]


def test_gpu_check_without_cuda_is_a_usage_error(tmp_path):
    import torch
    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    done = subprocess.run([sys.executable, str(REPO / "benchmarks" / "gpu_check.py"),
                           "--out", str(tmp_path / "x.json")], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 2 and "--smoke" in done.stderr
