"""Hostile: work hidden from the grader's PyTorch trace earns no trace credit.

``torch.utils._python_dispatch._disable_current_modes()`` runs ops where a
TorchDispatchMode (the grader's tracer) does not see them; a decode that
repeats K/V per query head inside it used to pass "never materializes K/V"."""
from __future__ import annotations

import textwrap

import pytest

from tests.conftest import copy_solutions, failures, grade_dir

HIDDEN = textwrap.dedent('''

    from torch.utils._python_dispatch import _disable_current_modes as _out_of_sight


    def gqa_decode_attention(q, k_cache, v_cache):  # the hostile twin, defined last
        b, h, s_q, d = q.shape
        h_kv = k_cache.shape[1]
        if s_q != 1 or h % h_kv:
            raise ValueError("one query position, h % h_kv == 0")
        with _out_of_sight():
            k = k_cache.repeat_interleave(h // h_kv, dim=1)
            v = v_cache.repeat_interleave(h // h_kv, dim=1)
            return torch.softmax(q @ k.transpose(-1, -2) / d ** 0.5, -1) @ v
''')


@pytest.mark.slow
def test_repeated_kv_hidden_from_the_trace_is_not_credited(tmp_path):
    sub = copy_solutions(tmp_path / "submission", ["ex06_gqa_intensity"])
    path = sub / "ex06_gqa_intensity.py"
    path.write_text(path.read_text() + HIDDEN)
    report = grade_dir(sub, ["ex06_gqa_intensity"], keyword="no_repeated_kv")
    assert not report.errors, report.errors
    got, total = report.exercise_scores()["ex06_gqa_intensity"]
    assert total > 0 and got == 0, (got, total)
    assert all("dispatch cannot see" in t.output for t in failures(report)), \
        [t.output for t in failures(report)]
