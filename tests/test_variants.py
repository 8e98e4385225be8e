"""Exercise A per student: variants, their grading, the roster, and the run seed."""
from __future__ import annotations

import csv
import json

import numpy as np
import pytest
from click.testing import CliRunner

from grader.cli import main
from grader.reference import cases
from grader.reference.secret import by_hand
from grader.variants import COMMON, BadStudentId, inputs_for, normalize
from tests.conftest import copy_solutions, failures, grade_dir as _grade_dir

IDS = [f"s{n:07d}" for n in range(400)] + ["alice", "Bob Smith", "élodie@uni.example"]



def grade_dir(*args, **kwargs):
    """These tests are about exercise A's answers and whose they are: its
    heatmap's test (a point for any working plot) is left out."""
    kwargs.setdefault("keyword", "not plot")
    return _grade_dir(*args, **kwargs)


def answers_module(inputs, student_id=None, **override) -> str:
    """An ex01 module holding the exact answers of ``inputs``, to three decimals."""
    exact = by_hand.exact(inputs)
    lines = [] if student_id is None else [f"STUDENT_ID = {student_id!r}"]
    for step in by_hand.STEPS:
        value = override.get(step, exact[step])
        if step != "ROWS_UNCHANGED_BY_MASK":
            value = np.round(np.asarray(value, dtype=float), 3).tolist()
        lines.append(f"{step} = {value!r}")
    return "\n".join(lines) + "\n"


def submit(tmp_path, text, name="sub"):
    sub = tmp_path / name
    sub.mkdir(parents=True)
    (sub / "ex01_by_hand.py").write_text(text)
    return sub


def ex01(report):
    return report.exercise_scores()["ex01_by_hand"]


# -- the variants themselves -------------------------------------------------
def test_a_variant_is_the_same_everywhere_and_differs_between_students():
    assert inputs_for("alice") == inputs_for("  ALICE ")          # normalized
    assert inputs_for("alice") != inputs_for("alic3")
    distinct = {(v.q, v.k, v.v) for v in map(inputs_for, IDS)}
    assert len(distinct) > 0.95 * len(IDS)
    assert inputs_for(None) is COMMON and inputs_for(12345) == inputs_for("12345")


@pytest.mark.parametrize("sid", IDS)
def test_every_variant_has_the_properties_the_grading_relies_on(sid):
    inputs = inputs_for(sid)
    assert (inputs.q, inputs.k, inputs.v) != (COMMON.q, COMMON.k, COMMON.v)
    exact = by_hand.exact(inputs)
    # Step 7 is unambiguous: rows 0 and 1 change clearly, row 2 never does.
    assert exact["ROWS_UNCHANGED_BY_MASK"] == (2,)
    change = np.abs(exact["OUT_FULL"] - exact["OUT_CAUSAL"]).max(axis=1)
    assert change[0] > 3 * by_hand.TOLERANCE and change[1] > 3 * by_hand.TOLERANCE
    for step in ("SCORES", "SCALED", "WEIGHTS_FULL"):   # no answer is itself degenerate
        assert not by_hand.degenerate(exact[step]), step
    # The slips the feedback names stay distinguishable from the right answer.
    for step in ("SCALED", "WEIGHTS_CAUSAL"):
        for name, wrong in by_hand.slips(step, inputs).items():
            if "common exercise" not in name and "also hides the diagonal" not in name:
                assert not by_hand.within(np.asarray(wrong), exact[step]), (step, name)


@pytest.mark.parametrize("bad", ["", "   ", "x" * 201, "tab\there", None.__class__, True, 1.5])
def test_bad_identifiers_are_refused(bad):
    with pytest.raises(BadStudentId):
        normalize(bad)


def test_variant_command_prints_q_k_v_and_rejects_nonsense():
    result = CliRunner().invoke(main, ["variant", "alice"])
    assert result.exit_code == 0, result.output
    assert inputs_for("alice").text() in result.output
    assert "STUDENT_ID = 'alice'" in result.output
    empty = CliRunner().invoke(main, ["variant", " "])
    assert empty.exit_code == 2 and "identifier is empty" in empty.output


def test_the_student_edition_has_inputs_but_no_answers():
    """variants ships; it must not compute any step of the exercise."""
    import inspect

    from grader import variants
    from grader.replay import SECRET_MODULES
    assert "by_hand" in SECRET_MODULES and "variants" not in SECRET_MODULES
    import ast
    tree = ast.parse(inspect.getsource(variants))
    names = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)} | \
        {n.attr for n in ast.walk(tree) if isinstance(n, ast.Attribute)}
    assert not names & {"exp", "sqrt", "softmax", "matmul", "dot", "T"}, names
    assert not any(isinstance(n, ast.MatMult) for n in ast.walk(tree))


# -- grading a variant ---------------------------------------------------------
def test_a_variant_solved_earns_full_marks_and_the_common_answers_earn_nothing(tmp_path):
    mine = inputs_for("alice")
    good = grade_dir(submit(tmp_path, answers_module(mine, "alice")), ["ex01_by_hand"])
    assert ex01(good) == (7, 7), [t.output for t in failures(good)]
    assert "graded for STUDENT_ID = 'alice'" in "\n".join(t.output for t in good.tests)

    copied = grade_dir(submit(tmp_path, answers_module(COMMON, "alice"), "copied"),
                       ["ex01_by_hand"])
    assert ex01(copied)[0] == 1      # step 7 only: row (2,) is unchanged in every variant
    text = failures(copied)[0].output
    assert "answers of the common exercise" in text and "attn-grade variant" in text


def test_without_student_id_the_common_exercise_is_graded(tmp_path):
    report = grade_dir(submit(tmp_path, answers_module(COMMON)), ["ex01_by_hand"])
    assert ex01(report) == (7, 7)
    said = "\n".join(t.output for t in report.tests)
    assert "graded on the common exercise: no STUDENT_ID" in said
    # How to get a variant is said once (by the public test), not again by the hidden one.
    assert said.count("attn-grade variant YOUR_ID") == 1, said
    assert not report.errors


def test_the_roster_decides_and_a_mismatch_earns_nothing(tmp_path):
    mine = inputs_for("s0000001")
    sub = submit(tmp_path, answers_module(mine, "s0000001"))
    agreed = grade_dir(sub, ["ex01_by_hand"], student_id="S0000001 ")
    assert ex01(agreed) == (7, 7)
    other = grade_dir(sub, ["ex01_by_hand"], student_id="s0000002")
    assert ex01(other) == (0, 7)
    said = [t.output for t in failures(other)]
    assert any("does not match the course roster" in o and "'s0000002'" in o for o in said), said
    # No STUDENT_ID: the roster's identifier is used.
    bare = submit(tmp_path, answers_module(mine), "bare")
    assert ex01(grade_dir(bare, ["ex01_by_hand"], student_id="s0000001")) == (7, 7)


def test_an_unusable_student_id_is_named(tmp_path):
    text = answers_module(COMMON).replace("SCORES =", "STUDENT_ID = 42.5\nSCORES =", 1)
    report = grade_dir(submit(tmp_path, text), ["ex01_by_hand"])
    assert ex01(report)[0] == 0
    assert "STUDENT_ID = 42.5 cannot be used" in failures(report)[0].output


def test_a_degenerate_step_earns_no_carry_forward(tmp_path):
    """Zeros in SCORES, then "correct" work from them: only honest steps count."""
    zeros = np.zeros((3, 3))
    uniform = np.full((3, 3), 1 / 3)
    v = np.array(COMMON.v, dtype=float)
    causal = by_hand.softmax_rows(zeros, by_hand.CAUSAL)
    text = answers_module(COMMON, SCORES=zeros, SCALED=zeros, WEIGHTS_FULL=uniform,
                          OUT_FULL=uniform @ v, WEIGHTS_CAUSAL=causal,
                          OUT_CAUSAL=causal @ v)
    report = grade_dir(submit(tmp_path, text), ["ex01_by_hand"])
    # Only ROWS_UNCHANGED_BY_MASK (right from the exact outputs' point of view too) scores.
    failed = {t.name for t in failures(report)}
    assert ex01(report)[0] <= 1, failed
    assert all(f"test_step[{s}]" in failed for s in by_hand.STEPS[:6])


def test_carry_forward_still_credits_an_honest_slip():
    exact = by_hand.exact()
    answers = {"SCORES": exact["SCORES"], "SCALED": exact["SCORES"]}  # forgot the scale
    carried = by_hand.carry("WEIGHTS_FULL", answers)
    assert carried is not None and np.allclose(carried, by_hand.softmax_rows(exact["SCORES"]))
    assert by_hand.carry("WEIGHTS_FULL", {"SCALED": np.zeros((3, 3))}) is None
    assert by_hand.carry("OUT_FULL", {"WEIGHTS_FULL": np.full((3, 3), 1 / 3)}) is None


# -- batch with a roster -------------------------------------------------------
def write_roster(path, rows, header=("submission", "student_id")):
    with path.open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(header)
        w.writerows(rows)
    return path


def test_batch_grades_each_submission_for_its_roster_entry(tmp_path):
    klass = tmp_path / "class"
    submit(klass, answers_module(inputs_for("u1"), "u1"), "ann")       # agrees
    submit(klass, answers_module(inputs_for("u1"), "u1"), "ben")       # ann's work, ben's row
    submit(klass, answers_module(inputs_for("u3")), "cy")              # no STUDENT_ID
    roster = write_roster(tmp_path / "roster.csv", [("ann", "u1"), ("ben", "u2"), ("cy", "u3")])
    out = tmp_path / "grades.csv"
    result = CliRunner().invoke(main, ["batch", str(klass), "--out", str(out), "-e", "ex01",
                                       "--roster", str(roster), "--jobs", "2"])
    assert result.exit_code == 0, result.output
    rows = {r["submission"]: r for r in csv.DictReader(out.open())}
    assert float(rows["ann"]["ex01_by_hand"]) == 7
    assert float(rows["ben"]["ex01_by_hand"]) == 0
    assert float(rows["cy"]["ex01_by_hand"]) == 7
    ben = json.loads((tmp_path / "results" / "ben.json").read_text())
    assert any("does not match the course roster" in t["output"] for t in ben["tests"])


@pytest.mark.parametrize("content,phrase", [
    ("name,id\nann,u1\n", "needs a header row with the columns submission and student_id"),
    ("submission,student_id\n", "holds no rows"),
    ("submission,student_id\nann,u1\nann,u2\n", "listed twice"),
    ("submission,student_id\nann,\n", "line 2: the student identifier is empty"),
])
def test_a_bad_roster_is_one_sentence(tmp_path, content, phrase):
    klass = tmp_path / "class"
    submit(klass, answers_module(COMMON), "ann")
    roster = tmp_path / "roster.csv"
    roster.write_text(content)
    result = CliRunner().invoke(main, ["batch", str(klass), "--roster", str(roster),
                                       "--out", str(tmp_path / "g.csv")])
    assert result.exit_code == 2, result.output
    assert phrase in result.output and "Traceback" not in result.output


# -- the run seed --------------------------------------------------------------
def test_hidden_cases_follow_the_run_seed():
    a = cases.rng_for("mha", 1).standard_normal(4)
    with cases.run_seed(7):
        b = cases.rng_for("mha", 1).standard_normal(4)
        b_again = cases.rng_for("mha", 1).standard_normal(4)
        seed_b = cases.case_seed("ex05", 51)
    with cases.run_seed(8):
        c = cases.rng_for("mha", 1).standard_normal(4)
        assert cases.case_seed("ex05", 51) != seed_b
    assert np.array_equal(b, b_again) and not np.array_equal(b, c)
    assert np.array_equal(a, cases.rng_for("mha", 1).standard_normal(4))   # reset after


def test_hidden_suites_draw_only_through_the_seeded_helpers():
    """Cases come from grader.reference.cases: random ones from the run's seed,
    fixed ones (fixed_rng, fixed_seed) the same in every grading by design.  A
    seed written into a suite would bypass both."""
    import re

    from grader.paths import SUITES_DIR
    fixed = re.compile(r"default_rng\(\s*\d|manual_seed\(\s*(seed|\d)|np\.random\.(seed|rand)"
                       r"|_inputs\(\s*\d")
    for path in sorted((SUITES_DIR / "hidden").glob("test_*.py")):
        for n, line in enumerate(path.read_text().splitlines(), 1):
            if fixed.search(line):
                # ex03's shape-error test: its numbers are never compared with anything.
                allowed = "default_rng(5)" in line and path.name.startswith("test_ex03")
                assert allowed, f"{path.name}:{n}: {line.strip()}"


def test_a_grade_records_its_seed_and_reproduces_with_it(tmp_path):
    sub = copy_solutions(tmp_path / "sub", ["ex02_mha"])
    one = tmp_path / "one.json"
    result = CliRunner().invoke(main, ["grade", str(sub), "-e", "ex02", "-k", "softmax_random",
                                       "--format", "json", "--out", str(one)])
    assert result.exit_code == 0, result.output
    first = json.loads(one.read_text())
    assert isinstance(first["extra_data"]["seed"], int)   # ours: under extra_data
    two = tmp_path / "two.json"
    CliRunner().invoke(main, ["grade", str(sub), "-e", "ex02", "-k", "softmax_random",
                              "--format", "json", "--out", str(two), "--seed",
                              str(first["extra_data"]["seed"])])
    assert json.loads(two.read_text())["extra_data"]["seed"] == first["extra_data"]["seed"]
    text = CliRunner().invoke(main, ["grade", str(sub), "-e", "ex02", "-k", "softmax_random",
                                     "--seed", "99"])
    assert "seed 99 (--seed 99 reproduces this grade)" in text.output
    bad = CliRunner().invoke(main, ["grade", str(sub), "--seed", "-1"])
    assert bad.exit_code == 2


def test_fresh_runs_draw_fresh_seeds(tmp_path):
    sub = copy_solutions(tmp_path / "sub", ["ex01_by_hand"])
    seeds = {grade_dir(sub, ["ex01_by_hand"], keyword="whose").seed for _ in range(3)}
    assert len(seeds) == 3


def test_the_run_seed_reaches_the_hidden_cases(tmp_path):
    """The same failing submission, two seeds: the hidden case it fails on differs.
    It fails on 4-D arrays only: the fixed cases, which come first and are the
    same under every seed, have none."""
    sub = tmp_path / "sub"
    sub.mkdir()
    (sub / "ex02_mha.py").write_text(
        "import numpy as np\n"
        "def softmax(x, axis=-1):\n"
        "    x = np.asarray(x)\n"
        "    if x.ndim == 4:\n"
        "        raise ValueError(f'shape {np.shape(x)} sum {float(np.sum(x)):.6f}')\n"
        "    e = np.exp(x - np.max(x, axis=axis, keepdims=True))\n"
        "    return e / e.sum(axis=axis, keepdims=True)\n")
    outputs = []
    for seed in (1, 2, 1):
        report = grade_dir(sub, ["ex02_mha"], keyword="softmax_random", seed=seed)
        outputs.append(failures(report)[0].output)
    assert outputs[0] == outputs[2] and outputs[0] != outputs[1]


def test_the_self_check_says_whose_variant_it_is(tmp_path):
    sub = submit(tmp_path, answers_module(inputs_for("alice"), "alice"))
    public = grade_dir(sub, ["ex01_by_hand"], suite="public", keyword="not plot")
    assert public.score == public.max_score == 0 and not failures(public)
    assert "`attn-grade variant alice`" in "\n".join(t.output for t in public.tests)
    bad = submit(tmp_path, answers_module(COMMON, ""), "bad")
    flagged = failures(grade_dir(bad, ["ex01_by_hand"], suite="public", keyword="not plot"))
    assert len(flagged) == 1 and "identifier is empty" in flagged[0].output


def test_grade_refuses_an_empty_student_id(tmp_path):
    result = CliRunner().invoke(main, ["grade", str(tmp_path), "--student-id", " "])
    assert result.exit_code == 2 and "identifier is empty" in result.output


def test_a_batch_rerun_with_a_roster_regrades(tmp_path):
    """A result graded without the roster is not the roster's grade."""
    klass = tmp_path / "class"
    submit(klass, answers_module(COMMON), "ann")
    out = tmp_path / "grades.csv"
    args = ["batch", str(klass), "--out", str(out), "-e", "ex01"]
    assert "1 graded" in CliRunner().invoke(main, args).output
    assert float(next(csv.DictReader(out.open()))["ex01_by_hand"]) == 7
    roster = write_roster(tmp_path / "roster.csv", [("ann", "u9")])
    again = CliRunner().invoke(main, args + ["--roster", str(roster)])
    assert "1 graded, 0 already graded" in again.output
    # Not u9's answers: only step 7, the same row (2,) in every variant, still counts.
    assert float(next(csv.DictReader(out.open()))["ex01_by_hand"]) == 1
    third = CliRunner().invoke(main, args + ["--roster", str(roster)])
    assert "0 graded, 1 already graded" in third.output
    data = json.loads((tmp_path / "results" / "ann.json").read_text())
    assert data["extra_data"]["student_id"] == "u9"
