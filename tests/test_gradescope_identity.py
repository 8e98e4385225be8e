"""On Gradescope, exercise A is graded for the submitter (submission_metadata.json)."""
from __future__ import annotations

import json

import pytest

from grader.gradescope import run, submitter_id
from tests.test_variants import answers_module, inputs_for

META = {"users": [{"email": "alice@uni.example", "id": 11, "name": "Alice A",
                   "sid": "S0001"}]}


def _root(tmp_path, module_text: str | None, meta=META):
    root = tmp_path / "autograder"
    (root / "submission").mkdir(parents=True)
    (root / "results").mkdir()
    if meta is not None:
        (root / "submission_metadata.json").write_text(json.dumps(meta))
    if module_text is not None:
        (root / "submission" / "ex01_by_hand.py").write_text(module_text)
    return root


@pytest.mark.parametrize("declared, field, expected", [
    ("S0001", None, "S0001"),                       # the sid they declared
    (" ALICE@uni.example", None, "alice@uni.example"),   # the email, as normalized
    ("someone-else", None, "alice@uni.example"),    # not theirs: graded as themselves
    (None, None, "alice@uni.example"),              # unset: their own variant
    (None, "sid", "S0001"),
    ("someone-else", "off", None),                  # staff turned it off
])
def test_submitter_id(tmp_path, monkeypatch, declared, field, expected):
    if field is None:
        monkeypatch.delenv("ATTN_STUDENT_ID_FIELD", raising=False)
    else:
        monkeypatch.setenv("ATTN_STUDENT_ID_FIELD", field)
    text = "SCORES = None\n" if declared is None else f"STUDENT_ID = {declared!r}\n"
    root = _root(tmp_path, text)
    assert submitter_id(root, root / "submission") == expected


def test_no_metadata_or_a_broken_one_leaves_the_module_id(tmp_path, monkeypatch):
    monkeypatch.delenv("ATTN_STUDENT_ID_FIELD", raising=False)
    assert submitter_id(_root(tmp_path / "a", "x = 1\n", meta=None), tmp_path) is None
    root = _root(tmp_path / "b", "x = 1\n", meta=None)
    (root / "submission_metadata.json").write_text("{not json")
    assert submitter_id(root, root / "submission") is None


def test_the_module_is_read_never_run(tmp_path, monkeypatch):
    monkeypatch.delenv("ATTN_STUDENT_ID_FIELD", raising=False)
    marker = tmp_path / "ran"
    root = _root(tmp_path, f"STUDENT_ID = 'S0001'\nopen({str(marker)!r}, 'w').close()\n")
    assert submitter_id(root, root / "submission") == "S0001"
    assert not marker.exists()


def test_someone_elses_variant_earns_nothing_on_gradescope(tmp_path, monkeypatch):
    """A student who submits a friend's worked variant (with the friend's id)
    is graded for their own identity, and exercise A earns nothing."""
    monkeypatch.delenv("ATTN_STUDENT_ID_FIELD", raising=False)
    monkeypatch.setenv("ATTN_EXERCISES", "ex01_by_hand")
    own = run(_root(tmp_path / "own", answers_module(inputs_for("S0001"), "S0001")), "auto")
    friend = run(_root(tmp_path / "friend", answers_module(inputs_for("bob"), "bob")), "auto")
    assert own["score"] == 7
    assert friend["score"] == 0
    text = " ".join(t.get("output", "") for t in friend["tests"]) + friend.get("output", "")
    assert "STUDENT_ID" in text


def test_a_student_told_0_is_told_exactly_which_identifier_to_print_and_set(tmp_path,
                                                                            monkeypatch):
    """The module's example is STUDENT_ID = "s1234567": a student whose
    university ID that is, on a Gradescope course without student IDs (only
    email, id and name), is told to print and set their email, never about a
    roster; a course that set sids accepts it."""
    monkeypatch.delenv("ATTN_STUDENT_ID_FIELD", raising=False)
    monkeypatch.setenv("ATTN_EXERCISES", "ex01_by_hand")
    no_sid = {"users": [{"email": "alice@uni.example", "id": 11, "name": "Alice A"}]}
    module = answers_module(inputs_for("s1234567"), "s1234567")
    told = run(_root(tmp_path / "told", module, meta=no_sid), "auto")
    assert told["score"] == 0
    text = " ".join(t.get("output", "") for t in told["tests"])
    assert "`attn-grade variant alice@uni.example`" in text
    assert "STUDENT_ID = 'alice@uni.example'" in text
    assert "your Gradescope email" in text and "student ID (sid) or email" in text
    assert "roster" not in text

    with_sid = {"users": [{**no_sid["users"][0], "sid": "S1234567"}]}
    assert run(_root(tmp_path / "sid", module, meta=with_sid), "auto")["score"] == 7


def test_a_course_without_sids_still_grades_by_sid_field_as_email(tmp_path, monkeypatch):
    monkeypatch.setenv("ATTN_STUDENT_ID_FIELD", "sid")
    root = _root(tmp_path, "x = 1\n", meta={"users": [{"email": "a@b.example", "id": 3}]})
    chosen = submitter_id(root, root / "submission")
    assert chosen == "a@b.example" and chosen.named == "your Gradescope email"
