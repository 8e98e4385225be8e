"""The result of grading one submission, and its output formats.

``Report`` is plain data; ``to_text``, ``to_gradescope`` and ``to_junit`` are
small functions of it.  Every field a submission controls is made safe as it
is assigned (``grader.safetext``: valid Unicode, controls escaped, bounded),
so no format has a check of its own.  Gradescope's format: a top-level
``score`` and ``tests``, each test with ``name``, ``score``, ``max_score``,
``status`` (``passed``/``failed``), ``output`` and ``visibility``.
"""
from __future__ import annotations

import json
import re
import textwrap
from dataclasses import asdict, dataclass, field
from pathlib import Path

from grader import safetext
from grader.safetext import FIELD_LIMIT, NAME_LIMIT, Entries, Texts, TextMap, cleaner

PASSED, FAILED, NOT_RUN = "passed", "failed", "not_run"
# Could not be judged (a too noisy machine, say): its points stay in the
# maximum, it scores nothing until someone regrades it.
NEEDS_REGRADE = "needs_regrade"


ONE_LINE = cleaner(NAME_LIMIT, one_line=True)


@safetext.fields(exercise=ONE_LINE, name=ONE_LINE, title=ONE_LINE,
                 output=cleaner(FIELD_LIMIT))
@dataclass
class TestResult:
    exercise: str
    name: str              # the test function's name, e.g. test_softmax_rows
    title: str             # one line for people, from the docstring
    max_score: float
    score: float
    status: str            # passed, failed, not_run (setup) or needs_regrade
    output: str = ""       # feedback shown to the student
    visibility: str = "visible"
    hidden: bool = False
    # Failed, but kept its points: it fails only from a mistake found upstream
    # (grader.rootcause), which costs once unless --deduct-each.  The formats
    # show it as passed with a note ("KEPT" in the text table), never as a
    # failure at full score.
    kept: bool = False

    @property
    def shown_status(self) -> str:
        """The status the formats show: a kept test reads as passed."""
        return PASSED if self.kept and self.status == FAILED else self.status

    @property
    def full_name(self) -> str:
        return f"{self.exercise}: {self.title}"

    @property
    def mistakes(self) -> list[str]:
        """The stable ids of the mistakes its feedback names (grader.insight)."""
        from grader.insight import diagnoses
        return [ident for ident, _ in diagnoses(self.output)] if self.status == FAILED else []


@safetext.fields(submission=ONE_LINE, student_id=ONE_LINE, errors=Texts, notes=Texts,
                 manual=Entries, import_errors=TextMap)
@dataclass
class Report:
    submission: str
    suite: str
    tests: list[TestResult] = field(default_factory=list)
    exercises: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)     # shown above the table
    machine: dict = field(default_factory=dict)        # measured once per run
    errors: list[str] = field(default_factory=list)    # grader-side problems
    seconds: float = 0.0
    seed: int | None = None   # the hidden suites' random cases (``--seed`` reproduces them)
    manual: list[dict] = field(default_factory=list)   # free-text answers for staff
    student_id: str | None = None   # the roster's identifier exercise A was graded for
    deduct_each: bool = False       # graded with --deduct-each (see grader.rootcause)
    isolation: str = ""        # namespaces, uid, grading-user or root (sandbox.isolation)
    isolation_text: str = ""   # one line, first in every output format but the students'
    import_errors: dict = field(default_factory=dict)  # exercise -> why it did not load
    # Where the time went: each exercise's tests (setup, call and teardown,
    # in the grading process: what its workers took is in it), and the rest
    # of the grading by phase ("start and collection", "root causes", and
    # "ex07 compile, in the background": overlapped, not in the sum).
    exercise_seconds: dict = field(default_factory=dict)
    phase_seconds: dict = field(default_factory=dict)

    @property
    def needs_regrade(self) -> int:
        return sum(t.status == NEEDS_REGRADE for t in self.tests)

    @property
    def ungraded(self) -> bool:
        """Could this submission not be (fully) graded?  (``grade`` exits 3.)"""
        return bool(self.errors) or self.needs_regrade > 0

    @property
    def isolation_line(self) -> str:
        return f"Isolation: {self.isolation_text}" if self.isolation_text else ""

    @property
    def score(self) -> float:
        return round(sum(t.score for t in self.tests), 6)

    @property
    def max_score(self) -> float:
        return round(sum(t.max_score for t in self.tests), 6)

    def by_exercise(self) -> dict[str, list[TestResult]]:
        out: dict[str, list[TestResult]] = {e: [] for e in self.exercises}
        for t in self.tests:
            out.setdefault(t.exercise, []).append(t)
        return out

    def exercise_scores(self) -> dict[str, tuple[float, float]]:
        return {e: (round(sum(t.score for t in ts), 6), round(sum(t.max_score for t in ts), 6))
                for e, ts in self.by_exercise().items()}

    def to_dict(self) -> dict:
        d = asdict(self)
        d["score"], d["max_score"] = self.score, self.max_score
        return d


def _num(x: float) -> str:
    return f"{x:g}"


def _for_students(text: str) -> str:
    """No absolute paths for students: ``/home/x/course/exercises/ex02_mha.py``
    becomes ``ex02_mha.py``, the grader's own files ``grader/...``."""
    text = re.sub(r"(?<![\w.])(?:/[^\s/:'\"()]+)+/(grader/[^\s:'\"()]+)", r"\1", text)
    return re.sub(r"(?<![\w.])(?:/[^\s/:'\"()]+)+/([^\s/:'\"()]+\.(?:py|ipynb|png|zip))",
                  r"\1", text)


# A test that could not be judged, in the reader's words: staff know "regrade";
# a student reads what happens to it and that its points are not lost.
STAFF_WORDS = {
    "mark": "REGR",
    "pending": "pending a regrade (REGR), not lost",
    "summary": "NEEDS REGRADE: {n} test(s) could not be judged on this run (marked REGR); "
               "their points count in the maximum.",
}
STUDENT_WORDS = {
    "mark": "WAIT",
    "pending": "not judged yet (WAIT), not lost",
    "summary": "WAIT, not judged: {n} test(s) could not be judged on this run; your "
               "instructor will regrade them, and their points are not lost.",
}


def to_text(report: Report, *, public_only: bool = False) -> str:
    """A per-exercise table with each test's feedback under it (a passing
    test has feedback only when it has something to show, like a measurement).

    ``public_only`` is the students' view: no isolation, sandbox or machine
    lines, no absolute paths, and feedback that repeats within an exercise (a
    module that failed to import fails every test alike) is shown once."""
    name = Path(report.submission).name if public_only else report.submission
    words = STUDENT_WORDS if public_only else STAFF_WORDS
    lines = [report.isolation_line] if report.isolation_line and not public_only else []
    lines.append(f"Graded {name} with the {report.suite} suites in {report.seconds:.1f} s.")
    if not public_only:
        for key, value in report.machine.items():
            lines.append(f"  {key}: {value}")
    if report.seed is not None and report.suite == "hidden" and not public_only:
        lines.append(f"  random cases: seed {report.seed} (--seed {report.seed} reproduces "
                     "this grade)")
    lines.extend(report.notes)
    for exercise, tests in report.by_exercise().items():
        width = max([len(t.title) for t in tests] + [20])
        got, total = report.exercise_scores()[exercise]
        lines.append("")
        if total or any(t.max_score for t in tests):
            lines.append(f"{exercise}  {_num(got)}/{_num(total)}")
        else:   # format checks only: no "0/0", say how many hold
            held = sum(t.status == PASSED or t.kept for t in tests)
            lines.append(f"{exercise}  {held} of {len(tests)} checks pass (no points here)")
        shown: set[str] = set()
        for t in tests:
            mark = "KEPT" if t.kept else {PASSED: "ok  ", FAILED: "FAIL", NOT_RUN: "--  ",
                                          NEEDS_REGRADE: words["mark"]}[t.status]
            title = t.title
            pts = f"{_num(t.score)}/{_num(t.max_score)}" if t.max_score else ""  # never 0/0
            lines.append(f"  {mark} {title:<{width}} {pts:>7}".rstrip())
            output = t.output.rstrip()
            if public_only and output in shown:
                output = ""     # said once above, under the first test it failed
            shown.add(t.output.rstrip())
            if output:
                lines.append(textwrap.indent(output, "         "))
    lines.append("")
    failed = sum(t.status == FAILED and not t.kept for t in report.tests)
    # One total, never read as a pass while a test fails (0-point checks too).
    points = (f"{_num(report.score)}/{_num(report.max_score)}" if report.max_score else
              f"{len(report.tests) - failed} of {len(report.tests)} checks pass (no points here)")
    # Points waiting on a regrade are named in the total itself: "283/286" alone
    # reads as three points lost.
    pending = sum(t.max_score - t.score for t in report.tests
                  if t.status == NEEDS_REGRADE and not t.kept)
    lines.append(f"Total: {points}"
                 + (f", but {failed} test{'s' if failed > 1 else ''} FAILED" if failed else "")
                 + (f", {_num(pending)} point{'' if pending == 1 else 's'} "
                    f"{words['pending']}" if pending else ""))
    if report.manual and not public_only:
        staff = sum(e["points"] for e in report.manual)
        n = len(report.manual)
        lines.append(f"Plus {n} free-text answer{'' if n == 1 else 's'} ({_num(staff)} points) "
                     "for staff to grade: the batch's rubric sheet, or Gradescope's hidden "
                     "entries, has them.")
    if report.needs_regrade:
        lines.append(words["summary"].format(n=report.needs_regrade))
    for err in report.errors:   # its own lines indented: never one that looks like the table's
        lines.append("Grader problem: " + err.replace("\n", "\n  "))
    if public_only:
        lines.append("These are the public tests only: the hidden tests decide the grade, "
                     "so passing here does not mean the exercise is right.")
    if report.exercise_seconds or report.phase_seconds:
        lines.append(time_line(report))
    text = "\n".join(lines) + "\n"
    return _for_students(text) if public_only else text


def time_line(report: Report) -> str:
    """Where the grading's time went, in one line: seconds per exercise, then
    the other phases."""
    parts = [f"{e} {s:.1f} s" for e, s in report.exercise_seconds.items()]
    parts += [f"{p} {s:.1f} s" for p, s in report.phase_seconds.items()]
    return "Time: " + ", ".join(parts) + "."


# ``Report.machine``'s key for ex07's speed: the geometric mean of the
# student's TFLOP/s over the reference kernel's, measured in the same run (set
# by the hidden GPU suite); Gradescope's leaderboard shows it.
SPEED_RATIO = "ex07 speed ratio"


def _test_number(exercise: str, index: int) -> str:
    """Gradescope's ``number``: the exercise's place in the course, then the
    test's (``2.3``), the same for every submission."""
    from grader.registry import EXERCISES
    order = list(EXERCISES)
    return f"{order.index(exercise) + 1 if exercise in order else len(order) + 1}.{index}"


def _tags(t: TestResult) -> list[str]:
    return [t.exercise, "hidden" if t.hidden else "public"] + \
        (["needs_regrade"] if t.status == NEEDS_REGRADE else [])


def leaderboard(report: Report) -> list[dict]:
    """Gradescope's leaderboard: ex07's speed ratio, where a GPU measured it."""
    ratio = report.machine.get(SPEED_RATIO)
    if not isinstance(ratio, (int, float)) or isinstance(ratio, bool):
        return []
    return [{"name": "ex07 speed vs the reference kernel (x)", "value": round(ratio, 3),
             "order": "desc"}]


def to_gradescope(report: Report) -> dict:
    """Gradescope's results.json: standard keys at the top and on each test
    (``number`` and ``tags`` too), everything of ours under ``extra_data``."""
    tests, counts = [], {}

    def number(exercise: str) -> str:
        counts[exercise] = counts.get(exercise, 0) + 1
        return _test_number(exercise, counts[exercise])

    for t in report.tests:
        entry = {"name": t.full_name, "number": number(t.exercise), "score": t.score,
                 "max_score": t.max_score, "output": t.output, "visibility": t.visibility,
                 "tags": _tags(t)}
        if t.status in (PASSED, FAILED):
            entry["status"] = t.shown_status     # a kept test passes, its output says why
        if t.status == NEEDS_REGRADE:  # Gradescope knows passed and failed only
            entry["status"] = FAILED
            entry["output"] = f"NEEDS REGRADE (not judged on this run): {t.output}"
            entry["extra_data"] = {"needs_regrade": True}
        tests.append(entry)
    extra = {"isolation": report.isolation, "needs_regrade": report.needs_regrade,
             "import_errors": dict(report.import_errors), "errors": list(report.errors),
             # what each exercise scored, out of what: read back by ``exercise_scores_of``
             "exercise_scores": {e: {"score": got, "max_score": most}
                                 for e, (got, most) in report.exercise_scores().items()}}
    out = {"score": report.score, "tests": tests, "output_format": "text",
           "visibility": "visible", "execution_time": round(report.seconds, 3),
           "extra_data": extra}
    if report.exercise_seconds or report.phase_seconds:
        extra["seconds"] = {"exercises": {e: round(s, 3) for e, s in
                                          report.exercise_seconds.items()},
                            "phases": {p: round(s, 3) for p, s in report.phase_seconds.items()}}
    header = ([report.isolation_line] if report.isolation_line else []) + \
        [f"{k}: {v}" for k, v in report.machine.items()] + report.notes + report.errors
    if header:
        out["output"] = "\n".join(header)
    if report.seed is not None:
        extra["seed"] = report.seed   # for staff: `attn-grade grade --seed` reproduces the grade
    if report.student_id is not None:
        extra["student_id"] = report.student_id
    if report.deduct_each:
        extra["deduct_each"] = True   # a batch rerun without the option grades again
    if board := leaderboard(report):
        out["leaderboard"] = board
    from grader.insight import annotate
    annotate(report, out)    # each diagnosis's mistake id (grader.insight)
    if report.manual:
        # For staff only: Gradescope shows "hidden" entries to instructors, never to
        # students; the list (``manual_from_gradescope``) feeds the batch's rubric
        # sheet.  Each answer is stored once, in its hidden entry: the list points to it.
        extra["manual_grading"] = []
        for entry in report.manual:
            extra["manual_grading"].append({**{k: v for k, v in entry.items() if k != "answer"},
                                            "answer_in_test": len(tests)})
            tests.append({"name": f"{entry['exercise']}: {entry['question']} (staff grade, "
                                  f"out of {entry['points']:g})",
                          "number": number(entry["exercise"]),
                          "score": 0.0, "max_score": 0.0, "visibility": "hidden",
                          "tags": [entry["exercise"], "staff"],
                          "output": _staff_output(entry.get("answer", ""), entry["rubric"])})
    return out


def _staff_output(answer: str, rubric: str) -> str:
    return f"Answer:\n{answer or '(none)'}\n\nRubric: {rubric}"


def manual_from_gradescope(data: dict) -> list[dict]:
    """``Report.manual`` from a results JSON of ``to_gradescope``: each entry
    with its answer, read back from the hidden entry that holds it."""
    tests, out = data.get("tests") or [], []
    # under extra_data; at the top in results of earlier versions
    for entry in (data.get("extra_data") or {}).get("manual_grading") or \
            data.get("manual_grading") or []:
        entry = dict(entry)
        at = entry.pop("answer_in_test", None)
        if "answer" not in entry:      # (results of earlier versions hold it here)
            output = str(tests[at].get("output", "")) if isinstance(at, int) \
                and 0 <= at < len(tests) else ""
            answer = output.removeprefix("Answer:\n").removesuffix(
                f"\n\nRubric: {entry.get('rubric', '')}")
            entry["answer"] = "" if answer == "(none)" else answer
        out.append(entry)
    return out


def exercise_scores_of(data: dict) -> dict[str, tuple[float, float]]:
    """``Report.exercise_scores()`` from a results JSON of ``to_gradescope``
    (``extra_data.exercise_scores``): exercise -> (score, max)."""
    stored = (data.get("extra_data") or {}).get("exercise_scores") or {}
    return {str(e): (float(s.get("score", 0)), float(s.get("max_score", 0)))
            for e, s in stored.items() if isinstance(s, dict)}


def to_json(report: Report) -> str:
    return json.dumps(to_gradescope(report), indent=2)


def to_junit(report: Report) -> str:
    """JUnit XML: one testsuite per exercise, points as properties."""
    import xml.etree.ElementTree as ET

    root = ET.Element("testsuites", name="attn-grade", tests=str(len(report.tests)),
                      failures=str(sum(t.shown_status == FAILED for t in report.tests)),
                      time=f"{report.seconds:.3f}")
    for exercise, tests in report.by_exercise().items():
        got, total = report.exercise_scores()[exercise]
        suite = ET.SubElement(root, "testsuite", name=exercise, tests=str(len(tests)),
                              failures=str(sum(t.shown_status == FAILED for t in tests)),
                              skipped=str(sum(t.status == NOT_RUN for t in tests)))
        props = ET.SubElement(suite, "properties")
        ET.SubElement(props, "property", name="score", value=_num(got))
        ET.SubElement(props, "property", name="max_score", value=_num(total))
        for t in tests:
            case = ET.SubElement(suite, "testcase", classname=exercise, name=t.title)
            cprops = ET.SubElement(case, "properties")
            ET.SubElement(cprops, "property", name="points",
                          value=f"{_num(t.score)}/{_num(t.max_score)}")
            if t.shown_status == FAILED:
                ET.SubElement(case, "failure", message=t.output.splitlines()[0]
                              if t.output else "failed").text = t.output
            elif t.status in (NOT_RUN, NEEDS_REGRADE):
                ET.SubElement(case, "skipped", message=t.output)
            elif t.output:
                ET.SubElement(case, "system-out").text = t.output
    return ET.tostring(root, encoding="unicode", xml_declaration=True) + "\n"
