"""The line pointer: a wrong value's feedback names the line of the student's
file where it leaves the reference's steps (``grader.linepointer``).

Each mutant below is graded as a student's upload is (the sandboxed worker
traces the failing call again; the reference is traced in the grading
process), on the few tests that catch it, and the test asserts the line
number and the step the feedback names.  The matching rule's own cases
(another order, no step maps, a transpose) are checked on ``locate``.
"""
from __future__ import annotations

import re

import numpy as np
import pytest

from grader import linepointer
from grader.linepointer import Made, Step, locate
from grader.pages import student_page
from grader.sandbox.runtime.probes import linetrace
from tests.conftest import SOLUTIONS, copy_solutions, failures, grade_dir
from tests.data.mutants import mutant

POINTER = re.compile(r"^Where it goes wrong: line (\d+)(?: of (\S+))?, `(.*)`: (.*)$", re.M)



def _graded(tmp_path, exercise: str, source: str, keyword: str):
    copy_solutions(tmp_path)
    (tmp_path / f"{exercise}.py").write_text(source)
    return grade_dir(tmp_path, [exercise], keyword=keyword)


def _line_of(source: str, snippet: str) -> int:
    """The 1-based number of the only line of ``source`` holding ``snippet``."""
    found = [i + 1 for i, line in enumerate(source.splitlines()) if snippet in line]
    assert len(found) == 1, (snippet, found)
    return found[0]


def _pointers(report, exercise: str) -> list[tuple[str, re.Match]]:
    out = []
    for test in failures(report, exercise):
        for match in POINTER.finditer(test.output):
            out.append((test.output, match))
    return out


# (exercise, mutant, -k of the tests that catch it, the mutated line's text,
#  the words of the step the feedback must name, the other file named or None)
CASES = [
    ("ex01_by_hand", "no_scale", "test_step and SCALED", "SCALED = [[1.0, 0.0, 1.0],",
     "your SCALED scores differ", None),
    ("ex01_by_hand", "mask_wrong_triangle", "test_step and WEIGHTS_CAUSAL",
     "WEIGHTS_CAUSAL = [[0.401, 0.198, 0.401],", "your WEIGHTS_CAUSAL differs", None),
    ("ex02_mha", "no_scale", "multi_head_attention_small",
     "scores = q @ np.swapaxes(k, -1, -2)  ", "your scores differ", None),
    ("ex02_mha", "merge_without_transpose", "multi_head_attention_small",
     "return x.reshape(b, s, h * d_head)", "your merged heads differ", None),
    ("ex02_mha", "rope_interleaved", "multi_head_attention_small",
     "x1, x2 = x[..., 0::2], x[..., 1::2]",
     "your `x1` is neither the reference's first halves of RoPE's pairs", None),
    ("ex03_gqa", "no_mask_in_gqa", "gqa_random and float64",
     "m = np.max(x, axis=axis, keepdims=True)", "your row maxima of the softmax differ",
     "ex02_mha.py"),
    ("ex03_gqa", "kv_tile", "gqa_random and float64", "return np.tile(x, (1, n_rep, 1, 1))",
     "your repeated K/V heads differ", None),
    ("ex05_decode_prefill", "no_scale", "prefill_attention_small",
     "scores = qg @ k.transpose(-2, -1)  ", "your scores differ", None),
    ("ex05_decode_prefill", "diagonal_masked", "prefill_attention_small",
     'scores = scores.masked_fill(~allowed, float("-inf"))', "your scores differ", None),
    ("ex04_quadratic", "scores_without_batch", "score_matrix_bytes_hidden",
     "return n_heads * seq_len * seq_len * bytes_per_elem", "your output differs", None),
    ("ex05_decode_prefill", "flops_factor_2", "attention_flops_hidden",
     "return 2 * d_head * pairs * batch * n_heads", "your output differs", None),
    ("ex06_gqa_intensity", "intensity_flops_half", "decode_intensity_hidden",
     "flops = 2 * batch * n_heads * seq_len * d_head", "your FLOP count differs", None),
    ("ex06_gqa_intensity", "intensity_float_bytes", "decode_intensity_hidden",
     "nbytes = 4 * batch * d_head * (2 * n_heads", "your byte count differs", None),
    ("ex07_flash_attention", "numpy_no_rescale", "blockwise_on_split_heads",
     "acc_new = acc + p @ v", "your accumulator differs", None),
    ("ex07_flash_attention", "numpy_rescale_acc_only", "blockwise_on_split_heads",
     "l_new = l + np.sum(p, axis=-1)", "your running sum differs", None),
    ("ex07_flash_attention", "numpy_exp2_without_log2e", "blockwise_on_split_heads",
     "p = np.exp2(scores - shift[..., None])", "your tile's exponentials differ", None),
    ("ex08_mla", "scale_d_nope", "mla_attention_random and float64",
     "scores = q @ k.transpose(-2, -1) / math.sqrt(d_nope)  ", "your scores differ", None),
]


def _tiered(cases):
    """The first case of each exercise in the default run, the others in the
    corpus tier (more cases of a promise the default run already holds)."""
    seen, out = set(), []
    for case in cases:
        marks = [pytest.mark.corpus] if case[0] in seen else []
        seen.add(case[0])
        out.append(pytest.param(*case, marks=marks, id=f"{case[0]}-{case[1]}"))
    return out


@pytest.mark.parametrize("exercise,name,keyword,line,words,file", _tiered(CASES))
def test_pointer_names_the_mutated_line_and_its_step(tmp_path, exercise, name, keyword, line,
                                                      words, file):
    source = mutant(exercise, name).apply((SOLUTIONS / f"{exercise}.py").read_text())
    report = _graded(tmp_path, exercise, source, keyword)
    found = _pointers(report, exercise)
    assert found, [t.output for t in failures(report, exercise)]
    # A line of another module of the submission (ex03 calling ex02's) is read there.
    where = source if file is None else (tmp_path / file).read_text()
    for output, match in found:
        assert int(match.group(1)) == _line_of(where, line), output
        assert match.group(2) == file, output
        assert match.group(4).startswith(words), output
        # Once, and last: the known mistake and expected vs got come first.
        assert output.count("Where it goes wrong") == 1
        assert output.rstrip().splitlines()[-1].startswith("Where it goes wrong"), output


def test_pointer_follows_the_mistake_and_expected_vs_got(tmp_path):
    source = mutant("ex02_mha", "no_scale").apply((SOLUTIONS / "ex02_mha.py").read_text())
    report = _graded(tmp_path, "ex02_mha", source, "multi_head_attention_small")
    (output, _), = _pointers(report, "ex02_mha")
    lines = output.splitlines()
    at = {key: next(i for i, x in enumerate(lines) if x.startswith(key) or key in x)
          for key in ("This looks like", "first mismatch", "Where it goes wrong")}
    assert at["This looks like"] < at["first mismatch"] < at["Where it goes wrong"]


def test_wrong_only_at_the_output_points_at_the_return(tmp_path):
    source = mutant("ex02_mha", "no_output_projection").apply(
        (SOLUTIONS / "ex02_mha.py").read_text())
    report = _graded(tmp_path, "ex02_mha", source, "multi_head_attention_small")
    found = _pointers(report, "ex02_mha")
    assert found
    for output, match in found:
        assert match.group(3) == "return out", output
        lines = [i + 1 for i, x in enumerate(source.splitlines()) if x.strip() == "return out"]
        assert int(match.group(1)) in lines, output
        assert match.group(4).startswith("your output differs"), output


ANOTHER_ORDER = '''
def attention(q, k, v, mask=None):
    """Scaled before the product, the mask applied as a boolean."""
    d_head = q.shape[-1]
    q_scaled = q / d_head ** 0.5
    raw = q_scaled @ np.swapaxes(k, -1, -2)
    if mask is not None:
        raw = np.where(mask == 0, raw, -np.inf)
    w = softmax(raw, axis=-1)
    return w @ v
'''


def _with_attention(body: str) -> str:
    """ex02's solution with its ``attention`` replaced by ``body``."""
    source = (SOLUTIONS / "ex02_mha.py").read_text()
    start = source.index("def attention(")
    end = source.index("\ndef ", start + 1)
    return source[:start] + body.strip() + "\n\n" + source[end + 1:]


def test_another_order_that_is_right_passes_without_a_pointer(tmp_path):
    source = _with_attention(ANOTHER_ORDER)
    report = _graded(tmp_path, "ex02_mha", source, "multi_head_attention or attention_")
    assert report.tests and not failures(report, "ex02_mha"), \
        [t.output for t in failures(report, "ex02_mha")]
    assert not any("Where it goes wrong" in t.output for t in report.tests)


def test_another_order_wrong_at_the_output_is_not_blamed_on_its_order(tmp_path):
    source = _with_attention(ANOTHER_ORDER.replace("return w @ v", "return w @ v * 2"))
    report = _graded(tmp_path, "ex02_mha", source, "multi_head_attention_small")
    found = _pointers(report, "ex02_mha")
    assert found
    for output, match in found:
        assert match.group(3) == "return w @ v * 2", output
        assert int(match.group(1)) == _line_of(source, "return w @ v * 2")


PER_HEAD = '''
def multi_head_attention(x, w_q, w_k, w_v, w_o, n_heads, *, causal=True, positions=None,
                         rope_base=10000.0):
    """One head at a time, each a 2-D slice: no value has the reference's shapes."""
    b, s, _ = x.shape
    positions = np.arange(s) if positions is None else np.asarray(positions)
    d_head = w_q.shape[0] // n_heads
    rows = []
    for i in range(b):
        heads = []
        for h in range(n_heads):
            cut = slice(h * d_head, (h + 1) * d_head)
            qh = rope(x[i] @ w_q[cut].T, positions, rope_base)
            kh = rope(x[i] @ w_k[cut].T, positions, rope_base)
            vh = x[i] @ w_v[cut].T
            sc = qh @ kh.T    # not scaled: the mistake
            if causal:
                sc = sc + causal_mask(s)
            heads.append(softmax(sc, axis=-1) @ vh)
        rows.append(np.concatenate(heads, axis=-1) @ w_o.T)
    return np.stack(rows)
'''


def test_a_formula_whose_wrong_number_bears_no_step_name_says_so(tmp_path):
    # k_and_v is wrong, but the reference counts rows, not `k_and_v`: the
    # return line that adds it up is right and must not be blamed.
    source = mutant("ex05_decode_prefill", "bytes_kv_once").apply(
        (SOLUTIONS / "ex05_decode_prefill.py").read_text())
    report = _graded(tmp_path, "ex05_decode_prefill", source, "attention_bytes_hidden")
    outputs = [t.output for t in failures(report, "ex05_decode_prefill")]
    assert outputs
    assert all(f"Where it goes wrong: {linepointer.NO_MATCH}." in x for x in outputs), outputs


def test_no_step_maps_says_so(tmp_path):
    source = (SOLUTIONS / "ex02_mha.py").read_text()
    start = source.index("def multi_head_attention(")
    end = source.index("\ndef ", start + 1)
    source = source[:start] + PER_HEAD.strip() + "\n\n" + source[end + 1:]
    report = _graded(tmp_path, "ex02_mha", source, "multi_head_attention_small")
    outputs = [t.output for t in failures(report, "ex02_mha")]
    assert outputs
    assert all(f"Where it goes wrong: {linepointer.NO_MATCH}." in x for x in outputs), outputs


def test_hostile_line_text_is_shown_escaped(tmp_path):
    solution = (SOLUTIONS / "ex02_mha.py").read_text()
    scaled = mutant("ex02_mha", "no_scale").find
    hostile = ('scores = q @ np.swapaxes(k, -1, -2); _tag = "\x1b[2J\x1b]0;owned\x07'
               '<script>alert(1)</script>"')
    source = solution.replace(scaled, hostile)
    report = _graded(tmp_path, "ex02_mha", source, "multi_head_attention_small")
    (output, match), *_ = _pointers(report, "ex02_mha")
    assert "\x1b" not in output and "\x07" not in output
    assert "\\x1b[2J" in match.group(3) and "\\x07" in match.group(3)
    page = student_page(report.to_dict(), "hostile")
    assert "<script>alert(1)</script>" not in page
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page


# -- the matching rule, on values made by hand ------------------------------

def _step(name, value) -> Step:
    value = np.asarray(value, dtype=np.float64)
    return Step(name, value.shape, value.reshape(-1))


def _made(line, name, value) -> Made:
    value = np.asarray(value, dtype=np.float64)
    return Made(line, f"{name} = ...", name, value.shape, value.reshape(-1))


RNG = np.random.default_rng(0)
SCORES = RNG.standard_normal((2, 3, 3))
WEIGHTS = np.exp(SCORES) / np.exp(SCORES).sum(-1, keepdims=True)
V = RNG.standard_normal((2, 3, 4))
OUT = WEIGHTS @ V
STEPS = [_step("scores", SCORES), _step("weights", WEIGHTS), _step("out", OUT)]


def test_locate_skips_a_step_folded_into_a_later_one():
    # The student never forms the unscaled scores the reference names first.
    steps = [_step("raw", SCORES * 2)] + STEPS
    made = [_made(10, "scores", SCORES), _made(11, "w", WEIGHTS * 0.5),
            _made(12, "o", OUT * 0.5)]
    pointer = locate(steps, made, _step("out", OUT), 1e-6, 1e-6)
    assert pointer.made.line == 11 and pointer.step.name == "weights"


def test_locate_finds_nothing_to_point_at_when_every_step_is_reproduced():
    made = [_made(5, "w", WEIGHTS), _made(4, "s", SCORES), _made(6, "o", OUT)]
    assert locate(STEPS, made, _step("out", OUT), 1e-6, 1e-6) is None


def test_locate_never_matches_a_transpose():
    made = [_made(3, "scores", np.swapaxes(SCORES, -1, -2).copy()[:, :, :2])]
    pointer = locate(STEPS, made, _step("out", OUT), 1e-6, 1e-6)
    assert pointer.made is None
    one_row = _step("m", SCORES.max(-1, keepdims=True))        # (2, 3, 1)
    column = _made(7, "m", SCORES.max(-2, keepdims=True))      # (2, 1, 3): another layout
    assert not linepointer._may_be(column, one_row)


def test_tracer_records_each_line_and_stops_at_its_budget(tmp_path):
    (tmp_path / "mod_lp.py").write_text(
        "import numpy as np\n"
        "def f(x):\n"
        "    y = x * 2\n"
        "    z = y + 1\n"
        "    return z\n"
        "def slow(x):\n"
        "    import time\n"
        "    end = time.monotonic() + 1.0\n"
        "    while time.monotonic() < end:\n"
        "        pass\n"
        "    return x\n")
    import importlib.util
    spec = importlib.util.spec_from_file_location("mod_lp", tmp_path / "mod_lp.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    got = linetrace.trace(module, "f", [np.ones(3)], {}, 5.0)
    assert [(r["line"], r["name"]) for r in got["records"]] == [(3, "y"), (4, "z"), (5, "return")]
    assert not got["stopped"]
    cut = linetrace.trace(module, "slow", [np.ones(3)], {}, 0.2)
    assert cut["stopped"]
    assert not any(r["name"] == "return" for r in cut["records"])   # untraced by then


def test_a_forged_trace_is_held_to_the_tracers_bounds():
    forged = [{"line": 1, "text": "x" * 10_000, "name": "y", "shape": [50_000],
               "values": np.zeros(50_000)}] * (10 * linetrace.MAX_RECORDS) + ["not a record"]
    made = linepointer.made_of(forged)
    assert len(made) == linetrace.MAX_RECORDS
    assert all(m.values.size <= linetrace.MAX_ELEMENTS and len(m.text) <= linetrace.MAX_TEXT
               for m in made)


def test_a_call_too_slow_to_trace_again_within_its_limit_gets_no_pointer():
    from grader.feedback import Feedback, with_values

    class Slow:
        """A test's student whose failing call took most of its limit."""
        call_limit = 10.0
        got = np.zeros((1, 5, 8))
        calls = [(got, "multi_head_attention", (got,), {}, 4.0)]

        def trace_lines(self, *args):
            raise AssertionError("traced again past its limit")

    exc = with_values(Feedback("wrong"), Slow.got, np.ones((1, 5, 8)), atol=1e-6, rtol=1e-6)
    assert linepointer.point("ex02_mha", Slow(), exc) is None


def test_a_function_is_traced_once_for_its_first_failure(tmp_path):
    """Every failing test of ``attention`` re-runs nothing after the first: the
    root cause is said once, and each traced rerun costs up to a call's time."""
    source = mutant("ex02_mha", "no_scale").apply((SOLUTIONS / "ex02_mha.py").read_text())
    report = _graded(tmp_path, "ex02_mha", source, "test_attention")
    failed = failures(report, "ex02_mha")
    assert len(failed) >= 3, [t.name for t in failed]
    pointed = [t.name for t in failed if "Where it goes wrong" in t.output]
    assert len(pointed) == 1, pointed


def test_a_rerun_that_returns_another_answer_is_not_explained(tmp_path):
    """A function that answers differently each time (state kept between
    calls): the traced rerun is not the answer that failed, so no line of it
    is named; the pointer says why (a red team's alternating slips)."""
    source = (SOLUTIONS / "ex02_mha.py").read_text()
    source = source.replace("def attention(q, k, v, mask=None):",
                            "_CALLS = [0]\n\n\ndef attention(q, k, v, mask=None):\n"
                            "    _CALLS[0] += 1\n    return _attention(q, k, v, mask) + _CALLS[0]"
                            "\n\n\ndef _attention(q, k, v, mask=None):", 1)
    report = _graded(tmp_path, "ex02_mha", source, "attention_chapter_example")
    outputs = [t.output for t in failures(report, "ex02_mha")]
    assert outputs and all(f"Where it goes wrong: {linepointer.ANOTHER_ANSWER}." in x
                           for x in outputs), outputs
