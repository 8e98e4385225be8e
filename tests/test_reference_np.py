"""The NumPy reference for exercises B and C (``attention_np``) gives the
PyTorch reference's answers, each known mistake included; and grading A-C
imports no PyTorch into the grading process."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from grader.reference.secret import attention as torch_ref
from grader.reference.secret import attention_np as np_ref

REPO = Path(__file__).resolve().parent.parent
ALL = [None, *torch_ref.MISTAKES]


def _same(a, b, tol=1e-12):
    a = np.asarray(a.numpy() if hasattr(a, "numpy") else a, dtype=np.float64)
    assert isinstance(b, np.ndarray) and b.dtype == np.float64 and a.shape == b.shape
    np.testing.assert_allclose(b, a, rtol=tol, atol=tol, equal_nan=True)   # NaN where NaN


def test_the_mistakes_are_one_table():
    assert np_ref.MISTAKES == torch_ref.MISTAKES


@pytest.mark.parametrize("mistake", ALL)
def test_numpy_reference_matches_pytorchs(mistake):
    rng = np.random.default_rng(7)
    x = rng.standard_normal((2, 5, 8))
    w = [rng.standard_normal((8, 8)) * 0.3 for _ in range(4)]
    w_kv = [rng.standard_normal((4, 8)) * 0.3 for _ in range(2)]
    scores = rng.standard_normal((2, 3, 4)) * 40      # large: the unstable softmax overflows
    scores[0, 1] = -np.inf                            # a row that may see no key
    pos = np.array([3, 1, 4, 1, 5])
    q, k, v = (rng.standard_normal((2, 3, 5, 4)) for _ in range(3))
    cases = [
        (lambda r: r.softmax(scores, mistake=mistake)),
        (lambda r: r.softmax(scores, 1, mistake=mistake)),
        (lambda r: r.causal_mask(3, 5, mistake=mistake)),
        (lambda r: r.causal_mask(4, mistake=mistake)),
        (lambda r: r.rope(q, pos, 500.0, mistake=mistake)),
        (lambda r: r.attention(q, k, v, causal=True, mistake=mistake)),
        (lambda r: r.attention(q[..., :3, :], k, v, causal=True, mistake=mistake)),
        (lambda r: r.attention(q, k, v, mask=r.causal_mask(5), mistake=mistake)),
        (lambda r: r.repeat_kv(k[:, :2], 2, mistake=mistake)),
        (lambda r: r.split_heads(x, 2, mistake=mistake)),
        (lambda r: r.merge_heads(q, mistake=mistake)),
        (lambda r: r.gqa(x, *w, 2, mistake=mistake)),
        (lambda r: r.gqa(x, w[0], *w_kv, w[3], 4, 2, positions=pos, rope_base=100.0,
                         mistake=mistake)),
        (lambda r: r.gqa(x, *w, 2, causal=False, mistake=mistake)),
        (lambda r: r.head_weights(q[0], k[0, :1], mistake=mistake)),
        (lambda r: r.head_weights(q[0], k[0], causal=False, mistake=mistake)),
    ]
    # The unstable softmax's float32 exp differs by a few float32 ulps between
    # the two libraries; where it overflows (its point) both give NaN.
    tol = 1e-5 if mistake == "softmax_unstable" else 1e-12
    with np.errstate(all="ignore"):
        for case in cases:
            try:
                want = case(torch_ref)
            except (RuntimeError, ValueError):    # a shape the mistake cannot make
                with pytest.raises(ValueError):
                    case(np_ref)
                continue
            _same(want, case(np_ref), tol)


def test_grading_a_to_c_imports_no_pytorch(tmp_path):
    """In a process of its own, so that this one's imports do not count."""
    code = ("import json, sys\n"
            "from grader.core import grade\n"
            "from grader.options import Options\n"
            "report = grade(sys.argv[1], Options(exercises=['ex01_by_hand', 'ex02_mha', "
            "'ex03_gqa']))\n"
            "print(json.dumps({'torch': sorted(m for m in sys.modules if m == 'torch' or "
            "m.startswith('torch.'))[:5], 'score': report.score, 'max': report.max_score, "
            "'errors': report.errors}))\n")
    run = subprocess.run([sys.executable, "-c", code, str(REPO / "solutions")], cwd=REPO,
                         capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-3000:]
    seen = json.loads(run.stdout.strip().splitlines()[-1])
    assert seen["score"] == seen["max"] > 0 and not seen["errors"], seen
    assert seen["torch"] == [], f"grading A-C imported {seen['torch']}"
