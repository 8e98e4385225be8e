"""The staff's grading page (``attn-grade staff``), driven as staff use it:
headless Chromium over the DevTools Protocol (``tests/cdp.py``), keys
pressed one by one, then the gradebook and the class's export read back.

A class is made in the gradebook directly (a grading's result with its
free-text answers, as batch records it) so that no submission is graded
here: the page is what is tested, not the suites.
"""
from __future__ import annotations

import ast
import csv
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from click.testing import CliRunner

from grader.classroom import views
from grader.classroom.gradebook import Gradebook, GradebookError, StaleMark
from grader.rubric_line import parse_rubric, rubric_text
from grader.classroom.staff import CSP, Session, StaffServer, question_text
from grader.cli import main
from grader.paths import HIDDEN_SUITES_DIR
from grader.reference.secret import questions as qref
from tests.conftest import REPO

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser") or \
    shutil.which("google-chrome")
Q = "Q01_ATTENTION_IN_WORDS"
RUBRIC = rubric_text(qref.key(Q)["rubric"])     # three items, 1 point each


def make_class(folder: Path, answers: dict[str, str], auto: float = 5.0) -> Path:
    """A gradebook of students who each got ``auto`` grader's points and
    answered Q01 with the given text; returns its path."""
    path = folder / "grades.sqlite"
    with Gradebook(path) as book:
        for name, text in answers.items():
            book.record_student(name, result_key=name)
            book.record_grading(name, {"score": auto, "tests": [], "extra_data": {
                "exercise_scores": {"questions": {"score": auto, "max_score": 10.0}},
                "manual_grading": [{"exercise": "questions", "question": Q, "points": 3,
                                    "answer": text, "rubric": RUBRIC}]}})
    return path


class Served:
    """A grading page served from a thread, on its own gradebook connection."""

    def __init__(self, path: Path, who: str):
        self.book = Gradebook(path)
        self.session = Session(self.book, path.with_suffix(".csv"), who)
        self.server = StaffServer(self.session)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()
        self.url = self.server.url

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.book.close()


@pytest.fixture
def serve():
    started = []

    def start(path: Path, who: str = "ta1") -> Served:
        started.append(Served(path, who))
        return started[-1]

    yield start
    for served in started:
        served.close()


@pytest.fixture
def browser(tmp_path):
    """Headless Chromium; absent, the test is skipped, except in CI where it must run."""
    from tests.cdp import Browser

    if CHROMIUM is None:
        if os.environ.get("CI"):
            pytest.fail("CI must have Chromium (.ci/run installs it)")
        pytest.skip("needs Chromium (apt-get install chromium; .ci/run installs it)")
    with Browser(CHROMIUM, tmp_path) as b:
        yield b


def open_question(browser, url: str):
    tab = browser.tab(url)
    tab.wait_for("document.querySelectorAll('#questions button').length > 0")
    tab.key("q")                                    # the question list, by keyboard
    tab.wait_for("document.activeElement.dataset.q === 'Q01_ATTENTION_IN_WORDS'")
    tab.key("Enter")
    tab.wait_for("!document.getElementById('grading').hidden")
    return tab


def text_of(tab, ident: str) -> str:
    return tab.eval(f"document.getElementById({ident!r}).textContent")


def marks(path: Path) -> dict[str, dict]:
    with Gradebook(path) as book:
        return {s: book.staff_mark(s, Q) for s in book.submissions()}


# -- the rubric ---------------------------------------------------------------

def test_every_free_text_rubric_is_items_whose_points_make_the_question_s():
    """The rubric lives with the questions: each item has points, their sum
    is the staff's points, and the gradebook reads the items back whole."""
    rubrics = [(qref.key(n)["rubric"], qref.key(n)["staff_points"])
               for n, form in qref.FORMS.items() if form["kind"] == qref.TEXT]
    rubrics.append((suite_constant("SLOPE_RUBRIC"), suite_constant("SLOPE_STAFF_POINTS")))
    assert len(rubrics) == 5
    for items, most in rubrics:
        parsed = parse_rubric(rubric_text(items), most)
        assert [(i["points"], i["text"]) for i in parsed] == [(float(p), t) for p, t in items]
        assert sum(p for p, _ in items) == most


def suite_constant(name: str):
    """A constant of ex04's hidden suite, read from its source (a suite is
    pytest's to import, inside a grading, not a test's)."""
    tree = ast.parse((HIDDEN_SUITES_DIR / "test_ex04_quadratic_hidden.py").read_text())
    for node in tree.body:
        if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", "") == name:
            return ast.literal_eval(node.value)
    raise AssertionError(f"the ex04 hidden suite has no {name}")


def test_the_page_shows_what_each_free_text_question_asked():
    assert question_text("ex04_quadratic", "WHERE_THE_SLOPE_COMES_FROM").startswith(
        "6. ``WHERE_THE_SLOPE_COMES_FROM``: in a few sentences")
    assert question_text("ex04_quadratic", "WHERE_THE_SLOPE_COMES_FROM").endswith(
        "(no autograder points).")
    assert question_text("questions", "Q12_MLA").startswith("Q12 (text, staff-graded).")
    assert question_text("../grader/cli", "main") == ""


def test_a_rubric_without_points_is_split_evenly():
    """A grading of an earlier version carried prose: its parts share the points."""
    assert [i["points"] for i in parse_rubric("a; b; c", 3)] == [1.0, 1.0, 1.0]


# -- the gradebook under the page -----------------------------------------------

def test_a_stale_save_is_refused_and_new_item_points_rescore_every_answer(tmp_path):
    path = make_class(tmp_path, {"ann": "one", "bob": "two"})
    with Gradebook(path) as a, Gradebook(path) as b:
        a.mark_answers(["ann"], Q, [1, 3], "good", "ta1", {"ann": 0})
        with pytest.raises(StaleMark, match="changed by ta1 .* replace it with yours"):
            b.mark_answers(["ann"], Q, [2], "", "ta2", {"ann": 0})
        assert b.staff_mark("ann", Q)["items"] == [1, 3]          # nothing overwritten
        b.mark_answers(["ann"], Q, [2], "", "ta2", {"ann": 0}, replace=True)
        a.mark_answers(["bob"], Q, [2, 3], "", "ta1", {})
        assert a.set_rubric_points(Q, 2, 0.5, "ta1") == 2
        assert a.staff_mark("ann", Q)["points"] == 0.5
        assert a.staff_mark("bob", Q)["points"] == 1.5
        assert a.staff_mark("bob", Q)["version"] == 2
        whats = [h["what"] for h in a.history()]
        assert whats.count("staff marks") == 3 and whats.count("staff points rescored") == 2
        a.set_staff_points([{"submission": "bob", "question": Q, "points": 3}], "sheet")
        assert a.staff_mark("bob", Q)["items"] == [] and a.staff_mark("bob", Q)["version"] == 3
        with pytest.raises(GradebookError, match="no rubric item 9"):
            a.mark_answers(["ann"], Q, [9], "", "ta1", {}, replace=True)


# -- the server's doors ---------------------------------------------------------

def request(url: str, data: bytes | None = None, headers: dict | None = None):
    req = urllib.request.Request(url, data=data, headers=headers or {})
    try:
        with urllib.request.urlopen(req, timeout=30) as res:
            return res.status, dict(res.headers), res.read()
    except urllib.error.HTTPError as exc:
        return exc.code, dict(exc.headers), exc.read()


def test_every_request_without_the_token_or_from_elsewhere_is_refused(tmp_path, serve):
    served = serve(make_class(tmp_path, {"ann": "one"}))
    base = served.url.rsplit("/", 2)[0]
    status, headers, body = request(served.url)
    assert status == 200 and headers["Content-Security-Policy"] == CSP
    assert "script-src 'self'" in CSP and "unsafe-inline" not in CSP
    assert headers["X-Content-Type-Options"] == "nosniff"
    assert b"<script src=\"staff.js\"" in body and b"<script>" not in body
    assert served.server.server_address[0] == "127.0.0.1"
    for path in ("/", "/api/questions", "/wrong-token/", "/wrong-token/api/questions"):
        assert request(base + path)[0] == 403, path
    good = {"Content-Type": "application/json", "Origin": base}
    mark = json.dumps({"question": Q, "submissions": ["ann"], "items": [1], "comment": "",
                       "seen": {"ann": 0}}).encode()
    assert request(served.url + "api/mark", mark, {**good, "Origin": "http://evil.test"})[0] == 403
    assert request(served.url + "api/mark", mark, {"Content-Type": "application/json"})[0] == 403
    assert request(served.url + "api/mark", mark,
                   {**good, "Content-Type": "text/plain"})[0] == 403
    assert request(served.url, headers={"Host": "attacker.test"})[0] == 403   # DNS rebinding
    assert marks(tmp_path / "grades.sqlite")["ann"]["points"] is None
    status, _, body = request(served.url + "api/mark", mark, good)
    assert status == 200 and json.loads(body) == {"versions": {"ann": 1}}
    status, _, body = request(served.url + "api/mark", mark, good)        # seen 0: stale now
    assert status == 200 and "replace it with yours?" in json.loads(body)["stale"]
    assert marks(tmp_path / "grades.sqlite")["ann"]["version"] == 1
    item = json.dumps({"question": Q, "position": 1, "points": 0.5}).encode()
    status, _, body = request(served.url + "api/rubric", item, good)   # the page's points box
    assert status == 200 and json.loads(body) == {"rescored": 1}
    assert marks(tmp_path / "grades.sqlite")["ann"]["points"] == 0.5
    bad = json.dumps({"question": Q, "position": 1, "points": "NaN"}).encode()
    status, _, body = request(served.url + "api/rubric", bad, good)
    assert status == 400 and json.loads(body)["error"].endswith("points from 0 up.")


def test_the_command_prints_a_token_url_and_ctrl_c_stops_it_writing_the_files(tmp_path):
    make_class(tmp_path, {"ann": "one"})
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.Popen([sys.executable, "-m", "grader.cli", "staff",
                             str(tmp_path / "grades.csv"), "--grader", "ta1"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        line = proc.stdout.readline()
        url = line.split(": ", 1)[1].strip()
        assert url.startswith("http://127.0.0.1:") and len(url.rsplit("/", 2)[1]) >= 24
        assert request(url)[0] == 200
        assert request(url.rsplit("/", 2)[0] + "/")[0] == 403
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, err
    assert "stopped; wrote" in out and (tmp_path / "grades.csv").is_file()
    result = CliRunner().invoke(main, ["staff", str(tmp_path / "none.sqlite")])
    assert result.exit_code == 2 and "grade the class with `attn-grade batch` first" in \
        result.output


# -- in a browser ---------------------------------------------------------------

def test_three_students_graded_by_keys_reach_the_gradebook_and_the_export(
        tmp_path, serve, browser):
    path = make_class(tmp_path, {"ann": "Tokens ask and answer.", "bob": "Queries meet keys.",
                                 "cy": "A weighted blend of values."})
    tab = open_question(browser, serve(path).url)
    assert "Explain what attention does" in text_of(tab, "qtext")
    assert [b for b in tab.eval("[...document.querySelectorAll('#rubric button')]"
                                ".map(b => b.textContent)")][0].startswith("1. each token")
    assert tab.eval("document.getElementById('identity').hidden")     # anonymous by default
    shown = [text_of(tab, "answer")]
    for keys in (["1", "2"], ["n", "3", "c"], ["n", "0"]):
        for key in keys:
            tab.key(key)
        if keys[-1] == "c":                         # a comment, then Enter saves it
            tab.wait_for("document.activeElement.id === 'comment'")
            tab.type("the blend, well said")
            tab.key("Enter")
        tab.eval("queue")
        shown.append(text_of(tab, "answer"))
    tab.key("n")
    tab.eval("queue")
    assert "every answer of Q01_ATTENTION_IN_WORDS is graded" in text_of(tab, "status")
    assert "3/3 answers graded" in tab.eval("document.querySelector('.progress').textContent")
    by_answer = {m["answer"]: m for m in _questions(path)}
    assert shown[0] == shown[1] and len(set(shown)) == 3      # n moved on, twice
    assert [by_answer[a]["points"] for a in shown[1:]] == [2.0, 1.0, 0.0]
    got = marks(path)
    assert sorted(m["items"] for m in got.values()) == [[], [1, 2], [3]]
    assert {m["grader"] for m in got.values()} == {"ta1"}
    assert [m["comment"] for m in got.values() if m["items"] == [3]] == ["the blend, well said"]
    tab.key("i")
    tab.eval("queue")
    assert not tab.eval("document.getElementById('identity').hidden")
    tab.key("w")                                    # the class's files, from the page
    tab.wait_for("document.getElementById('status').textContent.startsWith('wrote')")
    export = tmp_path / "grades-export.csv"
    result = CliRunner().invoke(main, ["export", str(tmp_path / "grades.csv"),
                                       "--out", str(export)])
    assert result.exit_code == 0, result.output
    final = {r["submission"]: float(r["final_total"]) for r in csv.DictReader(export.open())}
    staff = {s: m["points"] for s, m in got.items()}
    assert final == {s: 5.0 + staff[s] for s in staff} and sorted(staff.values()) == [0, 1, 2]
    page = (tmp_path / "report" / "students").glob("*.html")
    assert any("the blend, well said" in p.read_text() for p in page)  # item 4: the comment
    assert tab.errors() == []


def _questions(path: Path) -> list[dict]:
    with Gradebook(path) as book:
        return book.questions()


def test_one_answer_text_from_several_students_is_graded_once(tmp_path, serve, browser):
    path = make_class(tmp_path, {"ann": "Same words.", "bob": "Same words.", "cy": "Other."})
    tab = open_question(browser, serve(path).url)
    assert tab.eval("state.q.groups.length") == 2
    tab.eval("state.at = state.q.groups.findIndex(g => g.members.length === 2); showGroup()")
    assert "the same text from 2 students" in text_of(tab, "place")
    tab.key("2")
    tab.eval("queue")
    got = marks(path)
    assert got["ann"]["points"] == got["bob"]["points"] == 1.0 and got["cy"]["points"] is None
    assert tab.errors() == []


def test_two_graders_on_one_answer_the_second_is_asked_before_replacing(
        tmp_path, serve, browser):
    path = make_class(tmp_path, {"ann": "Tokens ask and answer."})
    first = open_question(browser, serve(path, "ta1").url)
    second = open_question(browser, serve(path, "ta2").url)
    first.key("1")
    first.eval("queue")
    second.key("2")
    second.eval("queue")
    assert not second.eval("document.getElementById('conflict').hidden")
    assert "changed by ta1" in text_of(second, "conflict-text")
    assert second.eval("document.activeElement.id") == "replace"
    assert marks(path)["ann"]["items"] == [1]            # not replaced without asking
    second.key("r")
    second.eval("queue")
    assert marks(path)["ann"]["items"] == [2] and marks(path)["ann"]["grader"] == "ta2"
    first.key("3")                                        # ta1's page is stale now: asked too
    first.eval("queue")
    assert "changed by ta2" in text_of(first, "conflict-text")
    first.key("k")                                        # keep theirs: the page reloads it
    first.eval("queue")
    assert marks(path)["ann"]["items"] == [2]
    assert first.eval("state.q.groups[0].items") == [2]
    with Gradebook(path) as book:
        history = [h for h in book.history() if h["what"] == "staff marks"]
    assert [(h["who"], h["items"]) for h in history] == [("ta1", [1]), ("ta2", [2])]
    assert history[1]["replaced"]["items"] == [1]
    assert first.errors() == [] and second.errors() == []


HOSTILE = ("<script>window.pwned = 1</script><img src=x onerror=\"window.pwned = 2\">"
           "</pre><b>bold</b>\x1b[31m\x00\u202e" + "A" * 30_000)


def test_a_hostile_answer_stays_text(tmp_path, serve, browser):
    path = make_class(tmp_path, {"mallory": HOSTILE})
    tab = open_question(browser, serve(path).url)
    shown = text_of(tab, "answer")
    assert shown.startswith("<script>window.pwned = 1</script><img src=x")
    assert "\x00" not in shown and "\x1b" not in shown
    assert tab.eval("document.querySelectorAll('#answer *').length") == 0
    assert tab.eval("document.querySelectorAll('script').length") == 1       # staff.js only
    assert tab.eval("window.pwned === undefined")
    tab.key("1")
    tab.eval("queue")
    assert marks(path)["mallory"]["points"] == 1.0
    assert tab.errors() == []


def test_the_page_at_1280x800_and_thirty_answers_by_keyboard(tmp_path, serve, browser):
    """Every control of a grading fits 1280x800 without scrolling the page,
    and thirty answers are graded by keys alone (the time is printed: a
    figure for the report, never an assertion)."""
    path = make_class(tmp_path, {f"s{i:02d}": f"Answer number {i}: tokens blend values."
                                 for i in range(30)})
    tab = open_question(browser, serve(path).url)
    tab.screenshot(tmp_path / "staff-page.png")
    assert tab.eval("innerWidth") == 1280 and tab.eval("innerHeight") == 800
    bottom = tab.eval("Math.max(...['answer', 'rubric', 'comment'].map("
                      "i => document.getElementById(i).getBoundingClientRect().bottom))")
    assert bottom <= 800 and tab.eval("document.documentElement.scrollWidth") <= 1280
    assert tab.eval("[...document.querySelectorAll('nav button, #rubric li')]"
                    ".every(b => b.scrollWidth <= b.clientWidth)")      # nothing cut off
    start = time.perf_counter()
    for i in range(30):
        for key in ("1", "2") if i % 2 else ("3",):
            tab.key(key)
        tab.key("n")
    tab.eval("queue")
    seconds = time.perf_counter() - start
    got = marks(path)
    assert all(m["points"] is not None for m in got.values())
    assert sorted(m["points"] for m in got.values()) == [1.0] * 15 + [2.0] * 15
    print(f"\n30 answers graded by keyboard in {seconds:.2f} s")
    assert tab.errors() == []
