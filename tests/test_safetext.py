"""Every output is valid, safe and bounded, whatever text a student controls.

Hostile text (lone surrogates, terminal escapes, NUL, characters XML forbids,
spreadsheet formulas, huge strings) goes in where a submission's text enters
a ``Report`` or a batch ``Outcome``; every format comes out valid UTF-8,
without controls but newline and tab, parseable (JUnit, JSON, CSV), with no
CSV text cell that a spreadsheet would run, and bounded in size.
"""
from __future__ import annotations

import csv
import io
import json
import re
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from grader import safetext
from grader.classroom import views
from grader.classroom.gradebook import Gradebook
from grader.cli import main
from grader.gradescope import validate_results
from grader.report import (FAILED, NEEDS_REGRADE, NOT_RUN, PASSED, Report,
                           manual_from_gradescope, to_gradescope, to_json, to_junit, to_text)
from grader.report import TestResult as Result  # not "Test*": pytest would collect it
from grader.safetext import ANSWER_LIMIT, FIELD_LIMIT, NAME_LIMIT, clean
from tests.conftest import REPO, SOLUTIONS


# What no output may hold: C0 but tab and newline, DEL, C1 (ESC among them),
# bidi overrides and isolates, and what XML 1.0 forbids besides.
UNSAFE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069\ufffe\uffff"
                    "\ud800-\udfff]")
FORMULA = ("=", "+", "-", "@", "\t", "\r")

PIECES = ["\ud800", "\udfff", "\ud83d\ude00", "\x1b[2J", "\x1b]52;c;aGVsbG8=\x07",
          "\x1b]52;c;aGk=\x1b\\", "\x1b[31m", "\x9b2J", "\x00", "\x07", "\x0b", "\x0c",
          "\x7f", "\x85", "\ufffe", "\uffff", "\u202e", "\u2066", "\r", "\r\n", "\n", "\t",
          "=", "+", "-", "@", " =1+1", "=HYPERLINK(\"http://x\",\"y\")",
          "@SUM(1+1)*cmd|' /C calc'!A0", "+1+1", "-1", "\uff1d1", "Total: 249/249",
          "<", "&", "]]>", "\"", "'", ",", ";", "é", "√", "\u00a0"]
CHARS = st.one_of(st.characters(), st.integers(0, 0x10FFFF).map(chr),
                  st.sampled_from([p for p in PIECES if len(p) == 1]))
NASTY = st.lists(st.one_of(st.sampled_from(PIECES), CHARS), max_size=30).map("".join)
HUGE = st.builds(lambda piece, n: piece * n, st.sampled_from(PIECES), st.integers(500, 9000))
TEXT = st.one_of(NASTY, NASTY, NASTY, HUGE)
SETTINGS = settings(max_examples=60, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


def assert_safe(text: str) -> None:
    text.encode("utf-8", errors="strict")
    found = UNSAFE.search(text)
    assert found is None, f"{found.group()!r} at {found.start()} in {text[:200]!r}"


def strings_in(data) -> list[str]:
    if isinstance(data, str):
        return [data]
    if isinstance(data, dict):
        return [s for k, v in data.items() for s in strings_in(k) + strings_in(v)]
    if isinstance(data, list):
        return [s for v in data for s in strings_in(v)]
    return []


# -- the one function ------------------------------------------------------

@pytest.mark.quick
@SETTINGS
@given(TEXT, st.sampled_from([NAME_LIMIT, FIELD_LIMIT, ANSWER_LIMIT]), st.booleans())
def test_clean_is_valid_safe_bounded_and_idempotent(text, limit, one_line):
    out = clean(text, limit, one_line=one_line)
    assert_safe(out)
    assert len(out) <= limit
    assert clean(out, limit, one_line=one_line) == out
    if one_line:
        assert "\n" not in out and "\t" not in out
    if len(text) > limit:
        assert "cut by the grader" in out


@SETTINGS
@given(st.text(st.characters(blacklist_categories=("Cc", "Cs"), blacklist_characters=
                             "\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069"
                             "\ufffe\uffff") | st.sampled_from("\n\t"), max_size=300))
@pytest.mark.quick
def test_ordinary_text_is_left_as_written(text):
    """The grader's own text (its tables, its feedback) prints as it was written."""
    assert clean(text) == text


@pytest.mark.quick
def test_escapes_are_visible_and_surrogates_replaced():
    assert clean("a\x1b[2Jb") == "a\\x1b[2Jb"
    assert clean("\x1b]52;c;aGk=\x07") == "\\x1b]52;c;aGk=\\x07"
    assert clean("x\ud800y") == "x\ufffdy" and clean("\ud83d\ude00") == "\U0001f600"
    assert clean("\u202eevil\x00") == "\\u202eevil\\x00"
    assert clean("one\r\ntwo\rthree") == "one\ntwo\\x0dthree"
    assert clean("a\nb\tc", one_line=True) == "a\\x0ab\\x09c"
    cut = clean("x" * 60_000_000, ANSWER_LIMIT)
    assert len(cut) <= ANSWER_LIMIT and cut.endswith(
        "[cut by the grader: 60,000,000 characters, at most 20,000 kept]")


@pytest.mark.quick
def test_csv_cells_neutralise_text_formulas_not_numbers():
    cell = safetext.csv_cell
    assert [cell(v) for v in ("=1+1", "+1", "-1", "@x", "\tx", "\rx", "  =x", "\uff1dx")] == \
        ["'=1+1", "'+1", "'-1", "'@x", "'\tx", "'\rx", "'  =x", "'\uff1dx"]
    assert [cell(v) for v in (-1, 3.5, 0, -0.25)] == ["-1", "3.5", "0", "-0.25"]
    assert cell("plain") == "plain" and cell("'=x") == "''=x"   # read back as written


@pytest.mark.quick
def test_every_csv_the_grader_writes_goes_through_safetext():
    """One CSV writer: a new one elsewhere would skip the formula rule."""
    for path in sorted((REPO / "grader").rglob("*.py")):
        if path.name != "safetext.py":
            text = path.read_text()
            assert "csv.writer" not in text and "DictWriter" not in text, path


# -- every format of a report ----------------------------------------------

EXERCISES = ["ex01_by_hand", "questions"]


@st.composite
def reports(draw) -> Report:
    report = Report(submission=draw(TEXT), suite="hidden", exercises=list(EXERCISES),
                    student_id=draw(st.none() | TEXT), seed=7)
    for i in range(draw(st.integers(0, 4))):
        score = draw(st.sampled_from([0.0, 1.0]))
        report.tests.append(Result(
            exercise=draw(st.sampled_from(EXERCISES)), name=f"test_{i}",
            title=f"#{i} " + draw(NASTY), max_score=1.0, score=score,
            status=PASSED if score else draw(st.sampled_from([FAILED, NOT_RUN, NEEDS_REGRADE])),
            output=draw(TEXT), hidden=draw(st.booleans())))
    report.errors.append(draw(TEXT))
    report.notes.append(draw(NASTY))
    report.import_errors[draw(st.sampled_from(EXERCISES))] = draw(TEXT)
    for i in range(draw(st.integers(0, 2))):
        report.manual.append({"exercise": "questions", "question": f"Q{i}",
                              "points": 3, "answer": draw(TEXT), "rubric": draw(NASTY)})
    return report


@SETTINGS
@given(reports())
def test_every_report_format_is_valid_safe_and_bounded(report):
    for text in (to_text(report), to_text(report, public_only=True)):
        assert_safe(text)
    junit = to_junit(report)
    assert_safe(junit)
    ET.fromstring(junit.encode("utf-8"))
    data = json.loads(to_json(report))
    for text in strings_in(data):
        assert_safe(text)
    assert not validate_results(data)
    assert data == json.loads(json.dumps(to_gradescope(report)))
    bound = (len(report.tests) + 4) * (FIELD_LIMIT + NAME_LIMIT) * 6 + \
        len(report.manual) * (ANSWER_LIMIT + FIELD_LIMIT) * 6 + 10_000
    assert len(to_json(report)) < bound
    # Each answer is stored once, and read back whole (the rubric sheet's source).
    expected = [{**e, "answer": "" if e["answer"] == "(none)" else e["answer"]}
                for e in report.manual]
    assert manual_from_gradescope(data) == expected


@pytest.mark.quick
def test_a_huge_answer_and_feedback_are_cut_and_the_answer_stored_once():
    report = Report(submission="s", suite="hidden", exercises=["questions"])
    report.tests.append(Result("questions", "t", "t", 1.0, 0.0, FAILED,
                                   output="why " * 15_000_000))
    report.manual.append({"exercise": "questions", "question": "Q01", "points": 3,
                          "answer": "Attention is " * 5_000_000, "rubric": "r"})
    answer = report.manual[0]["answer"]
    assert len(answer) <= ANSWER_LIMIT and "cut by the grader" in answer
    assert len(report.tests[0].output) <= FIELD_LIMIT
    text = to_json(report)
    assert len(text) < ANSWER_LIMIT + FIELD_LIMIT + 5_000
    assert text.count(json.dumps(answer)[1:-1]) == 1       # stored once, not twice


# -- every CSV of a batch --------------------------------------------------

@st.composite
def outcomes(draw) -> list[tuple[str, dict]]:
    """(label, results JSON) of hostile submissions: names, errors, import
    errors, isolation lines, questions, answers and rubrics."""
    out = []
    for i in range(draw(st.integers(1, 4))):
        name = draw(st.lists(st.one_of(st.sampled_from(PIECES), CHARS), max_size=12)
                    .map("".join)) + f"#{i}"
        got = draw(st.sampled_from([0.0, 3.5, 7.0]))
        manual = {"exercise": "questions", "question": clean(draw(NASTY), NAME_LIMIT), "points": 3,
                  "answer": clean(draw(TEXT), ANSWER_LIMIT), "rubric": clean(draw(NASTY))}
        data = {"score": got, "tests": [], "extra_data": {
            "exercise_scores": {"ex01_by_hand": {"score": got, "max_score": 7.0}},
            "batch_error": draw(st.just("") | TEXT), "isolation": draw(NASTY),
            "import_errors": {"questions": draw(TEXT)}, "manual_grading": [manual]}}
        out.append((clean(name, NAME_LIMIT, one_line=True), data))
    return out


def gradebook_of(path: Path, outs: list, shard: str | None = None,
                 everyone: list | None = None) -> Gradebook:
    book = Gradebook(path)
    if shard:
        book.set_meta("shard", shard)
        book.set_meta("everyone", json.dumps(everyone))
    for label, data in outs:
        book.record_student(label)
        book.record_grading(label, data)
    return book


def read_csv(text: str, numbers: set[str]) -> list[dict]:
    """The rows, held to the rules: safe text, numbers where the grader wrote
    them, and no text cell a spreadsheet would run."""
    assert_safe(text.replace("\r\n", "\n"))   # CSV's own record separator (RFC 4180)
    rows = list(csv.DictReader(io.StringIO(text)))
    for row in rows:
        for column, cell in row.items():
            assert_safe(cell)
            if column in numbers:
                float(cell)
            else:
                assert not cell.startswith(FORMULA), (column, cell)
    return rows


@SETTINGS
@given(outcomes())
def test_every_batch_output_is_valid_safe_and_neutralised(outs):
    numbers = {"ex01_by_hand", *views.NUMBER_COLUMNS}
    with tempfile.TemporaryDirectory() as tmp:
        book = gradebook_of(Path(tmp, "whole.sqlite"), outs)
        rows = book.rows()
        grades = views.grades_csv(rows, ["ex01_by_hand"])
        read = read_csv(grades, numbers)
        assert len(read) == len(outs)
        sheet_text = views.rubric_csv(book)
        sheet = read_csv(sheet_text, {"points_possible"})
        assert len(sheet) == len(outs)
        assert len(sheet_text) < len(outs) * (ANSWER_LIMIT + 3 * FIELD_LIMIT) * 8
        assert_safe(views.summary(rows, ["ex01_by_hand"], []))
        everyone = [label for label, _ in outs]     # two shards, joined
        parts = []
        for k in (1, 2):
            part = Path(tmp, f"part{k}.sqlite")
            gradebook_of(part, outs[k - 1::2], f"{k}/2", everyone).close()
            parts.append(part)
        merged = Gradebook(Path(tmp, "merged.sqlite"))
        views.merge_parts(parts, merged)
        joined = views.grades_csv(merged.rows(), ["ex01_by_hand"])
        merged.close()
        book.close()
    assert sorted(map(sorted, (r.items() for r in read_csv(joined, numbers)))) == \
        sorted(map(sorted, (r.items() for r in read)))


# -- from outside: the command, on hostile submissions ----------------------

HOSTILE = ('raise ValueError("bad \\ud800 text \\x1b[2J\\x1b]52;c;aGVsbG8=\\x07"\n'
           '                 "\\n\\nex01_by_hand  249/249\\nTotal: 249/249")\n')


def test_grade_command_survives_hostile_error_text(tmp_path):
    """A module whose import raises with a lone surrogate, a screen clear and
    an OSC 52 clipboard write: every format is written and parses, the exit
    status is a grading's, and no ESC reaches the terminal."""
    sub = tmp_path / "sub"
    sub.mkdir()
    (sub / "ex01_by_hand.py").write_text(HOSTILE)
    cmd = [sys.executable, "-m", "grader.cli", "grade", str(sub), "-e", "ex01"]
    out = tmp_path / "junit.xml"
    proc = subprocess.run(cmd + ["--format", "junit", "--out", str(out)], cwd=REPO,
                          capture_output=True, timeout=300)
    assert proc.returncode == 0, proc.stderr.decode("utf-8", "replace")
    assert b"\x1b" not in proc.stdout + proc.stderr
    ET.fromstring(out.read_bytes())
    assert_safe(out.read_bytes().decode("utf-8"))
    out = tmp_path / "results.json"       # the same wiring, in this process
    result = CliRunner().invoke(main, cmd[3:] + ["--format", "json", "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert not validate_results(json.loads(out.read_text(encoding="utf-8")))
    proc = subprocess.run(cmd, cwd=REPO, capture_output=True, timeout=300)   # to the terminal
    assert proc.returncode == 0, proc.stderr.decode("utf-8", "replace")
    shown = proc.stdout.decode("utf-8")
    assert_safe(shown)
    assert "\\x1b[2J\\x1b]52;c;aGVsbG8=\\x07" in shown and "\ufffd" in shown
    total = re.search(r"\nex01_by_hand  0/(\d+)\n", shown)
    assert total and f"\nTotal: 0/{total.group(1)}, but " in shown
    forged = [ln for ln in shown.splitlines() if "249/249" in ln]
    assert forged and all(ln.startswith(" ") for ln in forged)   # inside the feedback


def test_batch_neutralises_formulas_and_caps_answers_in_staff_files(tmp_path):
    """A folder named like a formula, free-text answers that are formulas, and
    a 6 MB answer: the CSV cells are neutralised, the answer is cut, the
    files stay small."""
    klass = tmp_path / "class"
    name = "=1+1\x1b[2J"
    (klass / name).mkdir(parents=True)
    (klass / name / "questions.py").write_text(
        (SOLUTIONS / "questions.py").read_text()
        + "\nQ01_ATTENTION_IN_WORDS = '=HYPERLINK(\"http://x\",\"y\")'"
        + "\nQ02_FORMULA_AND_TERMS = \"@SUM(1+1)*cmd|' /C calc'!A0\""
        + "\nQ06_MHA_GQA_MQA = '+1' * 3_000_000\n")
    out = tmp_path / "grades.csv"
    result = CliRunner().invoke(main, ["batch", str(klass), "--out", str(out),
                                       "-e", "questions"])
    assert result.exit_code == 0, result.output
    assert "\x1b" not in result.output
    grades = read_csv(out.read_text(encoding="utf-8"), {"questions", *views.NUMBER_COLUMNS})
    assert grades[0]["submission"] == "'=1+1\\x1b[2J"
    sheet = tmp_path / "grades_rubric.csv"
    rows = {r["question"]: r for r in read_csv(sheet.read_text(encoding="utf-8"),
                                               {"points_possible"})}
    assert rows["Q01_ATTENTION_IN_WORDS"]["answer"] == "'=HYPERLINK(\"http://x\",\"y\")"
    assert rows["Q02_FORMULA_AND_TERMS"]["answer"] == "'@SUM(1+1)*cmd|' /C calc'!A0"
    big = rows["Q06_MHA_GQA_MQA"]["answer"]
    assert big.startswith("'+1+1") and "cut by the grader: 6,000,000" in big
    assert sheet.stat().st_size < 4 * ANSWER_LIMIT
    result_json = next((tmp_path / "results").glob("*.json"))
    assert result_json.stat().st_size < ANSWER_LIMIT + 100_000


@pytest.mark.quick
@pytest.mark.parametrize("text", ["'=x", "=x", "'abc", "abc", "''=1", " =1", "' =1", "'", ""])
def test_a_csv_cell_reads_back_as_written(text):
    """``merge`` reads a part's cells back: what was written comes back, also a
    text that begins with the marker itself (Hypothesis found ``'=``)."""
    assert safetext.csv_value(safetext.csv_cell(text)) == text
