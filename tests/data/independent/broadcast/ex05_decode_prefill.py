"""Exercise E: decode vs prefill, in PyTorch.

Prefill runs a whole prompt at once: ``S`` queries against ``S`` keys, a
matrix-matrix product with plenty of arithmetic per byte (compute-bound).
Decode runs one new token: a single query against the whole KV cache, a
matrix-vector product that reads every cached byte to do a few FLOPs with it
(memory-bound).  You implement both shapes, count their FLOPs and bytes,
measure what they achieve, place them on the roofline, and generate with a
growing KV cache.

Conventions (the course's contract):

* Tensors are ``(B, h, S, d_head)``; keys and values may have fewer heads
  (``h_kv``, grouped-query attention): query head ``i`` uses KV head
  ``i // (h // h_kv)``.
* Causal masks are aligned to the end: with ``S_q`` queries and ``S_k`` keys,
  query ``i`` sits at position ``S_k - S_q + i`` and sees keys
  ``0 .. S_k - S_q + i``.  One decode query therefore sees the whole cache.
* A (query, key) pair costs ``4 * d_head`` FLOPs: ``2 * d_head`` for its
  score (a multiply and an add per feature) and ``2 * d_head`` for its share
  of the weighted sum of values.  Softmax and scaling are not counted.
* Units are decimal: 1 TFLOP/s = 1e12 FLOP/s, 1 GB/s = 1e9 bytes/s.
* Weights act as ``y = x @ W.T``: ``w_q`` is ``(h*d_head, d)``, ``w_k`` and
  ``w_v`` are ``(h_kv*d_head, d)``, ``w_o`` is ``(d, h*d_head)``.
* RoPE is rotate-half (feature ``j`` pairs with ``j + d_head/2``, angle
  ``position * base ** (-2j / d_head)``), on q and k only, and k is rotated
  at its own position before it goes into the cache.

Run the public tests with ``attn-grade check ex05``.
"""
from __future__ import annotations

import math
import statistics
import time

import torch

# Helpers of your own (RoPE, splitting heads, attention with GQA grouping) go here.


def _rope(x, positions, base=10000.0):
    """Rotate-half RoPE on ``x`` ``(..., S, d_head)`` at ``positions`` ``(S,)``.

    The last axis is viewed as ``(2, d_head/2)``; one broadcast expression
    turns every pair (angles in float64, cast to ``x``'s dtype).
    """
    d_head = x.shape[-1]
    if d_head % 2:
        raise ValueError(f"RoPE needs an even d_head, got {d_head}")
    half = d_head // 2
    pos = torch.as_tensor(positions, device=x.device).to(torch.float64)
    inv_freq = float(base) ** (-2.0 * torch.arange(half, device=x.device, dtype=torch.float64) / d_head)
    ang = (pos[..., None] * inv_freq)[..., None, :]                   # (..., S, 1, half)
    cos, sin = ang.cos().to(x.dtype), ang.sin().to(x.dtype)
    halves = x.unflatten(-1, (2, half))                               # (..., S, 2, half)
    sign = torch.tensor([[-1.0], [1.0]], dtype=x.dtype, device=x.device)
    return (halves * cos + sign * halves.flip(-2) * sin).flatten(-2)


def _check_qkv(q, k, v):
    if q.dim() != 4 or k.dim() != 4 or k.shape != v.shape:
        raise ValueError(f"expected q (B, h, S_q, d) and k, v (B, h_kv, S_k, d); got "
                         f"{tuple(q.shape)}, {tuple(k.shape)}, {tuple(v.shape)}")
    b, h, _, d_head = q.shape
    if k.shape[0] != b or k.shape[-1] != d_head or k.shape[1] == 0 or h % k.shape[1]:
        raise ValueError(f"k/v {tuple(k.shape)} do not fit q {tuple(q.shape)} "
                         "(same batch and d_head, h a multiple of h_kv)")


def _grouped_attention(q, k, v, causal):
    """Attention with GQA grouping by broadcasting, end-aligned causal mask.

    ``q`` ``(B, h, S_q, d)`` is viewed as ``(B, h_kv, group, S_q, d)``; K/V
    ``(B, h_kv, S_k, d)`` get a broadcast group axis ``(B, h_kv, 1, S_k, d)``,
    so query head ``i`` meets K/V head ``i // group`` without any copy.
    Softmax by ``exp(x - logsumexp(x))``; a row that sees no key gives 0.
    """
    _check_qkv(q, k, v)
    b, h, s_q, d_head = q.shape
    h_kv, s_k = k.shape[1], k.shape[2]
    qg = q.unflatten(1, (h_kv, h // h_kv))                            # (B, h_kv, g, S_q, d)
    scores = torch.einsum("bjrqe,bjke->bjrqk", qg, k) * (1.0 / math.sqrt(d_head))
    if causal:
        rows = torch.arange(s_q, device=q.device)[:, None] + (s_k - s_q)
        allowed = torch.arange(s_k, device=q.device)[None, :] <= rows
        scores = torch.where(allowed, scores, float("-inf"))
    lse = torch.logsumexp(scores, dim=-1, keepdim=True)
    lse = torch.where(torch.isfinite(lse), lse, torch.zeros((), dtype=lse.dtype, device=lse.device))
    out = torch.einsum("bjrqk,bjke->bjrqe", torch.exp(scores - lse), v)
    return out.flatten(1, 2).to(q.dtype)


def prefill_attention(q, k, v):
    """Causal attention of a whole prompt: ``S_q == S_k``.

    ``q``: ``(B, h, S, d_head)``, ``k`` and ``v``: ``(B, h_kv, S, d_head)``
    with ``h % h_kv == 0`` (``h_kv == h`` is plain multi-head attention).
    Scores scaled by ``1/sqrt(d_head)``, lower-triangular mask (a query sees
    itself and the past), softmax over keys.  Returns ``(B, h, S, d_head)``
    in the dtype of ``q``.

    The mask is the course's end-aligned one, which for ``S_q == S_k`` is
    the lower triangle; given ``S_q != S_k`` (a chunk of a prompt against a
    longer cache) it computes that chunk's end-aligned causal attention
    rather than refusing.
    """
    return _grouped_attention(q, k, v, causal=True)


def decode_attention(q, k_cache, v_cache):
    """One decode step: ``q`` ``(B, h, 1, d_head)`` against the whole cache.

    ``k_cache``/``v_cache``: ``(B, h_kv, S, d_head)``.  The new token is the
    last position, so it sees every cached key (no key is masked).  Returns
    ``(B, h, 1, d_head)``.

    It applies the end-aligned causal mask, which for the one decode query
    masks nothing; several new queries at the end of the cache (speculative
    or chunked decode) each see the cache up to their own position.
    """
    _check_qkv(q, k_cache, v_cache)
    return _grouped_attention(q, k_cache, v_cache, causal=q.shape[2] > 1)   # one query: nothing to mask


def _causal_pairs(s_q, s_k):
    """Pairs the end-aligned mask keeps: query ``i`` sees ``max(0, s_k - s_q + i + 1)``
    keys (never more than ``s_k``): an arithmetic series ending at ``s_k``."""
    first = max(0, s_q - s_k)           # the first query row that sees a key
    n_rows = s_q - first
    if n_rows <= 0 or s_k <= 0:
        return 0
    lo = s_k - s_q + first + 1          # keys seen by that row; the last row sees s_k
    return n_rows * (lo + s_k) // 2


def attention_flops(batch, n_heads, s_q, s_k, d_head, causal=False):
    """FLOPs of attention: ``4 * d_head * pairs * batch * n_heads`` (an int).

    ``pairs`` is the number of (query, key) pairs computed: ``s_q * s_k``
    without a mask; with ``causal``, only the pairs the end-aligned mask
    allows (query ``i`` sees ``s_k - s_q + i + 1`` keys, at most ``s_k`` and
    at least 0).
    """
    pairs = _causal_pairs(int(s_q), int(s_k)) if causal else int(s_q) * int(s_k)
    return int(4 * d_head * pairs * batch * n_heads)


def attention_bytes(batch, n_heads, n_kv_heads, s_q, s_k, d_head, bytes_per_elem=2):
    """The least bytes attention must move (an int): read Q, K and V once and
    write O once.  Q and O have ``n_heads`` heads of ``s_q`` rows; K and V
    have ``n_kv_heads`` heads of ``s_k`` rows."""
    return int(bytes_per_elem * batch * d_head * (2 * n_heads * s_q + 2 * n_kv_heads * s_k))


def _sync():
    if torch.cuda.is_available():
        torch.cuda.synchronize()


def _median_seconds(fn, args, warmup=2, repeats=5):
    """As ``ex04_quadratic.time_fn``: untimed warm-up, synchronize, median."""
    for _ in range(warmup):
        fn(*args)
    times = []
    for _ in range(repeats):
        _sync()
        start = time.perf_counter()
        fn(*args)
        _sync()
        times.append(time.perf_counter() - start)
    return float(statistics.median(times))


def achieved(fn, args, flops, nbytes):
    """Time ``fn(*args)`` and report what it achieved.

    Time it like ``ex04_quadratic.time_fn`` does (warm-up, CUDA
    synchronization, median of repeats).  Returns a dict:
    ``{"seconds": s, "tflops": flops / s / 1e12, "gbps": nbytes / s / 1e9}``.
    """
    seconds = _median_seconds(fn, tuple(args))
    seconds = max(seconds, 1e-12)       # a clock tick of 0 must not divide by zero
    return {"seconds": seconds, "tflops": flops / seconds / 1e12, "gbps": nbytes / seconds / 1e9}


def bound(intensity, peak_flops, peak_bytes_per_s):
    """``"compute"`` or ``"memory"``: which roof limits a kernel of this
    arithmetic ``intensity`` (FLOPs per byte) on a machine with these peaks.

    The ridge point is ``peak_flops / peak_bytes_per_s``; an intensity at or
    above it is compute-bound, below it memory-bound.
    """
    return "compute" if intensity >= peak_flops / peak_bytes_per_s else "memory"


def decode_with_cache(x, w_q, w_k, w_v, w_o, n_heads, n_kv_heads, *, rope_base=10000.0):
    """Generate position by position with a growing KV cache.

    ``x``: ``(B, S, d)``.  For each position ``t`` in order: project
    ``x[:, t]`` to q, k, v; rotate q and k with RoPE at position ``t``; append
    k (rotated) and v to the cache; attend from q to the cache (one query
    against ``t + 1`` keys); project the result with ``w_o``.  Returns
    ``(out, k_cache, v_cache)``: ``out`` ``(B, S, d)`` equals full causal
    attention over ``x``; the caches are ``(B, h_kv, S, d_head)``.

    The cache is allocated once at its final size and filled one position
    at a time; step ``t`` attends to the filled prefix ``[:t + 1]`` (a view).
    ``ValueError`` when the shapes do not fit.
    """
    if x.dim() != 3:
        raise ValueError(f"decode_with_cache: x must be (B, S, d), got {tuple(x.shape)}")
    b, s, d = x.shape
    if n_heads <= 0 or n_kv_heads <= 0 or n_heads % n_kv_heads:
        raise ValueError(f"decode_with_cache: n_heads={n_heads} not a multiple of n_kv_heads={n_kv_heads}")
    if w_q.dim() != 2 or w_q.shape[1] != d or w_q.shape[0] % n_heads:
        raise ValueError(f"decode_with_cache: w_q {tuple(w_q.shape)} does not fit")
    d_head = w_q.shape[0] // n_heads
    for name, w, want in (("w_k", w_k, (n_kv_heads * d_head, d)), ("w_v", w_v, (n_kv_heads * d_head, d)),
                          ("w_o", w_o, (d, n_heads * d_head))):
        if tuple(w.shape) != want:
            raise ValueError(f"decode_with_cache: {name} is {tuple(w.shape)}, expected {want}")
    wq = w_q.to(x.dtype).unflatten(0, (n_heads, d_head))             # (h, d_head, d)
    wk = w_k.to(x.dtype).unflatten(0, (n_kv_heads, d_head))
    wv = w_v.to(x.dtype).unflatten(0, (n_kv_heads, d_head))
    wo = w_o.to(x.dtype).unflatten(1, (n_heads, d_head))             # (d, h, d_head)
    k_cache = x.new_zeros(b, n_kv_heads, s, d_head)
    v_cache = x.new_zeros(b, n_kv_heads, s, d_head)
    outs = []
    for t in range(s):
        x_t = x[:, t:t + 1]                                          # (B, 1, d)
        pos = torch.tensor([t], device=x.device)
        q = _rope(torch.einsum("bsd,hed->bhse", x_t, wq), pos, rope_base)
        k_cache[:, :, t:t + 1] = _rope(torch.einsum("bsd,hed->bhse", x_t, wk), pos, rope_base)
        v_cache[:, :, t:t + 1] = torch.einsum("bsd,hed->bhse", x_t, wv)
        o = decode_attention(q, k_cache[:, :, :t + 1], v_cache[:, :, :t + 1])   # (B, h, 1, d_head)
        outs.append(torch.einsum("bhse,dhe->bsd", o, wo))
    out = torch.cat(outs, dim=1) if outs else x.new_zeros(b, 0, d)
    return out, k_cache, v_cache
