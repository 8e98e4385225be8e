"""End to end: the reference earns full marks, stubs earn nothing, and a
broken submission costs only what it breaks."""
from __future__ import annotations

import json
import textwrap

import pytest

from grader.core import Options, maximum
from grader.gradescope import validate_results
from grader.report import to_gradescope, to_text
from tests.conftest import (FOUNDATION, copy_solutions, failures, grade_dir, graded_once,
                            graded_solutions, graded_stubs, one_exercise)



@pytest.mark.parametrize("exercise", FOUNDATION)
def test_solutions_get_full_marks(exercise, tmp_path_factory):
    # A-C's reference graded once a run in each suite (tests/conftest.py);
    # each case reads its own exercise's part.
    report = one_exercise(graded_solutions(tmp_path_factory), exercise)
    got, total = report.exercise_scores()[exercise]
    assert total > 0 and got == total, to_text(report)
    assert total == maximum(Options(exercises=[exercise]))[exercise]   # tests/test_one_max.py
    assert not report.errors
    _assert_gradescope_shape(to_gradescope(report), exercise)   # the same grading
    public = one_exercise(graded_solutions(tmp_path_factory, "public"), exercise)
    assert public.score == public.max_score
    assert len(public.tests) < len(report.tests)  # the hidden suite adds tests


def test_stubs_get_zero_and_the_grader_completes(tmp_path_factory):
    report = graded_stubs(tmp_path_factory)   # every exercise's stub, graded once a run
    assert report.score == 0, [t.full_name for t in report.tests if t.score]
    # Out of what the solutions are out of (tests/test_one_max.py).
    assert report.exercise_scores() == {e: (0, most) for e, most in maximum().items()}
    assert not report.errors, report.errors
    text = to_text(report)
    assert "not implemented yet" in text


def _assert_gradescope_shape(result: dict, exercise: str) -> None:
    """Gradescope's JSON of a hidden grading of ``exercise``: checked on the
    grading of test_solutions_get_full_marks (one grading, not one more):
    it follows Gradescope's specification, and says what each test is."""
    assert validate_results(result) == []
    json.dumps(result)
    assert result["score"] == sum(t["score"] for t in result["tests"])
    for t in result["tests"]:
        assert set(t) >= {"name", "score", "max_score", "status", "output", "visibility"}
        assert t["name"].startswith(f"{exercise}: ")
        assert t["status"] in ("passed", "failed")
        assert t["visibility"] in ("visible", "after_published")
    assert {t["visibility"] for t in result["tests"]} == {"visible", "after_published"}


def _sabotage(path, module, old, new):
    file = path / f"{module}.py"
    text = file.read_text()
    assert text.count(old) == 1, old
    file.write_text(text.replace(old, new))


@pytest.mark.slow
def test_hang_exit_and_crash_cost_only_the_tests_that_hit_them(tmp_path):
    sub = copy_solutions(tmp_path / "sub", FOUNDATION)
    # ex01: hangs at import, spinning.  ex02: multi_head_attention hangs asleep
    # (ex03 does not use it; test_attacks spins in a call).
    # ex03: one function calls os._exit, one segfaults, one raises SystemExit,
    # one raises KeyboardInterrupt.
    (sub / "ex01_by_hand.py").write_text("while True:\n    pass\n")
    _sabotage(sub, "ex02_mha", '    b, s, _ = x.shape\n    positions = np.arange(s)',
              '    import time; time.sleep(3600)\n    b, s, _ = x.shape\n    positions = np.arange(s)')
    _sabotage(sub, "ex03_gqa", "    return 2 * n_layers", "    import os; os._exit(3)\n    return 2 * n_layers")
    _sabotage(sub, "ex03_gqa", "    return n_heads / n_kv_heads",
              "    import ctypes; ctypes.string_at(0)\n    return n_heads / n_kv_heads")
    _sabotage(sub, "ex03_gqa", "    per_token = kv_cache_bytes(",
              "    raise SystemExit(0)\n    per_token = kv_cache_bytes(")
    _sabotage(sub, "ex03_gqa", "    b, h_kv, s, d_head = x.shape\n",
              "    raise KeyboardInterrupt\n")
    # (the heatmaps' tests left out: drawing takes longer than these 2 s limits)
    report = grade_dir(sub, FOUNDATION, call_timeout=2, import_timeout=3, keyword="not plot")
    assert not report.errors, report.errors
    by_ex = report.by_exercise()
    assert all(t.score == 0 for t in by_ex["ex01_by_hand"])
    assert "did not finish within 3 s" in by_ex["ex01_by_hand"][0].output
    for t in by_ex["ex02_mha"]:
        hits = "multi_head_attention" in t.title or "earlier outputs" in t.title \
            or "changing later tokens" in t.title or "shifting every position" in t.title
        assert (t.status == "failed") == hits, (t.title, t.output)
    mha = [t for t in by_ex["ex02_mha"] if t.status == "failed"]
    assert any("did not finish within 2 s" in t.output for t in mha)
    outputs = {t.name: t.output for t in failures(report, "ex03_gqa")}
    joined = "\n".join(outputs.values())
    assert "exited with code 3" in joined
    assert "SIGSEGV" in joined
    assert "SystemExit" in joined and "KeyboardInterrupt" in joined
    passed = {t.title for t in by_ex["ex03_gqa"] if t.status == "passed"}
    assert any("grouped_query_attention rejects" in t for t in passed)
    assert any("LLAMA3_70B_KV_SAVING" in t for t in passed)


def _printing_mha_and_broken_gqa(folder):
    """Two independent scenarios in one submission, graded once for the two
    tests that read it: ex02 prints a lot as it runs, ex03 does not parse."""
    copy_solutions(folder, FOUNDATION)
    _sabotage(folder, "ex02_mha", "    x = np.asarray(x)\n    m = np.max",
              "    print('debug ' * 1000); import sys; sys.stdout.flush()\n"
              "    x = np.asarray(x)\n    m = np.max")
    (folder / "ex03_gqa.py").write_text("import numpy as np\n\ndef repeat_kv(x, n_rep)\n    pass\n")


def _printing_and_broken(tmp_path_factory):
    return graded_once(tmp_path_factory, "ex02-prints-ex03-syntax",
                       _printing_mha_and_broken_gqa, FOUNDATION)


def test_syntax_error_costs_only_its_exercise_and_names_the_line(tmp_path_factory):
    report = _printing_and_broken(tmp_path_factory)
    scores = report.exercise_scores()
    assert scores["ex01_by_hand"][0] == scores["ex01_by_hand"][1]
    assert scores["ex02_mha"][0] == scores["ex02_mha"][1]
    assert scores["ex03_gqa"][0] == 0
    out = failures(report, "ex03_gqa")[0].output
    assert "SyntaxError" in out and "ex03_gqa.py, line 3" in out


def test_missing_module_and_missing_function(tmp_path):
    sub = copy_solutions(tmp_path / "sub", ["ex02_mha"])
    _sabotage(sub, "ex02_mha", "def merge_heads(x):", "def merge_heads_(x):")
    report = grade_dir(sub, ["ex02_mha", "ex03_gqa"])
    ex03 = failures(report, "ex03_gqa")
    assert ex03 and all("ex03_gqa.py was not found in the submission" in t.output for t in ex03)
    missing = {t.name: t.output for t in failures(report, "ex02_mha")}
    assert "does not define merge_heads" in missing["test_merge_heads_undoes_split"]
    # used inside mha: one root cause, charged once (mha's test says where it is)
    mha = missing["test_multi_head_attention_small"]
    assert "NameError" in mha or "follows from your merge_heads" in mha, mha


def test_student_output_does_not_disturb_grading(tmp_path_factory):
    report = _printing_and_broken(tmp_path_factory)   # ex02 prints as it runs
    got, total = report.exercise_scores()["ex02_mha"]
    assert got == total > 0 and not report.errors


def test_carry_forward_costs_only_the_first_wrong_step(tmp_path):
    sub = tmp_path / "sub"
    sub.mkdir()
    # SCORES wrong (every entry doubled) and every later step done right from it.
    import numpy as np
    from grader.reference.secret import by_hand
    scores = (by_hand.Q @ by_hand.K.T) * 2
    answers = {"SCORES": scores}
    for step in by_hand.STEPS[1:]:
        answers[step] = by_hand.carry(step, answers)
    text = "\n".join(f"{k} = {np.round(v, 3).tolist() if k != 'ROWS_UNCHANGED_BY_MASK' else v!r}"
                     for k, v in answers.items())
    (sub / "ex01_by_hand.py").write_text(text + "\n")
    report = grade_dir(sub, ["ex01_by_hand"])
    steps = [t for t in report.tests if t.name.startswith("test_step[")]
    assert [t.status for t in steps].count("failed") == 1
    assert steps[0].status == "failed" and "[SCORES]" in steps[0].name, \
        [t.name for t in steps]
    assert "follows correctly from your own earlier answer" in steps[1].output


def test_gpu_speed_feedback_is_never_published(tmp_path):
    """The speed run holds the reference kernel: its feedback stays hidden."""
    sub = copy_solutions(tmp_path / "sub", ["ex07_flash_attention"])
    report = grade_dir(sub, ["ex07_flash_attention"], keyword="gpu_speed")
    speed = [t for t in report.tests if t.name.startswith("test_gpu_speed")]
    assert speed and all(t.visibility == "hidden" for t in speed)
    assert all(t.status == "not_run" for t in speed) or all(t.status != "not_run"
                                                           for t in speed)


def test_only_the_main_thread_parses_while_workers_start_in_the_background(tmp_path,
                                                                          monkeypatch):
    """The submission's imports are read (parsed) before its workers start in
    the background: CPython 3.11 fails two threads that build ASTs at once
    ("AST constructor recursion depth mismatch"), and pytest parses every
    suite on the main thread meanwhile (grader.sandbox.reach)."""
    import ast
    import threading

    sub = copy_solutions(tmp_path / "sub", ["ex02_mha", "ex03_gqa"])
    for name in ("ex02_mha", "ex03_gqa"):     # contents no earlier grading parsed
        path = sub / f"{name}.py"
        path.write_text(path.read_text() + f"\n# {tmp_path.name}\n")
    threads, real = [], ast.parse

    def parse(*args, **kwargs):
        threads.append(threading.current_thread().name)
        return real(*args, **kwargs)

    monkeypatch.setattr(ast, "parse", parse)
    report = grade_dir(sub, ["ex02_mha", "ex03_gqa"], suite="public")
    assert report.score == report.max_score > 0 and not report.errors
    assert threads and set(threads) == {threading.main_thread().name}
