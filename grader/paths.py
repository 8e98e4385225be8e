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
SANDBOX_DIR = PACKAGE_DIR / "sandbox"                # the worker's runtime and probes
PROBES_DIR = SANDBOX_DIR / "probes"
MEASURE_KIT = PACKAGE_DIR / "measure.py"             # copied into each worker's runtime
CONTRACT_PATH = PACKAGE_DIR / "contract.json"
GPU_THRESHOLDS_PATH = PACKAGE_DIR / "data" / "gpu_thresholds.json"
