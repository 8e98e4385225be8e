"""Where things are: every path the grader uses, in one place.

All are derived from this file's place, so a copy of the package (the
student edition, a Gradescope bundle, a test's copy) finds its own files.
In the student edition the instructors' folders (solutions, hidden suites,
secret references) are absent; code that needs one checks ``is_dir()``.
"""
from __future__ import annotations

from pathlib import Path

PACKAGE_DIR = Path(__file__).resolve().parent        # grader/
REPO_DIR = PACKAGE_DIR.parent                        # the repository (or edition) around it
SOLUTIONS_DIR = REPO_DIR / "solutions"
EXERCISES_DIR = REPO_DIR / "exercises"               # the student stubs
TESTS_DIR = REPO_DIR / "tests"                       # the package's own tests (mutants too)
GIT_DIR = REPO_DIR / ".git"
SUITES_DIR = PACKAGE_DIR / "suites"
HIDDEN_SUITES_DIR = SUITES_DIR / "hidden"
# Secret by place: every module in this folder stays with the instructors (the
# student edition gets a replay module in its stead) and no worker may read it.
SECRET_REFERENCE_DIR = PACKAGE_DIR / "reference" / "secret"
# Everything that runs inside a worker, one folder used as it is (bound into
# the sandbox, or copied whole without namespaces): grader.sandbox.runtime.
RUNTIME_DIR = PACKAGE_DIR / "sandbox" / "runtime"
RUNTIME_PACKAGE = RUNTIME_DIR.name                   # what a worker imports it as
PROBES_DIR = RUNTIME_DIR / "probes"
# The reference kernels: for trusted workers only (a student's worker never
# sees the folder) and instructors only (the student edition leaves it out).
KERNELS_DIR = RUNTIME_DIR / "kernels"
CONTRACT_PATH = PACKAGE_DIR / "contract.json"
GPU_THRESHOLDS_PATH = PACKAGE_DIR / "data" / "gpu_thresholds.json"
