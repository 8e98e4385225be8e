"""What the class got wrong: a stable id for every diagnosis, and the table.

A diagnosis is a feedback line "This looks like: <text>." (``grader.feedback``).
Its id is the reference's mistake key (``no_scale``, the key of
``grader.reference.secret.attention.MISTAKES`` and its siblings), found by its
text, so that rewording a mistake's description changes no id and two
exercises naming the same slip share one (exercise A's by-hand slips are
``by_hand.MISTAKES``; a key another reference has already is qualified by its
module: ``by_hand.no_scale``; an interview question's slip is
``questions.<key>``, one key for a slip made in several questions).  A
diagnosis written in a suite without a key (a timing hint) gets
``unkeyed-<slug>-<hash>`` of its text: stable as long as its wording is.

``annotate`` puts the ids into a Gradescope result (each test's
``extra_data.mistakes`` and the result's ``extra_data.mistakes``);
``class_rows`` counts them over a class, each student once per exercise and
mistake however many tests named it (a root cause and the downstream tests
that follow from it are one mistake); ``mistakes_csv`` writes
``grades-mistakes.csv`` beside ``grades.csv`` and ``merge_mistakes`` joins
the parts' sheets of a sharded run.
"""
from __future__ import annotations

import csv
import hashlib
import io
import json
import re
from pathlib import Path

from grader.feedback import LOOKS_LIKE
from grader.safetext import NAME_LIMIT, clean, csv_text, csv_value

MISTAKES_COLUMNS = ["exercise", "mistake_id", "text", "count", "students"]
# The line rootcause puts first on a downstream failure (grader.rootcause.FOLLOWS).
FOLLOWS_START = "This follows from the "
STUDENTS_SEP = "; "
OR = " (or: "    # two mistakes giving one answer (grader.feedback.matching_mistake)

_known: dict[str, str] | None = None


def _reference_tables() -> list[tuple[str, dict]]:
    """(module name, {key: text}) of every reference that names its mistakes.
    The student edition ships no secret references: there every id is unkeyed."""
    tables = []
    try:
        from grader.reference.secret import attention, by_hand, flash, mla, roofline
    except Exception:   # noqa: BLE001 - the edition's stubs may raise anything: no keys
        return tables
    tables.append(("attention", attention.MISTAKES))
    tables.append(("by_hand", by_hand.MISTAKES))
    tables.append(("flash", {k: v for k, v in flash.FLASH_MISTAKES.items() if v}))
    tables.append(("mla", mla.MISTAKES))
    tables.append(("roofline", roofline.MISTAKES))
    return tables


def known_ids() -> dict[str, str]:
    """{description: mistake id}.  A key that two references use for two
    texts is qualified by its module (``mla.no_scale``) after the first."""
    global _known
    if _known is None:
        known: dict[str, str] = {}
        owner: dict[str, str] = {}    # id -> its text
        for module, table in _reference_tables():
            for key, text in table.items():
                if text in known:
                    continue
                ident = key if owner.get(key, text) == text else f"{module}.{key}"
                owner[ident] = text
                known[text] = ident
        try:   # the questions' slips: one key may have several wordings
            from grader.reference.secret import questions
            for name in questions.FORMS:
                for key, (text, _) in questions.key(name).get("mistakes", {}).items():
                    known.setdefault(text, f"questions.{key}")
        except Exception:   # noqa: BLE001 - the edition: no keys
            pass
        _known = known
    return _known


def mistake_id(text: str) -> str:
    """The stable id of one mistake's description."""
    known = known_ids().get(text)
    if known:
        return known
    slug = re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")[:40].strip("-")
    digest = hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:8]
    return f"unkeyed-{slug}-{digest}"


def _split(text: str) -> list[str]:
    """"A (or: B)" is two mistakes where either part is a known one."""
    known = known_ids()
    if text in known or OR not in text or not text.endswith(")"):
        return [text]
    start = 0
    while (at := text.find(OR, start)) >= 0:
        left, right = text[:at], text[at + len(OR):-1]
        if left in known or right in known:
            return [left, right]
        start = at + 1
    return [text]


def diagnoses(output: str) -> list[tuple[str, str]]:
    """[(id, text)] of the mistakes a test's feedback names, each once."""
    found: dict[str, str] = {}
    for line in output.splitlines():
        line = line.strip()
        if not (line.startswith(LOOKS_LIKE) and line.endswith(".")):
            continue
        for text in _split(line[len(LOOKS_LIKE):-1]):
            found.setdefault(mistake_id(text), text)
    return list(found.items())


def follows(output: str) -> bool:
    """Does this feedback say it follows from a mistake named upstream?"""
    return output.startswith(FOLLOWS_START)


def annotate(report, out: dict) -> None:
    """Each failed test's mistake ids into ``out`` (``to_gradescope``'s dict):
    ``tests[i].extra_data.mistakes`` and the list of all under
    ``extra_data.mistakes`` (exercise, test, id, text, follows)."""
    every = []
    for t, entry in zip(report.tests, out.get("tests", [])):
        if t.status != "failed":
            continue
        named = diagnoses(t.output)
        if not named:
            continue
        entry.setdefault("extra_data", {})["mistakes"] = [i for i, _ in named]
        every += [{"exercise": t.exercise, "test": t.name, "id": i, "text": text,
                   "follows": follows(t.output)} for i, text in named]
    if every:
        out.setdefault("extra_data", {})["mistakes"] = every


def result_mistakes(data: dict) -> list[tuple[str, str, str]]:
    """[(exercise, id, text)] of one results JSON: the ids ``annotate``
    stored, else (a result of an earlier version) read from the feedback."""
    extra = data.get("extra_data") if isinstance(data.get("extra_data"), dict) else {}
    stored = extra.get("mistakes")
    if isinstance(stored, list):
        return [(str(m.get("exercise", "")), str(m.get("id", "")), str(m.get("text", "")))
                for m in stored if isinstance(m, dict)]
    out = []
    for test in data.get("tests") or []:
        exercise = str(test.get("name", "")).split(":", 1)[0]
        out += [(exercise, i, text) for i, text in diagnoses(str(test.get("output", "")))]
    return out


def class_rows(results: list[tuple[str, dict]]) -> list[list]:
    """The mistakes table of (student label, results JSON) pairs: one row per
    exercise and mistake, most common first, each student counted once."""
    table: dict[tuple[str, str], tuple[str, set]] = {}
    for label, data in results:
        for exercise, ident, text in result_mistakes(data):
            table.setdefault((exercise, ident), (text, set()))[1].add(label)
    rows = [[ex, ident, text, len(who), STUDENTS_SEP.join(sorted(who))]
            for (ex, ident), (text, who) in table.items()]
    return sorted(rows, key=lambda r: (-r[3], r[0], r[1]))


def read_outcomes(outcomes) -> list[tuple[str, str, dict]]:
    """(label, result file's stem, results JSON) of each batch outcome whose
    result can be read, in name order."""
    out = []
    for o in sorted(outcomes, key=lambda o: (o.submission.name, o.submission.key)):
        try:
            data = json.loads(Path(o.result_path).read_text())
        except (OSError, ValueError):
            continue   # a lost result has its error row in grades.csv already
        if isinstance(data, dict):
            out.append((o.submission.label, Path(o.result_path).stem, data))
    return out


def read_results(outcomes) -> list[tuple[str, dict]]:
    """(label, results JSON) of each batch outcome whose result can be read."""
    return [(label, data) for label, _, data in read_outcomes(outcomes)]


def mistakes_of_csv(csv_path: Path) -> Path:
    """``grades-mistakes.csv`` beside ``grades.csv``."""
    csv_path = Path(csv_path)
    return csv_path.with_name(csv_path.stem + "-mistakes.csv")


def mistakes_csv(rows: list[list]) -> str:
    return csv_text(MISTAKES_COLUMNS, [[clean(c, NAME_LIMIT, one_line=True) if i == 2 else c
                                        for i, c in enumerate(r)] for r in rows])


def read_mistakes_csv(text: str) -> list[list]:
    rows = []
    for row in csv.DictReader(io.StringIO(text)):
        row = {k: clean(csv_value(v or "")) for k, v in row.items() if k is not None}
        try:
            count = int(float(row.get("count") or 0))
        except ValueError:
            count = 0
        rows.append([row.get("exercise", ""), row.get("mistake_id", ""), row.get("text", ""),
                     count, row.get("students", "")])
    return rows


def merge_mistakes(parts: list[Path]) -> list[list] | None:
    """The mistakes sheets beside the parts' CSVs joined (None when no part
    has one).  The parts hold disjoint students (``merge_parts`` refuses an
    overlap), so the counts add up."""
    table: dict[tuple[str, str], list] = {}
    found = False
    for path in parts:
        sheet = mistakes_of_csv(path)
        if not sheet.is_file():
            continue
        found = True
        for ex, ident, text, count, students in read_mistakes_csv(
                sheet.read_text(encoding="utf-8", errors="replace")):
            row = table.setdefault((ex, ident), [ex, ident, text, 0, []])
            row[3] += count
            row[4] += [s for s in students.split(STUDENTS_SEP) if s]
    if not found:
        return None
    rows = [[ex, ident, text, n, STUDENTS_SEP.join(sorted(who))]
            for ex, ident, text, n, who in table.values()]
    return sorted(rows, key=lambda r: (-r[3], r[0], r[1]))


def top_lines(rows: list[list], students: int, n: int = 5) -> list[str]:
    """The summary's lines for the ``n`` most common mistakes."""
    if not rows:
        return ["Most common mistakes: none named."]
    lines = [f"Most common mistakes (of {students} submissions):"]
    for ex, ident, text, count, _ in rows[:n]:
        lines.append(f"  {count:>4}  {ex}  {ident}: {text}")
    return lines


def write_mistakes(out: Path, rows: list[list], *, whole_class: bool, students: int) -> list[Path]:
    """``grades-mistakes.csv`` beside ``out`` and, for a whole class (not a
    shard), the five most common at the end of ``grades-summary.txt``."""
    from grader.report import write_private

    sheet = mistakes_of_csv(out)
    write_private(sheet, mistakes_csv(rows))
    written = [sheet]
    summary = Path(out).with_name(Path(out).stem + "-summary.txt")
    if whole_class and summary.is_file():
        text = summary.read_text(encoding="utf-8")
        write_private(summary, text + "\n".join(top_lines(rows, students)) + "\n")
    return written
