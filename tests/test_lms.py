"""LMS files keep every student: a Canvas bulk download in, Canvas's gradebook
import (and a generic CSV) out.

Canvas names each file of a bulk download
``name[_late]_userid_submissionid_original`` (``name``: family then given
names run together, lower case, in any script).  Two students of one name
differ in user id only, so the intake groups by user id.
"""
from __future__ import annotations

import csv
import io

import pytest
from click.testing import CliRunner

from grader.classroom.batch import RosterError, RosterRow, Submission, discover, match_roster
from grader.cli import main
from tests.conftest import SOLUTIONS, ex01_max


GOOD = (SOLUTIONS / "ex01_by_hand.py").read_text()
WRONG = "SCORES = None\n"

GRADEBOOK = """\
Student,ID,SIS User ID,SIS Login ID,Section,Attention exercises (555),Quiz 1 (556)
    Points Possible,,,,,7,10
"Smith, John",10005,S5,jsmith,Sec A,,
"Smith, John",10006,S6,jsmith2,Sec A,3,
"Müller, Jörg",10007,S7,jmuller,Sec B,,
"Lee, Ann",10008,S8,alee,Sec B,,
"Nobody, Here",10009,S9,nobody,Sec B,,
"Absent, Al",10010,S10,aabsent,Sec B,,
"""


def bulk_download(folder):
    """Same-name students, a name outside ASCII, a late resubmission, a file
    that is no module, a loose file, and a folder named by a login."""
    folder.mkdir()
    (folder / "smithjohn_10005_2001_ex01_by_hand.py").write_text(GOOD)
    (folder / "smithjohn_10006_2002_ex01_by_hand.py").write_text(WRONG)
    (folder / "müllerjörg_10007_2003_ex01_by_hand.py").write_text(GOOD)
    (folder / "leeann_late_10008_2004_ex01_by_hand-1.py").write_text(GOOD)
    (folder / "leeann_late_10008_2004_notes.txt").write_text("see my code")
    (folder / "stray.txt").write_text("?")
    (folder / "nobody").mkdir()
    (folder / "nobody" / "ex01_by_hand.py").write_text(GOOD)
    return folder


def rows_of(text):
    return list(csv.DictReader(io.StringIO(text)))


@pytest.mark.quick
def test_canvas_intake_groups_by_user_id_and_keeps_what_canvas_says(tmp_path):
    skipped: list[str] = []
    subs = discover(bulk_download(tmp_path / "dl"), staging=tmp_path / "staging",
                    skipped=skipped)
    by_name = {s.name: s for s in subs}
    assert set(by_name) == {"smithjohn_10005", "smithjohn_10006", "müllerjörg_10007",
                            "leeann_10008", "nobody"}
    assert by_name["smithjohn_10005"].lms_user_id == "10005"
    assert by_name["smithjohn_10006"].lms_submission_id == "2002"
    assert by_name["leeann_10008"].late is True and by_name["smithjohn_10005"].late is False
    assert by_name["nobody"].late is None and by_name["nobody"].lms_user_id == ""
    assert (by_name["leeann_10008"].path / "ex01_by_hand.py").is_file()   # "-1" dropped
    assert (by_name["smithjohn_10006"].path / "ex01_by_hand.py").read_text() == WRONG
    assert len({s.key for s in subs}) == len(subs)
    said = "\n".join(skipped)
    assert "stray.txt" in said and "notes.txt" not in said   # a student's file, kept with them


@pytest.mark.slow
def test_a_bulk_download_graded_and_exported_for_canvas(tmp_path):
    out = tmp_path / "grades.csv"
    result = CliRunner().invoke(main, ["batch", str(bulk_download(tmp_path / "dl")),
                                       "--out", str(out), "-e", "A", "-j", "2"])
    assert result.exit_code == 0, result.output
    assert "skipped stray.txt" in result.output
    grades = {r["submission"]: r for r in csv.DictReader(out.open(encoding="utf-8"))}
    assert len(grades) == 5
    full = f"{ex01_max():g}"      # exercise A's maximum, as the CSV writes it
    assert grades["smithjohn_10005"]["ex01_by_hand"] == full
    assert grades["smithjohn_10006"]["ex01_by_hand"] == "0"
    assert grades["müllerjörg_10007"]["lms_user_id"] == "10007"
    assert grades["leeann_10008"]["late"] == "yes" and grades["smithjohn_10005"]["late"] == "no"
    assert grades["leeann_10008"]["lms_submission_id"] == "2004"
    assert grades["nobody"]["lms_user_id"] == "" and grades["nobody"]["late"] == ""

    gradebook = tmp_path / "gradebook.csv"
    gradebook.write_text(GRADEBOOK, encoding="utf-8")
    canvas = tmp_path / "canvas-import.csv"
    result = CliRunner().invoke(main, ["export", str(out), "--canvas", str(gradebook),
                                       "--out", str(canvas)])
    assert result.exit_code == 0, result.output
    assert "5 students graded (final grades), 1 in the gradebook without a grade" in result.output
    text = canvas.read_text(encoding="utf-8")
    header = text.splitlines()[0].split(",")
    assert header == ["Student", "ID", "SIS User ID", "SIS Login ID", "Section",
                      "Attention exercises (555)"]   # the existing assignment, by its name
    got = {r["ID"]: r for r in rows_of(text)}
    assert {i: r["Attention exercises (555)"] for i, r in got.items()} == {
        "10005": full, "10006": "0", "10007": full, "10008": full, "10009": full}
    assert got["10007"]["Student"] == "Müller, Jörg" and got["10009"]["SIS Login ID"] == "nobody"
    assert "Points Possible" not in text

    generic = rows_of((tmp_path / "canvas-import-generic.csv").read_text(encoding="utf-8"))
    assert {r["submission"]: (r["lms_user_id"], r["final_total"], r["final_max"], r["late"])
            for r in generic}["leeann_10008"] == ("10008", full, full, "yes")


def test_export_says_which_grades_have_no_student_and_makes_new_columns(tmp_path):
    grades = tmp_path / "grades.csv"
    grades.write_text("submission,ex01_by_hand,total,max_total,needs_regrade,isolation,error,"
                      "lms_user_id,lms_submission_id,late\n"
                      "jsmith,7,7,7,0,uid,,,,\n"
                      "ghost_424242,5,5,7,0,uid,,424242,1,no\n", encoding="utf-8")
    gradebook = tmp_path / "gradebook.csv"
    gradebook.write_text(GRADEBOOK, encoding="utf-8")
    canvas = tmp_path / "c.csv"
    result = CliRunner().invoke(main, ["export", str(grades), "--canvas", str(gradebook),
                                       "--assignment", "Attention, graded", "--out",
                                       str(canvas)])
    assert result.exit_code == 0, result.output
    assert "ghost_424242: no student of the gradebook matches it" in result.output
    rows = rows_of(canvas.read_text(encoding="utf-8"))
    assert [(r["ID"], r["Attention, graded"]) for r in rows] == [("10005", "7")]   # by login

    plain = CliRunner().invoke(main, ["export", str(grades), "--out", str(tmp_path / "g.csv")])
    assert plain.exit_code == 0 and "2 submissions" in plain.output
    bad = CliRunner().invoke(main, ["export", str(gradebook), "--out", str(tmp_path / "x.csv")])
    assert bad.exit_code == 2 and "not a grades CSV" in bad.output


@pytest.mark.quick
def test_a_roster_may_name_a_canvas_student_by_user_id_and_a_typo_is_an_error():
    from pathlib import Path
    subs = [Submission("smithjohn_10005", None, lms_user_id="10005"),
            Submission("ann", None)]
    rows = [RosterRow(2, "10005", "s5"), RosterRow(3, "ann", "s1"), RosterRow(4, "", "s7")]
    found, missing = match_roster(Path("roster.csv"), rows, subs)
    assert {k: r.student_id for k, r in found.items()} == {"smithjohn_10005": "s5", "ann": "s1"}
    assert [r.student_id for r in missing] == ["s7"]      # handed nothing in: a row, marked
    with pytest.raises(RosterError, match="roster.csv line 5: no submission 'zed'"):
        match_roster(Path("roster.csv"), rows + [RosterRow(5, "zed", "s9")], subs)
