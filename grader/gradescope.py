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
# results.json's top level, as Gradescope's specification lists it.
TOP_LEVEL_KEYS = {"score", "execution_time", "output", "output_format", "test_output_format",
                  "test_name_format", "visibility", "stdout_visibility", "extra_data", "tests",
                  "leaderboard"}

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
# The sandbox is decided here, once, while the image is built, never at a
# student's submission: the probe records what this image gives (in
# attn-isolation.json beside this file) and stops the build where the
# bundle's --isolation cannot be had.
"$VENV/bin/python" -m grader.gradescope probe "$SOURCE"
"""

RUN_AUTOGRADER = """\
#!/usr/bin/env bash
# Gradescope runs this for every submission; it always writes results.json.
# Its output is shown to staff only (students see results.json).  The
# isolation is the one setup.sh recorded when the image was built.
ROOT="${AUTOGRADER_ROOT:-/autograder}"
PY="${ATTN_PYTHON:-${ATTN_VENV:-/opt/attn-venv}/bin/python}"
mkdir -p "$ROOT/results"
echo "run_autograder: $(date -u +%FT%TZ) grading $ROOT/submission with $PY"
cd "$ROOT"
exec "$PY" -m grader.gradescope run "$ROOT"
"""

# The bundle's choice (``attn-grade gradescope --isolation``), read by the probe.
BUNDLE_FILE = "attn-bundle.json"
# What the probe found while the image was built, read for every submission.
RECORD_FILE = "attn-isolation.json"
BUNDLE_ISOLATION = ("strict", "auto")
MEMORY_MB = 8192   # grader.core.Options' default: the probe's memory line matches a grading

# What of the repository goes into the bundle's top level, beside grader/.
SOURCE_FILES = ["pyproject.toml", "README.md"]


def build_bundle(out: Path, isolation: str = "strict") -> Path:
    """The bundle at ``out``; ``isolation``: ``strict`` (an image without
    namespaces fails its build) or ``auto`` (it grades with the strongest
    isolation its image gives, decided by ``setup.sh``'s probe)."""
    if isolation not in BUNDLE_ISOLATION:
        raise ValueError(f"unknown bundle isolation {isolation!r}: use strict or auto")
    out.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as z:
        for name, text in (("setup.sh", SETUP_SH), ("run_autograder", RUN_AUTOGRADER)):
            info = zipfile.ZipInfo(name)
            info.external_attr = 0o755 << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            z.writestr(info, text)
        z.writestr(BUNDLE_FILE, json.dumps({"isolation": isolation}) + "\n")
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


ID_FIELDS = {"sid": "your Gradescope student ID (sid)", "email": "your Gradescope email"}
ACCEPTED = "your Gradescope student ID (sid) or email"


def submitter_id(root: Path, folder: Path) -> str | None:
    """Exercise A's identifier for this upload, from Gradescope's
    ``submission_metadata.json`` (its ``users``: ``email``, ``id``, ``name``,
    and ``sid`` where the course set student IDs): a STUDENT_ID equal to a
    submitter's ``sid`` or ``email`` is used; otherwise the field named by
    ``ATTN_STUDENT_ID_FIELD`` (default ``email``; the other one where a
    submitter has none; ``off`` leaves exercise A to the module's own
    STUDENT_ID), so that a STUDENT_ID of someone else earns nothing and one
    left unset is graded on the student's own variant.  The identifier says
    how to name it to the student (``variants.AssignedId``)."""
    from grader.variants import AssignedId, BadStudentId, normalize

    field = os.environ.get("ATTN_STUDENT_ID_FIELD", "email").strip() or "email"
    if field == "off":
        return None
    try:
        meta = json.loads((root / "submission_metadata.json").read_text())
        users = [u for u in meta.get("users") or [] if isinstance(u, dict)]
    except (OSError, ValueError, AttributeError):
        return None

    def usable(value) -> str | None:
        try:
            return str(value) if value not in (None, "") and normalize(value) else None
        except BadStudentId:
            return None
    ids = [(usable(u.get(k)), k) for u in users for k in ID_FIELDS]
    ids = [(value, k) for value, k in ids if value is not None]
    declared = _declared_student_id(folder)
    mine = usable(declared) and normalize(declared)
    for value, k in ids:
        if mine and normalize(value) == mine:
            return AssignedId(value, ID_FIELDS[k], ACCEPTED)
    order = [field] + [k for k in ID_FIELDS if k != field]
    for k in order:
        chosen = [value for value, key in ids if key == k]
        if chosen:
            return AssignedId(chosen[0], ID_FIELDS[k], ACCEPTED)
    return None


# -- the sandbox, decided while the image is built ---------------------------

STRICT_FAILED = (
    "attn-grade setup: FAILED, on purpose. This bundle was built with --isolation strict, "
    "which grades only inside bubblewrap's namespaces, and this image cannot make them "
    "({why}). Gradescope's containers run under Docker's default seccomp profile, which "
    "refuses the unshare calls bubblewrap needs, and nothing in a bundle can change that. "
    "Rebuild the bundle with `attn-grade gradescope autograder.zip --isolation auto` and "
    "upload it: each student's code then runs as its own unprivileged user, with the hidden "
    "suites and /autograder/source readable by root only, sharing the container's network "
    "and /tmp (every results.json says so to staff). Or grade where namespaces work "
    "(`attn-grade doctor` says whether a machine has them) with `attn-grade batch`. No "
    "submission is graded with this image.")
AUTO_FAILED = (
    "attn-grade setup: FAILED. This image cannot make bubblewrap's namespaces ({why}), and "
    "it cannot give each student's code its own unprivileged user either: {lack}. Student "
    "code would run with the grader's rights and could read the hidden suites, so no "
    "submission is graded with this image. {fix}")


def _readable_by_a_worker(paths: list[Path], python: str = sys.executable) -> list[Path]:
    """Those of ``paths`` that a fresh unprivileged uid can open with
    ``python`` (one it can run), as root."""
    from grader.sandbox import confine
    uid = confine.fresh_uid()
    try:
        code = ("import sys\nfor p in sys.argv[1:]:\n    try:\n        open(p, 'rb').close()\n"
                "    except OSError:\n        continue\n    print(p)")
        proc = subprocess.run([python, "-I", "-c", code, *map(str, paths)], cwd="/",
                              user=uid, group=uid, extra_groups=[], capture_output=True,
                              text=True, timeout=60, env={"PATH": os.environ.get("PATH", "")})
        return [Path(p) for p in proc.stdout.split()]
    finally:
        confine.release_uid(uid)


def _protect_source(source: Path) -> None:
    """The bundle's own copy (hidden suites, references) and, as root, the
    installed package's secret folders readable by their owner only."""
    from grader.sandbox import confine
    source.chmod(0o700)
    confine.protect_secrets()


def _secrets_a_worker_reads(source: Path) -> list[Path]:
    """After ``_protect_source``, as root: the hidden suites (installed, and
    the bundle's copy) that a fresh unprivileged uid can still open."""
    from grader.paths import HIDDEN_SUITES_DIR
    _protect_source(source)
    probes = [p for folder in (HIDDEN_SUITES_DIR, source / "grader" / "suites" / "hidden")
              for p in sorted(folder.glob("*.py"))[:1]]
    return _readable_by_a_worker(probes)


INSTALL_FIX = ("Install the grader's Python where every user may run it (setup.sh's default, "
               "/opt/attn-venv, is such a place) and run setup.sh as root, as Gradescope does.")


def _why_no_own_uid(source: Path, iso) -> tuple[str, str]:
    """(why each worker cannot run as its own uid with the secrets unreadable
    here, what to change); ('', '') where it can."""
    from grader.sandbox import confine, isolation
    if not confine.is_root():
        return "setup.sh does not run as root here", INSTALL_FIX
    if iso.level != isolation.UID:
        return f"this Python ({sys.executable}) cannot be run by another user", INSTALL_FIX
    readable = _secrets_a_worker_reads(source)
    return (f"{readable[0]} stays readable by other users",
            "Make the folders above it readable by root only and rebuild.") if readable \
        else ("", "")


def probe(source: Path) -> int:
    """``setup.sh``'s step: decide the isolation for every submission of this
    image, from the bundle's choice (``attn-bundle.json``), and record it in
    ``attn-isolation.json``; 1, with one paragraph saying what to change,
    where the choice cannot be had here."""
    from grader.sandbox import bwrap, isolation

    try:
        chosen = json.loads((source / BUNDLE_FILE).read_text())["isolation"]
    except (OSError, ValueError, KeyError, TypeError):
        chosen = "strict"   # a bundle without the file: the safe choice
    print(f"attn-grade setup: the bundle asks for --isolation {chosen}", flush=True)
    ok, why = bwrap.usable()
    if not ok and chosen == "strict":
        print(STRICT_FAILED.format(why=why), flush=True)
        return 1
    iso = isolation.decide("strict" if ok else "fallback", MEMORY_MB)
    lack, fix = ("", "") if ok else _why_no_own_uid(source, iso)
    if lack:
        print(AUTO_FAILED.format(why=why, lack=lack, fix=fix), flush=True)
        return 1
    if ok:
        _protect_source(source)
    record = {"bundle": chosen, "grade_with": "strict" if ok else "fallback",
              "level": iso.level, "text": iso.text, "why_not_namespaces": why,
              "python": sys.executable, "probed": time.strftime("%Y-%m-%dT%H:%M:%SZ",
                                                                time.gmtime())}
    (source / RECORD_FILE).write_text(json.dumps(record, indent=2) + "\n")
    print(f"attn-grade setup: every submission of this image is graded with: {iso.text}",
          flush=True)
    return 0


def recorded_isolation(root: Path) -> dict | None:
    """What ``probe`` recorded when this image was built, or None."""
    try:
        record = json.loads((root / "source" / RECORD_FILE).read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(record, dict) or record.get("grade_with") not in ("strict", "fallback"):
        return None
    return record


def _staff_isolation_entry(report, record: dict | None) -> dict:
    """A test entry only staff see (``hidden``) saying which isolation ran."""
    built = "" if record is None else (
        f" Decided when the image was built (bundle --isolation {record.get('bundle')}"
        + (f"; no namespaces there: {record['why_not_namespaces']}"
           if record.get("why_not_namespaces") else "") + ").")
    return {"name": "Isolation (staff only)", "number": "0.1", "score": 0.0, "max_score": 0.0,
            "visibility": "hidden", "tags": ["staff"], "output": clean(
                f"{report.isolation_line or 'Isolation: unknown'}.{built}")}


def _protect_run(root: Path) -> None:
    """As root: Gradescope's metadata holds earlier submissions' full results
    (hidden tests' feedback included) and the source the hidden suites:
    readable by root only, whatever the isolation."""
    from grader.sandbox import confine
    if not confine.is_root():
        return
    for path, mode in ((root / "submission_metadata.json", 0o600), (root / "source", 0o700)):
        try:
            if path.exists() and not path.is_symlink():
                path.chmod(mode)
        except OSError:
            pass


def run(root: Path, isolation: str | None = None) -> dict:
    """Grade ``root/submission`` into ``root/results/results.json``; never raises
    for a bad submission.  ``isolation``: None, as ``setup.sh`` recorded when
    the image was built (``probe``); a mode, for tests and staff's checks."""
    from grader.core import Options, grade
    from grader.artifacts import write_private
    from grader.report import to_gradescope
    from grader.submission import SubmissionError, describe, materialize

    start = time.monotonic()
    results = root / "results" / "results.json"
    _log(f"grader {PACKAGE_DIR}, python {sys.executable}")
    record = recorded_isolation(root)
    upload = root / "submission"
    try:
        if isolation is None and record is None:
            raise _NotSetUp(f"no readable {RECORD_FILE} in {root / 'source'}: setup.sh's "
                            "sandbox probe did not run when the image was built")
        mode = isolation or record["grade_with"]
        _log(f"isolation: {mode}" + (f", as decided when the image was built ({record['text']})"
                                     if isolation is None else ", as asked"))
        _protect_run(root)
        _log(f"upload: {describe(upload)}")
        with materialize(upload) as folder:
            modules = sorted(p.name for p in folder.glob("ex*.py"))
            _log(f"exercise modules found: {', '.join(modules) or 'none'}")
            student = submitter_id(root, folder)
            _log(f"exercise A graded for: {student or 'the module STUDENT_ID, if any'}")
            report = grade(folder, Options(suite="hidden", exercises=_exercises_from_env(),
                                           isolation=mode, student_id=student))
        _log(f"isolation: {report.isolation_text}")
        if record is not None and isolation is None and report.isolation != record["level"]:
            _log(f"WARNING: the image recorded {record['level']}, this grading ran "
                 f"{report.isolation}")
        for key, value in report.machine.items():
            _log(f"{key}: {value}")
        if getattr(report, "seed", None) is not None:
            _log(f"random cases: seed {report.seed} (attn-grade grade --seed reproduces it)")
        for err in report.errors:
            _log(f"grader problem: {err}")
        for exercise, (got, most) in report.exercise_scores().items():
            _log(f"{exercise}: {got:g}/{most:g}")
        data = _student_output(to_gradescope(report), report)
        data["tests"].append(_staff_isolation_entry(report, record))
        if record is not None:
            data["extra_data"]["isolation_at_build"] = record
        _log(f"score {report.score:g}/{report.max_score:g} in {report.seconds:.1f} s")
    except SubmissionError as exc:
        _log(f"not graded: {exc}")
        said = str(exc).replace(f"{upload}{os.sep}", "")   # the student's own names
        data = _failure(f"Your submission could not be graded: {said} Upload your exercise "
                        "modules (ex01_by_hand.py ...), a course notebook, a zip of them, "
                        "or your course repository.", time.monotonic() - start)
    except _NotSetUp as exc:
        _log(f"the autograder is not set up: {exc}")
        data = _failure("The autograder is not set up (this is not about your code); "
                        "please tell your instructor.", time.monotonic() - start)
    except Exception as exc:  # the result file is written whatever happens
        _log(f"the autograder failed: {type(exc).__name__}: {exc}")
        data = _failure(f"The autograder failed ({type(exc).__name__}); "
                        "please tell your instructor.", time.monotonic() - start)
    write_private(results, json.dumps(data, indent=2))
    results.chmod(0o644)  # Gradescope's harness reads it
    _log(f"wrote {results}")
    return data


class _NotSetUp(RuntimeError):
    """The image was built without ``setup.sh``'s probe."""


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


def _replay_env(root: Path, python: str, env: dict | None, source_first: bool) -> dict:
    """``source_first``: import the bundle's ``grader`` from ``root/source`` (a
    Python where the bundle is not installed); otherwise no checkout on
    PYTHONPATH shadows the installed copy."""
    env = dict(env if env is not None else os.environ, AUTOGRADER_ROOT=str(root),
               ATTN_PYTHON=python)
    env.pop("PYTHONPATH", None)
    if source_first:
        env["PYTHONPATH"] = str(root / "source")
    return env


def setup_probe(root: Path, python: str, env: dict | None = None,
                source_first: bool = False) -> tuple[int, str]:
    """``setup.sh``'s last step (the sandbox probe) with ``python``, as the
    image's build runs it: (exit status, its output)."""
    proc = subprocess.run([python, "-m", "grader.gradescope", "probe", str(root / "source")],
                          env=_replay_env(root, python, env, source_first), cwd=root,
                          capture_output=True, text=True, timeout=600,
                          stdin=subprocess.DEVNULL)
    return proc.returncode, proc.stdout + proc.stderr


def run_autograder(root: Path, python: str, timeout: float = 3600, env: dict | None = None,
                   source_first: bool = False) -> Replay:
    """Run ``root/source/run_autograder`` with ``python`` (see ``_replay_env``)."""
    env = _replay_env(root, python, env, source_first)
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
           env: dict | None = None, isolation: str = "strict") -> Replay:
    """Run a bundle on one upload the way Gradescope does, in a temporary
    ``autograder`` tree: ``setup.sh``'s sandbox probe (the image's build),
    then ``run_autograder``.  ``python``: one where the bundle is installed
    (as ``setup.sh`` does); default this one, importing the bundle's source.
    ``isolation``: of the bundle made when none is given."""
    with tempfile.TemporaryDirectory(prefix="attn-gradescope-") as tmp:
        tmp = Path(tmp)
        if bundle is None:
            bundle = build_bundle(tmp / "autograder.zip", isolation)
        root = autograder_tree(bundle, tmp / "autograder")
        place_upload(submission, root)
        python, source_first = python or sys.executable, python is None
        code, log = setup_probe(root, python, env, source_first)
        if code != 0:
            return Replay(log, {}, ["setup.sh's sandbox probe failed: Gradescope would not "
                                    "build this image"], code)
        result = run_autograder(root, python, env=env, source_first=source_first)
        result.log = log + result.log
        return result


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
        if "number" in t and not isinstance(t["number"], str):
            problems.append(f"{where}.number must be a string")
        if "tags" in t and not (isinstance(t["tags"], list)
                                and all(isinstance(x, str) for x in t["tags"])):
            problems.append(f"{where}.tags must be a list of strings")
    for i, row in enumerate(data.get("leaderboard", [])):
        if not isinstance(row, dict) or not isinstance(row.get("name"), str) \
                or not isinstance(row.get("value"), (int, float, str)) \
                or row.get("order", "desc") not in ("asc", "desc"):
            problems.append(f"leaderboard[{i}] needs a name, a value and order asc or desc")
    if not isinstance(data.get("extra_data", {}), dict):
        problems.append("extra_data must be an object")
    unknown = set(data) - TOP_LEVEL_KEYS
    if unknown:
        problems.append(f"keys outside the format (put them under extra_data): "
                        f"{', '.join(sorted(unknown))}")
    return problems


def main(argv: list[str]) -> int:
    """``probe SOURCE`` (setup.sh) or ``run ROOT`` (run_autograder)."""
    if len(argv) == 2 and argv[0] == "probe":
        return probe(Path(argv[1]))
    if len(argv) == 2 and argv[0] == "run":
        run(Path(argv[1]))
        return 0
    print("usage: python -m grader.gradescope probe SOURCE | run ROOT", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
