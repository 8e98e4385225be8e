"""Gradescope decides the sandbox while its image is built, never at a
student's submission.

Gradescope's containers run under Docker's default seccomp profile, which
refuses the unshare calls bubblewrap makes.  Here a fake ``bwrap`` early on
PATH fails as bubblewrap does there (its real error messages), and the
bundle's ``setup.sh`` runs unchanged but for its ``apt-get`` lines: with
``--isolation strict`` the build fails with one paragraph that says what to
change; with ``--isolation auto`` it records the fallback (each worker its
own uid, the secrets readable by root only) and every results.json says so
to staff.  ``bwrap.usable()`` caches its probe per process: the in-process
tests reset it (monkeypatch), the scripts run in processes of their own.
"""
from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
import sysconfig
import tempfile
from pathlib import Path

import pytest
from click.testing import CliRunner

from grader import gradescope
from grader.cli import main
from grader.gradescope import (RECORD_FILE, autograder_tree, build_bundle, place_upload,
                               run_autograder, validate_results)
from grader.sandbox import bwrap, confine
from tests.conftest import copy_solutions, ex01_max, package_dirs

# What bubblewrap prints where a container's seccomp profile blocks it: without
# root (a user namespace) and as root (the uid map, or the unshare itself).
SECCOMP_ERRORS = [
    "bwrap: No permissions to creating new namespace, likely because the kernel does not "
    "allow non-privileged user namespaces. On e.g. debian this can be enabled with "
    "'sysctl kernel.unprivileged_userns_clone=1'.",
    "bwrap: setting up uid map: Permission denied",
    "bwrap: Creating new namespace failed: Operation not permitted",
]
SYSTEM_PYTHON = Path("/usr/bin/python3")   # what setup.sh's apt-get gives on Gradescope


def fake_bwrap(folder: Path, message: str = SECCOMP_ERRORS[0]) -> Path:
    """A folder with a ``bwrap`` that fails as under Docker's default seccomp."""
    folder.mkdir(parents=True, exist_ok=True)
    script = folder / "bwrap"
    script.write_text(f"#!/bin/sh\necho {shlex.quote(message)} >&2\nexit 1\n")
    script.chmod(0o755)
    return folder


def _extract(tmp_path: Path, isolation: str) -> Path:
    bundle = build_bundle(tmp_path / f"{isolation}.zip", isolation)
    return autograder_tree(bundle, tmp_path / f"autograder-{isolation}")


@pytest.mark.parametrize("message", SECCOMP_ERRORS, ids=["userns", "uid-map", "unshare"])
def test_a_strict_probe_under_seccomp_is_one_paragraph_saying_what_to_change(
        tmp_path, monkeypatch, capsys, message):
    root = _extract(tmp_path, "strict")
    monkeypatch.setenv("PATH", f"{fake_bwrap(tmp_path / 'bin', message)}{os.pathsep}"
                               f"{os.environ['PATH']}")
    monkeypatch.setattr(bwrap, "_probe", None)    # usable() caches per process
    assert gradescope.probe(root / "source") == 1
    out = capsys.readouterr().out
    failed = [line for line in out.splitlines() if "FAILED" in line]
    assert len(failed) == 1, out                   # one paragraph, one line in the log
    paragraph = failed[0]
    assert message in paragraph and "--isolation auto" in paragraph
    assert "seccomp" in paragraph and "No submission is graded" in paragraph
    assert not (root / "source" / RECORD_FILE).exists()


def test_a_run_without_the_builds_record_is_not_graded_and_says_so(tmp_path):
    root = _extract(tmp_path, "auto")
    copy_solutions(root / "submission", ["ex01_by_hand"])
    data = gradescope.run(root)
    assert data["score"] == 0 and "not set up" in data["output"]
    assert "not about your code" in data["output"] and validate_results(data) == []


# -- setup.sh and run_autograder, as Gradescope runs them ---------------------

def _reachable_venv() -> Path:
    """A venv of the system Python in a folder every user may enter, that sees
    this environment's packages (nothing downloaded): what setup.sh makes in
    /opt/attn-venv.  Skips where that cannot be had here."""
    if not confine.is_root():
        pytest.skip("the image's build runs as root (Gradescope's does); this test needs root")
    version = f"{sys.version_info.major}.{sys.version_info.minor}"
    if not SYSTEM_PYTHON.is_file() or subprocess.run(
            [str(SYSTEM_PYTHON), "-c", f"import sys; assert sys.version[:{len(version)}] == "
             f"{version!r}; import venv, ensurepip"], capture_output=True).returncode:
        pytest.skip(f"needs {SYSTEM_PYTHON} {version} with venv and ensurepip, as setup.sh's "
                    "apt-get installs")
    top = Path(tempfile.mkdtemp(prefix="attn-gs-build-"))
    top.chmod(0o755)
    venv = top / "venv"
    subprocess.run([str(SYSTEM_PYTHON), "-m", "venv", "--without-pip", str(venv)], check=True)
    purelib = Path(sysconfig.get_paths(vars={"base": str(venv), "platbase": str(venv)})
                   ["purelib"])
    ours = [p for p in package_dirs() if "site-packages" in p]
    (purelib / "_attn_test_env.pth").write_text("\n".join(ours) + "\n")
    uid = confine.fresh_uid()
    try:
        seen = subprocess.run([str(venv / "bin" / "python"), "-I", "-c", "import numpy, click"],
                              cwd="/", user=uid, group=uid, extra_groups=[],
                              capture_output=True, text=True)
    finally:
        confine.release_uid(uid)
    if seen.returncode:
        shutil.rmtree(top)
        pytest.skip(f"this environment's packages ({ours[0]}) are not readable by another "
                    "user here, as the fallback needs: " + seen.stderr.strip()[-200:])
    return venv


@pytest.fixture(scope="module")
def venv():
    path = _reachable_venv()
    yield path
    shutil.rmtree(path.parent, ignore_errors=True)


def _setup_sh(root: Path, venv: Path, bin_dir: Path) -> subprocess.CompletedProcess:
    """The bundle's setup.sh, but for apt-get, with the fake bwrap first on PATH."""
    setup = (root / "source" / "setup.sh").read_text()
    script = root / "source" / "setup-test.sh"
    script.write_text("\n".join(line for line in setup.splitlines() if "apt-get" not in line))
    (bin_dir / "python3").unlink(missing_ok=True)
    (bin_dir / "python3").symlink_to(SYSTEM_PYTHON)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env.update(ATTN_VENV=str(venv), PIP_NO_INDEX="1", PIP_NO_BUILD_ISOLATION="false",
               PIP_DISABLE_PIP_VERSION_CHECK="1", PATH=f"{bin_dir}{os.pathsep}{env['PATH']}")
    return subprocess.run(["bash", str(script)], env=env, capture_output=True, text=True,
                          timeout=600, cwd=root)


@pytest.mark.slow
def test_a_strict_bundle_fails_its_build_under_seccomp(tmp_path, venv):
    bin_dir = fake_bwrap(tmp_path / "bin")
    strict = _extract(tmp_path, "strict")
    built = _setup_sh(strict, venv, bin_dir)
    log = built.stdout + built.stderr
    assert built.returncode != 0, log          # the build fails: no image, no zero grades
    paragraph = next(line for line in log.splitlines() if "FAILED" in line)
    assert SECCOMP_ERRORS[0] in paragraph and "--isolation auto" in paragraph
    assert not (strict / "source" / RECORD_FILE).exists()


@pytest.mark.slow
def test_an_auto_bundle_grades_each_worker_as_its_own_uid_and_says_so(tmp_path, venv):
    bin_dir = fake_bwrap(tmp_path / "bin")
    auto = _extract(tmp_path, "auto")
    built = _setup_sh(auto, venv, bin_dir)
    log = built.stdout + built.stderr
    assert built.returncode == 0, log
    record = json.loads((auto / "source" / RECORD_FILE).read_text())
    assert record["bundle"] == "auto" and record["grade_with"] == "fallback"
    assert record["level"] == "uid" and SECCOMP_ERRORS[0] in record["why_not_namespaces"]
    assert "own unprivileged user" in log
    # the secrets: readable by root only, in the bundle's copy and where installed
    hidden = sorted((auto / "source" / "grader" / "suites" / "hidden").glob("*.py"))
    python = str(venv / "bin" / "python")
    assert hidden and gradescope._readable_by_a_worker(hidden[:2], python) == []

    copy_solutions(tmp_path / "up", ["ex01_by_hand"])
    place_upload(tmp_path / "up", auto)
    env = dict(os.environ, ATTN_EXERCISES="ex01_by_hand",
               PATH=f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    result = run_autograder(auto, python, timeout=600, env=env)
    assert result.returncode == 0 and result.problems == [], result.log
    data = result.results
    assert data["score"] == ex01_max(), result.log
    assert data["extra_data"]["isolation"] == "uid"
    assert data["extra_data"]["isolation_at_build"]["bundle"] == "auto"
    staff = [t for t in data["tests"] if t["name"] == "Isolation (staff only)"]
    assert len(staff) == 1 and staff[0]["visibility"] == "hidden"
    assert "own unprivileged user" in staff[0]["output"]
    assert "bundle --isolation auto" in staff[0]["output"]
    seen_by_students = data.get("output", "") + "".join(
        t.get("output", "") for t in data["tests"] if t.get("visibility") != "hidden")
    assert "ISOLATION" not in seen_by_students.upper()
    assert "as decided when the image was built" in result.log


def test_the_bundle_option_is_wired(tmp_path):
    for choice in ("strict", "auto"):
        out = tmp_path / f"{choice}.zip"
        result = CliRunner().invoke(main, ["gradescope", str(out), "--isolation", choice])
        assert result.exit_code == 0, result.output
        root = autograder_tree(out, tmp_path / choice)
        assert json.loads((root / "source" / "attn-bundle.json").read_text()) == \
            {"isolation": choice}
    bad = CliRunner().invoke(main, ["gradescope", str(tmp_path / "x.zip"), "--isolation",
                                    "fallback"])
    assert bad.exit_code == 2
