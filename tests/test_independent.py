"""Correct submissions written from the contract alone get full marks.

``tests/data/independent/<variant>/`` holds complete submissions written from
CURRICULUM.md, contract.json and the stubs, by authors who never read
``solutions/``, ``grader/reference/`` or the suites, each in a style unlike
the reference:

* ``einsum``: einsum everywhere, log-sum-exp softmax, float32 kept float32,
  positions as lists, whole-number scores written as ints;
* ``plain``: matmul, loops over heads, float64 results, unrounded floats in
  ex01, shapes validated, numpy scalars returned;
* ``guards``: input validation everywhere, a device check in ex07's wrapper
  (CUDA, or the CPU under the interpreter), a 64x32 two-phase kernel;
* ``broadcast``: broadcasting and einsum, GQA by reshaping the queries, the
  MLA latent broadcast over heads, a kernel whose program loops over a KV
  head's query group;
* ``loops``: explicit Python loops, float64 inside, a 16x16 kernel on a 3-D
  grid with every stride passed;
* ``torchy``: PyTorch inside the NumPy exercises, dataclasses and
  lru_cache, a 1-D grid kernel, a dataclass in ex04's timer module.

``einsum`` and ``plain`` have no Triton kernel in ex07 (only the NumPy
functions), so their flash_attention tests are the only ones allowed to
fail, and only because the function is missing; the other four are complete
and must lose nothing.  Each grading draws a fresh secret seed, as a real
one does (the seed is in the failure message): full marks under every seed.
A grader that takes points from these takes them from a student who followed
the contract.
"""
from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from grader.registry import EXERCISES as REGISTRY
from tests.conftest import grade_dir

HERE = Path(__file__).parent / "data" / "independent"
# The contract's exercises (the variants are written against the contract alone).
EXERCISES = [name for name, ex in REGISTRY.items() if ex.in_contract]

# Where the stub asks for more than the contract says. The contract
# (CURRICULUM.md, ex08) never asks mla_attention for a ValueError; the stub's
# docstring does, so those checks are advice worth 0 points: the ``einsum``
# variant (contract only) fails them and loses nothing. A stale entry here is
# reported too.
CONTRACT_GAPS = {
    ("einsum", "ex08_mla"): "mla_attention rejects weights whose shapes do not fit",
    # ex04's written answer on the slope (issue 29) is the stub's, not the
    # contract's: staff grade it, the autograder gives it 0 points.
    **{(variant, "ex04_quadratic"): "WHERE_THE_SLOPE_COMES_FROM"
       for variant in ("broadcast", "einsum", "guards", "loops", "plain", "torchy")},
}


# The variants the default run grades: the two least like the reference
# (PyTorch inside the NumPy exercises, dataclasses, a 1-D grid kernel; einsum
# everywhere, no kernel); the others are the corpus tier (``--corpus``).
DEFAULT_VARIANTS = {"torchy", "einsum"}

# The variants written without ex07's kernel.
NO_KERNEL = {"einsum", "plain"}


def missing_kernel(test) -> bool:
    return "has no attribute 'flash_attention'" in (test.output or "")


@pytest.mark.slow
@pytest.mark.parametrize("variant", [
    pytest.param(name, marks=[] if name in DEFAULT_VARIANTS else [pytest.mark.corpus])
    for name in sorted(p.name for p in HERE.iterdir() if p.is_dir()
                       and not p.name.startswith(("_", ".")))])
def test_independent_submission_gets_full_marks(variant, tmp_path):
    sub = tmp_path / "submission"
    # A copy: grading writes the ex04 plot beside the modules.
    shutil.copytree(HERE / variant, sub, ignore=shutil.ignore_patterns("__pycache__", "*.png"))
    report = grade_dir(sub, EXERCISES)
    assert not report.errors, report.errors
    lost = []
    gap_seen = set()
    for t in report.tests:
        if t.score >= t.max_score and t.status != "failed":
            continue
        if variant in NO_KERNEL and t.exercise == "ex07_flash_attention" \
                and missing_kernel(t):
            continue
        gap = CONTRACT_GAPS.get((variant, t.exercise))
        if gap and t.title.startswith(gap) and t.max_score == 0:
            gap_seen.add((variant, t.exercise))
            continue
        lost.append(f"{t.exercise}: {t.title} ({t.score}/{t.max_score})\n{t.output}")
    assert not lost, f"seed {report.seed}:\n" + "\n\n".join(lost)
    stale = {k for k in CONTRACT_GAPS if k[0] == variant} - gap_seen
    assert not stale, f"the grader now agrees with the contract here: drop {stale}"
    # Every exercise was graded (a suite that silently dropped out would pass above).
    assert set(report.exercise_scores()) == set(EXERCISES)



# -- real code, adapted (issue 50) ---------------------------------------------
# ``independent/_real_style/`` holds exercises written in the numerics and
# idioms of public code, adapted to the contract: Meta's Llama (RoPE's angles
# and the softmax in float32, ex02), Hugging Face's repeat_kv and float32
# softmax (ex03, ex05), DeepSeek-V3's complex RoPE and float32 softmax (ex08),
# a timer on torch.utils.benchmark (ex04), a launch under torch.cuda.device
# (ex07).  Each is correct under the contract, so each gets full marks: a
# point lost is the grader's mistake (the precision rule, the warm-up count,
# the GPU stand-in).  The default run grades ex08 (a few seconds); the rest
# are the corpus tier.
REAL_STYLE = HERE / "_real_style"
REAL_STYLE_GROUPS = {
    "deepseek-mla": ["ex08_mla"],
    "llama-numpy": ["ex02_mha", "ex03_gqa", "ex05_decode_prefill"],
    "benchmark-timer": ["ex04_quadratic"],
    "device-guard": ["ex07_flash_attention"],
}
REAL_STYLE_DEFAULT = {"deepseek-mla"}


@pytest.mark.slow
@pytest.mark.parametrize("group", [
    pytest.param(name, marks=[] if name in REAL_STYLE_DEFAULT else [pytest.mark.corpus])
    for name in REAL_STYLE_GROUPS])
def test_real_style_submission_gets_full_marks(group, tmp_path):
    exercises = REAL_STYLE_GROUPS[group]
    sub = tmp_path / "submission"
    sub.mkdir()
    for name in exercises:
        shutil.copy(REAL_STYLE / f"{name}.py", sub / f"{name}.py")
    report = grade_dir(sub, exercises)
    assert not report.errors, report.errors
    lost = [f"{t.exercise}: {t.title} ({t.score}/{t.max_score})\n{t.output}"
            for t in report.tests if t.score < t.max_score or t.status == "failed"]
    assert not lost, f"seed {report.seed}:\n" + "\n\n".join(lost)
    assert set(report.exercise_scores()) == set(exercises)



# ``independent/_realcode/<source>_<exercise>/``: one exercise each, adapted
# from public code read in its documentation (Hugging Face, Llama, nanoGPT,
# minGPT, Mistral, xFormers, Megatron, vLLM, DeepSeek-V3, Liger, Tri Dao's
# and Triton's tutorial kernels, do_bench, CUDA events, torch.utils.benchmark)
# by an author who never read the grader.  Each is correct under the contract
# and got full marks (one lost two points to the plot's time unit until the
# grader accepted ms): the corpus tier keeps them so.
REALCODE = HERE / "_realcode"


@pytest.mark.slow
@pytest.mark.corpus
@pytest.mark.parametrize("name", sorted(p.name for p in REALCODE.iterdir() if p.is_dir()))
def test_adapted_real_code_gets_full_marks(name, tmp_path):
    exercise = name.split("_", 1)[1]
    sub = tmp_path / "submission"
    sub.mkdir()
    shutil.copy(REALCODE / name / f"{exercise}.py", sub / f"{exercise}.py")
    report = grade_dir(sub, [exercise])
    assert not report.errors, report.errors
    # A test that follows from a module not handed in here (ex03 imports ex02,
    # graded alone) keeps its points and says so: nothing is lost.
    lost = [f"{t.title} ({t.score}/{t.max_score})\n{t.output}" for t in report.tests
            if t.score < t.max_score or t.status == "failed" and not t.kept]
    assert not lost, f"seed {report.seed}:\n" + "\n\n".join(lost)
    assert set(report.exercise_scores()) == {exercise}


# -- one documented contract (issue 50, items 5 and 6) ---------------------------
# What an independent author reads (the stub's docstring, docs/CURRICULUM_NOTES.md
# and grader/contract.json) says the same as what the grading enforces.
REPO = Path(__file__).resolve().parent.parent
NOTES = REPO / "docs" / "CURRICULUM_NOTES.md"

# The precision rule's factor for each function graded against a float64
# reference (grader.feedback.accuracy); tests/test_mistakes_of.py measures
# the margins at these same factors.
PRECISION = {
    "ex02_mha": {"softmax": 1, "attention": 1, "rope": 10, "multi_head_attention": 10},
    "ex03_gqa": {"grouped_query_attention": 10},
    "ex04_quadratic": {"naive_attention": 1},
    "ex05_decode_prefill": {"prefill_attention": 1, "decode_attention": 1,
                            "decode_with_cache": 1},
    "ex06_gqa_intensity": {"gqa_decode_attention": 1},
    "ex08_mla": {"mla_cache": 10, "mla_attention": 10, "mla_decode": 10},
}
# Rules beyond the tolerances, in the words the stub and the notes both use.
STATED = {
    "ex02_mha": ["float32 in, float32 out", "math.sqrt(d)"],
    "ex04_quadratic": ["at least warmup + repeats"],
}


def _number(x: float) -> str:
    """2e-05 as the docs write it: 2e-5."""
    mantissa, exponent = f"{x:.0e}".split("e")
    return f"{mantissa}e{int(exponent)}"


def _flat(text: str) -> str:
    return " ".join(text.replace("`", "").split())


def _top_level(path: Path) -> dict:
    import ast
    out = {}
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.FunctionDef):
            out[node.name] = ast.unparse(node.body[1:] if ast.get_docstring(node) else node.body)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for t in targets:
                if isinstance(t, ast.Name):
                    out[t.id] = ast.unparse(node.value) if node.value else ""
    return {k: v for k, v in out.items() if not k.startswith("_")}


def test_contract_json_holds_every_graded_name():
    """Every name a student writes (a public name the stub holds as a task:
    its definition there differs from the solution's) and every name the
    suites read of a submission is in
    grader/contract.json, the questions' under ``extensions``."""
    import json
    import re

    from grader.paths import SUITES_DIR
    from tests.conftest import EXERCISES_DIR, SOLUTIONS
    contract = json.loads((REPO / "grader" / "contract.json").read_text())
    missing = []
    for name in REGISTRY:
        names = set()
        for part in ("modules", "extensions"):
            spec = contract[part].get(name, {"functions": {}, "constants": []})
            names |= set(spec["functions"]) | set(spec["constants"])
        solved = _top_level(SOLUTIONS / f"{name}.py")
        stub = _top_level(EXERCISES_DIR / f"{name}.py")
        tasks = {n for n, body in solved.items() if n in stub and stub[n] != body}
        read = set()
        for suite in SUITES_DIR.glob(f"*/test_{name}*.py"):
            read |= set(re.findall(r"\bstudent\.([A-Za-z_]\w*)", suite.read_text())) - {"probe"}
        missing += [f"{name}.{n}" for n in sorted((tasks | read) - names)]
        missing += [f"{name}.{n} (in contract.json, not in the stub)"
                    for n in sorted(names - set(stub))]
    assert not missing, missing


def test_each_rule_the_grading_enforces_is_in_the_stub_and_the_notes():
    """The precision rule's tolerances for each graded function, and the
    rules beyond them, are written in the stub's docstring and in
    docs/CURRICULUM_NOTES.md, as the grading applies them."""
    import ast
    import re

    from grader.feedback import LONG_CHAIN, accuracy
    from tests.conftest import EXERCISES_DIR
    from tests.test_mistakes_of import _calls
    notes = _flat(NOTES.read_text())
    raw = NOTES.read_text()
    rule = raw[raw.index("## How close is right"):]
    rule = rule[:rule.index("\n## ", 1)]
    # the rule's bullets, each on one line: "ex02 softmax, attention; ...: atol = ..."
    bullets = [_flat(b) for b in re.split(r"\n- ", rule)[1:]]
    unstated = []
    for module, functions in PRECISION.items():
        doc = _flat(ast.get_docstring(ast.parse((EXERCISES_DIR / f"{module}.py").read_text())))
        for fn, factor in functions.items():
            atol, rtol = (_number(x) for x in accuracy("float64", factor))
            line = next((b for b in bullets if re.search(rf"\b{fn}\b", b.split(":")[0])), "")
            if f"atol = {atol}" not in line or f"rtol = {rtol}" not in line:
                unstated.append(f"notes: {module}.{fn} at atol {atol}, rtol {rtol}")
            if f"atol={atol}, rtol={rtol}" not in doc or fn not in doc:
                unstated.append(f"stub {module}: {fn} at atol={atol}, rtol={rtol}")
        stub_text = _flat((EXERCISES_DIR / f"{module}.py").read_text())
        for phrase in STATED.get(module, []):
            for where, text in (("notes", notes), (f"stub {module}", stub_text)):
                if _flat(phrase) not in text:
                    unstated.append(f"{where}: {phrase!r}")
    # the margins are measured at the factors stated here
    for module, calls in _calls().items():
        for _, fn, _, _, factor in calls:
            if PRECISION.get(module, {}).get(fn, factor) != factor:
                unstated.append(f"tests/test_mistakes_of.py measures {module}.{fn} at {factor}")
    assert LONG_CHAIN == 10
    assert not unstated, "\n".join(unstated)
