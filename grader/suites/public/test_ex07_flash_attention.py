"""Public tests for ex07_flash_attention: small cases to check your work.

Without a GPU your kernel runs in Triton's interpreter on the CPU (the
grader sets ``TRITON_INTERPRET=1``): shapes stay small and float32.
"""
import numpy as np
import pytest
import torch

from grader.feedback import Feedback, check_close
from grader.reference import flash_judge
from grader.reference.secret import flash
from grader.reference.cases import fixed_rng

pytestmark = pytest.mark.exercise("ex07_flash_attention")
# The NumPy half runs everywhere; the kernel's tests where Triton is (Linux).
NEEDS_TRITON = "needs Triton (Linux): pip install triton, or use Linux or Colab"
needs_triton = pytest.mark.skipif(not flash.HAS_TRITON, reason=NEEDS_TRITON)


def _heads(key, b, h, h_kv, s_q, s_k, d):
    rng = fixed_rng("ex07-public", *key)
    make = lambda *shape: torch.from_numpy(rng.standard_normal(shape).astype(np.float32))  # noqa
    return make(b, h, s_q, d), make(b, h_kv, s_k, d), make(b, h_kv, s_k, d)


@pytest.mark.points(1)
def test_online_softmax_step_two_tiles(student):
    """online_softmax_step over two tiles, the second raising the maximum; a row masked whole"""
    rng = fixed_rng("ex07-public", "step")
    v1, v2 = rng.standard_normal((3, 4)), rng.standard_normal((2, 4))
    s1 = np.array([[0.5, -1.0, 0.0], [1.0, 2.0, -0.5]])
    s2 = np.array([[3.0, 0.0], [-1.0, 0.5]])
    m, l, acc = np.full(2, -np.inf), np.zeros(2), np.zeros((2, 4))
    got = student.online_softmax_step(m, l, acc, s1, v1)
    want = flash.step_reference(m, l, acc, s1, v1)
    exp2 = flash.step_reference(m, l, acc, s1, v1, mistake="exp2_no_log2e")
    for name, g, w, bad in zip(("m", "l", "acc"), got, want, exp2):
        check_close(g, w, what=f"after the first tile, {name}", atol=1e-9, rtol=1e-7,
                    mistakes={flash.describe("exp2_no_log2e"): bad})
    got = student.online_softmax_step(*want, s2, v2)
    # Each of m, l and acc is held to what each step mistake gives for it: a
    # step that forgets to rescale l is named at l, not only at acc.  acc is
    # checked before l: a step that rescales neither is named by its acc.
    wrong = {flash.describe(n): flash.step_reference(*want, s2, v2, mistake=n)
             for n in ("no_rescale", "no_rescale_l", "exp2_no_log2e", "max_not_running")}
    right = flash.step_reference(*want, s2, v2)
    for i, name in ((0, "m"), (2, "acc"), (1, "l")):
        check_close(got[i], right[i], what=f"after the second tile, {name}", atol=1e-9,
                    rtol=1e-7, mistakes={d: bad[i] for d, bad in wrong.items()})
    # A first tile that row 0 sees nothing of (all -inf): it stays empty, not NaN.
    masked = np.array([[-np.inf, -np.inf, -np.inf], [0.5, -np.inf, 2.0]])
    got = student.online_softmax_step(m, l, acc, masked, v1)
    want = flash.step_reference(m, l, acc, masked, v1)
    nan = flash.step_reference(m, l, acc, masked, v1, mistake="nan_masked_tile")
    for name, g, w, bad in zip(("m", "l", "acc"), got, want, nan):
        check_close(g, w, what=f"after a first tile fully masked for row 0, {name}",
                    atol=1e-9, rtol=1e-7, mistakes={flash.describe("nan_masked_tile"): bad})


@pytest.mark.points(1)
def test_blockwise_small(student):
    """blockwise_attention with tiles of 3 keys equals attention (causal, S=7; and 4 queries)"""
    rng = fixed_rng("ex07-public", "blockwise")
    q, k, v = (rng.standard_normal((2, 7, 4)) for _ in range(3))
    # 4 queries over 7 keys: with as many queries as keys, a mask aligned to the
    # top-left and one aligned to the end are the same
    for q_, what in ((q, "blockwise_attention(q, k, v, 3)"),
                     (q[:, 3:], "blockwise_attention(q[:, 3:], k, v, 3), S_q=4, S_k=7")):
        want = flash.reference(q_[None], k[None], v[None], True)[0]
        blockwise = flash.blockwise_mistakes(q_, k, v, 3, causal=True)
        exact = {flash.describe(n): flash.reference(q_[None], k[None], v[None], True,
                                                   mistake=n)[0]
                 for n in ("no_scale", "scale_by_d", "top_left_mask", "mask_wrong_triangle")}
        check_close(student.blockwise_attention(q_, k, v, 3, causal=True), want, what=what,
                    atol=1e-9, rtol=1e-7, mistakes={**blockwise, **exact})


# (B, h, h_kv, S_q, S_k, d_head, causal, sm_scale): unlike a square case, each
# tells the end-aligned mask from the top-left one; the first has rows that see
# no key (they give zeros, never NaN), the second tells the grouping of K/V
# heads (h > h_kv > 1) and a copy of K/V per query head
KERNEL_CASES = {
    "causal, S_q=40 over S_k=30, d_head=16, sm_scale=0.3": (1, 2, 2, 40, 30, 16, True, 0.3),
    "causal, h=4 over h_kv=2, S_q=24, S_k=40, d_head=32": (1, 4, 2, 24, 40, 32, True, None),
}
# The known kernel mistakes tried are flash_mistakes' own list, the hidden
# suite's too: a mistake named in one suite is named in the other.


@needs_triton
@pytest.mark.points(1)
@pytest.mark.timeout_s(180)
@pytest.mark.parametrize("case", list(KERNEL_CASES), ids=list(KERNEL_CASES))
def test_flash_attention_small(student, case):
    """flash_attention on a small case (B=1): right, and computed in your Triton kernel"""
    b, h, h_kv, s_q, s_k, d_head, causal, sm_scale = KERNEL_CASES[case]
    q, k, v = _heads((case,), b, h, h_kv, s_q, s_k, d_head)
    later = _heads((case, "replay"), b, h, h_kv, s_q, s_k, d_head)   # other values, same shapes
    res = student.probe("ex07_flash_attention.run_checked", q, k, v, causal=causal,
                        sm_scale=sm_scale, replay=later)
    what = f"flash_attention(q, k, v, causal={causal}" + \
        (f", sm_scale={sm_scale})" if sm_scale is not None else ")")
    flash.check_output(res, q, flash.reference(q, k, v, causal, sm_scale), what=what,
                       mistakes=flash.flash_mistakes(q, k, v, causal, sm_scale))
    flash.check_authentic(res, q, k, v, what=what, causal=causal)
    flash_judge.check_inputs_unchanged(res, q, k, v, what=what)
    if h != h_kv:
        flash_judge.check_no_kv_copy(res, q, k, what=what)
    # the call's launches made again on the other values: the output was their work
    flash_judge.check_replay(res, later[0], flash.reference(*later, causal, sm_scale),
                             what=what)


@needs_triton
@pytest.mark.points(1)
@pytest.mark.timeout_s(180)
def test_flash_attention_in_your_kernel(student):
    """flash_attention(q, k, v) by default (causal, 1/sqrt(d_head)): in your own Triton kernel,
    never building the (S_q, S_k) scores, each call from its own inputs"""
    # The second call's inputs are new values in the same buffers (copied in place):
    # an earlier call's output, kept by buffer address, must not come back.
    calls = [_heads(("kernel", i), 1, 1, 1, 64, 64, 16) for i in range(2)]
    later = _heads(("kernel", "replay"), 1, 1, 1, 64, 64, 16)
    first = student.probe("ex07_flash_attention.run_checked", *calls[0], pass_sm_scale=False,
                          pass_causal=False, again=calls[1:], replay=later)
    for i, ((q, k, v), res) in enumerate(zip(calls, [first, *first["again"]])):
        what = "flash_attention(q, k, v)" + (" (a second call, new inputs)" if i else "")
        # The output first: a kernel whose wrong answer is a known mistake
        # (a loop that never reaches some keys reads only part of k) is told
        # that mistake, not where its reads fell short; a cached second
        # output comes back without a launch.
        flash.check_output(res, q, flash.reference(q, k, v, True), what=what,
                           mistakes=flash.flash_mistakes(q, k, v, True),
                           hint="An earlier call's output came back? Compute every output "
                                "from its own inputs; cache nothing between calls."
                           if i else None)
        flash.check_authentic(res, q, k, v, what=what)
    # the first call's launches made again on other values: its output was their work
    flash_judge.check_replay(first, later[0], flash.reference(*later, True),
                             what="flash_attention(q, k, v)")


@needs_triton
@pytest.mark.gpu
@pytest.mark.points(1)
@pytest.mark.timeout_s(300)
def test_flash_attention_gpu_fp16(student):
    """on a GPU: flash_attention in float16 (causal, S=1024, d_head=64), right and in your kernel"""
    if not torch.cuda.is_available():
        pytest.skip("needs a GPU")
    q, k, v = (x.half() for x in _heads("gpu", 1, 4, 2, 1024, 1024, 64))
    later = tuple(x.half() for x in _heads("gpu-replay", 1, 4, 2, 1024, 1024, 64))
    res = student.probe("ex07_flash_attention.run_checked", q, k, v, causal=True,
                        replay=later)
    what = "flash_attention(q, k, v) in float16 on the GPU"
    flash.check_output(res, q, flash.reference(q, k, v, True, device="cuda"), what=what)
    flash.check_authentic(res, q, k, v, what=what)
    # on a GPU nothing counts loads and stores: the launches made again on the
    # grader's buffers show where the output came from
    flash_judge.check_replay(res, later[0], flash.reference(*later, True, device="cuda"),
                             what=what)


@needs_triton
@pytest.mark.points(1)
@pytest.mark.timeout_s(600)
@pytest.mark.nothing_to_record
def test_kernel_compiles_for_sm80_and_sm90(request, submission_dir, launch_worker,
                                           check_cache_dir, compile_cache_dir):
    """your kernel compiles for real GPUs (sm_80 and sm_90), with every config it launches"""
    # flash_judge, not flash: judging code ships as is in the student edition.
    # A grading compiles every config fully; `check` (its cache given) answers
    # once the config likeliest to need the most shared memory compiled per
    # GPU and the others passed Triton's front end, and its output says so.
    # A grading takes a launch compiled for another submission of its run
    # from the run's shared cache (compile_cache_dir).
    res, cached = flash_judge.compile_results(submission_dir, launch_worker, check_cache_dir,
                                              compile_cache_dir)
    kept = "\n(kept from an earlier check of these same files)" if cached else ""
    try:
        request.node.feedback_on_pass = flash_judge.judge_compile(res) + kept
    except Feedback as exc:
        raise Feedback(f"{exc}{kept}") from None


# -- the step before the kernel: your tile_update and tile_finish in the given kernel ----
def _block(key, s_q, s_k, d_head):
    rng = fixed_rng("ex07-public", "block", *key)
    make = lambda *shape: torch.from_numpy(rng.standard_normal(shape).astype(np.float32))  # noqa
    return make(s_q, d_head), make(s_k, d_head), make(s_k, d_head)


@needs_triton
@pytest.mark.points(1)
@pytest.mark.timeout_s(180)
def test_query_block_small(student):
    """tile_update in the given kernel: query_block_attention, not causal, S_q=24, S_k=40"""
    q, k, v = _block(("small",), 24, 40, 16)
    res = student.probe("ex07_flash_attention.run_checked", q, k, v, causal=False,
                        entry="query_block_attention")
    flash.check_output(res, q, flash.query_block_reference(q, k, v, False),
                       what="query_block_attention(q, k, v, causal=False)",
                       mistakes=flash.query_block_mistakes(q, k, v, False))
    flash_judge.check_work(res, q, k, v, what="query_block_attention(q, k, v, causal=False)",
                           causal=False)


@needs_triton
@pytest.mark.points(1)
@pytest.mark.timeout_s(180)
def test_query_block_rows_that_see_nothing(student):
    """tile_update and tile_finish: causal, S_q=40 > S_k=30 (10 rows see no key: zeros)"""
    q, k, v = _block(("nothing",), 40, 30, 32)
    res = student.probe("ex07_flash_attention.run_checked", q, k, v, causal=True,
                        entry="query_block_attention")
    flash.check_output(res, q, flash.query_block_reference(q, k, v, True),
                       what="query_block_attention(q, k, v, causal=True) with S_q=40, S_k=30",
                       mistakes=flash.query_block_mistakes(q, k, v, True))
    flash_judge.check_work(res, q, k, v, what="query_block_attention(q, k, v, causal=True)",
                           causal=True)


@needs_triton
@pytest.mark.points(1)
@pytest.mark.timeout_s(180)
def test_flash_attention_rescales_across_key_tiles(student):
    """flash_attention over 512 keys whose scores rise tile after tile: the past rescaled
    (acc and l) whenever a key tile raises a row's maximum"""
    # 512 keys outnumber any key tile a kernel uses (the small cases above fit
    # in one tile of 64, where a missing rescale changes nothing); each key
    # leans further along q's direction, so every tile raises each row's
    # maximum (by about 1 per 16 keys) and the past's weights must shrink.
    rng = fixed_rng("ex07-public", "rising")
    s_q, s_k, d_head = 16, 512, 16
    lean = torch.arange(s_k, dtype=torch.float32)[:, None] / s_k * 8.0   # (S_k, 1)
    noise = lambda *shape: torch.from_numpy(  # noqa: E731
        0.3 * rng.standard_normal(shape).astype(np.float32))
    q = (1.0 + noise(1, 1, s_q, d_head)).contiguous()
    k = (lean + noise(1, 1, s_k, d_head)).contiguous()
    v = torch.from_numpy(rng.standard_normal((1, 1, s_k, d_head)).astype(np.float32))
    later = _heads(("rising", "replay"), 1, 1, 1, s_q, s_k, d_head)
    res = student.probe("ex07_flash_attention.run_checked", q, k, v, causal=True, replay=later)
    what = "flash_attention(q, k, v, causal=True) with S_q=16, S_k=512, rising scores"
    flash.check_output(res, q, flash.reference(q, k, v, True), what=what,
                       mistakes=flash.flash_mistakes(q, k, v, True),
                       hint="When a key tile raises a row's maximum from m to m_new, multiply "
                            "that row's acc and l by exp(m - m_new) before adding the tile.")
    flash_judge.check_replay(res, later[0], flash.reference(*later, True), what=what)
