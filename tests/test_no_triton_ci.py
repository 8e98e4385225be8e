"""CI proves "no Triton, no failure" (issue 26, item 4): its step without
Triton really has none, and fails when `check ex07` fails (pipefail: tee's
status would hide check's) or does not say the kernel tests need Triton."""
from __future__ import annotations

import yaml

from tests.conftest import REPO


def _no_triton_step() -> dict:
    jobs = yaml.safe_load((REPO / ".github" / "workflows" / "ci.yml").read_text())["jobs"]
    steps = [s for job in jobs.values() for s in job.get("steps", [])
             if "uninstall -y -q triton" in s.get("run", "")]
    assert len(steps) == 1, steps
    return steps[0]


def test_ci_checks_exercise_g_in_an_environment_without_triton():
    step = _no_triton_step()
    run = step["run"]
    assert step.get("shell") == "bash" and "set -o pipefail" in run
    lines = run.splitlines()
    uninstall = next(i for i, x in enumerate(lines) if "uninstall -y -q triton" in x)
    proof = next(i for i, x in enumerate(lines) if 'python -c "import triton"' in x)
    check = next(i for i, x in enumerate(lines) if "grader.cli check ex07" in x)
    assert uninstall < proof < check and "exit 1" in lines[proof]
    assert "--no-fail" not in lines[check]
    assert 'grep -q "not run: needs Triton (Linux)"' in run
