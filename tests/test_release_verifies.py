"""The release fails when a public test of the solutions would check nothing
in the student edition (issue 26, item 1): ``grader.release`` checks the
solutions with the edition it just wrote, and every test that says "not
checked in the student edition" there, beyond the shrinking
``STILL_NOT_CHECKED``, stops the release with its name."""
from __future__ import annotations

import shutil

import pytest
from click.testing import CliRunner

from grader import release
from grader.cli import main
from tests import test_release
from tests.test_release import edition  # noqa: F401 - the shared student edition


def test_one_list_of_what_the_edition_still_does_not_check():
    """The release's list and the edition test's list are the same list."""
    assert release.STILL_NOT_CHECKED == test_release.STILL_NOT_CHECKED
    assert release.NOT_CHECKED == test_release.NOT_CHECKED


def test_a_public_test_that_checks_nothing_stops_the_release(tmp_path, monkeypatch):
    """Wiring: what verify finds beyond the list is a click error naming the test,
    exit 2, and no edition is claimed written."""
    extra = ("ex07_flash_attention", "test_blockwise_small")
    monkeypatch.setattr(release, "record_public_answers", lambda folder: folder.mkdir(
        parents=True, exist_ok=True))
    monkeypatch.setattr(release, "unchecked_in_edition",
                        lambda out, exercises=None: set(release.STILL_NOT_CHECKED) | {extra})
    result = CliRunner().invoke(main, ["release", str(tmp_path / "e"), "--install",
                                       test_release.URL, "--no-git"])
    assert result.exit_code == 2, result.output
    assert "ex07_flash_attention::test_blockwise_small" in result.output
    assert "wrote the student edition" not in result.output
    monkeypatch.setattr(release, "unchecked_in_edition",
                        lambda out, exercises=None: set(release.STILL_NOT_CHECKED))
    release.verify_every_public_test_checks(tmp_path)   # the listed ones only: no error


_SEEDED_TEST = '''

@pytest.mark.points(1)
def test_planted_seeded_inputs(student):
    """a planted public test whose inputs mix in the run's seed"""
    from grader.reference.cases import rng_for
    x = rng_for("planted").standard_normal((1, 2, 3, 2))
    check_close(student.repeat_kv(x, 2), ref.repeat_kv(x, 2), what="repeat_kv", atol=0, rtol=0)
'''


@pytest.mark.slow
def test_the_check_finds_an_unrecorded_public_test(edition, tmp_path):  # noqa: F811
    """For real: in a copy of the edition, a public test whose answers the
    release did not record (as with inputs drawn with the run's seed, the way
    exercise G's once were: they never replay) says "not checked in the student
    edition", and the release's check names it; the edition's own public tests
    of exercise C check everything."""
    copy = tmp_path / "edition"
    shutil.copytree(edition, copy, ignore=shutil.ignore_patterns(".git", "__pycache__"))
    assert release.unchecked_in_edition(copy, ["ex03_gqa"]) == set()
    suite = copy / "grader" / "suites" / "public" / "test_ex03_gqa.py"
    suite.write_text(suite.read_text() + _SEEDED_TEST)
    assert release.unchecked_in_edition(copy, ["ex03_gqa"]) == {
        ("ex03_gqa", "test_planted_seeded_inputs")}
