"""Batch grading: a class in one command; one broken submission costs only itself."""
from __future__ import annotations

import csv
import json
from dataclasses import replace

import pytest
from click.testing import CliRunner

from grader.classroom.batch import Submission, cache_key, grade_one
from grader.classroom.gradebook import Gradebook
from grader.core import Options
from grader.cli import main
from tests.conftest import copy_solutions, ex01_max

# Exercise A and the questions: a grading process that imports no PyTorch
# (the NumPy exercises' references are written in PyTorch), so that the
# class's many gradings test the batch, not PyTorch's start.
ONLY = ["-e", "ex01", "-e", "questions"]


def make_class(root):
    copy_solutions(root / "alice", ["ex01_by_hand", "questions"])
    copy_solutions(root / "bob", ["ex01_by_hand"])                  # questions missing
    (root / "carol").mkdir()
    (root / "carol" / "questions.py").write_text("Q1 = (\n")        # syntax error
    (root / "dave").mkdir()                                         # nothing at all
    return root


def read_csv(path):
    return {row["submission"]: row for row in csv.DictReader(path.open())}


@pytest.mark.slow
def test_batch_grades_a_class_and_reruns_skip(tmp_path):
    make_class(tmp_path / "class")
    out = tmp_path / "grades.csv"
    args = ["batch", str(tmp_path / "class"), "--out", str(out), "--jobs", "2", *ONLY]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 3, result.output   # dave could not be graded
    rows = read_csv(out)
    assert set(rows) == {"alice", "bob", "carol", "dave"}
    assert float(rows["alice"]["total"]) == float(rows["alice"]["max_total"]) > 0
    assert float(rows["bob"]["ex01_by_hand"]) == ex01_max() and float(rows["bob"]["questions"]) == 0
    assert float(rows["carol"]["total"]) == 0
    assert "questions: questions.py could not be imported" in rows["carol"]["error"]
    assert "SyntaxError" in rows["carol"]["error"]
    assert rows["alice"]["needs_regrade"] == "0" and rows["alice"]["isolation"]
    assert "no exercise modules" in rows["dave"]["error"]
    results = tmp_path / "results"
    for name in rows:
        data = json.loads((results / f"{name}.json").read_text())
        assert "score" in data and "tests" in data
        assert data["extra_data"]["batch"]["submission"] == name
    assert "4 submissions: 4 graded, 0 already graded" in result.output
    summary = (tmp_path / "grades-summary.txt").read_text()
    assert summary.startswith("4 submissions") and "mean" in summary
    assert (tmp_path / "grades-histogram.png").read_bytes().startswith(b"\x89PNG")

    again = CliRunner().invoke(main, args)
    assert "0 graded, 4 already graded" in again.output
    assert read_csv(out) == rows
    (tmp_path / "class" / "bob" / "questions.py").write_text(
        (tmp_path / "class" / "alice" / "questions.py").read_text())
    third = CliRunner().invoke(main, args)
    assert "1 graded, 3 already graded" in third.output      # bob changed
    assert float(read_csv(out)["bob"]["questions"]) > 0
    forced = CliRunner().invoke(main, args + ["--force"])
    assert "4 graded, 0 already graded" in forced.output


def test_a_submission_that_outlasts_its_limit_costs_only_its_row(tmp_path):
    from grader.sandbox.process import stale_staging
    sub = copy_solutions(tmp_path / "slow", ["ex01_by_hand"])
    (sub / "ex01_by_hand.py").write_text("import time\ntime.sleep(60)\n")
    before = set(stale_staging(min_age_s=0))
    book = Gradebook(tmp_path / "grades.sqlite")
    book.record_student("slow")
    outcome = grade_one(Submission("slow", sub), tmp_path / "results",
                        Options(suite="hidden", exercises=["ex01_by_hand"]), book=book,
                        submission_timeout=3, force=False)
    assert "longer than 3 s" in outcome.error
    # The grader could not finish it: the gradebook holds a regrade, not a zero.
    [row] = book.rows()
    assert row.grading_failed and row.final.points is None
    # The killed grading's workers' folders went with it (other tests' may be live).
    left = set(stale_staging(min_age_s=0)) - before
    assert not left, left
    data = json.loads(outcome.result_path.read_text())
    assert data["score"] == 0 and "not graded" in data["output"]


def test_batch_bad_input(tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    file = tmp_path / "f.txt"
    file.write_text("x")
    for args, phrase in [([str(tmp_path / "nope")], "does not exist"),
                         ([str(empty)], "holds no submissions"),
                         ([str(file)], "is not a folder"),
                         ([str(empty), "--jobs", "0"], "--jobs"),
                         ([str(empty), "-e", "ex42"], "unknown exercise")]:
        result = CliRunner().invoke(main, ["batch", *args, "--out", str(tmp_path / "g.csv")])
        assert result.exit_code == 2, result.output
        assert phrase in result.output


def test_intake_like_course_staff_need(tmp_path):
    """Archiver and editor litter is no student; a whole repository and a
    Canvas bulk download are; the summary says '1 submission'."""
    cls = tmp_path / "class"
    copy_solutions(cls / "alice" / "exercises", ["ex01_by_hand"])      # a repository
    (cls / "alice" / "notebooks").mkdir()
    (cls / "alice" / ".git").mkdir()
    (cls / "__MACOSX" / "alice").mkdir(parents=True)
    (cls / "__MACOSX" / "alice" / "._ex01_by_hand.py").write_text("junk")
    (cls / ".DS_Store").write_text("junk")
    (cls / "alice~").mkdir()
    sol = (cls.parent / "sol")
    copy_solutions(sol, ["ex01_by_hand"])
    # Canvas: login[_late]_userid_submissionid_file, a resubmission gets "-1"
    (cls / "bobsmith_1234_5678_ex01_by_hand-1.py").write_text(
        (sol / "ex01_by_hand.py").read_text())
    (cls / "caroljones_late_99_100_ex01_by_hand.py").write_text("def x(:\n")
    (cls / "caroljones_late_99_100_notes.txt").write_text("not code")
    from grader.classroom.batch import discover
    subs = discover(cls, staging=tmp_path / "staging")
    assert [s.name for s in subs] == ["alice", "bobsmith_1234", "caroljones_99"]
    assert (tmp_path / "staging" / "bobsmith_1234" / "ex01_by_hand.py").is_file()

    out = tmp_path / "g.csv"
    result = CliRunner().invoke(main, ["batch", str(cls), "--out", str(out), "-e", "A"])
    assert result.exit_code == 0, result.output
    rows = read_csv(out)
    assert set(rows) == {"alice", "bobsmith_1234", "caroljones_99"}
    assert float(rows["alice"]["ex01_by_hand"]) == ex01_max() and not rows["alice"]["error"]
    assert float(rows["bobsmith_1234"]["ex01_by_hand"]) == ex01_max()
    assert float(rows["caroljones_99"]["total"]) == 0 and rows["caroljones_99"]["late"] == "yes"

    one = tmp_path / "one"
    copy_solutions(one / "dana", ["ex01_by_hand"])
    result = CliRunner().invoke(main, ["batch", str(one), "--out", str(tmp_path / "o.csv"),
                                       "-e", "A"])
    assert "1 submission: 1 graded, 0 already graded" in result.output
    assert (tmp_path / "o-summary.txt").read_text().startswith("1 submission\n")


@pytest.mark.slow
def test_three_shards_merge_to_one_run(tmp_path):
    cls = tmp_path / "class"
    for i, name in enumerate(["ann", "ben", "cat", "dan", "eve"]):
        copy_solutions(cls / name, ["ex01_by_hand"] if i % 2 else [])
        if i % 2 == 0:
            (cls / name / "ex01_by_hand.py").write_text("SCORES = None\n")
    whole = tmp_path / "whole" / "grades.csv"
    assert CliRunner().invoke(main, ["batch", str(cls), "--out", str(whole), "-e", "A",
                                     "-j", "2"]).exit_code == 0
    parts = []
    for k in (1, 2, 3):
        part = tmp_path / f"part{k}" / "grades.csv"
        result = CliRunner().invoke(main, ["batch", str(cls), "--out", str(part), "-e", "A",
                                           "--shard", f"{k}/3"])
        assert result.exit_code == 0, result.output
        assert f"(shard {k}/3 of 5 submissions)" in result.output
        parts.append(part)
    sizes = [len(read_csv(p)) for p in parts]
    assert sorted(sizes) == [1, 2, 2]
    merged = tmp_path / "merged.csv"
    result = CliRunner().invoke(main, ["merge", *map(str, parts), "--out", str(merged)])
    assert result.exit_code == 0, result.output
    assert merged.read_text() == whole.read_text()
    assert (tmp_path / "merged-histogram.png").is_file()

    gap = CliRunner().invoke(main, ["merge", str(parts[0]), str(parts[2]), "--out",
                                    str(tmp_path / "x.csv")])
    assert gap.exit_code == 2 and "shard 2/3 is missing" in gap.output
    overlap = CliRunner().invoke(main, ["merge", str(parts[0]), str(parts[0]), str(parts[1]),
                                        "--out", str(tmp_path / "x.csv")])
    assert overlap.exit_code == 2 and "both shard 1/3" in overlap.output
    bad = CliRunner().invoke(main, ["batch", str(cls), "--shard", "4/3"])
    assert bad.exit_code == 2 and "--shard" in bad.output


def test_the_class_workflow_is_a_matrix_of_shards_and_a_merge():
    from tests.conftest import REPO
    text = (REPO / ".github" / "workflows" / "grade-class.yml").read_text()
    grade, merge = text.split("\n  grade:\n", 1)[1].split("\n  merge:\n", 1)
    assert "matrix:" in grade and "shard: [1, 2, 3, 4]" in grade and "of: [4]" in grade
    assert 'SHARD: "${{ matrix.shard }}/${{ matrix.of }}"' in grade and '--shard "$SHARD"' in grade
    assert "needs: grade" in merge and "if: always()" in merge
    assert "pattern: grades-part-*" in merge
    assert "attn-grade merge parts/grades-part-*/grades.csv" in merge


def test_colliding_names_are_both_graded_under_distinct_names(tmp_path):
    """s1/ and s1!.zip (and two names differing only in an accent) map to one
    safe name: each is graded on its own and the CSV keeps the original names."""
    import zipfile

    from grader.classroom.batch import discover
    root = tmp_path / "class"
    copy_solutions(root / "s1", ["ex01_by_hand"])
    (root / "s1" / "ex01_by_hand.py").write_text("SCORES = None\n")   # 0 points
    with zipfile.ZipFile(root / "s1!.zip", "w") as z:
        z.write(_solution_file("ex01_by_hand"), "ex01_by_hand.py")
    copy_solutions(root / "Jos\u00e9", ["ex01_by_hand"])
    copy_solutions(root / "Jos\u00e8", ["ex01_by_hand"])
    subs = discover(root)
    assert len({s.key for s in subs}) == 4
    out = tmp_path / "grades.csv"
    result = CliRunner().invoke(main, ["batch", str(root), "--out", str(out),
                                       "-e", "ex01"])
    assert result.exit_code == 0, result.output
    assert "4 graded, 0 already graded" in result.output
    rows = read_csv(out)
    assert set(rows) == {"s1", "s1!", "Jos\u00e9", "Jos\u00e8"}
    assert float(rows["s1"]["total"]) == 0 and float(rows["s1!"]["total"]) == ex01_max()
    assert len(list((tmp_path / "results").glob("*.json"))) == 4


def _solution_file(name):
    from tests.conftest import SOLUTIONS
    return SOLUTIONS / f"{name}.py"


def test_the_cache_is_keyed_on_the_options_that_change_scores(tmp_path):
    """After a public-suite run, a hidden-suite run grades again, and the key
    (content, suite, exercises, grader version) is recorded in the result."""
    sub = copy_solutions(tmp_path / "a", ["ex01_by_hand"])
    results = tmp_path / "results"
    book = Gradebook(tmp_path / "grades.sqlite")
    book.record_student("a")
    kwargs = dict(submission_timeout=300, force=False, book=book)
    public = Options(suite="public", exercises=["ex01_by_hand"])
    first = grade_one(Submission("a", sub, "a"), results, public, **kwargs)
    assert not first.skipped and not first.error
    key = json.loads(first.result_path.read_text())["extra_data"]["batch"]["key"]
    assert key["suite"] == "public" and key["content"] and key["grader"]
    # the options as graded: the budget within --submission-timeout's
    assert key == cache_key(Submission("a", sub, "a"), replace(public, grading_budget=270.0))
    assert book.current_result("a")[0] == key          # the gradebook's validity key
    again = grade_one(Submission("a", sub, "a"), results, public, **kwargs)
    assert again.skipped
    hidden = grade_one(Submission("a", sub, "a"), results, replace(public, suite="hidden"),
                       **kwargs)
    assert not hidden.skipped
    assert json.loads(hidden.result_path.read_text())["extra_data"]["batch"]["key"]["suite"] == \
        "hidden"


def test_the_histograms_count_axis_has_whole_numbers():
    pytest.importorskip("matplotlib")
    from grader.classroom.views import histogram_figure
    fig = histogram_figure([0.0, 7.0, 7.0, 3.5, 16.0])
    ax = fig.axes[0]
    fig.canvas.draw()   # the locator picks the ticks when drawn
    ticks = [t for t in ax.get_yticks() if ax.get_ylim()[0] <= t <= ax.get_ylim()[1]]
    assert ticks and all(float(t).is_integer() for t in ticks), ticks


def student_links(report):
    """{label: its page's text} of the Students table of ``report/index.html``,
    each link followed as a browser would (relative to the index)."""
    import html
    import re
    index = (report / "index.html").read_text()
    table = index[index.index('id="students"'):]
    table = table[:table.index("</table>")]
    links = re.findall(r'<a href="([^"]+)">([^<]*)</a>', table)
    assert len(links) == len({html.unescape(label) for _, label in links}), links
    return {html.unescape(label): (report / html.unescape(href)).read_text()
            for href, label in links}


def test_discover_gives_every_submission_a_label_of_its_own(tmp_path):
    """A file keeps its suffix where a folder or another file has its stem; a
    lone file is named by its stem, as before; labels that cleaning would make
    one get a hash tag; result names differ in more than case."""
    from grader.classroom.batch import RosterRow, discover, match_roster
    cls = tmp_path / "class"
    for folder in ("ann", "Bob", "c\x1b", "c\\x1b"):
        (cls / folder).mkdir(parents=True)
    for file in ("ann.zip", "ann.ipynb", "bob.zip", "dan.zip", "eve.zip", "eve.ipynb"):
        (cls / file).write_bytes(b"")
    subs = {s.name: s for s in discover(cls)}
    assert set(subs) == {"ann", "ann.zip", "ann.ipynb", "Bob", "bob", "c\x1b", "c\\x1b",
                         "dan", "eve.zip", "eve.ipynb"}
    assert subs["ann.zip"].path.name == "ann.zip" and subs["dan"].path.name == "dan.zip"
    labels = [s.label for s in subs.values()]
    assert len(set(labels)) == len(labels)
    assert subs["c\x1b"].label.startswith("c\\x1b #") and subs["c\\x1b"].label != "c\\x1b"
    assert len({s.key.casefold() for s in subs.values()}) == len(subs)   # Bob and bob
    assert subs["ann"].key == "ann" and subs["ann.zip"].key == "ann.zip"
    # The roster names each as grades.csv does: ann is the folder, ann.zip the zip.
    tagged = subs["c\x1b"].label
    rows = [RosterRow(i + 2, name, sid) for i, (name, sid) in
            enumerate([("ann", "s1"), ("ann.zip", "s2"), ("dan", "s3"), (tagged, "s4")])]
    found, missing = match_roster(tmp_path / "roster.csv", rows, list(subs.values()))
    assert {name: row.student_id for name, row in found.items()} \
        == {"ann": "s1", "ann.zip": "s2", "dan": "s3", "c\x1b": "s4"} and missing == []


@pytest.mark.slow
def test_a_folder_and_a_zip_of_one_name_are_two_rows_two_pages(tmp_path):
    """The red team's batch-samename: ann/ and ann.zip are ann and ann.zip in
    grades.csv, in --submitted-times, in results/ and in the class report,
    each page its own feedback and pictures."""
    import zipfile
    cls = tmp_path / "class"
    copy_solutions(cls / "ann", ["ex04_quadratic"])
    (cls / "ann" / "ex01_by_hand.py").write_text("SCORES = None\n")      # 0 for A
    with zipfile.ZipFile(cls / "ann.zip", "w") as z:                   # full A, no D
        z.write(_solution_file("ex01_by_hand"), "ex01_by_hand.py")
    times = tmp_path / "times.csv"
    times.write_text("submission,submitted_at\nann,2026-01-01T00:00\n"
                     "ann.zip,2026-01-02T12:00\n")
    out = tmp_path / "out" / "grades.csv"
    result = CliRunner().invoke(main, [
        "batch", str(cls), "--out", str(out), "-e", "A", "-e", "D", "-j", "2",
        "--due", "2026-01-01T00:00", "--late-policy", "10%/day",
        "--submitted-times", str(times)])
    assert result.exit_code == 0, result.output
    rows = read_csv(out)
    assert list(rows) == ["ann", "ann.zip"] and len(out.read_text().splitlines()) == 3
    assert float(rows["ann"]["ex01_by_hand"]) == 0 and float(rows["ann"]["ex04_quadratic"]) > 0
    assert float(rows["ann.zip"]["ex01_by_hand"]) == ex01_max()
    assert float(rows["ann.zip"]["ex04_quadratic"]) == 0
    assert float(rows["ann"]["penalty"]) == 0 and float(rows["ann.zip"]["late_units"]) == 2
    results = out.parent / "results"
    for name in rows:
        data = json.loads((results / f"{name}.json").read_text())
        assert data["extra_data"]["batch"]["submission"] == name
    pages = student_links(out.parent / "report")
    assert set(pages) == {"ann", "ann.zip"} and pages["ann"] != pages["ann.zip"]
    assert "<h1>ann</h1>" in pages["ann"] and "<h1>ann.zip</h1>" in pages["ann.zip"]
    # Each page shows its own grading's pictures, and only those.
    import re
    for name, picture in (("ann", "ex04_scaling.png"), ("ann.zip", "ex01_weights.png")):
        [href] = re.findall(r'<img alt="[^"]*" src="([^"]+)"', pages[name])
        page_dir = out.parent / "report" / "students"
        assert (page_dir / href).resolve() == (results / f"{name}.artifacts" / picture).resolve()
    index = (out.parent / "report" / "index.html").read_text()
    assert "<h1>Class report</h1>" in index and "<p>2 submissions.</p>" in index


def test_shards_of_a_folder_and_a_zip_of_one_name_merge(tmp_path):
    """merge keeps ann and ann.zip apart (it refused them as 'in two parts'),
    and its class report links each, and =bob (a formula's start), to its page."""
    import zipfile
    cls = tmp_path / "class"
    copy_solutions(cls / "ann", [])
    (cls / "ann" / "ex01_by_hand.py").write_text("SCORES = None\n")
    with zipfile.ZipFile(cls / "ann.zip", "w") as z:
        z.write(_solution_file("ex01_by_hand"), "ex01_by_hand.py")
    copy_solutions(cls / "=bob", ["ex01_by_hand"])
    parts = []
    for k in (1, 2):
        part = tmp_path / f"part{k}" / "grades.csv"
        result = CliRunner().invoke(main, ["batch", str(cls), "--out", str(part), "-e", "A",
                                           "--shard", f"{k}/2"])
        assert result.exit_code == 0, result.output
        parts.append(part)
    merged = tmp_path / "merged" / "grades.csv"
    result = CliRunner().invoke(main, ["merge", *map(str, parts), "--out", str(merged)])
    assert result.exit_code == 0, result.output
    rows = read_csv(merged)
    assert set(rows) == {"ann", "ann.zip", "'=bob"}          # the CSV's formula guard
    assert float(rows["ann"]["total"]) == 0 and float(rows["ann.zip"]["total"]) == ex01_max()
    pages = student_links(merged.parent / "report")
    assert set(pages) == {"ann", "ann.zip", "=bob"}
    for label, page in pages.items():
        assert f"<h1>{label}</h1>" in page
    assert 'id="total">Total: 0/' in pages["ann"]
    assert f'id="total">Total: {ex01_max():g}/' in pages["ann.zip"]


def test_an_older_folder_is_read_in_with_the_result_written_under_its_own_name(tmp_path):
    """An output folder of an earlier version (grades.csv and results/, no
    gradebook) is read into a gradebook the first time a command meets it; a
    results folder may still hold an older run's file of a label (ann/ and
    ann.zip were both 'ann', ann-49915e0d.json): the one the batch wrote
    under that submission's own result name is taken."""
    from grader.classroom.views import import_folder
    from grader.safetext import csv_text
    out, results = tmp_path / "grades.csv", tmp_path / "results"
    results.mkdir(parents=True)
    out.write_text(csv_text(["submission", "ex01_by_hand", "total", "max_total"],
                            [["ann", 1, 1, 8], ["bob", 0, 0, 8]]))
    old = {"score": 0, "extra_data": {"batch": {"submission": "ann"}}}
    new = {"score": 1, "extra_data": {"batch": {"submission": "ann", "result": "ann"},
                                      "exercise_scores": {"ex01_by_hand": {
                                          "score": 1, "max_score": 8}}}}
    (results / "ann-49915e0d.json").write_text(json.dumps(old))   # sorts first
    (results / "ann.json").write_text(json.dumps(new))
    book = import_folder(out)
    with Gradebook(book) as opened:
        rows = {r.submission: r for r in opened.rows()}
        assert rows["ann"].result_key == "ann" and rows["ann"].total == 1
        assert rows["bob"].total == 0 and "without its result" in rows["bob"].error
    assert import_folder(out) is None        # once: the gradebook is the record now
