"""Hidden tests for ex07_flash_attention: every tile size, ragged shapes, proof of work.

The NumPy parts are checked for any tile width, fully masked tiles included.
``flash_attention`` is called through the ``ex07_flash_attention.run_checked`` probe: on the
GPU if there is one, else on the CPU under Triton's interpreter (float32,
small shapes).  Every call gets fresh random inputs, its output is checked,
and so is how it was computed: a Triton kernel of the submission launched,
no PyTorch matmul/softmax/SDPA, no (S_q, S_k) buffer, inputs unchanged, a
plain tensor of the input's dtype back.

The NumPy parts run fixed cases first (the same in every grading; a known
mistake fails on one of them under every seed), then random ones
(``grader/reference/cases.py``).  The kernel's cases are all fixed: each
call in Triton's interpreter takes seconds, and the shapes, chosen to
expose each known mistake, are what covers a kernel (its data are generic:
random values at the same shapes would add nothing but seeds).
"""
import numpy as np
import pytest
import torch

from grader.feedback import Feedback, check_close
from grader.reference import flash_judge
from grader.reference.secret import flash
from grader.reference.cases import fixed_rng, on_case, rng_for

pytestmark = [pytest.mark.exercise("ex07_flash_attention"), pytest.mark.hidden,
              pytest.mark.skipif(not flash.HAS_TRITON, reason=flash.NEEDS_TRITON)]
STEP_TOL = (1e-9, 1e-7)            # float64 NumPy
STEP_MISTAKES = ("no_rescale", "no_rescale_l", "exp2_no_log2e", "nan_masked_tile",
                 "max_not_running")


def _heads(key, b, h, h_kv, s_q, s_k, d):
    rng = fixed_rng("ex07-hidden", *key)
    make = lambda *shape: torch.from_numpy(rng.standard_normal(shape).astype(np.float32))  # noqa
    return make(b, h, s_q, d), make(b, h_kv, s_k, d), make(b, h_kv, s_k, d)


def _state(rng, lead, rows, d, n_tiles):
    """A running (m, l, acc) after ``n_tiles`` random tiles (n_tiles=0: the start)."""
    m, l, acc = np.full(lead + (rows,), -np.inf), np.zeros(lead + (rows,)), \
        np.zeros(lead + (rows, d))
    for _ in range(n_tiles):
        n = int(rng.integers(1, 6))
        m, l, acc = flash.step_reference(m, l, acc, rng.standard_normal(lead + (rows, n)) * 2,
                                         rng.standard_normal(lead + (n, d)))
    return m, l, acc


def _check_step(student, args, text, drawn=False):
    got = student.online_softmax_step(*args)
    want = flash.step_reference(*args)
    wrong = {name: flash.step_reference(*args, mistake=name)
             for name in STEP_MISTAKES}
    if not isinstance(got, (tuple, list)) or len(got) != 3:
        raise Feedback(f"online_softmax_step must return (m, l, acc), got {type(got).__name__}")
    # acc before l: a step that rescales neither is named by its acc.
    for i, name in ((0, "m"), (2, "acc"), (1, "l")):
        on_case(text, lambda: check_close(
            got[i], want[i], what=f"the updated {name}", atol=STEP_TOL[0], rtol=STEP_TOL[1],
            mistakes={flash.describe(k): w[i] for k, w in wrong.items()}), drawn=drawn)


# -- online_softmax_step -------------------------------------------------------------
@pytest.mark.points(1)
@pytest.mark.parametrize("n", [1, 3, 8, 17])
def test_step_any_tile_width(student, n):
    """online_softmax_step from a running state, tiles of any width"""
    for drawn in (False, True):
        rng = (rng_for if drawn else fixed_rng)("ex07-step", n)
        for lead, n_tiles in (((), 2), ((2, 3), 1), ((2,), 3)):
            m, l, acc = _state(rng, lead, 5, 4, n_tiles)
            scores = rng.standard_normal(lead + (5, n)) * 3 + 1.0   # often raises the max
            scores[rng.random(scores.shape) < 0.2] = -np.inf         # some masked entries
            v = rng.standard_normal(lead + (n, 4))
            _check_step(student, (m, l, acc, scores, v),
                        f"batch dims {lead}, 5 rows, tile of {n} keys, after {n_tiles} tiles",
                        drawn)


@pytest.mark.points(1)
def test_step_fully_masked_tile(student):
    """online_softmax_step on a fully masked tile gives no NaN, at the start and later"""
    rng = fixed_rng("ex07-step", "masked")
    v = rng.standard_normal((4, 3))
    masked = np.full((2, 4), -np.inf)
    _check_step(student, (np.full(2, -np.inf), np.zeros(2), np.zeros((2, 3)), masked, v),
                "a fully masked first tile (m = -inf)")
    m, l, acc = _state(rng, (), 2, 3, 2)
    _check_step(student, (m, l, acc, masked, v), "a fully masked tile after two tiles")
    mixed = np.array([[-np.inf] * 4, [0.5, -np.inf, 2.0, -1.0]])
    _check_step(student, (np.full(2, -np.inf), np.zeros(2), np.zeros((2, 3)), mixed, v),
                "a first tile that masks all of row 0 only")


@pytest.mark.points(1)
def test_step_chain_is_attention(student):
    """folding every tile in with online_softmax_step gives softmax(scores) @ v"""
    for drawn in (False, True):
        rng = (rng_for if drawn else fixed_rng)("ex07-step", "chain")
        scores, v = rng.standard_normal((3, 23)) * 4, rng.standard_normal((23, 5))
        on_case("scores of shape (3, 23)", lambda: _check_chain(student, scores, v),
                drawn=drawn)


def _check_chain(student, scores, v):
    m, l, acc = np.full(3, -np.inf), np.zeros(3), np.zeros((3, 5))
    for j0, j1 in ((0, 1), (1, 9), (9, 10), (10, 23)):
        out = student.online_softmax_step(m, l, acc, scores[:, j0:j1], v[j0:j1])
        m, l, acc = (np.asarray(x) for x in out)
    e = np.exp(scores - scores.max(-1, keepdims=True))
    want = (e / e.sum(-1, keepdims=True)) @ v
    wrong = {}
    for name in STEP_MISTAKES:
        wm, wl, wacc = np.full(3, -np.inf), np.zeros(3), np.zeros((3, 5))
        for j0, j1 in ((0, 1), (1, 9), (9, 10), (10, 23)):
            wm, wl, wacc = flash.step_reference(wm, wl, wacc, scores[:, j0:j1], v[j0:j1],
                                                mistake=name)
        wrong[flash.describe(name)] = wacc / wl[:, None]
    check_close(acc / l[:, None], want, what="acc / l after tiles of 1, 8, 1 and 13 keys",
                atol=1e-9, rtol=1e-7, mistakes=wrong,
                hint="When a tile raises the maximum, rescale both l and acc by "
                     "exp(m_old - m_new).")


# -- blockwise_attention --------------------------------------------------------------
BLOCKWISE_CASES = [  # (S_q, S_k, block_size, causal)
    # First a case where tile-local key indices differ from no mask at all (a
    # query before position block_size - 1 with several tiles), so that the
    # first failure names the one mistake.
    (12, 12, 5, True), (9, 9, 1, True), (5, 13, 4, True), (8, 20, 7, False),
    (1, 17, 5, True), (6, 6, 6, True), (6, 10, 32, False),
]


def _blockwise_cases():
    """(S_q, S_k, block_size, causal, rng, drawn): the fixed cases, then random ones."""
    fixed = fixed_rng("ex07-blockwise")
    for case in BLOCKWISE_CASES:
        yield (*case, fixed, False)
    rng = rng_for("ex07-blockwise")
    for _ in range(3):
        s_q = int(rng.integers(1, 25))
        yield s_q, s_q + int(rng.integers(0, 20)), int(rng.integers(1, 12)), \
            bool(rng.integers(2)), rng, True


@pytest.mark.points(1)
def test_blockwise_any_block_size(student):
    """blockwise_attention equals attention for any block size and ragged S_q, S_k"""
    for s_q, s_k, block, causal, rng, drawn in _blockwise_cases():
        q = rng.standard_normal((2, s_q, 8))
        k, v = rng.standard_normal((2, s_k, 8)), rng.standard_normal((2, s_k, 8))
        want = flash.reference(q[None], k[None], v[None], causal)[0]
        on_case(f"S_q={s_q}, S_k={s_k}, block_size={block}, causal={causal}",
                lambda: check_close(
                    student.blockwise_attention(q, k, v, block, causal=causal), want,
                    what=f"blockwise_attention(q, k, v, {block}, causal={causal})",
                    atol=1e-9, rtol=1e-7,
                    mistakes=lambda: _blockwise_mistakes(q, k, v, block, causal)),
                drawn=drawn)


def _blockwise_mistakes(q, k, v, block, causal):
    """The known mistakes of ``blockwise_attention(q, k, v, block, causal=causal)``:
    the scale's and the mask's (as attention makes them), the missing rescale
    at this block size, and the walk's own (``flash.blockwise_mistakes``).
    ``q``: ``(B, h, S, d)``, or ``(h, S, d)`` (one batch of heads)."""
    if q.ndim == 3:
        return {d: w[0] for d, w in
                _blockwise_mistakes(q[None], k[None], v[None], block, causal).items()}
    found = flash.flash_mistakes(q, k, v, causal,
                                 names=["no_scale", "scale_by_d", "top_left_mask",
                                        "diagonal_masked", "mask_wrong_triangle", "no_mask"])
    if k.shape[-2] > block:
        found[flash.describe("no_rescale")] = flash.reference(
            q, k, v, causal, None, ("no_rescale", block))
    for description, wrong in flash.blockwise_mistakes(q, k, v, block, causal).items():
        found.setdefault(description, wrong)
    return found


@pytest.mark.points(1)
def test_blockwise_on_split_heads(student):
    """blockwise_attention on (B, h, S, d_head) arrays equals attention"""
    rng = fixed_rng("ex07-blockwise", "heads")
    q, k, v = (rng.standard_normal((2, 3, s, 8)) for s in (6, 11, 11))    # (B, h, S, d)
    on_case("q of shape (2, 3, 6, 8), S_k=11, block_size=4", lambda: check_close(
        student.blockwise_attention(q, k, v, 4, causal=True), flash.reference(q, k, v, True),
        what="blockwise_attention(q, k, v, 4) on (B, h, S, d_head) arrays", atol=1e-9,
        rtol=1e-7, mistakes=lambda: _blockwise_mistakes(q, k, v, 4, True)))


@pytest.mark.points(1)
def test_blockwise_rows_that_see_nothing(student):
    """blockwise_attention, causal with S_q > S_k: rows that may see no key give zeros, not NaN"""
    rng = fixed_rng("ex07-blockwise", "nothing")
    q, k, v = (rng.standard_normal((1, s, 4)) for s in (7, 3, 3))
    want = flash.reference(q[None], k[None], v[None], True)[0]
    check_close(student.blockwise_attention(q, k, v, 2, causal=True), want,
                what="blockwise_attention(q, k, v, 2) with S_q=7, S_k=3", atol=1e-9, rtol=1e-7,
                mistakes=lambda: {flash.describe("nan_masked_tile"): flash.reference(
                    q[None], k[None], v[None], True, None, "nan_masked_tile")[0],
                    **_blockwise_mistakes(q, k, v, 2, True)})


@pytest.mark.points(1)
def test_blockwise_holds_one_tile(student):
    """blockwise_attention: right, from tiles of at most block_size keys (online_softmax_step)"""
    rng = fixed_rng("ex07-blockwise", "tiles")
    q, k, v = (rng.standard_normal((2, s, 4)) for s in (5, 22, 22))
    res = student.probe("ex07_flash_attention.blockwise_traced", q, k, v, 6, causal=False)
    widths = res["widths"]
    if not widths:
        raise Feedback("blockwise_attention did not call online_softmax_step: fold each tile "
                       "in with the module's online_softmax_step")
    if max(widths) > 6 or sum(widths) < 22:
        raise Feedback(f"with block_size=6 and S_k=22, online_softmax_step saw tiles of "
                       f"{widths} keys: expected tiles of at most 6 keys covering all 22")
    check_close(res["out"], flash.reference(q[None], k[None], v[None], False)[0],
                what="blockwise_attention(q, k, v, 6, causal=False)", atol=1e-9, rtol=1e-7)


# -- flash_attention: correctness --------------------------------------------------------
FLASH_CASES = {  # id: (B, h, h_kv, S_q, S_k, d_head, causal)
    "ragged, not causal": (2, 2, 2, 37, 53, 32, False),
    "causal, S_q = S_k = 70": (1, 2, 2, 70, 70, 64, True),
    "causal, S_q < S_k": (1, 2, 2, 20, 75, 32, True),
    "decode, S_q = 1, h_kv = 1": (2, 4, 1, 1, 77, 64, True),
    "causal, S_q > S_k": (1, 2, 2, 40, 30, 16, True),    # 10 rows see no key
    "GQA, h = 4, h_kv = 2": (1, 4, 2, 33, 45, 32, True),
    "GQA, h_kv = 1, not causal": (1, 4, 1, 29, 29, 16, False),
    "GQA decode, h = 6, h_kv = 2": (2, 6, 2, 1, 40, 32, True),
    "d_head = 16": (1, 2, 2, 50, 50, 16, True),
    "d_head = 128": (1, 1, 1, 35, 35, 128, True),
}


def _flash_check(student, key, shape, *, sm_scale=None, pass_sm_scale=True, pass_causal=True,
                 machine=None):
    b, h, h_kv, s_q, s_k, d, causal = shape
    q, k, v = _heads(key, b, h, h_kv, s_q, s_k, d)
    # The same shapes with other values, for the grader's replay of the launches.
    later = _heads(("replay", key), b, h, h_kv, s_q, s_k, d)
    res = student.probe("ex07_flash_attention.run_checked", q, k, v, causal=causal,
                        sm_scale=sm_scale, pass_sm_scale=pass_sm_scale, pass_causal=pass_causal,
                        replay=later)
    if machine is not None:
        machine.setdefault("ex07 kernels ran on", res["gpu"] or
                           "the CPU, in Triton's interpreter (float32; GPU tests not run)")
    args = "q, k, v" + (f", causal={causal}" if pass_causal else "") + \
        (f", sm_scale={sm_scale}" if pass_sm_scale and sm_scale is not None else "")
    what = f"flash_attention({args})"
    text = f"B={b}, h={h}, h_kv={h_kv}, S_q={s_q}, S_k={s_k}, d_head={d}, causal={causal}"
    on_case(text, lambda: flash.check_output(
        res, q, flash.reference(q, k, v, causal, sm_scale), what=what,
        mistakes=lambda: flash.flash_mistakes(q, k, v, causal, sm_scale)))
    on_case(text, lambda: flash.check_authentic(res, q, k, v, what=what, causal=causal))
    # Every case, not one: a kernel that reads q, k and v and does the FLOPs
    # but stores numbers made elsewhere passes the count, never the replay.
    on_case(text, lambda: flash_judge.check_replay(
        res, later[0], flash.reference(*later, causal, sm_scale), what=what))
    return q, k, v, res


@pytest.mark.points(1)
@pytest.mark.timeout_s(240)
@pytest.mark.parametrize("case", list(FLASH_CASES), ids=list(FLASH_CASES))
def test_flash_attention(student, case, machine):
    """flash_attention matches exact attention"""
    _flash_check(student, ("flash", case), FLASH_CASES[case], machine=machine)


@pytest.mark.points(1)
@pytest.mark.timeout_s(240)
def test_flash_custom_sm_scale(student):
    """flash_attention with sm_scale=0.3 (not causal) matches exact attention"""
    # not causal: a mistake of the mask is not this test's to name
    _flash_check(student, ("scale",), (1, 2, 2, 26, 41, 32, False), sm_scale=0.3)


@pytest.mark.points(1)
@pytest.mark.timeout_s(240)
def test_flash_defaults(student):
    """flash_attention(q, k, v) by default: causal, scaled by 1/sqrt(d_head)"""
    _flash_check(student, ("defaults",), (1, 2, 2, 30, 30, 64, True),
                 pass_sm_scale=False, pass_causal=False)


# -- flash_attention: the work is real ----------------------------------------------------
@pytest.mark.points(1)
@pytest.mark.timeout_s(240)
def test_flash_no_score_matrix(student):
    """flash_attention (S=96, not causal) allocates no (S_q, S_k) buffer, and is right"""
    b, h, s, d = 1, 1, 96, 16          # S*S = 9216 elements > q, k, v (1536 each)
    q, k, v = _heads(("scores",), b, h, h, s, s, d)
    later = _heads(("replay", "scores"), b, h, h, s, s, d)
    res = student.probe("ex07_flash_attention.run_checked", q, k, v, causal=False, replay=later)
    flash.check_authentic(res, q, k, v, what="flash_attention(q, k, v, causal=False)",
                          causal=False)
    flash.check_output(res, q, flash.reference(q, k, v, False),
                       what="flash_attention(q, k, v, causal=False)",
                       mistakes=lambda: flash.flash_mistakes(q, k, v, False))
    flash_judge.check_replay(res, later[0], flash.reference(*later, False),
                             what="flash_attention(q, k, v, causal=False)")


@pytest.mark.points(1)
@pytest.mark.timeout_s(240)
def test_flash_gqa_without_copies(student):
    """flash_attention, h=4 over h_kv=1: right, with no copy of K or V per query head"""
    q, k, v = _heads(("gqa-copy",), 1, 4, 1, 16, 96, 32)
    later = _heads(("replay", "gqa-copy"), 1, 4, 1, 16, 96, 32)
    what = "flash_attention(q, k, v) with h=4, h_kv=1"
    res = student.probe("ex07_flash_attention.run_checked", q, k, v, causal=True, replay=later)
    flash.check_output(res, q, flash.reference(q, k, v, True), what=what,
                       mistakes=lambda: flash.flash_mistakes(q, k, v, True))
    flash.check_no_kv_copy(res, q, k, what=what)
    flash_judge.check_work(res, q, k, v, what=what, causal=True)
    flash_judge.check_replay(res, later[0], flash.reference(*later, True), what=what)


@pytest.mark.points(1)
@pytest.mark.timeout_s(240)
def test_flash_inputs_unchanged(student):
    """flash_attention leaves q, k and v as they were, and is right"""
    q, k, v = _heads(("inputs",), 1, 2, 2, 21, 21, 32)
    later = _heads(("replay", "inputs"), 1, 2, 2, 21, 21, 32)
    res = student.probe("ex07_flash_attention.run_checked", q, k, v, causal=True, sm_scale=0.5,
                        replay=later)
    flash.check_inputs_unchanged(res, q, k, v, what="flash_attention(q, k, v, sm_scale=0.5)")
    flash.check_output(res, q, flash.reference(q, k, v, True, 0.5),
                       what="flash_attention(q, k, v, sm_scale=0.5)",
                       mistakes=lambda: flash.flash_mistakes(q, k, v, True, 0.5))
    flash_judge.check_work(res, q, k, v, what="flash_attention(q, k, v, sm_scale=0.5)",
                           causal=True)
    flash_judge.check_replay(res, later[0], flash.reference(*later, True, 0.5),
                             what="flash_attention(q, k, v, sm_scale=0.5)")


@pytest.mark.points(1)
@pytest.mark.timeout_s(240)
def test_flash_fresh_inputs(student):
    """three calls, the inputs' values changed in place between them: each output is right"""
    # In place: the same buffers, so an output kept by address (data_ptr) is stale.
    calls = [_heads(("fresh", i), 1, 2, 2, 24, 24, 16) for i in range(3)]
    later = _heads(("fresh", "replay"), 1, 2, 2, 24, 24, 16)
    first = student.probe("ex07_flash_attention.run_checked", *calls[0], causal=True,
                          again=calls[1:], replay=later)
    for i, ((q, k, v), res) in enumerate(zip(calls, [first, *first["again"]])):
        what = f"call {i + 1} of 3, the inputs' values changed in place"
        on_case(what, lambda: flash.check_output(
            res, q, flash.reference(q, k, v, True), what="flash_attention(q, k, v)",
            mistakes=lambda: flash.flash_mistakes(q, k, v, True),
            hint="An earlier call's output came back? Compute every output from its own "
                 "inputs; cache nothing between calls."))
        flash.check_authentic(res, q, k, v, what=f"flash_attention ({what})")
    # the first call's launches again, on the grader's buffers: its output was their work
    flash_judge.check_replay(first, later[0], flash.reference(*later, True),
                             what="flash_attention (call 1 of 3)")


# -- the step before the kernel: tile_update and tile_finish in the given kernel ----------
BLOCK_CASES = {  # id: (S_q, S_k, d_head, causal, sm_scale)
    # rows whose later key tiles are all masked: a maximum that is not kept is lost there
    "causal, S_q = S_k = 48": (48, 48, 16, True, None),
    "decode, S_q = 1, S_k = 77": (1, 77, 64, True, None),
    "not causal, sm_scale = 0.3, S_k = 100": (33, 100, 32, False, 0.3),
    "causal, S_q < S_k, d_head = 128": (20, 75, 128, True, None),
    "causal, S_q > S_k": (37, 21, 16, True, None),          # 16 rows see no key
}


def _block_check(student, q, k, v, causal, sm_scale, text):
    res = student.probe("ex07_flash_attention.run_checked", q, k, v, causal=causal,
                        sm_scale=sm_scale, entry="query_block_attention")
    what = f"query_block_attention(q, k, v, causal={causal}, sm_scale={sm_scale})"
    on_case(text, lambda: flash.check_output(
        res, q, flash.query_block_reference(q, k, v, causal, sm_scale), what=what,
        mistakes=lambda: flash.query_block_mistakes(q, k, v, causal, sm_scale),
        hint="Check tile_update against online_softmax_step: the same update, in Triton ops."))
    on_case(text, lambda: flash.check_authentic(res, q, k, v, what=what, causal=causal))


@pytest.mark.points(1)
@pytest.mark.timeout_s(240)
@pytest.mark.parametrize("case", list(BLOCK_CASES), ids=list(BLOCK_CASES))
def test_query_block(student, case):
    """tile_update and tile_finish in the given kernel match exact attention"""
    s_q, s_k, d, causal, sm_scale = BLOCK_CASES[case]
    q, k, v = (x[0, 0] for x in _heads(("block", case), 1, 1, 1, s_q, s_k, d))
    _block_check(student, q, k, v, causal, sm_scale, f"{case}: S_q={s_q}, S_k={s_k}, "
                 f"d_head={d}")


@pytest.mark.points(1)
@pytest.mark.timeout_s(240)
def test_query_block_large_scores(student):
    """tile_update keeps the running maximum: high scores, then a tile of much lower ones"""
    # Scores near +50 on the first 16 keys and near -50 on the next 16 (sm_scale 1): a
    # maximum taken from each tile alone rescales by exp(100), past float32's range.
    rng = fixed_rng("ex07-hidden", "block-large")
    d = 16
    q = torch.zeros(16, d)
    q[:, 0] = 10.0
    k = torch.from_numpy(rng.standard_normal((40, d)).astype(np.float32)) * 0.1
    k[:16, 0] += 5.0
    k[16:32, 0] -= 5.0
    v = torch.from_numpy(rng.standard_normal((40, d)).astype(np.float32))
    q = q + torch.from_numpy(rng.standard_normal((16, d)).astype(np.float32)) * 0.1
    _block_check(student, q, k, v, False, 1.0,
                 "scores near +50, then near -50, then near 0 (S_q=16, S_k=40)")
