"""An exception in the grader's own code is never a failed student test; a
malformed answer that makes the grader's code raise still is (grader.fault)."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from grader.feedback import Feedback, check_equal
from grader.report import FAILED, NEEDS_REGRADE, PASSED, to_gradescope, to_text
from tests.conftest import SOLUTIONS, copy_solutions, grade_dir


def _sabotage(path, module, old, new):
    file = path / f"{module}.py"
    text = file.read_text()
    assert text.count(old) == 1, old
    file.write_text(text.replace(old, new))


def test_a_reference_that_raises_is_a_regrade_not_a_failure(tmp_path, monkeypatch):
    from grader.reference.secret import attention_np as attention   # B's suites' reference

    def broken(*args, **kwargs):
        raise RuntimeError("the reference broke")

    monkeypatch.setattr(attention, "softmax", broken)
    sub = copy_solutions(tmp_path / "sub", ["ex02_mha"])
    report = grade_dir(sub, ["ex02_mha"], keyword="softmax_large_logits", fresh=True)
    [test] = report.tests
    assert test.status == NEEDS_REGRADE, test.output
    assert test.score == 0 and test.max_score == 1      # kept in the maximum
    assert test.output.startswith("the grader failed here: RuntimeError: the reference broke")
    assert "a person regrades this (0/1 until then)" in test.output
    assert "test_ex02_mha_hidden.py, line" in test.output   # the grader's line, named
    assert report.errors and report.ungraded             # grade exits 3
    assert "REGR" in to_text(report)
    [entry] = to_gradescope(report)["tests"]
    assert entry["output"].startswith("NEEDS REGRADE") and entry["extra_data"]["needs_regrade"]


def test_a_suites_slip_in_calling_a_grader_helper_is_the_graders_fault(tmp_path,
                                                                     monkeypatch):
    """An author's suite that calls check_close with arguments it does not
    take (here: a check_close that lost its keywords) is the grader's
    failure, a regrade, never "your answer has the wrong type or shape",
    although the call carries the student's answer."""
    from grader import feedback

    def check_close(got, expected, *, what):     # no atol, rtol or mistakes
        raise AssertionError("never reached")

    import sys
    real = feedback.check_close
    for module in [feedback, *sys.modules.values()]:   # a suite imported by an earlier test too
        if getattr(module, "check_close", None) is real:
            monkeypatch.setattr(module, "check_close", check_close)
    sub = copy_solutions(tmp_path / "sub", ["ex02_mha"])
    report = grade_dir(sub, ["ex02_mha"], keyword="softmax_large_logits", fresh=True)
    [test] = report.tests
    assert test.status == NEEDS_REGRADE, test.output
    assert test.output.startswith("the grader failed here: TypeError: "), test.output
    assert "check_close() got an unexpected keyword argument 'atol'" in test.output
    assert "wrong type or shape" not in test.output


def test_a_malformed_answer_that_makes_the_suite_raise_is_a_failure(tmp_path):
    # multi_head_attention returns None: the suite's `np.asarray(b)[:, :t]`
    # raises inside NumPy, on what the student returned.
    sub = copy_solutions(tmp_path / "sub", ["ex02_mha"])
    _sabotage(sub, "ex02_mha", "def multi_head_attention(",
              "def multi_head_attention(*args, **kwargs):\n    return None\n\n\n"
              "def _unused_mha(")
    report = grade_dir(sub, ["ex02_mha"], keyword="mha_is_causal", fresh=True)
    [test] = report.tests
    assert test.status == FAILED, test.output
    assert test.output.startswith("your answer has the wrong type or shape for this check: ")
    assert "test_ex02_mha_hidden.py, line" in test.output
    assert not report.errors and not report.ungraded   # nothing for a person to regrade


def test_an_answer_that_cannot_be_unpacked_is_a_failure(tmp_path):
    # online_softmax_step returns None where (m, l, acc) was expected:
    # the public suite's zip over it raises on the answer.
    pytest.importorskip("triton")
    sub = copy_solutions(tmp_path / "sub", ["ex07_flash_attention"])
    _sabotage(sub, "ex07_flash_attention", "def online_softmax_step(",
              "def online_softmax_step(*args, **kwargs):\n    return None\n\n\n"
              "def _unused_step(")
    report = grade_dir(sub, ["ex07_flash_attention"], suite="public",
                       keyword="online_softmax_step_two_tiles", fresh=True)
    [test] = report.tests
    assert test.status == FAILED, test.output
    assert "wrong type or shape" in test.output and "NoneType" in test.output
    assert not report.errors


@pytest.mark.parametrize("got", [np.array([1, 2]), torch.tensor([1.0, 2.0]), (1, 2), None],
                         ids=["array", "tensor", "tuple", "None"])
def test_check_equal_explains_an_answer_the_comparison_cannot_judge(got):
    """An array compared with a number has no single truth value: a wrong
    answer, explained, never an exception of the grader's comparison."""
    with pytest.raises(Feedback, match=r"^n_params: expected 3, got "):
        check_equal(got, 3, what="n_params", mistakes={"counted twice": 6})


def test_check_equal_still_passes_a_right_answer():
    check_equal(np.int64(3), 3, what="n")
    check_equal((1, 2), (1, 2), what="pair")


def test_the_reference_still_passes(tmp_path):
    sub = copy_solutions(tmp_path / "sub", ["ex02_mha"])
    report = grade_dir(sub, ["ex02_mha"], keyword="softmax_large_logits or relative_position",
                       fresh=True)
    assert [t.status for t in report.tests] == [PASSED, PASSED]


# -- a probe's own failure, in the worker -------------------------------------------
KERNEL = ("import triton\nimport triton.language as tl\n\n\n"
          "@triton.jit\ndef _k(X, N, BLOCK: tl.constexpr):\n"
          "    offs = tl.arange(0, BLOCK)\n"
          "    tl.store(X + offs, tl.load(X + offs, mask=offs < N) * 2.0, mask=offs < N)\n")


def _kernel(tmp_path):
    pytest.importorskip("triton")
    from grader.sandbox.runtime.probes import gpu_compile
    src = tmp_path / "k.py"
    src.write_text(KERNEL)
    return gpu_compile, gpu_compile.load_for_gpu(str(src), "_k_fault")


def test_the_compile_check_blames_itself_when_triton_lacks_what_it_uses(tmp_path, monkeypatch):
    """Triton 3.4 has no JITFunction._pack_args: the check's own AttributeError
    is never "your kernel does not compile"."""
    from triton.runtime import jit
    gpu_compile, mod = _kernel(tmp_path)
    args = (torch.empty(64), 64)
    assert gpu_compile.compile_launch(mod._k, args, {"BLOCK": 64}, 80)["ok"]
    monkeypatch.delattr(jit.JITFunction, "_pack_args")
    with pytest.raises(gpu_compile.ProbeFailed, match=r"does not work with Triton .*"
                                                      r"AttributeError: .*_pack_args"):
        gpu_compile.compile_launch(mod._k, args, {"BLOCK": 64}, 80)


def test_the_launch_recorder_blames_itself_on_launch_paths_it_does_not_know(monkeypatch):
    pytest.importorskip("triton")
    from triton.runtime import autotuner
    from grader.sandbox.runtime.probes import gpu_compile
    monkeypatch.delattr(autotuner.Autotuner, "run")
    with pytest.raises(gpu_compile.ProbeFailed, match="KeyError"):
        gpu_compile.capture_launches(lambda: None)


def _raised(type_name, where):
    from grader.sandbox.client import StudentRaised
    from grader.sandbox.runtime import codec
    exc = StudentRaised("checking ex07 (compile_check)",
                        codec.Raised(type_name, "the GPU compile check does not work", where,
                                     "", bases=[type_name, "Exception"]))
    return pytest.ExceptionInfo.from_exc_info((type(exc), exc, None))


def test_a_probe_failure_from_the_worker_is_the_graders_but_a_students_raise_is_not():
    from grader import fault
    assert fault.graders(_raised("ProbeFailed", ""), [])
    assert "ProbeFailed: the GPU compile check" in fault.what(_raised("ProbeFailed", ""))
    # raised where the submission's own code is on the stack: the student's
    assert not fault.graders(_raised("ProbeFailed", "ex07_flash_attention.py, line 9, in f"),
                             [])
    assert not fault.graders(_raised("ValueError", ""), [])


def test_a_crash_while_recording_one_test_costs_that_test_only(monkeypatch):
    """The grader's own exception while it records a result (a hook of the
    plugin that raised) marks that test for regrade and says so; the tests
    after it are still run and graded."""
    from grader import core
    real, seen = core.GradingPlugin._record, []

    def record(self, item, rep, call):
        seen.append(item.name)
        if len(seen) == 2:
            raise RuntimeError("recording broke")
        return real(self, item, rep, call)

    monkeypatch.setattr(core.GradingPlugin, "_record", record)
    report = grade_dir(SOLUTIONS, ["ex01_by_hand"], suite="public", fresh=True)
    broken = [t for t in report.tests if t.name == seen[1]]
    assert [t.status for t in broken] == [NEEDS_REGRADE]
    assert "the grader failed recording this test: RuntimeError: recording broke" \
        in broken[0].output
    assert any("recording broke" in e for e in report.errors) and report.ungraded
    rest = [t for t in report.tests if t.name not in seen[1:2]]
    assert len(rest) >= 3 and all(t.status == PASSED for t in rest), rest


def test_a_crash_inside_pytest_is_in_the_report(monkeypatch):
    """Where the grader's own hook breaks the session (pytest's internal
    error), the report says where, and the tests not run need a regrade."""
    from grader import core

    def collected(self, session):
        raise RuntimeError("planning broke")

    monkeypatch.setattr(core.GradingPlugin, "pytest_collection_finish", collected)
    report = grade_dir(SOLUTIONS, ["ex01_by_hand"], suite="public", fresh=True)
    assert any("planning broke" in e for e in report.errors), report.errors
    assert report.ungraded
