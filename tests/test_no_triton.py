"""Without Triton (macOS, Windows): ex07's NumPy half is checked, its kernel
tests say "not run: needs Triton (Linux)", and nothing fails for it.

Triton is hidden the way a Mac lacks it, in every process: a virtual
environment of this interpreter that sees this one's packages (a ``.pth``)
and whose ``sitecustomize`` makes ``import triton`` raise ImportError.  The
workers run ``python -I``, which ignores PYTHONPATH but still runs
``sitecustomize``, so the blocker reaches them too (the first test proves it:
its submission fails unless Triton is hidden where the student code runs).
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest

from tests.conftest import EXERCISES_DIR, REPO, SOLUTIONS, package_dirs

BLOCKER = '''"""Hide Triton, as on macOS and Windows: `import triton` raises ImportError."""
import sys

sys.modules["triton"] = None
'''
KERNEL_TESTS = 8   # ex07's public tests that need Triton: four correctness (one with
#                  rising scores), GPU, compile, and two of the step before the kernel
#                  (query_block_attention)


@pytest.fixture(scope="module")
def python_without_triton(tmp_path_factory):
    env_dir = tmp_path_factory.mktemp("no-triton") / "venv"
    base = getattr(sys, "_base_executable", sys.executable)
    subprocess.run([base, "-m", "venv", "--without-pip", str(env_dir)], check=True)
    python = env_dir / "bin" / "python"
    packages = subprocess.run([python, "-c", "import site; print(site.getsitepackages()[0])"],
                              capture_output=True, text=True, check=True).stdout.strip()
    with open(os.path.join(packages, "base.pth"), "w") as fh:
        fh.write("\n".join(package_dirs()) + "\n")
    with open(os.path.join(packages, "sitecustomize.py"), "w") as fh:
        fh.write(BLOCKER)
    probe = subprocess.run([python, "-I", "-c", "import numpy, torch, triton"],
                           capture_output=True, text=True)
    assert "ModuleNotFoundError" in probe.stderr and "triton" in probe.stderr, probe.stderr
    return python


def _check(python, folder):
    env = dict(os.environ, PYTHONPATH=str(REPO))
    proc = subprocess.run([python, "-m", "grader.cli", "check", "ex07", "--path", str(folder)],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    return proc.returncode, proc.stdout + proc.stderr


def test_without_triton_the_numpy_half_is_checked_and_the_kernel_is_not_run(
        python_without_triton, tmp_path):
    sub = tmp_path / "sub"
    shutil.copytree(SOLUTIONS, sub)
    path = sub / "ex07_flash_attention.py"
    text = path.read_text()
    # The NumPy steps pass only where Triton is hidden from the student's code.
    marker = "    # BEGIN SOLUTION\n    m_new = np.maximum"
    assert marker in text
    path.write_text(text.replace(marker, '    assert triton is None, "Triton was importable"\n'
                                 + marker, 1))
    rc, out = _check(python_without_triton, sub)
    assert rc == 0, out
    assert "FAIL" not in out and "Triton was importable" not in out, out
    # One maximum (grader.core.plan): the kernel tests keep their points in it
    # and say they need Triton, to be graded where it is; none fails.
    assert "ex07_flash_attention  2/9" in out, out
    assert "not run: needs Triton (Linux)" in out, out
    assert out.count("\n  WAIT ") + out.count("\n  --  ") == KERNEL_TESTS, out


def test_without_triton_the_untouched_stub_fails_only_its_numpy_half(python_without_triton):
    rc, out = _check(python_without_triton, EXERCISES_DIR)
    assert rc == 1, out                      # the NumPy tasks are not done yet: a failure
    assert out.count("\n  FAIL ") == 2 and "NotImplementedError" in out, out
    assert "ImportError" not in out and "not run: needs Triton (Linux)" in out, out
    assert out.count("\n  WAIT ") + out.count("\n  --  ") == KERNEL_TESTS, out
