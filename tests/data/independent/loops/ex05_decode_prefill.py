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

# ---------------------------------------------------------------------------
# Helpers (RoPE, one head of attention with a hand-written softmax, the timer)
# ---------------------------------------------------------------------------

def _rope(x, positions, base=10000.0):
    """Rotate-half RoPE of ``x`` ``(..., S, d_head)`` at ``positions`` ``(S,)``
    (float64 in, float64 out)."""
    d_head = x.shape[-1]
    if d_head % 2 != 0:
        raise ValueError(f"RoPE needs an even d_head, got {d_head}")
    half = d_head // 2
    inv_freq = torch.zeros(half, dtype=torch.float64, device=x.device)
    for j in range(half):
        inv_freq[j] = float(base) ** (-2.0 * j / d_head)
    positions = torch.as_tensor(positions, dtype=torch.float64, device=x.device).reshape(-1)
    angles = torch.outer(positions, inv_freq)          # (S, half)
    cos = torch.cos(angles)
    sin = torch.sin(angles)
    first = x[..., :half]
    second = x[..., half:]
    out = torch.zeros(x.shape, dtype=torch.float64, device=x.device)
    out[..., :half] = first * cos - second * sin
    out[..., half:] = second * cos + first * sin
    return out


def _softmax_rows(scores):
    """Softmax over the last axis of a 2-D float64 tensor, by hand:
    subtract each row's max, exp, divide by the row's sum.  A row that is
    all ``-inf`` gives zeros."""
    row_max = torch.amax(scores, dim=-1, keepdim=True)
    row_max = torch.where(row_max == float("-inf"), torch.zeros_like(row_max), row_max)
    exps = torch.exp(scores - row_max)
    total = torch.sum(exps, dim=-1, keepdim=True)
    total = torch.where(total == 0, torch.ones_like(total), total)
    return exps / total


def _one_head(q_head, k_head, v_head, causal):
    """Attention of one head: ``q_head`` ``(S_q, d)`` against ``k_head``,
    ``v_head`` ``(S_k, d)``, all float64; end-aligned causal mask if asked."""
    s_q, d_head = q_head.shape
    s_k = k_head.shape[0]
    scores = (q_head @ k_head.T) * (1.0 / math.sqrt(d_head))
    if causal:
        hidden = torch.triu(torch.ones((s_q, s_k), dtype=torch.bool, device=scores.device),
                            diagonal=s_k - s_q + 1)
        scores = scores.masked_fill(hidden, float("-inf"))
    weights = _softmax_rows(scores)
    return weights @ v_head


def _check_qkv(q, k, v):
    if q.dim() != 4 or k.dim() != 4 or v.dim() != 4:
        raise ValueError("q, k, v must be (B, h, S, d_head)")
    if k.shape != v.shape:
        raise ValueError("k and v must have the same shape")
    if k.shape[0] != q.shape[0] or k.shape[3] != q.shape[3]:
        raise ValueError("k and v do not fit q (batch or d_head)")
    n_heads = q.shape[1]
    n_kv_heads = k.shape[1]
    if n_kv_heads == 0 or n_heads % n_kv_heads != 0:
        raise ValueError(f"{n_heads} query heads are not a multiple of {n_kv_heads} KV heads")
    return n_heads // n_kv_heads


def _grouped_attention(q, k, v, causal):
    """Loop over batch and query heads; query head ``i`` reads KV head
    ``i // group``.  Returns float64 ``(B, h, S_q, d_head)``."""
    group = _check_qkv(q, k, v)
    batch, n_heads, s_q, d_head = q.shape
    out = torch.zeros((batch, n_heads, s_q, d_head), dtype=torch.float64, device=q.device)
    for b in range(batch):
        for head in range(n_heads):
            kv_head = head // group
            out[b, head] = _one_head(q[b, head].to(torch.float64),
                                     k[b, kv_head].to(torch.float64),
                                     v[b, kv_head].to(torch.float64),
                                     causal)
    return out


def _sync_if_cuda():
    if torch.cuda.is_available():
        torch.cuda.synchronize()


def _median_seconds(fn, args, warmup=2, repeats=5):
    """Warm-up calls, then the median of ``repeats`` synchronized timings."""
    for _ in range(warmup):
        fn(*args)
    _sync_if_cuda()
    times = []
    for _ in range(repeats):
        _sync_if_cuda()
        start = time.perf_counter()
        fn(*args)
        _sync_if_cuda()
        times.append(time.perf_counter() - start)
    return float(statistics.median(times))


# ---------------------------------------------------------------------------
# The exercise
# ---------------------------------------------------------------------------

def prefill_attention(q, k, v):
    """Causal attention of a whole prompt: ``S_q == S_k``.

    ``q``: ``(B, h, S, d_head)``, ``k`` and ``v``: ``(B, h_kv, S, d_head)``
    with ``h % h_kv == 0`` (``h_kv == h`` is plain multi-head attention).
    Scores scaled by ``1/sqrt(d_head)``, lower-triangular mask (a query sees
    itself and the past), softmax over keys.  Returns ``(B, h, S, d_head)``
    in the dtype of ``q``.  ``ValueError`` when ``S_q != S_k``.
    """
    _check_qkv(q, k, v)
    if q.shape[2] != k.shape[2]:
        raise ValueError(f"prefill_attention needs S_q == S_k, got {q.shape[2]} and {k.shape[2]}")
    return _grouped_attention(q, k, v, causal=True).to(q.dtype)


def decode_attention(q, k_cache, v_cache):
    """One decode step: ``q`` ``(B, h, 1, d_head)`` against the whole cache.

    ``k_cache``/``v_cache``: ``(B, h_kv, S, d_head)``.  The new token is the
    last position, so it sees every cached key (no key is masked).  Returns
    ``(B, h, 1, d_head)``.
    """
    _check_qkv(q, k_cache, v_cache)
    if q.shape[2] != 1:
        raise ValueError(f"decode_attention takes one query position, got {q.shape[2]}")
    # With one query the end-aligned mask hides nothing: no mask needed.
    return _grouped_attention(q, k_cache, v_cache, causal=False).to(q.dtype)


def attention_flops(batch, n_heads, s_q, s_k, d_head, causal=False):
    """FLOPs of attention: ``4 * d_head * pairs * batch * n_heads`` (an int).

    ``pairs`` is the number of (query, key) pairs computed: ``s_q * s_k``
    without a mask; with ``causal``, only the pairs the end-aligned mask
    allows (query ``i`` sees ``s_k - s_q + i + 1`` keys, at most ``s_k`` and
    at least 0).
    """
    if causal:
        pairs = 0
        for i in range(s_q):
            visible = s_k - s_q + i + 1
            if visible > s_k:
                visible = s_k
            if visible < 0:
                visible = 0
            pairs += visible
    else:
        pairs = s_q * s_k
    return int(4 * d_head * pairs * batch * n_heads)


def attention_bytes(batch, n_heads, n_kv_heads, s_q, s_k, d_head, bytes_per_elem=2):
    """The least bytes attention must move (an int): read Q, K and V once and
    write O once.  Q and O have ``n_heads`` heads of ``s_q`` rows; K and V
    have ``n_kv_heads`` heads of ``s_k`` rows."""
    q_elems = batch * n_heads * s_q * d_head
    o_elems = batch * n_heads * s_q * d_head
    k_elems = batch * n_kv_heads * s_k * d_head
    v_elems = batch * n_kv_heads * s_k * d_head
    return int((q_elems + k_elems + v_elems + o_elems) * bytes_per_elem)


def achieved(fn, args, flops, nbytes, warmup=2, repeats=5):
    """Time ``fn(*args)`` and report what it achieved.

    Time it like ``ex04_quadratic.time_fn`` does (warm-up, CUDA
    synchronization, median of repeats).  Returns a dict:
    ``{"seconds": s, "tflops": flops / s / 1e12, "gbps": nbytes / s / 1e9}``.
    """
    if not isinstance(args, (tuple, list)):
        args = (args,)
    seconds = _median_seconds(fn, tuple(args), warmup=warmup, repeats=repeats)
    return {
        "seconds": seconds,
        "tflops": flops / seconds / 1e12,
        "gbps": nbytes / seconds / 1e9,
    }


def bound(intensity, peak_flops, peak_bytes_per_s):
    """``"compute"`` or ``"memory"``: which roof limits a kernel of this
    arithmetic ``intensity`` (FLOPs per byte) on a machine with these peaks.

    The ridge point is ``peak_flops / peak_bytes_per_s``; an intensity at or
    above it is compute-bound, below it memory-bound.
    """
    ridge = peak_flops / peak_bytes_per_s
    if intensity >= ridge:
        return "compute"
    return "memory"


def decode_with_cache(x, w_q, w_k, w_v, w_o, n_heads, n_kv_heads, *, rope_base=10000.0):
    """Generate position by position with a growing KV cache.

    ``x``: ``(B, S, d)``.  For each position ``t`` in order: project
    ``x[:, t]`` to q, k, v; rotate q and k with RoPE at position ``t``; append
    k (rotated) and v to the cache; attend from q to the cache (one query
    against ``t + 1`` keys); project the result with ``w_o``.  Returns
    ``(out, k_cache, v_cache)``: ``out`` ``(B, S, d)`` equals full causal
    attention over ``x``; the caches are ``(B, h_kv, S, d_head)``.
    Everything is computed in float64 and returned in ``x``'s dtype.
    """
    if x.dim() != 3:
        raise ValueError("decode_with_cache: x must be (B, S, d)")
    batch, seq_len, d_model = x.shape
    if n_heads <= 0 or n_kv_heads <= 0 or n_heads % n_kv_heads != 0:
        raise ValueError(f"{n_heads} heads are not a multiple of {n_kv_heads} KV heads")
    if w_q.dim() != 2 or w_q.shape[0] % n_heads != 0:
        raise ValueError("w_q must be (n_heads*d_head, d)")
    d_head = w_q.shape[0] // n_heads
    if tuple(w_q.shape) != (n_heads * d_head, d_model):
        raise ValueError(f"w_q is {tuple(w_q.shape)}, expected {(n_heads * d_head, d_model)}")
    kv_shape = (n_kv_heads * d_head, d_model)
    if tuple(w_k.shape) != kv_shape or tuple(w_v.shape) != kv_shape:
        raise ValueError(f"w_k and w_v must be {kv_shape}")
    if tuple(w_o.shape) != (d_model, n_heads * d_head):
        raise ValueError(f"w_o is {tuple(w_o.shape)}, expected {(d_model, n_heads * d_head)}")
    group = n_heads // n_kv_heads
    f64 = torch.float64
    device = x.device
    x64 = x.to(f64)
    wq, wk, wv, wo = (w.to(f64) for w in (w_q, w_k, w_v, w_o))

    k_cache = torch.zeros((batch, n_kv_heads, 0, d_head), dtype=f64, device=device)
    v_cache = torch.zeros((batch, n_kv_heads, 0, d_head), dtype=f64, device=device)
    out = torch.zeros((batch, seq_len, d_model), dtype=f64, device=device)
    scale = 1.0 / math.sqrt(d_head)

    for t in range(seq_len):
        x_t = x64[:, t, :]                       # (B, d)
        q_flat = x_t @ wq.T                      # (B, h*d_head)
        k_flat = x_t @ wk.T                      # (B, h_kv*d_head)
        v_flat = x_t @ wv.T
        # split into heads, one row (position t) each: (B, heads, 1, d_head)
        q_t = torch.zeros((batch, n_heads, 1, d_head), dtype=f64, device=device)
        for head in range(n_heads):
            q_t[:, head, 0, :] = q_flat[:, head * d_head:(head + 1) * d_head]
        k_t = torch.zeros((batch, n_kv_heads, 1, d_head), dtype=f64, device=device)
        v_t = torch.zeros((batch, n_kv_heads, 1, d_head), dtype=f64, device=device)
        for j in range(n_kv_heads):
            k_t[:, j, 0, :] = k_flat[:, j * d_head:(j + 1) * d_head]
            v_t[:, j, 0, :] = v_flat[:, j * d_head:(j + 1) * d_head]
        # RoPE at position t on q and k (never on v), BEFORE k is cached
        q_t = _rope(q_t, [t], rope_base)
        k_t = _rope(k_t, [t], rope_base)
        # grow the cache by one position
        k_cache = torch.cat([k_cache, k_t], dim=2)
        v_cache = torch.cat([v_cache, v_t], dim=2)
        # one query against the t + 1 cached keys (it sees them all)
        merged = torch.zeros((batch, n_heads * d_head), dtype=f64, device=device)
        for b in range(batch):
            for head in range(n_heads):
                kv_head = head // group
                keys = k_cache[b, kv_head]        # (t+1, d_head)
                values = v_cache[b, kv_head]
                scores = (keys @ q_t[b, head, 0]) * scale     # (t+1,)
                weights = _softmax_rows(scores.unsqueeze(0))[0]
                merged[b, head * d_head:(head + 1) * d_head] = weights @ values
        out[:, t, :] = merged @ wo.T

    return out.to(x.dtype), k_cache.to(x.dtype), v_cache.to(x.dtype)
