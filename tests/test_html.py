"""The class's page and each student's: static, offline, read in a real browser."""
from __future__ import annotations

import json
import shutil
import subprocess

import pytest
from click.testing import CliRunner

from grader import pages as html
from grader.cli import main
from grader.reference.secret.attention import MISTAKES
from grader.report import FAILED, Report, to_gradescope
from grader.report import TestResult as Result
from grader.classroom import pages as class_pages
from grader.classroom.gradebook import Gradebook
from grader.classroom.similarity import Pair
from tests.conftest import copy_solutions

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
HOSTILE = "=<script>alert(1)</script>evil"


def _result(name: str, score: float) -> dict:
    report = Report(name, "hidden", exercises=["ex02_mha"], tests=[
        Result("ex02_mha", "test_attention", "attention is right", 2.0, score,
               FAILED if score < 2 else "passed",
               "" if score == 2 else f"out is wrong.\nThis looks like: {MISTAKES['no_scale']}.")])
    return json.loads(json.dumps(to_gradescope(report)))


def _class(folder):
    """A class of three in a gradebook (ben's tests need a regrade; the
    hostile name's grading the grader could not finish) and its report."""
    ben, evil = _result("ben", 0.0), _result(HOSTILE, 0.0)
    ben["extra_data"]["needs_regrade"] = 1
    evil["extra_data"].update(batch_error="=boom", batch_fault="grader")
    book = Gradebook(folder.parent / "grades.sqlite")
    for name, key, data in (("ann", "ann", _result("ann", 2.0)), ("ben", "ben", ben),
                            (HOSTILE, "evil", evil)):
        book.record_student(name, result_key=key)
        book.record_grading(name, data)
    book.set_pairs([Pair("ex02_mha", "ann", "ben", 0.9, 0.8, [(1, 2)], [(2, 3)],
                         "def f(x):\n    return x\n", "# a\ndef g(y):\n    return y <b>\n")])
    mistakes = [["ex02_mha", "no_scale", MISTAKES["no_scale"], 2, f"ben; {HOSTILE}"]]
    return class_pages.write_class_report(folder, book, book.rows(), mistakes, None)


def test_the_class_page_holds_histogram_tables_and_links(tmp_path):
    index = _class(tmp_path / "report")
    text = index.read_text()
    assert '<svg id="histogram"' in text and 'id="mistakes"' in text
    assert "<code>no_scale</code>" in text and 'href="pair-0.html"' in text
    assert 'href="students/ann.html"' in text and 'href="students/evil.html"' in text
    assert "<script>" not in text and "&lt;script&gt;" in text       # escaped, never run
    regrade = text[text.index('id="regrade"'):text.index("<h2>What the class")]
    assert "ben" in regrade and "boom" in regrade and "ann.html" not in regrade
    students = text[text.index('id="students"'):text.index("<h2>To regrade")]
    assert "<strong>2</strong>" in students and "<strong>needs regrade</strong>" in students
    pair = (tmp_path / "report" / "pair-0.html").read_text()
    assert "<mark>def f(x):</mark>" in pair and "&lt;b&gt;" in pair and "<mark># a" not in pair
    student = (tmp_path / "report" / "students" / "ben.html").read_text()
    assert "This looks like: the scores were not scaled" in student
    for page in (tmp_path / "report").rglob("*.html"):
        assert "http://" not in page.read_text() and "https://" not in page.read_text()


def test_grade_format_html_writes_one_students_page(tmp_path):
    sub = copy_solutions(tmp_path / "alice", ["ex01_by_hand"])
    out = tmp_path / "alice.html"
    result = CliRunner().invoke(main, ["grade", str(sub), "-e", "A", "--format", "html",
                                       "--out", str(out)])
    assert result.exit_code == 0, result.output
    text = out.read_text()
    assert text.startswith("<!DOCTYPE html>") and "<h1>alice</h1>" in text
    assert "ex01_by_hand" in text and "Content-Security-Policy" in text


def _chromium(url: str, tmp_path, *extra) -> subprocess.CompletedProcess:
    return subprocess.run([CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu",
                           "--enable-logging=stderr", "--v=0",
                           f"--user-data-dir={tmp_path / 'profile'}", *extra, url],
                          capture_output=True, text=True, timeout=120)


def _console(run: subprocess.CompletedProcess) -> list[str]:
    return [line for line in run.stderr.splitlines() if ":CONSOLE" in line]


@pytest.mark.skipif(CHROMIUM is None, reason="needs Chromium (apt-get install chromium)")
def test_a_real_browser_reads_the_pages_without_console_errors(tmp_path):
    from matplotlib.image import imread

    import numpy as np

    # The check sees a console error where there is one (a blocked request).
    bad = tmp_path / "bad.html"
    bad.write_text(html.page("bad", '<img src="http://example.com/x.png">'))
    assert _console(_chromium(bad.as_uri(), tmp_path, "--dump-dom"))

    index = _class(tmp_path / "report")
    shot = tmp_path / "class.png"
    run = _chromium(index.as_uri(), tmp_path, f"--screenshot={shot}", "--window-size=1200,1400")
    assert run.returncode == 0 and _console(run) == [], run.stderr[-2000:]
    pixels = (imread(shot)[..., :3] * 255).round().astype(int)
    colours = {tuple(p) for p in pixels.reshape(-1, 3)[::7]}
    assert (0x44, 0x77, 0xaa) in colours           # the histogram's bars
    assert (0xee, 0xee, 0xee) in colours           # the tables' header cells
    dom = _chromium(index.as_uri(), tmp_path, "--dump-dom")
    assert dom.stdout.count("<rect") == 10 and 'id="mistakes"' in dom.stdout
    for name in ("students/ben.html", "pair-0.html"):
        run = _chromium((tmp_path / "report" / name).as_uri(), tmp_path, "--dump-dom")
        assert _console(run) == [], run.stderr[-2000:]
    assert "This looks like: the scores were not scaled" in \
        _chromium((tmp_path / "report" / "students" / "ben.html").as_uri(), tmp_path,
                  "--dump-dom").stdout


@pytest.mark.slow
def test_a_batch_students_page_shows_the_ex04_plot(tmp_path):
    cls = tmp_path / "class"
    copy_solutions(cls / "ann", ["ex04_quadratic"])
    out = tmp_path / "out" / "grades.csv"
    result = CliRunner().invoke(main, ["batch", str(cls), "--out", str(out), "-e", "D"])
    assert result.exit_code == 0, result.output
    made = out.parent / "results" / "ann.artifacts" / "ex04_scaling.png"
    assert made.read_bytes().startswith(b"\x89PNG")          # beside its result, grader-owned
    page = (out.parent / "report" / "students" / "ann.html").read_text()
    # linked, not carried: the page's own link leads to the grading's picture
    assert '<img alt="ex04_scaling.png" src="../../results/ann.artifacts/ex04_scaling.png">' \
        in page and "img-src 'self' data:" in page
    assert not list(cls.rglob("*.png"))                       # nothing in the submission


@pytest.mark.slow
def test_students_named_index_and_pair_0_overwrite_no_class_page(tmp_path):
    """The red team's batch-inject: students named index and pair-0 (alike, so
    pair-0.html exists) each have their own page, and the class's index and
    pair page are intact."""
    from tests.test_batch import student_links
    cls = tmp_path / "class"
    for name in ("index", "pair-0"):
        copy_solutions(cls / name, ["ex04_quadratic"])
    out = tmp_path / "out" / "grades.csv"
    result = CliRunner().invoke(main, ["batch", str(cls), "--out", str(out), "-e", "D",
                                       "-j", "2"])
    assert result.exit_code == 0, result.output
    report = out.parent / "report"
    index = (report / "index.html").read_text()
    assert "<h1>Class report</h1>" in index and "<p>2 submissions.</p>" in index
    pages = student_links(report)
    assert set(pages) == {"index", "pair-0"}
    for name, page in pages.items():
        assert f"<h1>{name}</h1>" in page and '<img alt="ex04_scaling.png"' in page
    assert 'href="pair-0.html"' in index
    pair = (report / "pair-0.html").read_text()
    assert "<h1>ex04_quadratic: index and pair-0</h1>" in pair and "<mark>" in pair
