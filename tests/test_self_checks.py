"""Self-checks that tell right from wrong without giving answers away (issue 51, item 4).

Exercise A's public check works each step from the student's own previous
step and own variant; the questions' public check says right or wrong from
the sealed key.  The public test functions are called here on plain
objects (no worker, no grading): what they decide is what `check` prints.
The student edition's own check on the same answers is
``test_the_editions_check_tells_right_from_wrong`` (corpus tier: it builds
an edition).
"""
from __future__ import annotations

import importlib
import json
import math
import re
import types
import warnings
from pathlib import Path

import numpy as np
import pytest

from grader.feedback import Feedback
from grader.reference import questions_checks
from grader.reference.secret import by_hand
from grader.reference.secret import questions as qref
from grader.variants import COMMON, inputs_for
from tests.conftest import SOLUTIONS
from tests.test_release import edition  # noqa: F401 - the fixture: one edition for the run


def _suite(name: str):
    """A public suite's module (its marks are registered by the suites'
    own pytest.ini, not this run's)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", pytest.PytestUnknownMarkWarning)
        return importlib.import_module(f"grader.suites.public.{name}")


ex01, pub_questions = _suite("test_ex01_by_hand"), _suite("test_questions")

LOOKS_LIKE = "This looks like: "


def _student(student_id, answers: dict) -> types.SimpleNamespace:
    """Exercise A's module as its public tests read it: constants to three decimals."""
    return types.SimpleNamespace(STUDENT_ID=student_id, **{
        name: tuple(value) if name == "ROWS_UNCHANGED_BY_MASK"
        else np.round(np.asarray(value, dtype=np.float64), 3).tolist()
        for name, value in answers.items()})


def _ex01_failures(student) -> dict[str, str]:
    """{check: its feedback} for exercise A's answer checks that fail."""
    checks = {"SCORES": lambda: ex01.test_scores_are_your_q_times_k_transposed(student, None),
              "ROWS_UNCHANGED_BY_MASK":
                  lambda: ex01.test_rows_unchanged_follow_from_your_outputs(student, None)}
    for step in ex01.EARLIER:
        checks[step] = (lambda s: lambda: ex01.test_step_follows_from_your_previous_one(
            student, None, s))(step)
    failed = {}
    for name, check in checks.items():
        try:
            check()
        except Feedback as exc:
            failed[name] = str(exc)
    return failed


def _worked(inputs, scores) -> dict:
    """Every step worked on from ``scores``, rightly, with ``inputs``' V."""
    _, _, v = inputs.arrays()
    scaled = scores / math.sqrt(by_hand.D_HEAD)
    full, causal = by_hand.softmax_rows(scaled), by_hand.softmax_rows(scaled, by_hand.CAUSAL)
    return {"SCORES": scores, "SCALED": scaled, "WEIGHTS_FULL": full, "OUT_FULL": full @ v,
            "WEIGHTS_CAUSAL": causal, "OUT_CAUSAL": causal @ v,
            "ROWS_UNCHANGED_BY_MASK": by_hand.unchanged_rows(full @ v, causal @ v)}


@pytest.mark.parametrize("index", range(0, 300, 3))
def test_exercise_a_passes_every_variants_right_answers(index):
    """Right answers to three decimals pass every step for any identifier."""
    sid = f"student-{index}@uni.example"
    assert _ex01_failures(_student(sid, by_hand.exact(inputs_for(sid)))) == {}


def test_exercise_a_names_a_transposed_product():
    """K @ Q.T worked through rightly: SCORES fails, naming the transposed
    product; every later step follows from it and passes."""
    inputs = inputs_for("alice")
    q, k, _ = inputs.arrays()
    assert not np.allclose(q @ k.T, k @ q.T)       # else the slip would not show
    failed = _ex01_failures(_student("alice", _worked(inputs, k @ q.T)))
    assert list(failed) == ["SCORES"], failed
    assert "This looks like: " + by_hand.MISTAKES["scores_transposed"] in failed["SCORES"]
    assert "attn-grade variant alice" in failed["SCORES"]


def test_exercise_a_names_the_common_exercises_numbers_under_a_student_id():
    """The common exercise's answers handed in under STUDENT_ID = "alice"
    fail SCORES and both outputs, each named as the common exercise's."""
    failed = _ex01_failures(_student("alice", by_hand.exact(COMMON)))
    assert {"SCORES", "OUT_FULL", "OUT_CAUSAL"} <= set(failed), failed
    for step in ("SCORES", "OUT_FULL", "OUT_CAUSAL"):
        assert LOOKS_LIKE + by_hand.MISTAKES["common_answers"] in failed[step], failed[step]


def test_exercise_a_names_weights_carried_with_two_decimals():
    answers = by_hand.exact(COMMON)
    answers["WEIGHTS_FULL"] = np.round(answers["WEIGHTS_FULL"], 2)
    failed = _ex01_failures(_student(None, answers))
    assert list(failed) == ["WEIGHTS_FULL"], failed
    assert LOOKS_LIKE + by_hand.MISTAKES["rounded_weights"] in failed["WEIGHTS_FULL"]


def test_exercise_a_accepts_a_step_right_on_a_wrong_one_and_a_right_one_after_a_slip():
    """Graded as the hidden suite grades: a step worked rightly from a wrong
    SCORES passes, and so does a right SCALED under a wrong SCORES."""
    inputs = inputs_for("bob")
    wrong = _worked(inputs, inputs.arrays()[0] @ inputs.arrays()[1].T + 1)
    assert list(_ex01_failures(_student("bob", wrong))) == ["SCORES"]
    answers = by_hand.exact(inputs)
    answers["SCORES"] = answers["SCORES"] + 1
    assert list(_ex01_failures(_student("bob", answers))) == ["SCORES"]


# -- the questions ------------------------------------------------------------

NUMBERS = [n for n, f in qref.FORMS.items() if f["kind"] == qref.NUMBER]
CHOICES = [n for n, f in qref.FORMS.items() if f["kind"] == qref.CHOICE]


def test_the_sealed_key_is_the_instructors_key():
    """Reseal (``python -m grader.reference.questions_checks``) after changing
    the key: every graded question is sealed, the answer and anything well
    inside its tolerance reads right, anything outside it wrong, each slip
    named, each wrong letter explained."""
    key = questions_checks.sealed()
    assert sorted(key["numbers"]) == sorted(NUMBERS) and sorted(key["choices"]) == sorted(CHOICES)
    for name in NUMBERS:
        entry = qref.key(name)
        want, rtol = entry["answer"], entry["rtol"]
        for factor in (1, 1 + 0.9 * rtol, 1 - 0.9 * rtol):
            assert questions_checks.judge_number(key, name, want * factor) == (True, None), name
        for factor in (1 + 1.1 * rtol, 1 - 1.1 * rtol, 2):
            assert not questions_checks.judge_number(key, name, want * factor)[0], name
        for words, value in entry["mistakes"].values():
            if not math.isclose(value, want, rel_tol=rtol):
                assert questions_checks.judge_number(key, name, value) == (False, words), name
    for name in CHOICES:
        entry = qref.key(name)
        assert questions_checks.judge_choice(key, name, entry["answer"]) == (True, None)
        for letter, why in entry["wrong"].items():
            assert questions_checks.judge_choice(key, name, letter) == (False, why)


def _plain(value):
    """Every string and number of the sealed key but its hashes."""
    if isinstance(value, dict):
        for k, v in value.items():
            yield from _plain(k)
            yield from _plain(v)
    elif isinstance(value, list):
        for v in value:
            yield from _plain(v)
    elif not (isinstance(value, str) and re.fullmatch(r"[0-9a-f]{24,}", value)):
        yield value


def test_the_sealed_key_shows_no_answer_in_plain():
    """No right value, right letter, worked answer ("how") or reason why a
    letter is right stands in the shipped file."""
    text = questions_checks.SEALED.read_text()
    plain = list(_plain(json.loads(text)))
    numbers = {v for v in plain if isinstance(v, (int, float)) and not isinstance(v, bool)}
    strings = " ".join(v for v in plain if isinstance(v, str))
    for name in NUMBERS:
        entry = qref.key(name)
        assert not any(math.isclose(v, entry["answer"], rel_tol=entry["rtol"])
                       for v in numbers), name
        assert entry["how"] not in strings
    for name in CHOICES:
        entry = qref.key(name)
        assert entry["why"] not in strings
        assert not re.search(rf'"{name}": "{entry["answer"]}"', text)


def _questions_module(**changes) -> types.SimpleNamespace:
    source = (SOLUTIONS / "questions.py").read_text()
    values = {}
    exec(compile(source, "questions.py", "exec"), values)   # noqa: S102 - our own solution
    values.update(changes)
    return types.SimpleNamespace(**{k: v for k, v in values.items() if k.startswith("Q")})


def _question_failures(student) -> dict[str, str]:
    failed = {}
    for name in NUMBERS + CHOICES:
        check = pub_questions.test_number_is_right if name in NUMBERS \
            else pub_questions.test_choice_is_right
        try:
            check(student, name)
        except Feedback as exc:
            failed[name] = str(exc)
    return failed


def test_the_questions_check_says_which_answers_are_wrong_and_names_the_slip():
    """Four wrong answers (two numbers with a known slip, one without, one
    letter) fail, each alone, without the right value; the solution passes."""
    assert _question_failures(_questions_module()) == {}
    failed = _question_failures(_questions_module(
        Q16_KV_CACHE_128K_GB=16.0, Q05_KV_CACHE_GB=1.0, Q08_MQA_DECODE_INTENSITY=40.0,
        Q21_KERNEL_FALLBACK="a"))
    assert sorted(failed) == ["Q05_KV_CACHE_GB", "Q08_MQA_DECODE_INTENSITY",
                              "Q16_KV_CACHE_128K_GB", "Q21_KERNEL_FALLBACK"], failed
    assert LOOKS_LIKE in failed["Q16_KV_CACHE_128K_GB"] and "GiB" in failed["Q16_KV_CACHE_128K_GB"]
    assert "GiB" in failed["Q05_KV_CACHE_GB"]
    assert LOOKS_LIKE not in failed["Q08_MQA_DECODE_INTENSITY"]
    assert failed["Q21_KERNEL_FALLBACK"].startswith("Q21_KERNEL_FALLBACK: A is not right: ")
    for name, text in failed.items():
        if name in NUMBERS:
            assert f"{qref.key(name)['answer']:.3g}" not in text, text
        else:
            assert f"The answer is {qref.key(name)['answer']}" not in text, text


def test_no_sealed_file_is_left_unshipped():
    """The sealed key ships with the package (its data files)."""
    assert questions_checks.SEALED.parent == Path(questions_checks.__file__).parent.parent / "data"
    pyproject = (SOLUTIONS.parent / "pyproject.toml").read_text()
    assert '"data/*.json"' in pyproject


# -- the student edition's own check on the same mistakes ----------------------

def _write_ex01(folder: Path, student_id: str, answers: dict) -> None:
    """A student's ex01_by_hand.py: the stub's text with these constants."""
    source = (SOLUTIONS / "ex01_by_hand.py").read_text()
    head, tail = source.split("# BEGIN SOLUTION", 1)[0], source.split("# END SOLUTION", 1)[1]
    values = _student(student_id, answers)
    body = "".join(f"{name} = {getattr(values, name)!r}\n" for name in answers)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "ex01_by_hand.py").write_text(
        head.replace("STUDENT_ID = None", f"STUDENT_ID = {student_id!r}") + body + tail)


def _edition_check(edition: Path, folder: Path, *letters: str) -> str:
    import os
    import subprocess
    import sys
    env = dict(os.environ, PYTHONPATH=str(edition))
    proc = subprocess.run([sys.executable, "-m", "grader.cli", "check", *letters, "--path",
                           str(folder)], cwd=edition, env=env, capture_output=True, text=True,
                          timeout=900)
    assert proc.returncode == 1, proc.stdout + proc.stderr     # a public test failed
    return proc.stdout


def _failed_block(out: str, title: str) -> str:
    """The FAIL line of the test titled ``title`` and its feedback under it."""
    lines = out.splitlines()
    start = next(i for i, ln in enumerate(lines) if ln.startswith("  FAIL " + title))
    end = next((j for j in range(start + 1, len(lines)) if not lines[j].startswith("      ")),
               len(lines))
    return "\n".join(lines[start:end])


@pytest.mark.slow
def test_the_editions_check_tells_right_from_wrong(edition, tmp_path):
    """In the student edition: a transposed A and the common exercise's A
    under a student's own ID fail SCORES with their reason; four wrong
    question answers fail, each saying it is not right, without the value."""
    inputs = inputs_for("alice")
    q, k, _ = inputs.arrays()
    sub = tmp_path / "sub"
    _write_ex01(sub, "alice", _worked(inputs, k @ q.T))
    source = (SOLUTIONS / "questions.py").read_text()
    for name, right, wrong in (("Q16_KV_CACHE_128K_GB", "17.18", "16.0"),
                               ("Q05_KV_CACHE_GB", "1.074", "1.0"),
                               ("Q08_MQA_DECODE_INTENSITY", "31.9", "40.0"),
                               ("Q21_KERNEL_FALLBACK", '"B"', '"A"')):
        assert f"\n{name} = {right}\n" in source
        source = source.replace(f"\n{name} = {right}\n", f"\n{name} = {wrong}\n")
    (sub / "questions.py").write_text(source)
    out = _edition_check(edition, sub, "A", "Q")
    scores = _failed_block(out, "SCORES is Q @ K.T of your own Q and K")
    assert "This looks like: " + by_hand.MISTAKES["scores_transposed"] in scores, out
    assert out.count("\n  FAIL ") == 5, out          # SCORES and the four answers
    for name in ("Q16_KV_CACHE_128K_GB", "Q05_KV_CACHE_GB", "Q08_MQA_DECODE_INTENSITY"):
        block = _failed_block(out, f"numeric answer is right (the check says right or wrong, "
                                   f"never the value) [{name}]")
        assert "is not right (graded to" in block, block
        assert f"{qref.key(name)['answer']:.3g}" not in block, block
    assert "This looks like: the answer is in GiB" in out, out
    assert "Q21_KERNEL_FALLBACK: A is not right: " in out, out

    common = tmp_path / "common"
    _write_ex01(common, "alice", by_hand.exact(COMMON))
    out = _edition_check(edition, common, "A")
    scores = _failed_block(out, "SCORES is Q @ K.T of your own Q and K")
    assert LOOKS_LIKE + by_hand.MISTAKES["common_answers"] in scores, out
    assert "attn-grade variant alice" in scores, out


@pytest.mark.slow
@pytest.mark.corpus
def test_the_editions_check_fails_a_kernel_that_never_rescales(edition, tmp_path):
    """In the student edition: a Triton kernel with key tiles of 64 that never
    rescales its accumulator passes the small cases (one tile) and fails the
    rising-scores case, named."""
    source = (SOLUTIONS / "ex07_flash_attention.py").read_text()
    for find, replace in (
            ("acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v)",
             "acc = acc + tl.dot(p.to(v.dtype), v)"),
            ('_CONFIGS = [triton.Config({"BLOCK_M": 16, "BLOCK_N": 16}, num_warps=1)]',
             '_CONFIGS = [triton.Config({"BLOCK_M": 16, "BLOCK_N": 64}, num_warps=1)]')):
        assert source.count(find) == 1, find
        source = source.replace(find, replace)
    sub = tmp_path / "sub"
    sub.mkdir()
    (sub / "ex07_flash_attention.py").write_text(source)
    out = _edition_check(edition, sub, "G")
    assert out.count("\n  FAIL ") == 1, out
    block = _failed_block(out, "flash_attention over 512 keys whose scores rise tile after tile")
    assert "does not rescale the accumulator" in block, block
