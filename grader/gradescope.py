"""Gradescope: an autograder bundle, and the run inside it.

``build_bundle(out.zip)`` packs ``setup.sh``, ``run_autograder`` and the
grader's source (hidden suites and references included: the bundle stays
with the instructor and Gradescope, never with students).  On Gradescope,
``run_autograder`` calls ``python3 -m grader.gradescope /autograder``, which
grades ``/autograder/submission`` (modules, a notebook or a zip, as uploaded)
and always writes ``/autograder/results/results.json``, even when the
submission cannot be graded.
"""
from __future__ import annotations

import json
import sys
import time
import zipfile
from pathlib import Path

from grader.exercises import PACKAGE_DIR, REPO_DIR

VISIBILITIES = {"hidden", "after_due_date", "after_published", "visible"}
OUTPUT_FORMATS = {"text", "html", "simple_format", "md", "ansi"}

SETUP_SH = """\
#!/usr/bin/env bash
# Gradescope runs this once, as root, when it builds the autograder image.
set -euo pipefail
apt-get update -q && apt-get install -y -q python3 python3-pip python3-venv
python3 -m venv /opt/attn-venv
/opt/attn-venv/bin/python -m pip install -q --upgrade pip
# Gradescope's machines have no GPU: the CPU build of PyTorch is far smaller.
/opt/attn-venv/bin/python -m pip install -q torch --index-url https://download.pytorch.org/whl/cpu
/opt/attn-venv/bin/python -m pip install -q /autograder/source
"""

RUN_AUTOGRADER = """\
#!/usr/bin/env bash
# Gradescope runs this for every submission; it always writes results.json.
ROOT="${AUTOGRADER_ROOT:-/autograder}"
PY="${ATTN_PYTHON:-/opt/attn-venv/bin/python}"
mkdir -p "$ROOT/results"
exec "$PY" -m grader.gradescope "$ROOT"
"""

# What of the repository goes into the bundle's source/ folder.
SOURCE_FILES = ["pyproject.toml", "README.md"]


def build_bundle(out: Path) -> Path:
    out.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as z:
        for name, text in (("setup.sh", SETUP_SH), ("run_autograder", RUN_AUTOGRADER)):
            info = zipfile.ZipInfo(name)
            info.external_attr = 0o755 << 16
            z.writestr(info, text)
        for name in SOURCE_FILES:
            z.write(REPO_DIR / name, f"source/{name}")
        for path in sorted(PACKAGE_DIR.rglob("*")):
            if path.is_file() and "__pycache__" not in path.parts:
                z.write(path, f"source/grader/{path.relative_to(PACKAGE_DIR)}")
    return out


def _failure(message: str, seconds: float) -> dict:
    return {"score": 0.0, "tests": [], "output": message, "output_format": "text",
            "visibility": "visible", "execution_time": round(seconds, 3)}


def run(root: Path) -> dict:
    """Grade ``root/submission`` into ``root/results/results.json``; never raises
    for a bad submission."""
    from grader.report import write_private
    from grader.core import Options, grade
    from grader.report import to_gradescope
    from grader.submission import SubmissionError, materialize

    start = time.monotonic()
    results = root / "results" / "results.json"
    try:
        with materialize(root / "submission") as folder:
            data = to_gradescope(grade(folder, Options(suite="hidden")))
    except SubmissionError as exc:
        data = _failure(f"Your submission could not be graded: {exc} Upload your exercise "
                        "modules (ex01_by_hand.py ...), a course notebook, or a zip of them.",
                        time.monotonic() - start)
    except Exception as exc:  # the result file is written whatever happens
        data = _failure(f"The autograder failed ({type(exc).__name__}: {exc}); "
                        "please tell your instructor.", time.monotonic() - start)
    write_private(results, json.dumps(data, indent=2))
    results.chmod(0o644)  # Gradescope's harness reads it
    return data


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
    run(Path(sys.argv[1] if len(sys.argv) > 1 else "/autograder"))
