"""Grade a whole class: every submission in a folder, each in its own
grader process, into one CSV and a Gradescope-style JSON per submission.

A submission is a sub-folder holding exercise modules.  Each is graded by
``attn-grade grade`` in a fresh process with an overall time limit, so one
submission that breaks even the grader costs only its own row.  A rerun
skips submissions whose result file is already there and newer than the
submission, unless ``force``.
"""
from __future__ import annotations

import csv
import io
import json
import re
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from grader.exercises import EXERCISES


@dataclass
class Submission:
    name: str
    path: Path


@dataclass
class Outcome:
    submission: Submission
    result_path: Path
    skipped: bool = False          # graded in an earlier run
    error: str = ""
    seconds: float = 0.0
    scores: dict = field(default_factory=dict)   # exercise -> (score, max)
    manual: list = field(default_factory=list)   # free-text answers for staff (rubric sheet)


def _safe(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", name).strip("._") or "submission"


def discover(folder: Path) -> list[Submission]:
    """Every sub-folder, notebook and zip in ``folder`` is a submission."""
    subs = []
    for path in sorted(Path(folder).iterdir()):
        if path.name.startswith("."):
            continue
        if path.is_dir() or path.suffix.lower() in (".ipynb", ".zip"):
            name = path.name if path.is_dir() else path.stem
            subs.append(Submission(name, path))
    return subs


def _latest_mtime(path: Path) -> float:
    if path.is_file():
        return path.stat().st_mtime
    times = [p.stat().st_mtime for p in path.rglob("*") if p.is_file()]
    return max(times + [path.stat().st_mtime])


def exercise_scores(result: dict) -> dict:
    """Per-exercise (score, max) from a results JSON (names start 'exNN_...: ')."""
    out: dict = {}
    for test in result.get("tests", []):
        exercise = str(test.get("name", "")).split(":", 1)[0]
        got, total = out.get(exercise, (0.0, 0.0))
        out[exercise] = (got + float(test.get("score", 0)), total + float(test.get("max_score", 0)))
    return out


def _failed_result(message: str) -> dict:
    return {"score": 0, "tests": [], "output": message, "output_format": "text"}


def _write_json(path: Path, data: dict) -> None:
    from grader.report import write_private
    write_private(path, json.dumps(data, indent=2))


class RosterError(ValueError):
    """A roster that cannot be used; the text is one sentence."""


ROSTER_COLUMNS = ("submission", "student_id")


def read_roster(path: Path) -> dict[str, str]:
    """{submission name: student identifier} from a CSV with a header row
    naming the columns ``submission`` and ``student_id`` (others are kept
    for people and ignored here)."""
    from grader.variants import BadStudentId, normalize

    try:
        with open(path, newline="", encoding="utf-8-sig") as f:
            rows = list(csv.DictReader(f))
            header = [h.strip().lower() for h in (rows and rows[0].keys() or [])]
    except (OSError, UnicodeDecodeError, csv.Error) as exc:
        raise RosterError(f"{path} is not a readable CSV file ({exc})") from None
    if not rows:
        raise RosterError(f"{path} holds no rows under a header of "
                          f"{', '.join(ROSTER_COLUMNS)}")
    if not set(ROSTER_COLUMNS) <= set(header):
        raise RosterError(f"{path} needs a header row with the columns "
                          f"{' and '.join(ROSTER_COLUMNS)}; it has {', '.join(header)}")
    roster: dict[str, str] = {}
    for line, row in enumerate(rows, start=2):
        row = {(k or "").strip().lower(): (v or "").strip() for k, v in row.items()}
        name, sid = row["submission"], row["student_id"]
        if name in roster:
            raise RosterError(f"{path} line {line}: submission {name!r} is listed twice")
        try:
            normalize(sid)
        except BadStudentId as exc:
            raise RosterError(f"{path} line {line}: {exc}") from None
        roster[name] = sid
    return roster


def grade_one(sub: Submission, results_dir: Path, *, suite: str, timeout: float | None,
              submission_timeout: float, force: bool,
              exercises: list[str] | None = None, seed: int | None = None,
              student_id: str | None = None) -> Outcome:
    result_path = results_dir / f"{_safe(sub.name)}.json"
    outcome = Outcome(sub, result_path)
    if not force and result_path.is_file() and \
            result_path.stat().st_mtime >= _latest_mtime(sub.path):
        try:
            data = json.loads(result_path.read_text())
            # Graded for another roster identity or seed: not the same grade.
            if data.get("student_id") != student_id or \
                    (seed is not None and data.get("seed") != seed):
                raise ValueError("graded with other options")
            outcome.skipped = True
            outcome.scores = exercise_scores(data)
            outcome.manual = data.get("manual_grading", [])
            outcome.error = data.get("batch_error", "")
            return outcome
        except (OSError, ValueError):
            pass  # unreadable: grade again
    cmd = [sys.executable, "-m", "grader.cli", "grade", str(sub.path), "--suite", suite,
           "--format", "json", "--out", str(result_path)]
    if timeout:
        cmd += ["--timeout", str(timeout)]
    for ex in exercises or []:
        cmd += ["--exercise", ex]
    if seed is not None:
        cmd += ["--seed", str(seed)]
    if student_id is not None:
        cmd += ["--student-id", student_id]
    start = time.monotonic()
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=submission_timeout,
                              stdin=subprocess.DEVNULL)
        if proc.returncode != 0:
            lines = (proc.stderr or proc.stdout).strip().splitlines()
            last = lines[-1] if lines else f"the grader exited with {proc.returncode}"
            outcome.error = last.removeprefix("Error: ")
    except subprocess.TimeoutExpired:
        outcome.error = f"grading took longer than {submission_timeout:g} s and was stopped"
    outcome.seconds = time.monotonic() - start
    if outcome.error:
        data = _failed_result(f"not graded: {outcome.error}")
        data["batch_error"] = outcome.error
        _write_json(result_path, data)
        return outcome
    try:
        data = json.loads(result_path.read_text())
        outcome.scores = exercise_scores(data)
        outcome.manual = data.get("manual_grading", [])
    except (OSError, ValueError) as exc:
        outcome.error = f"the result could not be read: {exc}"
    return outcome


def to_csv(outcomes: list[Outcome], exercises: list[str]) -> str:
    buf = io.StringIO()
    writer = csv.writer(buf)
    writer.writerow(["submission", *exercises, "total", "max_total", "error"])
    for o in sorted(outcomes, key=lambda o: o.submission.name):
        row = [o.submission.name]
        total = max_total = 0.0
        for ex in exercises:
            got, most = o.scores.get(ex, (0.0, 0.0))
            row.append(f"{got:g}")
            total, max_total = total + got, max_total + most
        writer.writerow(row + [f"{total:g}", f"{max_total:g}", o.error])
    return buf.getvalue()


RUBRIC_COLUMNS = ["question", "submission", "points_possible", "answer", "rubric", "points",
                  "comment"]


def to_rubric_csv(outcomes: list[Outcome]) -> str:
    """The staff's sheet for free-text answers: one row per answer, grouped by
    question (staff grade one question across the class), with the rubric and
    empty ``points`` and ``comment`` columns to fill in."""
    rows = [(str(e.get("question", "")), o.submission.name, e) for o in outcomes
            for e in o.manual]
    buf = io.StringIO()
    writer = csv.writer(buf)
    writer.writerow(RUBRIC_COLUMNS)
    for question, name, e in sorted(rows, key=lambda r: (r[0], r[1])):
        writer.writerow([question, name, f"{float(e.get('points', 0)):g}",
                         e.get("answer", ""), e.get("rubric", ""), "", ""])
    return buf.getvalue()


def run_batch(subs: list[Submission], results_dir: Path, *, jobs: int = 1, suite: str = "hidden",
              timeout: float | None = None, submission_timeout: float = 1800.0,
              force: bool = False, exercises: list[str] | None = None,
              seed: int | None = None, roster: dict[str, str] | None = None,
              on_done: Callable[[Outcome], None] | None = None) -> list[Outcome]:
    results_dir.mkdir(parents=True, exist_ok=True)
    outcomes = []
    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        futures = [pool.submit(grade_one, s, results_dir, suite=suite, timeout=timeout,
                               submission_timeout=submission_timeout, force=force,
                               exercises=exercises, seed=seed,
                               student_id=(roster or {}).get(s.name))
                   for s in subs]
        for future in as_completed(futures):
            outcome = future.result()
            outcomes.append(outcome)
            if on_done:
                on_done(outcome)
    return outcomes


def columns(outcomes: list[Outcome]) -> list[str]:
    seen = {ex for o in outcomes for ex in o.scores}
    return [ex for ex in EXERCISES if ex in seen]
