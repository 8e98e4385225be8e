"""Gradescope: an autograder bundle, the run inside it, and a local replay.

Gradescope's autograder specification: the bundle is a zip whose top level
holds ``setup.sh`` and ``run_autograder``; it is extracted into
``/autograder/source``, ``setup.sh`` runs once (as root) when the image is
built, and ``run_autograder`` runs for every submission, which lands in
``/autograder/submission``; the result goes to
``/autograder/results/results.json``.  So the bundle's top level is also an
installable project (``pyproject.toml`` beside ``grader/``, hidden suites and
references included: the bundle stays with the instructor and Gradescope,
never with students), and ``setup.sh`` installs it with the plot extra.

``run_autograder`` calls ``python -m grader.gradescope /autograder``, which
grades the submission (modules, a notebook, a zip, or a student's whole
repository as a GitHub upload brings it) and always writes results.json.
Its progress goes to stdout, which Gradescope shows to staff only; the
sandbox and machine lines go there too, never into what students see.

``replay(bundle, submission)`` does locally what Gradescope does: extract
the bundle into a fake ``autograder/source``, copy the upload into
``autograder/submission``, run ``run_autograder``.  ``attn-grade gradescope
--test SUBMISSION`` prints its log and results.
"""
from __future__ import annotations

import ast
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from dataclasses import dataclass
from pathlib import Path

from grader.paths import PACKAGE_DIR, REPO_DIR
from grader.safetext import clean

VISIBILITIES = {"hidden", "after_due_date", "after_published", "visible"}
OUTPUT_FORMATS = {"text", "html", "simple_format", "md", "ansi"}

SETUP_SH = """\
#!/usr/bin/env bash
# Gradescope runs this once, as root, when it builds the autograder image.
# It sits in /autograder/source beside pyproject.toml and grader/.
set -euo pipefail
SOURCE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
VENV="${ATTN_VENV:-/opt/attn-venv}"
echo "attn-grade setup: installing $SOURCE into $VENV"
apt-get update -q && apt-get install -y -q python3 python3-pip python3-venv bubblewrap
python3 -m venv "$VENV"
# Gradescope's machines have no GPU: the CPU build of PyTorch is far smaller.
"$VENV/bin/python" -m pip install -q torch --index-url https://download.pytorch.org/whl/cpu
# The plot extra: exercise D's plot tests need matplotlib.
"$VENV/bin/python" -m pip install -q "$SOURCE[plot]"
"$VENV/bin/python" -c "import grader.gradescope, matplotlib; print('attn-grade setup: ok')"
"""

RUN_AUTOGRADER = """\
#!/usr/bin/env bash
# Gradescope runs this for every submission; it always writes results.json.
# Its output is shown to staff only (students see results.json).
ROOT="${AUTOGRADER_ROOT:-/autograder}"
PY="${ATTN_PYTHON:-${ATTN_VENV:-/opt/attn-venv}/bin/python}"
mkdir -p "$ROOT/results"
echo "run_autograder: $(date -u +%FT%TZ) grading $ROOT/submission with $PY"
cd "$ROOT"
# strict: no grade without namespaces (ATTN_ISOLATION=auto accepts the fallback).
exec "$PY" -m grader.gradescope "$ROOT" "${ATTN_ISOLATION:-strict}"
"""

# What of the repository goes into the bundle's top level, beside grader/.
SOURCE_FILES = ["pyproject.toml", "README.md"]


def build_bundle(out: Path) -> Path:
    out.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as z:
        for name, text in (("setup.sh", SETUP_SH), ("run_autograder", RUN_AUTOGRADER)):
            info = zipfile.ZipInfo(name)
            info.external_attr = 0o755 << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            z.writestr(info, text)
        for name in SOURCE_FILES:
            z.write(REPO_DIR / name, name)
        for path in sorted(PACKAGE_DIR.rglob("*")):
            if path.is_file() and "__pycache__" not in path.parts \
                    and path.suffix not in (".pyc", ".png"):
                z.write(path, f"grader/{path.relative_to(PACKAGE_DIR)}")
    return out


def _failure(message: str, seconds: float) -> dict:
    """A result without a report: its message may name the upload's files (safetext)."""
    return {"score": 0.0, "tests": [], "output": clean(message), "output_format": "text",
            "visibility": "visible", "execution_time": round(seconds, 3)}


def _log(message: str) -> None:
    """One line of progress for staff (Gradescope shows stdout to staff only); it
    may name the upload's files, so it is made safe (``grader.safetext``)."""
    print(f"[attn-grade {time.strftime('%H:%M:%S')}] {clean(message)}", flush=True)


def _student_output(data: dict, report) -> dict:
    """What students see: the report's notes, but no sandbox, machine or
    grader-problem lines (those are logged for staff instead)."""
    data = dict(data)
    data.pop("output", None)
    if report.notes:
        data["output"] = "\n".join(report.notes)
    return data


def _exercises_from_env() -> list[str] | None:
    """``ATTN_EXERCISES="ex01_by_hand ex02_mha"`` grades only those (staff's
    quick checks of a bundle); unset, every exercise is graded."""
    names = os.environ.get("ATTN_EXERCISES", "").split()
    return names or None


def _declared_student_id(folder: Path) -> str | None:
    """``STUDENT_ID = "..."`` of the submission's ex01_by_hand.py, read as text
    (parsed, never run: this is the grading process)."""
    path = folder / "ex01_by_hand.py"
    if not path.is_file() or path.is_symlink():
        return None
    try:
        tree = ast.parse(path.read_text(errors="replace"))
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None   # unparsable (MemoryError: the parser's own stack): the import says why
    for node in tree.body:
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant) \
                and isinstance(node.value.value, str) \
                and any(isinstance(t, ast.Name) and t.id == "STUDENT_ID" for t in node.targets):
            return node.value.value
    return None


def submitter_id(root: Path, folder: Path) -> str | None:
    """Exercise A's identifier for this upload, from Gradescope's
    ``submission_metadata.json`` (its ``users``): the submitter's identifiers
    (``sid``, ``email``) are what a STUDENT_ID may be.  One that matches the
    module's STUDENT_ID is used; otherwise the field named by
    ``ATTN_STUDENT_ID_FIELD`` (default ``email``; ``off`` leaves exercise A
    to the module's own STUDENT_ID), so that a STUDENT_ID of someone else earns
    nothing and one left unset is graded on the student's own variant."""
    field = os.environ.get("ATTN_STUDENT_ID_FIELD", "email").strip() or "email"
    if field == "off":
        return None
    from grader.variants import BadStudentId, normalize
    try:
        meta = json.loads((root / "submission_metadata.json").read_text())
        users = [u for u in meta.get("users") or [] if isinstance(u, dict)]
    except (OSError, ValueError, AttributeError):
        return None
    ids = [str(u[k]) for u in users for k in ("sid", "email") if u.get(k)]
    declared = _declared_student_id(folder)

    def same(a, b) -> bool:
        try:
            return normalize(a) == normalize(b)
        except BadStudentId:
            return False
    for candidate in ids:
        if declared is not None and same(candidate, declared):
            return candidate
    chosen = [str(u[field]) for u in users if u.get(field) and same(u[field], u[field])]
    return chosen[0] if chosen else None


def run(root: Path, isolation: str = "auto") -> dict:
    """Grade ``root/submission`` into ``root/results/results.json``; never raises
    for a bad submission."""
    from grader.core import Options, grade
    from grader.report import to_gradescope, write_private
    from grader.submission import SubmissionError, describe, materialize

    start = time.monotonic()
    results = root / "results" / "results.json"
    _log(f"grader {PACKAGE_DIR}, python {sys.executable}")
    try:
        upload = root / "submission"
        _log(f"upload: {describe(upload)}")
        with materialize(upload) as folder:
            modules = sorted(p.name for p in folder.glob("ex*.py"))
            _log(f"exercise modules found: {', '.join(modules) or 'none'}")
            student_id = submitter_id(root, folder)
            _log(f"exercise A graded for: {student_id or 'the module STUDENT_ID, if any'}")
            report = grade(folder, Options(suite="hidden", exercises=_exercises_from_env(),
                                           isolation=isolation, student_id=student_id))
        _log(f"isolation: {report.isolation_text}")
        for key, value in report.machine.items():
            _log(f"{key}: {value}")
        if getattr(report, "seed", None) is not None:
            _log(f"random cases: seed {report.seed} (attn-grade grade --seed reproduces it)")
        for err in report.errors:
            _log(f"grader problem: {err}")
        for exercise, (got, most) in report.exercise_scores().items():
            _log(f"{exercise}: {got:g}/{most:g}")
        data = _student_output(to_gradescope(report), report)
        _log(f"score {report.score:g}/{report.max_score:g} in {report.seconds:.1f} s")
    except SubmissionError as exc:
        _log(f"not graded: {exc}")
        said = str(exc).replace(f"{upload}{os.sep}", "")   # the student's own names
        data = _failure(f"Your submission could not be graded: {said} Upload your exercise "
                        "modules (ex01_by_hand.py ...), a course notebook, a zip of them, "
                        "or your course repository.", time.monotonic() - start)
    except Exception as exc:  # the result file is written whatever happens
        _log(f"the autograder failed: {type(exc).__name__}: {exc}")
        data = _failure(f"The autograder failed ({type(exc).__name__}); "
                        "please tell your instructor.", time.monotonic() - start)
    write_private(results, json.dumps(data, indent=2))
    results.chmod(0o644)  # Gradescope's harness reads it
    _log(f"wrote {results}")
    return data


@dataclass
class Replay:
    log: str            # run_autograder's stdout and stderr (what staff see)
    results: dict       # results.json
    problems: list      # results.json against the specification
    returncode: int


def autograder_tree(bundle: Path, root: Path) -> Path:
    """Extract ``bundle`` as Gradescope does: into ``root/source``."""
    (root / "submission").mkdir(parents=True)
    (root / "results").mkdir()
    with zipfile.ZipFile(bundle) as z:
        z.extractall(root / "source")
        for info in z.infolist():   # extractall drops the permission bits
            mode = info.external_attr >> 16
            if mode:
                (root / "source" / info.filename).chmod(mode & 0o777)
    return root


def place_upload(submission: Path, root: Path) -> None:
    """Put an upload where Gradescope does: the files of a folder (or the one
    file uploaded) directly in ``root/submission``."""
    dest = root / "submission"
    if submission.is_dir():
        shutil.copytree(submission, dest, dirs_exist_ok=True, symlinks=True)
    else:
        shutil.copy2(submission, dest / submission.name)


def run_autograder(root: Path, python: str, timeout: float = 3600, env: dict | None = None,
                   source_first: bool = False) -> Replay:
    """Run ``root/source/run_autograder`` with ``python``.  ``source_first``:
    import the bundle's ``grader`` from ``root/source`` (a Python where the
    bundle is not installed); otherwise no checkout on PYTHONPATH shadows the
    installed copy."""
    env = dict(env if env is not None else os.environ, AUTOGRADER_ROOT=str(root),
               ATTN_PYTHON=python)
    env.pop("PYTHONPATH", None)
    if source_first:
        env["PYTHONPATH"] = str(root / "source")
    proc = subprocess.run(["bash", str(root / "source" / "run_autograder")], env=env,
                          capture_output=True, text=True, timeout=timeout,
                          stdin=subprocess.DEVNULL)
    path = root / "results" / "results.json"
    try:
        results = json.loads(path.read_text())
        problems = validate_results(results)
    except (OSError, ValueError) as exc:
        results, problems = {}, [f"no readable results.json ({exc})"]
    return Replay(proc.stdout + proc.stderr, results, problems, proc.returncode)


def replay(submission: Path, bundle: Path | None = None, python: str | None = None,
           env: dict | None = None) -> Replay:
    """Run a bundle on one upload the way Gradescope does, in a temporary
    ``autograder`` tree.  ``python``: one where the bundle is installed (as
    ``setup.sh`` does); default this one, importing the bundle's source."""
    with tempfile.TemporaryDirectory(prefix="attn-gradescope-") as tmp:
        tmp = Path(tmp)
        if bundle is None:
            bundle = build_bundle(tmp / "autograder.zip")
        root = autograder_tree(bundle, tmp / "autograder")
        place_upload(submission, root)
        return run_autograder(root, python or sys.executable, env=env,
                              source_first=python is None)


def validate_results(data: dict) -> list[str]:
    """Problems with a results.json against Gradescope's specification."""
    problems = []
    if not isinstance(data, dict):
        return ["results.json must be an object"]
    if "score" not in data and "tests" not in data:
        problems.append("needs a top-level score or tests")
    if "score" in data and not isinstance(data["score"], (int, float)):
        problems.append("score must be a number")
    if data.get("visibility", "visible") not in VISIBILITIES:
        problems.append(f"bad top-level visibility {data.get('visibility')!r}")
    if data.get("output_format", "text") not in OUTPUT_FORMATS:
        problems.append(f"bad output_format {data.get('output_format')!r}")
    if "execution_time" in data and not isinstance(data["execution_time"], (int, float)):
        problems.append("execution_time must be a number")
    names = set()
    for i, t in enumerate(data.get("tests", [])):
        where = f"tests[{i}]"
        if not isinstance(t, dict):
            problems.append(f"{where} must be an object")
            continue
        for key in ("score", "max_score"):
            if key in t and not isinstance(t[key], (int, float)):
                problems.append(f"{where}.{key} must be a number")
        if "status" in t and t["status"] not in ("passed", "failed"):
            problems.append(f"{where}.status must be passed or failed")
        if t.get("visibility", "visible") not in VISIBILITIES:
            problems.append(f"{where}.visibility {t.get('visibility')!r}")
        if not isinstance(t.get("name", ""), str) or not isinstance(t.get("output", ""), str):
            problems.append(f"{where}.name and output must be strings")
        if t.get("name") in names:
            problems.append(f"{where}.name {t.get('name')!r} is not unique")
        names.add(t.get("name"))
        if "score" in t and "max_score" in t and not 0 <= t["score"] <= max(t["max_score"], 0):
            problems.append(f"{where}.score is outside 0..max_score")
    return problems


if __name__ == "__main__":
    run(Path(sys.argv[1] if len(sys.argv) > 1 else "/autograder"),
        sys.argv[2] if len(sys.argv) > 2 else "auto")
