"""The interview questions: the key is sound, numbers and letters are graded
with teaching feedback, free text reaches staff, and no answer ships."""
from __future__ import annotations

import ast
import csv
import json
import math

import pytest
from click.testing import CliRunner

from grader import replay
from grader.cli import main
from grader.gradescope import validate_results
from grader.reference.secret import questions as qref
from grader.report import manual_from_gradescope, to_gradescope, to_text
from tests.conftest import EXERCISES_DIR, SOLUTIONS, failures, grade_dir


# 2 points a number, 1 a letter: the hidden suite's markers (text earns staff points only).
FULL = sum({qref.NUMBER: 2, qref.CHOICE: 1}.get(f["kind"], 0) for f in qref.FORMS.values())


def constants(path) -> dict:
    tree = ast.parse(path.read_text())
    return {t.id: n.value for n in tree.body if isinstance(n, ast.Assign)
            for t in n.targets if isinstance(t, ast.Name)}


def test_one_manifest_the_key_the_solution_and_the_stub_agree():
    assert set(qref.FORMS) == set(qref._KEY)
    solved = constants(SOLUTIONS / "questions.py")
    assert list(solved) == list(qref.FORMS)     # same questions, same order
    stub = constants(EXERCISES_DIR / "questions.py")
    assert list(stub) == list(qref.FORMS)
    assert all(isinstance(v, ast.Constant) and v.value is None for v in stub.values())


@pytest.mark.parametrize("name", list(qref.FORMS))
def test_each_key_entry_can_grade_and_teach(name):
    key = qref.key(name)
    if key["kind"] == qref.NUMBER:
        assert key["points"] > 0 and 0 < key["rtol"] <= 0.05 and key["how"]
        for slip, value in key["mistakes"].values():   # every named slip is a wrong answer
            assert not math.isclose(value, key["answer"], rel_tol=key["rtol"]), slip
    elif key["kind"] == qref.CHOICE:
        assert key["answer"] in qref.LETTERS and key["why"]
        assert set(key["wrong"]) == set(qref.LETTERS) - {key["answer"]}
    else:
        assert key["kind"] == qref.TEXT and key["points"] == 0
        assert key["staff_points"] > 0 and len(key["rubric"]) >= 2


def test_the_project_s_own_numbers():
    """The three questions the course adds, computed from first principles."""
    assert qref.key("Q05_KV_CACHE_GB")["answer"] == pytest.approx(2 * 32 * 8 * 128 * 8192 * 2
                                                                 / 1e9)
    n = qref.key("Q13_ATTENTION_PASSES_WEIGHTS_AT")["answer"]
    attention = lambda n: 32 * 32 * 4 * 128 * n * (n + 1) / 2      # noqa: E731
    assert attention(n) > 2 * 7.0e9 * n and attention(n - 1) <= 2 * 7.0e9 * (n - 1)
    mqa = qref.key("Q08_MQA_DECODE_INTENSITY")["answer"]
    assert 31 < mqa < 32    # about h / h_kv = 32, a little less for q and the output


def test_the_chapter_s_numbers_behind_issue_29_s_questions():
    """The seed's figures, from first principles: ~30k, 17.2 GB against 16 GB, 34.4 GB."""
    n = qref.key("Q15_ATTENTION_PASSES_FFN_AT")["answer"]
    ffn = lambda n: 2 * 3 * 4096 * 14336 * n                                  # noqa: E731
    attention = lambda n: 2 * 4096 * (4096 + 1024 + 1024 + 4096) * n \
        + 4 * 128 * 32 * n * (n + 1) // 2                                     # noqa: E731
    assert attention(n) > ffn(n) and attention(n - 1) <= ffn(n - 1)
    assert n == 32768 and abs(n - 30000) / 30000 < 0.1     # the chapter's "about 30k"
    cache = qref.key("Q16_KV_CACHE_128K_GB")["answer"]
    assert round(cache, 1) == 17.2 and cache * 1e9 > 16e9  # bigger than the weights
    assert qref.key("Q17_KV_128K_OVER_WEIGHTS")["answer"] == pytest.approx(cache / 16)
    s = qref.key("Q18_NAIVE_MAX_SEQ_LEN_80GB")["answer"]
    assert 8 * 32 * s * s * 2 <= 80e9 < 8 * 32 * (s + 1) ** 2 * 2
    assert round(8 * 32 * 8192 ** 2 * 2 / 1e9, 1) == 34.4   # the chapter's case fits below
    per_token = qref.key("Q19_GQA_SAVES_MB_PER_TOKEN")["answer"] * 1e6
    assert per_token == 2 * 80 * (64 - 8) * 128 * 2
    assert qref.key("Q20_GQA_SAVES_GB_PER_128K")["answer"] * 1e9 == \
        pytest.approx(per_token * 131072)


def submit(tmp_path, **answers):
    """The reference questions.py with some answers replaced."""
    lines = (SOLUTIONS / "questions.py").read_text().splitlines()
    tree = ast.parse("\n".join(lines))
    for node in reversed(tree.body):   # from the end: line numbers stay valid
        if isinstance(node, ast.Assign) and node.targets[0].id in answers:
            name = node.targets[0].id
            value = answers[name]
            rendered = "float('nan')" if value != value else repr(value)   # NaN: no literal
            lines[node.lineno - 1:node.end_lineno] = [f"{name} = {rendered}"]
    assert set(answers) <= set(constants(SOLUTIONS / "questions.py"))
    sub = tmp_path / "sub"
    sub.mkdir(exist_ok=True)
    (sub / "questions.py").write_text("\n".join(lines) + "\n")
    return sub


def test_the_reference_answers_earn_everything_and_reach_staff(tmp_path):
    report = grade_dir(submit(tmp_path), ["questions"])
    got, total = report.exercise_scores()["questions"]
    assert got == total == FULL and not report.errors
    assert [e["question"] for e in report.manual] == \
        [n for n, f in qref.FORMS.items() if f["kind"] == qref.TEXT]
    data = to_gradescope(report)
    assert not validate_results(data)
    staff = [t for t in data["tests"] if "(staff grade" in t["name"]]
    assert len(staff) == 4 and {t["visibility"] for t in staff} == {"hidden"}
    assert all(t["max_score"] == 0 and "Rubric:" in t["output"] for t in staff)
    assert data["score"] == FULL and manual_from_gradescope(data) == report.manual
    answers = [e["answer"] for e in report.manual]
    assert all(json.dumps(data).count(json.dumps(a)[1:-1]) == 1 for a in answers)  # once
    assert "4 free-text answers (12 points) for staff" in to_text(report)


@pytest.mark.parametrize("name,value,phrase", [
    ("Q05_KV_CACHE_GB", 1.0, "GiB"),
    ("Q05_KV_CACHE_GB", 4.295, "that is MHA"),
    ("Q05_KV_CACHE_GB", 0.537, "only K or only V"),
    ("Q08_MQA_DECODE_INTENSITY", 1.0, "MHA's intensity"),
    ("Q11_KV_PASSES_INT8_WEIGHTS_AT", 122071, "the chapter's case"),
    ("Q13_ATTENTION_PASSES_WEIGHTS_AT", 26703, "causal mask keeps about half"),
    ("Q14_ATTENTION_SHARE_AT_8K", 13.3, "percentage"),
    ("Q03_WHY_SCALE", "a", "the scale changes how peaked"),
    ("Q10_PREFILL_VS_DECODE", "C", "the other way round"),
    ("Q04_CAUSAL_MASK_AND_CACHE", "E", "must be one letter"),
    ("Q09_SCORES_GB", float("nan"), "finite number"),
    # issue 29's lessons: each slip named, then the worked How:
    ("Q15_ATTENTION_PASSES_FFN_AT", 43008, "projections (w_q, w_k, w_v, w_o) were left out"),
    ("Q15_ATTENTION_PASSES_FFN_AT", 18432, "SwiGLU FFN has 3"),
    ("Q16_KV_CACHE_128K_GB", 16.0, "GiB"),
    ("Q16_KV_CACHE_128K_GB", 16.78, "128,000 tokens"),
    ("Q17_KV_128K_OVER_WEIGHTS", 0.931, "inverted"),
    ("Q18_NAIVE_MAX_SEQ_LEN_80GB", 35355, "batch was left out"),
    ("Q18_NAIVE_MAX_SEQ_LEN_80GB", 12952, "80 GiB"),
    ("Q19_GQA_SAVES_MB_PER_TOKEN", 0.328, "GQA's cache per token"),
    ("Q19_GQA_SAVES_MB_PER_TOKEN", 2.1875, "MiB"),
    ("Q20_GQA_SAVES_GB_PER_128K", 343.6, "MHA's cache"),
    ("Q21_KERNEL_FALLBACK", "A", "slower backend"),
    ("Q22_LONG_CONTEXT_COST", "A", "n^2, not n"),
])
def test_a_wrong_answer_loses_its_points_and_is_explained(tmp_path, name, value, phrase):
    report = grade_dir(submit(tmp_path, **{name: value}), ["questions"], suite="hidden")
    failed = failures(report, "questions")
    assert len(failed) in (1, 2), [t.name for t in failed]   # public form check may fail too
    text = "\n".join(t.output for t in failed)
    assert phrase in text, text
    assert report.exercise_scores()["questions"][0] < FULL
    graded = [t for t in failed if t.hidden]
    assert graded and ("How:" in graded[0].output or "The answer is" in graded[0].output
                       or "must be" in graded[0].output)


def test_a_letter_is_read_leniently(tmp_path):
    report = grade_dir(submit(tmp_path, Q03_WHY_SCALE=" b "), ["questions"])
    assert report.exercise_scores()["questions"] == (FULL, FULL)


def test_empty_free_text_is_flagged_but_costs_no_autograder_points(tmp_path):
    report = grade_dir(submit(tmp_path, Q12_MLA="no idea"), ["questions"])
    assert report.exercise_scores()["questions"] == (FULL, FULL)
    flagged = failures(report, "questions")
    assert flagged and "Q12_MLA has 2 words" in flagged[-1].output
    entry = next(e for e in report.manual if e["question"] == "Q12_MLA")
    assert entry["answer"] == "no idea" and entry["points"] == 3


def test_batch_writes_the_rubric_sheet_beside_the_grades(tmp_path):
    klass = tmp_path / "class"
    (klass / "ann").mkdir(parents=True)
    (klass / "ann" / "questions.py").write_text((SOLUTIONS / "questions.py").read_text())
    (klass / "bo").mkdir()
    (klass / "bo" / "questions.py").write_text((EXERCISES_DIR / "questions.py").read_text())
    out = tmp_path / "grades.csv"
    result = CliRunner().invoke(main, ["batch", str(klass), "--out", str(out),
                                       "-e", "questions"])
    assert result.exit_code == 0, result.output
    rows = list(csv.DictReader((tmp_path / "grades_rubric.csv").open()))
    assert [r["question"] for r in rows[:2]] == ["Q01_ATTENTION_IN_WORDS"] * 2
    assert {r["submission"] for r in rows} == {"ann", "bo"} and len(rows) == 8
    ann = next(r for r in rows if r["submission"] == "ann" and r["question"] == "Q12_MLA")
    assert "latent" in ann["answer"] and "low-rank" in ann["rubric"]
    assert ann["points_possible"] == "3" and ann["points"] == ""
    grades = {r["submission"]: r for r in csv.DictReader(out.open())}
    assert float(grades["ann"]["questions"]) == FULL and float(grades["bo"]["questions"]) == 0
    json.loads((tmp_path / "results" / "ann.json").read_text())["extra_data"]["manual_grading"]


def test_the_student_edition_ships_the_forms_not_the_key():
    """Replay ships a secret module's upper-case constants: only the forms."""
    shipped = replay._constants(qref, {})
    assert set(shipped) == {"FORMS", "NUMBER", "CHOICE", "TEXT", "LETTERS", "MIN_WORDS",
                            "MAX_WORDS"}
    text = json.dumps(shipped)
    for word in ("answer", "rubric", "mistakes", "how", "why"):
        assert word not in text
    assert "questions" in replay.SECRET_MODULES
