"""An answer that ignores its inputs earns no property's points.

Causality and shift invariance say what must stay the same; all zeros keep
both for nothing.  Each property test also asks that the output respond to
what should change it (grader.feedback.check_responds), and RoPE that it keep
each vector's length (a rotation).
"""
from __future__ import annotations

import pytest

from tests.conftest import SOLUTIONS, copy_solutions, grade_dir

ZEROS = {
    "ex02_mha": "\n\ndef rope(x, positions, base=10000.0):\n    return np.zeros_like(x)\n"
                "\n\ndef multi_head_attention(x, *args, **kwargs):\n"
                "    return np.zeros_like(np.asarray(x, dtype=float))\n",
    "ex08_mla": "\n\ndef mla_attention(x, *args, **kwargs):\n    return torch.zeros_like(x)\n",
}
PROPERTIES = {
    "ex02_mha": ["test_rope_depends_only_on_relative_position", "test_mha_is_causal",
                 "test_mha_shift_invariance"],
    "ex08_mla": ["test_causality", "test_relative_positions"],
}


@pytest.mark.slow
def test_all_zeros_keep_no_property(tmp_path):
    sub = copy_solutions(tmp_path / "zeros", list(ZEROS))
    for module, tail in ZEROS.items():
        path = sub / f"{module}.py"
        path.write_text((SOLUTIONS / f"{module}.py").read_text() + tail)
    report = grade_dir(sub, exercises=list(ZEROS))
    by_name = {(t.exercise, t.name.split("[")[0]): t for t in report.tests}
    for module, names in PROPERTIES.items():
        for name in names:
            test = by_name[(module, name)]
            assert test.score == 0 and not test.kept, (module, name, test.output)
            assert "does not depend on its inputs" in test.output or \
                "length of each vector" in test.output, test.output

