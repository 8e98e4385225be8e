"""Late work: the policy language, and the batch's raw score, penalty and final score."""
from __future__ import annotations

import csv
import io
import json
from datetime import datetime, timezone

import pytest
from click.testing import CliRunner

from grader.classroom import late
from grader.cli import main
from tests.conftest import SOLUTIONS, copy_solutions


DUE = datetime(2026, 12, 15, 23, 59, tzinfo=timezone.utc)


@pytest.mark.quick
def test_the_policy_language():
    assert late.parse("10%/day,max 3") == late.Policy(10.0, "day", 3)
    p = late.parse(" 2.5 % / hour , grace 15 min ")
    assert (p.percent, p.unit, p.max_units, p.grace.seconds) == (2.5, "hour", None, 900)
    for bad, words in (("10%", "none of"), ("max 3", "no rate"), ("10%/day,5%/day", "two rates"),
                       ("150%/day", "more than the whole")):
        with pytest.raises(late.LatePolicyError, match=words):
            late.parse(bad)
    with pytest.raises(late.LatePolicyError, match="not a time"):
        late.parse_time("next friday")


@pytest.mark.quick
def test_days_late_and_the_penalty():
    p = late.parse("10%/day,max 3,grace 10 min")
    at = lambda s: late.parse_time(s)  # noqa: E731
    assert late.units_late(p, DUE, at("2026-12-15T23:00"), False) == 0
    assert late.units_late(p, DUE, at("2026-12-16T00:05"), True) == 0        # in the grace
    assert late.units_late(p, DUE, at("2026-12-16T00:30"), False) == 1       # a started day
    assert late.units_late(p, DUE, at("2026-12-18T01:00"), False) == 3
    assert late.units_late(p, DUE, None, True) == 1          # a flag without a time: one day
    assert late.units_late(p, DUE, None, False) == 0
    assert late.penalty(p, 80, 0) == 0 and late.penalty(p, 80, 2) == 16
    assert late.penalty(p, 80, 4) == 80                       # past max 3: nothing earned


@pytest.mark.slow
def test_batch_applies_the_policy_to_flags_and_staff_times_and_changes_nothing_without(
        tmp_path):
    cls = tmp_path / "class"
    cls.mkdir()
    solution = (SOLUTIONS / "ex01_by_hand.py").read_text()
    (cls / "annsmith_late_101_9001_ex01_by_hand.py").write_text(solution)   # Canvas, late
    (cls / "bobjones_102_9002_ex01_by_hand.py").write_text(solution)        # Canvas, on time
    times = tmp_path / "times.csv"     # from the LMS, as staff export it
    times.write_text("submission,submitted_at\ncarl,2026-12-17T10:00:00+00:00\n"
                     "dora,2026-12-14T10:00\neve,2026-12-17T10:00\n")
    for name in ("carl", "dora", "eve"):
        copy_solutions(cls / name, ["ex01_by_hand"])
    # A time a student wrote into their own folder is never read: the LMS's is.
    (cls / "eve" / "submission_metadata.json").write_text(
        json.dumps({"created_at": "2026-12-01T00:00"}))
    plain = tmp_path / "plain" / "grades.csv"
    assert CliRunner().invoke(main, ["batch", str(cls), "--out", str(plain), "-e", "A",
                                     "-j", "2"]).exit_code == 0
    for row in csv.DictReader(plain.open()):          # no policy: nothing off
        assert float(row["penalty"]) == 0 and row["final_total"] == row["total"], row

    out = tmp_path / "late" / "grades.csv"
    result = CliRunner().invoke(main, ["batch", str(cls), "--out", str(out), "-e", "A", "-j",
                                       "2", "--due", "2026-12-15T23:59",
                                       "--late-policy", "10%/day,max 3",
                                       "--submitted-times", str(times)])
    assert result.exit_code == 0, result.output
    rows = {r["submission"]: r for r in csv.DictReader(out.open())}
    full = float(rows["dora"]["total"])
    assert full > 0
    expect = {"annsmith_101": 1, "bobjones_102": 0, "carl": 2, "dora": 0, "eve": 2}
    for name, units in expect.items():
        row = rows[name]
        assert int(float(row["late_units"])) == units, row
        assert float(row["total"]) == full                      # the raw score is kept
        assert float(row["penalty"]) == pytest.approx(full * 0.1 * units)
        assert float(row["final_total"]) == pytest.approx(full - full * 0.1 * units)
    assert rows["carl"]["submitted_at"].startswith("2026-12-17T10:00")
    assert rows["eve"]["submitted_at"].startswith("2026-12-17T10:00")
    assert rows["annsmith_101"]["late"] == "yes"

    bad = CliRunner().invoke(main, ["batch", str(cls), "--late-policy", "10%/week",
                                    "--due", "2026-12-15T23:59"])
    assert bad.exit_code == 2 and "none of P%/day" in bad.output
    alone = CliRunner().invoke(main, ["batch", str(cls), "--late-policy", "10%/day"])
    assert alone.exit_code == 2 and "go together" in alone.output


def fake_result(points: float, most: float = 10.0) -> dict:
    """A results JSON as a grading writes it: one exercise, one test."""
    return {"score": points, "tests": [{"name": "ex01_by_hand: t", "score": points,
                                        "max_score": most, "status": "passed"}],
            "extra_data": {"exercise_scores": {"ex01_by_hand": {"score": points,
                                                                "max_score": most}}}}


def test_merge_keeps_the_policy_and_times_of_sharded_parts(tmp_path):
    """Each shard's gradebook keeps the policy and its students' times; the
    merged one applies them as one run would."""
    from grader.classroom.gradebook import Gradebook
    from grader.classroom.views import merge_parts

    parts = []
    for k, (name, when) in enumerate((("ann", "2026-12-15T10:00"), ("ben", "2026-12-17T10:00")),
                                     start=1):
        path = tmp_path / f"p{k}" / "grades.sqlite"
        with Gradebook(path) as book:
            book.set_meta("shard", f"{k}/2")
            book.set_meta("everyone", json.dumps(["ann", "ben"]))
            book.set_policy(DUE, "10%/day,max 3")
            book.record_student(name)
            book.record_grading(name, fake_result(10))
            book.set_submitted_times({name: late.parse_time(when)})
        parts.append(path)
    with Gradebook(tmp_path / "merged.sqlite") as merged:
        assert merge_parts(parts, merged) == 2
        rows = {r.submission: r for r in merged.rows()}
    assert rows["ben"].final.late_units == 2 and rows["ben"].final.penalty == 2
    assert rows["ben"].final.points == 8 and rows["ann"].final.points == 10
