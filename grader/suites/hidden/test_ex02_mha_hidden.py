"""Hidden tests for ex02_mha: fixed cases that expose every known mistake,
then random shapes (both precisions), and properties.

Each test runs its fixed cases first (the same in every grading), then its
random ones (drawn from the run's seed; see ``grader/reference/cases.py``):
a known mistake fails on a fixed case, so it costs the same under every seed.
"""
import numpy as np
import pytest

from grader.feedback import LONG_CHAIN, Feedback, accuracy, check_close, check_responds, \
    expect_raises, named_mistake
from grader.reference.mistakes import looks_like
from grader.reference.secret import attention_np as ref
from grader.reference.cases import fixed_rng, heads, mha_case, mha_data, on_case, rng_for

pytestmark = [pytest.mark.exercise("ex02_mha"), pytest.mark.hidden]
N_CASES = 8
# The precision rule (grader.feedback.accuracy): a float64 input is held to
# what float32 arithmetic reaches; a long chain of products to ten times that.
ATOL, RTOL = accuracy("float64")
ATOL_LONG, RTOL_LONG = accuracy("float64", LONG_CHAIN)
ATTN_MISTAKES = ["no_scale", "scale_by_d", "scale_multiplied", "softmax_over_queries",
                 "no_mask", "diagonal_masked", "top_left_mask", "mask_wrong_triangle",
                 "mask_after_softmax", "softmax_base_2"]
MHA_MISTAKES = ATTN_MISTAKES + ["rope_on_values", "no_rope", "rope_interleaved",
                                "rope_positions_ignored", "rope_wrong_frequency",
                                "rope_wrong_direction", "split_without_transpose",
                                "merge_without_transpose", "no_output_projection",
                                "scale_by_d_model", "rope_inverse_frequency",
                                "rope_base_ignored", "rope_only_q"]
SOFTMAX_MISTAKES = ["softmax_base_2", "empty_row_nan", "softmax_unstable"]


def tol(dtype):
    return accuracy(np.dtype(dtype))


def direct_before_property(prop, direct, what):
    """Run the property check ``prop()``; when it fails, check the direct answer
    first (``direct()``): a mistake named there (a softmax over queries) also
    breaks the property, and blaming the mask for it would mislead."""
    try:
        prop()
    except Feedback as prop_failure:
        try:
            direct()
        except Feedback as exc:
            if named_mistake(str(exc)):
                raise Feedback(f"{what} fails, and so does the output itself:\n{exc}") \
                    from None
        raise prop_failure from None


# -- softmax ----------------------------------------------------------------
# (shape, axis): an axis other than the last (first and middle), and the last
SOFTMAX_FIXED = [((2, 3, 4), 0), ((3, 4, 2), 1), ((3, 5), -1), ((6,), 0)]


@pytest.mark.points(2)
@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_softmax_random(student, dtype):
    """softmax over the given axis, on hidden shapes"""
    atol, rtol = tol(dtype)

    def check(x, axis, drawn):
        names = SOFTMAX_MISTAKES + (["softmax_ignores_axis"]
                                    if axis not in (-1, x.ndim - 1) else [])
        on_case(f"shape {x.shape}, axis={axis}, {dtype}", lambda: check_close(
            student.softmax(x, axis=axis), ref.softmax(x, axis), what=f"softmax(x, axis={axis})",
            atol=atol, rtol=rtol,
            mistakes=lambda: ref.mistakes_of(ref.softmax, names, x, axis)), drawn=drawn)

    fixed = fixed_rng("softmax", dtype)
    for shape, axis in SOFTMAX_FIXED:
        check((fixed.standard_normal(shape) * 3).astype(dtype), axis, False)
    rng = rng_for("softmax", dtype)
    for _ in range(N_CASES):
        shape = tuple(int(n) for n in rng.integers(1, 7, size=int(rng.integers(1, 5))))
        axis = int(rng.integers(-len(shape), len(shape)))
        check((rng.standard_normal(shape) * 3).astype(dtype), axis, True)


@pytest.mark.points(1)
def test_softmax_large_logits(student):
    """softmax of logits near 1e4 is finite and right"""
    # The last row sits 1e4 below the others: a shift by the whole array's max
    # (not each row's) underflows it to 0/0.
    x = np.array([[1e4, 0.0, -1e4], [1e4, 1e4 - 1.0, 5.0], [0.0, -1.0, -2.0]])
    check_close(student.softmax(x), ref.softmax(x), what="softmax of logits near 1e4",
                atol=ATOL, rtol=RTOL,
                mistakes=lambda: ref.mistakes_of(
                    ref.softmax, SOFTMAX_MISTAKES + ["softmax_global_max"], x),
                hint="Shift each row by its own max (along axis, keepdims=True), not by one "
                     "max of the whole array: a row far below the others underflows to 0/0.",
                hint_where=np.array([[False], [False], [True]]))   # the row 1e4 below


@pytest.mark.points(1)
def test_softmax_masked_entries(student):
    """-inf entries get weight 0; a row of only -inf gives zeros, not NaN"""
    inf = np.inf
    x = np.array([[0.0, -inf, 1.0], [-inf, -inf, -inf]])
    check_close(student.softmax(x), ref.softmax(x), what="softmax with -inf entries",
                atol=ATOL, rtol=RTOL,
                mistakes=lambda: ref.mistakes_of(ref.softmax, SOFTMAX_MISTAKES, x),
                hint="A row that may see nothing must give zeros: guard the max and the sum.",
                hint_where=np.array([[False], [True]]))       # row 1 is all -inf


# -- causal mask --------------------------------------------------------------
@pytest.mark.points(1)
@pytest.mark.parametrize("s_q,s_k", [(1, 1), (5, 5), (1, 7), (3, 8), (6, 4), (17, 17)])
def test_causal_mask_end_aligned(student, s_q, s_k):
    """causal_mask(s_q, s_k) is end-aligned"""
    got = student.causal_mask(s_q, s_k)
    names = ["top_left_mask", "diagonal_masked", "mask_wrong_triangle", "no_mask",
             "mask_neg_1e4", "mask_ignores_s_k"]
    check_close(got, ref.causal_mask(s_q, s_k), what=f"causal_mask({s_q}, {s_k})", atol=0,
                rtol=0, mistakes=lambda: ref.mistakes_of(ref.causal_mask, names, s_q, s_k))


@pytest.mark.points(1)
def test_causal_mask_default_s_k(student):
    """causal_mask(s_q) defaults s_k to s_q"""
    check_close(student.causal_mask(6), ref.causal_mask(6), what="causal_mask(6)", atol=0,
                rtol=0, mistakes=lambda: ref.mistakes_of(ref.causal_mask, ["mask_neg_1e4"], 6))


# -- RoPE ---------------------------------------------------------------------
ROPE_MISTAKES = ["rope_interleaved", "rope_positions_ignored", "rope_wrong_frequency",
                 "rope_wrong_direction", "rope_positions_off_by_one", "rope_inverse_frequency",
                 "rope_base_ignored"]
# (shape, positions, base): d_head of 8 and 16 (at 2, interleaved pairs, every
# frequency and the base look alike), positions with gaps, bases other than 10000
ROPE_FIXED = [((1, 2, 5, 8), [0, 2, 3, 7, 11], 100.0),
              ((2, 1, 4, 16), [5, 6, 9, 40], 500000.0),
              ((1, 3, 6, 4), [1, 2, 3, 4, 5, 6], 10000.0)]


@pytest.mark.points(2)
@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_rope_random(student, dtype):
    """rope at given positions and bases, on hidden shapes"""
    atol, rtol = tol(dtype)

    def check(q, pos, base, drawn):
        on_case(f"x of shape {q.shape}, positions {list(pos)[:6]}, base={base}, {dtype}",
                lambda: check_close(
                    student.rope(q, pos, base), ref.rope(q, pos, base),
                    what="rope(x, positions, base)", atol=atol * 10, rtol=rtol * 10,
                    mistakes=lambda: ref.mistakes_of(ref.rope, ROPE_MISTAKES, q, pos, base)),
                drawn=drawn)

    fixed = fixed_rng("rope", dtype)
    for shape, pos, base in ROPE_FIXED:
        check(fixed.standard_normal(shape).astype(dtype), np.array(pos), base, False)
    rng = rng_for("rope", dtype)
    for i in range(N_CASES):
        q, _, _ = heads(rng, dtype)
        s = q.shape[-2]
        pos = np.sort(rng.choice(np.arange(3 * s + 20), size=s, replace=False))
        check(q, pos, [10000.0, 500000.0, 100.0][i % 3], True)


@pytest.mark.points(1)
def test_rope_odd_head_width_is_an_error(student):
    """rope raises ValueError for an odd d_head in a 4-d batch of heads (d_head 5)"""
    expect_raises(lambda: student.rope(np.ones((1, 2, 4, 5)), np.arange(4)), "ValueError",
                  what="rope(x) with d_head=5")


@pytest.mark.points(1)
def test_rope_depends_only_on_relative_position(student):
    """q.k after rope is unchanged when every position shifts by the same amount"""
    p_q, p_k = np.array([3, 9, 10, 20, 21, 40]), np.array([0, 1, 5, 8, 30, 33])

    def check(q, k, drawn):
        rotated = student.rope(q, p_q)
        on_case(f"q of shape {q.shape}", lambda: check_close(
            rotated, q, what="rope(q)", atol=1e300, rtol=0) or check_close(
            np.linalg.norm(np.asarray(rotated, dtype=np.float64), axis=-1),
            np.linalg.norm(q, axis=-1),
            what="the length of each vector after rope", atol=ATOL_LONG, rtol=RTOL_LONG,
            hint="RoPE rotates pairs of coordinates: a rotation keeps each vector's "
                 "length (an output of zeros keeps q.k's shift invariance for nothing)."),
            drawn=drawn)
        base_scores = student.rope(q, p_q) @ np.swapaxes(student.rope(k, p_k), -1, -2)
        for shift in (1, 7, 1000):
            shifted = student.rope(q, p_q + shift) @ np.swapaxes(
                student.rope(k, p_k + shift), -1, -2)
            on_case(f"q and k of shape {q.shape}", lambda: check_close(
                shifted, base_scores, what=f"scores with every position shifted by {shift}",
                atol=ATOL_LONG, rtol=RTOL_LONG, hint="q.k after RoPE must depend only on the "
                "distance between positions: rotate both q and k, pairing j with j+d/2, "
                "with the same frequencies."), drawn=drawn)

    check(*fixed_rng("rope-relative").standard_normal((2, 6, 16)), False)
    check(*rng_for("rope-relative").standard_normal((2, 6, 16)), True)


# -- heads --------------------------------------------------------------------
# (B, S, n_heads, d_head): with S or n_heads of 1 a reshape without the
# transpose, or strided heads, give the right answer
SPLIT_FIXED = [(2, 3, 4, 5), (1, 5, 2, 3)]


def _split_cases(key):
    fixed = fixed_rng(key)
    for b, s, h, d in SPLIT_FIXED:
        yield fixed.standard_normal((b, s, h * d)), h, False
    rng = rng_for(key)
    for _ in range(N_CASES):
        b, s, h, d = (int(n) for n in rng.integers(1, 7, size=4))
        yield rng.standard_normal((b, s, h * d)), h, True


@pytest.mark.points(1)
def test_split_heads_random(student):
    """split_heads on hidden shapes"""
    for x, h, drawn in _split_cases("split"):
        on_case(f"x of shape {x.shape}, n_heads={h}", lambda: check_close(
            student.split_heads(x, h), ref.split_heads(x, h), what=f"split_heads(x, {h})",
            atol=0, rtol=0, mistakes=lambda: ref.mistakes_of(
                ref.split_heads, ["split_without_transpose", "split_strided"], x, h)),
            drawn=drawn)


@pytest.mark.points(1)
def test_merge_heads_random(student):
    """merge_heads undoes split_heads, on hidden shapes"""
    for x, h, drawn in _split_cases("merge"):
        split = np.asarray(ref.split_heads(x, h))
        on_case(f"x of shape {split.shape}", lambda: check_close(
            student.merge_heads(split), x, what="merge_heads", atol=0, rtol=0,
            mistakes=lambda: {ref.MISTAKES["merge_without_transpose"]:
                              ref.merge_heads(split, "merge_without_transpose")}),
            drawn=drawn)


# -- attention ------------------------------------------------------------------
# (B, h, S_q, S_k, d_head, causal): square and more keys than queries, and no mask
ATTENTION_FIXED = [(2, 3, 5, 5, 8, True), (1, 2, 3, 7, 4, True), (1, 2, 4, 6, 16, False)]


@pytest.mark.points(2)
@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_attention_random(student, dtype):
    """attention with and without a causal mask, on hidden shapes"""
    atol, rtol = tol(dtype)

    def check(q, k, v, causal, drawn):
        s_q, s_k = q.shape[-2], k.shape[-2]
        mask = np.asarray(ref.causal_mask(s_q, s_k)).astype(dtype) if causal else None
        names = ["no_scale", "scale_by_d", "scale_multiplied", "softmax_over_queries"]
        if causal:
            names += ["no_mask", "mask_after_softmax"]
        on_case(f"q {q.shape}, k {k.shape}, {'causal mask' if causal else 'no mask'}, "
                f"{dtype}", lambda: check_close(
                    student.attention(q, k, v, mask), ref.attention(q, k, v, causal=causal),
                    what="attention(q, k, v, mask)", atol=atol, rtol=rtol,
                    mistakes=lambda: ref.mistakes_of(ref.attention, names, q, k, v,
                                                     causal=causal)), drawn=drawn)

    fixed = fixed_rng("attention", dtype)
    for b, h, s_q, s_k, d, causal in ATTENTION_FIXED:
        check(*heads(fixed, dtype, b=b, h=h, s_q=s_q, s_k=s_k, d_head=d), causal, False)
    rng = rng_for("attention", dtype)
    for i in range(N_CASES):
        s_q = int(rng.integers(1, 33))
        s_k = s_q if i % 2 else s_q + int(rng.integers(0, 20))
        check(*heads(rng, dtype, s_q=s_q, s_k=s_k), i % 4 != 3, True)


@pytest.mark.points(1)
def test_attention_keeps_float32(student):
    """attention of float32 inputs returns float32"""
    q, k, v = heads(fixed_rng("attention-dtype"), np.float32, b=1, h=2, s_q=4, s_k=6,
                    d_head=8)
    mask = np.asarray(ref.causal_mask(4, 6)).astype(np.float32)
    got = student.attention(q, k, v, mask)
    dtype = getattr(got, "dtype", None)
    if dtype is None:
        raise Feedback(f"attention(q, k, v, mask) returned {type(got).__name__}, not an array")
    if np.dtype(dtype) == np.float32:
        return
    upstream = ""
    if np.dtype(getattr(student.softmax(q), "dtype", np.float32)) != np.float32:
        upstream = " (your softmax already returns float64 for a float32 input)"
    raise Feedback(f"attention(q, k, v, mask) with float32 q, k, v and mask returned "
                   f"{np.dtype(dtype).name}; every function keeps its input's dtype{upstream}"
                   "\n" + looks_like(ref.MISTAKES['float64_for_float32']))


@pytest.mark.points(1)
def test_attention_large_logits(student):
    """attention of scores up to 3000 is finite and right"""
    q, k, v = heads(fixed_rng("attention-large"), np.float64, s_q=7, h=2, d_head=16, b=1)
    # scores up to 3000: exp overflows in float64 past 709 without the max subtracted
    q = q * (3000.0 * np.sqrt(16) / np.abs(q @ np.swapaxes(k, -1, -2)).max())
    check_close(student.attention(q, k, v, None), ref.attention(q, k, v),
                what="attention with scores up to 3000", atol=ATOL_LONG, rtol=RTOL_LONG,
                mistakes=lambda: ref.mistakes_of(
                    ref.attention, ["softmax_unstable"] + ATTN_MISTAKES, q, k, v))


@pytest.mark.points(1)
def test_attention_query_that_sees_nothing(student):
    """a query row that may see no key gives zeros, not NaN"""
    q, k, v = heads(fixed_rng("attention-empty"), np.float64, s_q=5, s_k=3, h=1, d_head=4, b=1)
    mask = np.asarray(ref.causal_mask(5, 3))
    check_close(student.attention(q, k, v, mask), ref.attention(q, k, v, causal=True),
                what="attention with 5 queries, 3 keys, causal mask", atol=ATOL, rtol=RTOL,
                mistakes=lambda: ref.mistakes_of(
                    ref.attention, ["empty_row_nan"] + ATTN_MISTAKES, q, k, v, causal=True),
                hint="Rows 0 and 1 see no key (end-aligned): their weights and output are 0.",
                hint_where=(np.arange(5) < 2)[:, None])      # (S_q, 1): rows 0 and 1


# -- multi-head attention -----------------------------------------------------
# Shapes where every mistake shows: more than one head (a reshape without the
# transpose), d_head of 8 (interleaved pairs and the frequencies), d != d_head
# (the scale by the model width), several positions (RoPE, the mask).
MHA_FIXED = [dict(b=2, s=6, d=16, h=4, d_head=8), dict(b=1, s=9, d=24, h=3, d_head=4)]


def _mha_cases(key, dtype=np.float64, *, positions=False, max_s=64, n=N_CASES):
    """(case, drawn): the fixed cases, then ``n`` random ones."""
    fixed = fixed_rng(key, dtype)
    for shape in MHA_FIXED:
        yield mha_data(fixed, h_kv=shape["h"], dtype=dtype, positions=positions, **shape), False
    rng = rng_for(key, dtype)
    for _ in range(n):
        yield mha_case(rng, dtype, positions=positions, max_s=max_s), True


@pytest.mark.points(3)
@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_mha_random(student, dtype):
    """multi_head_attention, causal and not, on hidden shapes"""
    atol, rtol = tol(dtype)
    for i, (c, drawn) in enumerate(_mha_cases("mha", dtype)):
        causal = i % 3 != 2
        args = (c.x, c.w_q, c.w_k, c.w_v, c.w_o, c.n_heads)
        on_case(c.shape_text + (", causal" if causal else ", not causal"),
                lambda: check_close(
                    student.multi_head_attention(*args, causal=causal),
                    ref.gqa(*args, causal=causal), what="multi_head_attention",
                    atol=atol * 10, rtol=rtol * 10,
                    mistakes=lambda: ref.mistakes_of(ref.gqa, MHA_MISTAKES, *args,
                                                     causal=causal)), drawn=drawn)


@pytest.mark.points(2)
def test_mha_positions_and_base(student):
    """multi_head_attention with given positions (with gaps) and rope_base"""
    for i, (c, drawn) in enumerate(_mha_cases("mha-positions", positions=True)):
        base = [500000.0, 10000.0][i % 2]
        args = (c.x, c.w_q, c.w_k, c.w_v, c.w_o, c.n_heads)
        kwargs = dict(positions=c.positions, rope_base=base)
        on_case(c.shape_text + f", positions {c.positions[:4].tolist()}..., base={base}",
                lambda: check_close(
                    student.multi_head_attention(*args, **kwargs),
                    ref.gqa(*args, **kwargs), what="multi_head_attention", atol=ATOL_LONG,
                    rtol=RTOL_LONG, mistakes=lambda: ref.mistakes_of(ref.gqa, MHA_MISTAKES,
                                                                *args, **kwargs)),
                drawn=drawn)


@pytest.mark.points(2)
def test_mha_is_causal(student):
    """multi_head_attention: changing later tokens never changes earlier outputs"""
    for i, (c, drawn) in enumerate(_mha_cases("mha-causal", max_s=32, n=4)):
        s = c.x.shape[1]
        if s < 2:
            continue
        later = (rng_for if drawn else fixed_rng)("mha-causal-later", i)
        t = int(later.integers(1, s))
        x2 = c.x.copy()
        x2[:, t:] = later.standard_normal(x2[:, t:].shape)
        args = (c.x, c.w_q, c.w_k, c.w_v, c.w_o, c.n_heads)
        a = student.multi_head_attention(*args)
        b = student.multi_head_attention(x2, *args[1:])
        on_case(c.shape_text + f", tokens {t}.. changed", lambda: direct_before_property(
            lambda: (check_close(
                np.asarray(b)[:, :t], np.asarray(a)[:, :t],
                what=f"outputs at positions 0..{t - 1}", atol=ATOL, rtol=RTOL,
                hint="Earlier outputs changed when later tokens did: the causal mask is "
                     "missing or lets queries see later keys."),
                check_responds(a, student.multi_head_attention(-c.x, *args[1:]),
                               what="multi_head_attention's output",
                               changed="x became -x")),
            lambda: check_close(a, ref.gqa(*args), what="multi_head_attention", atol=ATOL_LONG,
                                rtol=RTOL_LONG, mistakes=lambda: ref.mistakes_of(
                                    ref.gqa, MHA_MISTAKES, *args)),
            "the causality check (later tokens changed earlier outputs)"), drawn=drawn)


@pytest.mark.points(1)
def test_mha_shift_invariance(student):
    """multi_head_attention: shifting every position by the same amount changes nothing"""
    for c, drawn in _mha_cases("mha-shift", max_s=24, n=1):
        args = (c.x, c.w_q, c.w_k, c.w_v, c.w_o, c.n_heads)
        s = c.x.shape[1]
        base = student.multi_head_attention(*args)
        shifted = student.multi_head_attention(*args, positions=np.arange(s) + 37)
        other = student.multi_head_attention(-c.x, *args[1:])
        on_case(c.shape_text, lambda: direct_before_property(
            lambda: (check_close(shifted, base, what="output with positions 37..", atol=ATOL_LONG,
                                 rtol=RTOL_LONG, hint="With RoPE, attention depends only on "
                                 "relative positions, so a common shift must not change "
                                 "the output. Is RoPE applied to both q and k (and not to "
                                 "v)?"),
                     check_responds(base, other, what="multi_head_attention's output",
                                    changed="x became -x")),
            lambda: check_close(base, ref.gqa(*args), what="multi_head_attention", atol=ATOL_LONG,
                                rtol=RTOL_LONG,
                                mistakes=lambda: ref.mistakes_of(ref.gqa, MHA_MISTAKES, *args)),
            "the shift check (positions 37.. changed the output)"), drawn=drawn)
