"""The class's gradebook owns every grade: a class replayed from outside, as staff run it.

A Canvas bulk download (two students of one name, a late flag, an upload of
a README only), a times file with a typo (refused, nothing written), then
the real one; batch, the staff's rubric sheet filled in and merged, a rerun,
one student's resubmission, an extension, an override, and Canvas's import.
Every exported grade is checked against the course's definition, computed
here from the columns: the grader's points plus the staff's, less the late
penalty on that sum (``10%/day, max 3``).
"""
from __future__ import annotations

import csv
import io
import shutil
import subprocess
import sys
import threading
import time

import pytest
from click.testing import CliRunner

from grader.classroom.gradebook import Gradebook, final_grade
from grader.classroom.late import parse, parse_time
from grader.cli import main
from tests.conftest import REPO, SOLUTIONS

GOOD_A = (SOLUTIONS / "ex01_by_hand.py").read_text()
QUESTIONS = (SOLUTIONS / "questions.py").read_text()
WRONG_A = "SCORES = None\n"
ONLY = ["-e", "A", "-e", "questions"]
POLICY = ["--due", "2026-12-15T23:59", "--late-policy", "10%/day,max 3"]

CANVAS = """\
Student,ID,SIS User ID,SIS Login ID,Section,Attention (77)
    Points Possible,,,,,
"Smith, John",10005,S5,jsmith,A,
"Smith, John",10006,S6,jsmith2,A,
"Lee, Ann",10008,S8,alee,B,
"Read, Me",10011,S11,rme,B,
"Absent, Al",10012,S12,aal,B,
"""


def download(folder):
    folder.mkdir()
    (folder / "smithjohn_10005_2001_ex01_by_hand.py").write_text(GOOD_A)
    (folder / "smithjohn_10005_2001_questions.py").write_text(QUESTIONS)
    (folder / "smithjohn_10006_2002_ex01_by_hand.py").write_text(WRONG_A)   # same name
    (folder / "leeann_late_10008_2004_ex01_by_hand-1.py").write_text(GOOD_A)
    (folder / "leeann_late_10008_2004_questions.py").write_text(QUESTIONS)
    (folder / "readme_10011_2005_README.md").write_text("# my work is on my laptop")
    return folder


def grades(path) -> dict[str, dict]:
    return {r["submission"]: r for r in csv.DictReader(path.open(encoding="utf-8"))}


def expected(row: dict, units: int) -> float:
    """The course's final grade from a grades row: (auto + staff), less the penalty."""
    raw = float(row["total"]) + float(row["staff_points"] or 0)
    off = raw if units > 3 else round(raw * 0.1 * units, 6)
    return raw - min(raw, off)


@pytest.mark.slow
def test_a_class_replayed_keeps_every_grade_staff_point_and_penalty(tmp_path):
    cls = download(tmp_path / "dl")
    out = tmp_path / "out" / "grades.csv"
    run = lambda *args: CliRunner().invoke(main, ["batch", str(cls), "--out", str(out),  # noqa: E731
                                                  *ONLY, "-j", "2", *POLICY, *args])
    # A times file naming no submission (a typo) is refused, naming it, before anything.
    typo = tmp_path / "typo.csv"
    typo.write_text("submission,submitted_at\nleeann_10008,2026-12-17T09:00\n"
                    "leean_10008,2026-12-17T09:00\n")
    refused = run("--submitted-times", str(typo))
    assert refused.exit_code == 2 and "'leean_10008'" in refused.output
    assert not out.parent.exists()                              # nothing written
    times = tmp_path / "times.csv"
    times.write_text("submission,submitted_at\nleeann_10008,2026-12-17T09:00\n"
                     "smithjohn_10005,2026-12-15T20:00\n")

    first = run("--submitted-times", str(times))
    assert first.exit_code == 3, first.output       # readme_10011 could not be graded
    rows = grades(out)
    assert set(rows) == {"smithjohn_10005", "smithjohn_10006", "leeann_10008", "readme_10011"}
    readme = rows["readme_10011"]
    assert "no exercise module found" in readme["error"] and "README.md" in readme["error"]
    assert float(readme["final_total"]) == 0 and readme["status"] == "not graded"
    assert rows["leeann_10008"]["late_units"] == "2"       # the LMS's time, not only its flag

    # Staff fill in the rubric sheet the batch wrote; merge --rubric stores it.
    sheet = out.with_name("grades_rubric.csv")
    filled = list(csv.DictReader(io.StringIO(sheet.read_text(encoding="utf-8"))))
    given = {}
    for r in filled:
        r["points"] = str(float(r["points_possible"]) - (1 if r["submission"] == "leeann_10008"
                                                          else 0))
        given[r["submission"]] = given.get(r["submission"], 0) + float(r["points"])
    filled_path = tmp_path / "filled.csv"
    with filled_path.open("w", newline="", encoding="utf-8") as f:
        writer = csv.DictWriter(f, fieldnames=list(filled[0]))
        writer.writeheader()
        writer.writerows(filled)
    merged = CliRunner().invoke(main, ["merge", "--rubric", str(filled_path), "--out", str(out),
                                       "--grader", "ta"])
    assert merged.exit_code == 0, merged.output
    after_staff = grades(out)
    for name, points in given.items():
        assert float(after_staff[name]["staff_points"]) == pytest.approx(points)

    # A rerun with nothing changed changes nothing; the sheet comes back filled.
    again = run("--submitted-times", str(times))
    assert "0 graded, 4 already graded" in again.output and "no grading changed" in again.output
    assert grades(out) == after_staff
    back = list(csv.DictReader(io.StringIO(sheet.read_text(encoding="utf-8"))))
    assert all(r["points"] and r["graded_by"] == "ta" for r in back)

    # One student resubmits: only that row changes; an extension and an override.
    (cls / "smithjohn_10006_2002_ex01_by_hand.py").write_text(GOOD_A)
    ext = tmp_path / "ext.csv"
    ext.write_text("submission,due,reason\nleeann_10008,2026-12-18T00:00,illness\n")
    third = run("--submitted-times", str(times), "--extensions", str(ext))
    assert "1 graded, 3 already graded" in third.output
    now = grades(out)
    assert float(now["smithjohn_10006"]["ex01_by_hand"]) > 0
    assert now["leeann_10008"]["late_units"] == "0"         # the extension holds
    for name in ("smithjohn_10005", "readme_10011"):
        assert now[name] == after_staff[name]
    over = CliRunner().invoke(main, ["override", "readme_10011", "--out", str(out), "--points",
                                     "5", "--reason", "emailed the file before the deadline"])
    assert over.exit_code == 0, over.output

    canvas = tmp_path / "canvas.csv"
    (tmp_path / "canvas-export.csv").write_text(CANVAS, encoding="utf-8")
    exported = CliRunner().invoke(main, ["export", str(out), "--canvas",
                                         str(tmp_path / "canvas-export.csv"), "--assignment",
                                         "Attention", "--out", str(canvas)])
    assert exported.exit_code == 0, exported.output
    got = {r["ID"]: float(r["Attention (77)"]) for r in csv.DictReader(canvas.open())}
    final = grades(out)
    units = {"smithjohn_10005": 0, "smithjohn_10006": 0, "leeann_10008": 0}
    ids = {"smithjohn_10005": "10005", "smithjohn_10006": "10006", "leeann_10008": "10008"}
    for name, uid in ids.items():
        assert got[uid] == pytest.approx(expected(final[name], units[name])), name
        assert float(final[name]["final_total"]) == pytest.approx(got[uid])
    assert got["10011"] == 5                                # the override
    assert "10012" not in got                               # handed nothing in
    # The staff's points survived the rerun and the resubmission, and count.
    assert float(final["leeann_10008"]["staff_points"]) == pytest.approx(given["leeann_10008"])
    assert got["10005"] == pytest.approx(float(final["smithjohn_10005"]["total"])
                                         + given["smithjohn_10005"])
    with Gradebook(out.with_suffix(".sqlite")) as book:
        said = [(h["what"], h["who"]) for h in book.history()]
    assert ("staff points", "ta") in said
    assert {"extension", "override", "late policy"} <= {what for what, _ in said}


@pytest.mark.quick
def test_the_final_grade_is_defined_once():
    """(auto + staff), the penalty on that sum, capped; past max, nothing;
    an override replaces it; a regrade has no number."""
    policy = parse("10%/day,max 3")
    assert final_grade(80, 20, policy=policy, late_units=2).points == pytest.approx(80)
    assert final_grade(80, 20, policy=policy, late_units=4).points == 0
    assert final_grade(80, 20).points == 100
    assert final_grade(80, 20, needs_regrade=True).points is None
    assert final_grade(80, 20, needs_regrade=True, override=55).points == 55
    # the figures: 227 two days late is 181.6; 261 with 12 staff points is 273
    assert final_grade(227, 0, policy=policy, late_units=2).points == pytest.approx(181.6)
    assert final_grade(261, 12).points == 273


@pytest.mark.slow
def test_two_writers_and_a_reader_at_once_lose_no_row(tmp_path):
    """Two ``batch --jobs 2`` processes on one gradebook while a reader reads it."""
    cls = tmp_path / "class"
    for i in range(4):
        (cls / f"s{i}").mkdir(parents=True)
        (cls / f"s{i}" / "ex01_by_hand.py").write_text(GOOD_A if i % 2 else WRONG_A)
    out = tmp_path / "out" / "grades.csv"
    cmd = [sys.executable, "-m", "grader.cli", "batch", str(cls), "--out", str(out), "-e", "A",
           "-j", "2", "--force"]
    Gradebook(out.with_suffix(".sqlite")).close()
    errors, reads, stop = [], [], threading.Event()

    def reader():
        while not stop.is_set():
            try:
                with Gradebook(out.with_suffix(".sqlite")) as book:
                    reads.append(len(book.rows()))
            except Exception as exc:   # noqa: BLE001 - any failure to read is the finding
                errors.append(repr(exc))
            time.sleep(0.05)

    thread = threading.Thread(target=reader)
    thread.start()
    try:
        writers = [subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                    text=True) for _ in range(2)]
        outputs = [w.communicate(timeout=600) for w in writers]
    finally:
        stop.set()
        thread.join()
    assert [w.returncode for w in writers] == [0, 0], outputs
    assert not errors, errors[:3]
    assert reads and max(reads) == 4
    with Gradebook(out.with_suffix(".sqlite")) as book:
        rows = {r.submission: r for r in book.rows()}
        gradings = book.db.execute("SELECT COUNT(*) FROM gradings").fetchone()[0]
        current = book.db.execute("SELECT COUNT(*) FROM gradings WHERE current = 1").fetchone()[0]
    assert set(rows) == {"s0", "s1", "s2", "s3"} and gradings == 8 and current == 4
    assert rows["s1"].total > 0 and rows["s0"].total == 0


CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


@pytest.mark.skipif(CHROMIUM is None, reason="needs Chromium (apt-get install chromium; "
                                             ".ci/run installs it)")
def test_a_browser_reads_the_final_grade_column_of_the_class_page(tmp_path):
    """The class page, opened in headless Chromium: the Students table's final grades."""
    import html
    import re

    from grader.classroom import pages

    book = Gradebook(tmp_path / "grades.sqlite")
    book.set_policy(parse_time("2026-12-15T23:59"), "10%/day,max 3")
    for name, points, late in (("ann", 8.0, False), ("bob", 6.0, True)):
        book.record_student(name, result_key=name, late_flag=late)
        book.record_grading(name, {"score": points, "tests": [], "extra_data": {
            "exercise_scores": {"ex01_by_hand": {"score": points, "max_score": 8.0}}}})
    index = pages.write_class_report(tmp_path / "report", book, book.rows(), [], None)
    run = subprocess.run([CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu",
                          f"--user-data-dir={tmp_path / 'profile'}", "--dump-dom",
                          index.as_uri()], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr[-2000:]
    table = run.stdout[run.stdout.index('id="students"'):]
    table = table[:table.index("</table>")]
    cells = [[html.unescape(re.sub("<[^>]+>", "", c)) for c in re.findall(r"<td>(.*?)</td>", r)]
             for r in re.findall(r"<tr>(.*?)</tr>", table)]
    final = {row[0]: row[1] for row in cells if row}
    assert final == {"ann": "8", "bob": "5.4"}     # bob: late (a flag is one day): 10% off


def _result(points: float) -> dict:
    return {"score": points, "tests": [], "extra_data": {
        "exercise_scores": {"ex01_by_hand": {"score": points, "max_score": 8.0}},
        "manual_grading": [{"exercise": "questions", "question": "Q01", "points": 3,
                            "answer": "an answer", "rubric": "a rubric"}]}}


def test_merging_the_shards_again_keeps_what_staff_gave_the_joined_gradebook(tmp_path):
    """Shards merged, staff points given to the joined gradebook, the shards
    merged again (a resubmission regraded in its shard): the staff's points
    stay, an unchanged grading is not recorded twice, a changed one replaces."""
    import json

    from grader.classroom.views import merge_parts
    parts = []
    for k, name in ((1, "ann"), (2, "ben")):
        with Gradebook(tmp_path / f"p{k}.sqlite") as book:
            book.set_meta("shard", f"{k}/2")
            book.set_meta("everyone", json.dumps(["ann", "ben"]))
            book.record_student(name)
            book.record_grading(name, _result(5.0))
        parts.append(tmp_path / f"p{k}.sqlite")
    with Gradebook(tmp_path / "joined.sqlite") as joined:
        assert merge_parts(parts, joined) == 2
        joined.set_staff_points([{"submission": "ann", "question": "Q01", "points": 2.0}], "ta")
        with Gradebook(parts[1]) as shard:       # ben resubmitted: his shard regraded him
            shard.record_grading("ben", _result(8.0))
        assert merge_parts(parts, joined) == 2
        rows = {r.submission: r for r in joined.rows()}
        gradings = joined.db.execute("SELECT COUNT(*) FROM gradings").fetchone()[0]
    assert rows["ann"].final.staff == 2.0 and rows["ann"].final.points == 7.0
    assert rows["ben"].total == 8.0
    assert gradings == 3          # ann's once, ben's twice (his first, then his new one)
