"""Secrecy by folder: a module an author drops into ``grader/reference/secret``
is secret because of where it is. Nothing lists it, yet the student edition
leaves it out (a replay module stands in its place), and the isolation code
hides the folder from every worker."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

from tests.conftest import REPO

PROBE = """\
import json, sys
from pathlib import Path
from grader import replay
from grader.paths import KERNELS_DIR, SECRET_REFERENCE_DIR
from grader.release import _copy_package
from grader.sandbox import bwrap, confine

dest = Path(sys.argv[1])
_copy_package(dest)
print(json.dumps({
    "secret_modules": list(replay.secret_modules()),
    "shipped": sorted(str(p.relative_to(dest)) for p in dest.rglob("*.py")),
    "protected": [str(p) for p in confine.secret_paths()],
    "hidden_from_bwrap": [str(p) for p in bwrap.secrets_inside([SECRET_REFERENCE_DIR.parents[2]])],
    "secret_dir": str(SECRET_REFERENCE_DIR),
    "kernels_dir": str(KERNELS_DIR),
}))
"""


def test_a_new_module_in_the_secret_folder_is_secret(tmp_path):
    copy = tmp_path / "repo"
    copy.mkdir()
    shutil.copytree(REPO / "grader", copy / "grader",
                    ignore=shutil.ignore_patterns("__pycache__"))
    (copy / "grader" / "reference" / "secret" / "brand_new.py").write_text(
        '"""A reference nobody listed anywhere."""\n\n\n'
        "def brand_new_answer(x):\n    return x * 4711\n")
    env = dict(os.environ, PYTHONPATH=str(copy))
    proc = subprocess.run([sys.executable, "-c", PROBE, str(tmp_path / "edition")],
                          cwd=copy, env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    seen = json.loads(proc.stdout.strip().splitlines()[-1])
    secret_dir = seen["secret_dir"]
    assert secret_dir.startswith(str(copy))
    # found by place, beside the ones already there
    assert "brand_new" in seen["secret_modules"] and "attention" in seen["secret_modules"]
    # not shipped: nothing of the secret folder is copied (replay modules are
    # written there later, from the recording); the shipped helpers are
    assert not any(p.startswith("reference/secret/") for p in seen["shipped"])
    assert "reference/cases.py" in seen["shipped"]
    # not readable by a worker: the folder is one confine protects as root, and
    # bwrap mounts nothing of the package (an empty tmpfs over it)
    assert secret_dir in seen["protected"]
    assert any(secret_dir.startswith(p) for p in seen["hidden_from_bwrap"])
    # the worker runtime's reference kernels: a folder the edition leaves out
    # and confine protects too (a student's worker never sees it: tests/test_runtime.py)
    assert not any(p.startswith("sandbox/runtime/kernels/") for p in seen["shipped"])
    assert "sandbox/runtime/probes/ex07_flash_attention.py" in seen["shipped"]
    assert seen["kernels_dir"] in seen["protected"]
