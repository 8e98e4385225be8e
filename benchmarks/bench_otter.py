"""Processor seconds of grading exercise B (``ex02_mha``) here and with Otter-Grader, side by side.

Otter-Grader (https://otter-grader.readthedocs.io) is what many courses grade
Python with; issue 52 asks that ``attn-grade grade -e ex02_mha`` cost no more
processor time than Otter on the same question.  The Otter side is a
comparable question written here: the reference's ``ex02_mha.py`` as the
submission script, and one OK-format test of five cases (the softmax, the
causal mask, RoPE, attention and multi-head attention, each against a
float64 NumPy reference inside the test), graded with ``otter run`` (Otter
without a container: it runs the script in a Jupyter kernel).  Ours grades
the same file with the hidden suite of ex02 (dozens of cases, the mistake
matcher, a sandboxed worker).

Each command's cost is summed over its whole process tree
(``bench_class_cpu.TreeCpu``: the kernel Otter starts, our sandboxed
workers), on the same machine in the same run, with ``/proc/loadavg``
printed beside it.  A benchmark, never a test: no assertion on time.

Otter runs in an environment of its own (it pins nbconvert, Jupyter and
more): ``--otter-env DIR`` is made on first use (``pip install otter-grader
ipykernel numpy``; needs the network or a package mirror).

    python benchmarks/bench_otter.py [--otter-env /tmp/otter-env] [--repeats 3]
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_class_cpu import INTERVAL, TreeCpu, _load  # noqa: E402

REPO = Path(__file__).resolve().parent.parent

# One OK-format test, five cases: each compares the script's function with a
# float64 NumPy reference written in the test (no answers are stored).
REFERENCE = '''
>>> import numpy as np
>>> rng = np.random.default_rng(0)
>>> def ref_softmax(x, axis=-1):
...     e = np.exp(x - x.max(axis=axis, keepdims=True))
...     return e / e.sum(axis=axis, keepdims=True)
>>> def ref_mask(s_q, s_k):
...     i = np.arange(s_q)[:, None] + (s_k - s_q)
...     return np.where(np.arange(s_k)[None, :] > i, -np.inf, 0.0)
>>> def ref_rope(x, pos, base=10000.0):
...     half = x.shape[-1] // 2
...     freq = base ** (-np.arange(half) * 2.0 / x.shape[-1])
...     ang = np.asarray(pos, dtype=np.float64)[:, None] * freq
...     c, s = np.cos(ang), np.sin(ang)
...     a, b = x[..., :half], x[..., half:]
...     return np.concatenate([a * c - b * s, a * s + b * c], axis=-1)
>>> def ref_attention(q, k, v, mask=None):
...     s = q @ np.swapaxes(k, -1, -2) / np.sqrt(q.shape[-1])
...     s = s if mask is None else s + mask
...     return ref_softmax(s) @ v
>>> def ref_mha(x, wq, wk, wv, wo, h):
...     B, S, d = x.shape
...     split = lambda t: t.reshape(B, S, h, d // h).transpose(0, 2, 1, 3)
...     q, k, v = (split(x @ w.T) for w in (wq, wk, wv))
...     pos = np.arange(S)
...     o = ref_attention(ref_rope(q, pos), ref_rope(k, pos), v, ref_mask(S, S))
...     return o.transpose(0, 2, 1, 3).reshape(B, S, d) @ wo.T
'''
CASES = [
    ">>> x = rng.standard_normal((4, 7))\n>>> bool(np.allclose(softmax(x), ref_softmax(x)))\nTrue",
    ">>> bool(np.array_equal(np.asarray(causal_mask(3, 5)), ref_mask(3, 5)))\nTrue",
    ">>> x = rng.standard_normal((2, 3, 6, 8))\n"
    ">>> bool(np.allclose(rope(x, np.arange(6)), ref_rope(x, np.arange(6))))\nTrue",
    ">>> q, k, v = (rng.standard_normal((2, 3, 5, 8)) for _ in range(3))\n"
    ">>> bool(np.allclose(attention(q, k, v, ref_mask(5, 5)), "
    "ref_attention(q, k, v, ref_mask(5, 5))))\nTrue",
    ">>> x = rng.standard_normal((2, 6, 16))\n"
    ">>> ws = [rng.standard_normal((16, 16)) / 4 for _ in range(4)]\n"
    ">>> bool(np.allclose(multi_head_attention(x, *ws, 4), ref_mha(x, *ws, 4)))\nTrue",
]


def make_otter_env(env: Path) -> Path:
    python = env / "bin" / "python"
    if not python.exists():
        subprocess.run([sys.executable, "-m", "venv", str(env)], check=True)
        subprocess.run([str(python), "-m", "pip", "install", "-q", "otter-grader", "ipykernel",
                        "numpy"], check=True)
    return env / "bin" / "otter"


def write_question(folder: Path) -> Path:
    """The question's folder: ``tests/q1.py`` and the submission ``ex02_mha.py``."""
    (folder / "tests").mkdir(parents=True)
    cases = [{"code": REFERENCE.strip() + "\n" + c, "hidden": False, "locked": False}
             for c in CASES]
    test = {"name": "q1", "points": 5, "suites": [{"type": "doctest", "scored": True,
                                                   "setup": "", "teardown": "",
                                                   "cases": cases}]}
    (folder / "tests" / "q1.py").write_text("OK_FORMAT = True\ntest = " + repr(test) + "\n")
    sub = folder / "ex02_mha.py"
    sub.write_text((REPO / "solutions" / "ex02_mha.py").read_text())
    return sub


def tree_run(cmd: list[str], cwd: Path, env: dict | None = None) -> tuple[float, float, int]:
    """(wall s, processor s of the whole tree, exit status)."""
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True)
    tree = TreeCpu(proc.pid)
    while proc.poll() is None:
        time.sleep(INTERVAL)
    tree.stop()
    if proc.returncode not in (0, 1):
        print(f"    exit {proc.returncode}: {proc.stderr.read()[-800:]}")
    return time.perf_counter() - start, tree.total(), proc.returncode


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--otter-env", type=Path,
                        default=Path(tempfile.gettempdir()) / "attn-bench-otter-env")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    otter = make_otter_env(args.otter_env)
    with tempfile.TemporaryDirectory(prefix="bench-otter-") as tmp:
        folder = Path(tmp) / "question"
        sub = write_question(folder)
        subprocess.run([str(otter), "generate"], cwd=folder, check=True,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        ours_env = {**os.environ, "PYTHONPATH": str(REPO)}
        (folder / "out").mkdir()
        rows = {"otter run (5 cases)": [], "attn-grade grade -e ex02_mha": []}
        for _ in range(args.repeats):
            rows["otter run (5 cases)"].append(tree_run(
                [str(otter), "run", "-a", "autograder.zip", sub.name, "-o", "out"], folder))
            result = json.loads((folder / "out" / "results.json").read_text())
            assert any(t.get("score") == 5.0 for t in result["tests"]), result
            rows["attn-grade grade -e ex02_mha"].append(tree_run(
                [sys.executable, "-m", "grader.cli", "grade", str(folder), "-e", "ex02_mha",
                 "--format", "json", "--out", str(Path(tmp) / "ours.json")], REPO, ours_env))
        ours = json.loads((Path(tmp) / "ours.json").read_text())
        tests = [t for t in ours["tests"] if t.get("max_score")]
        print(f"{_load()}; ours graded {len(tests)} tests, "
              f"{sum(t['score'] for t in tests):g}/{sum(t['max_score'] for t in tests):g}")
        for name, runs in rows.items():
            print(f"{name:32s} median of {len(runs)}: "
                  f"{statistics.median(r[1] for r in runs):6.2f} cpu-s (tree), "
                  f"{statistics.median(r[0] for r in runs):6.2f} s wall")


if __name__ == "__main__":
    main()
