"""ex05_decode_prefill in Hugging Face's numerics (a real-style submission for
the grader's own tests): the softmax in float32, cast back to the scores'
dtype, and RoPE's angles in float32."""
from __future__ import annotations

import math
import statistics
import time

import torch



def _attend(q, k, v, causal):
    """Attention of ``q`` over ``k``/``v`` with GQA grouping (no repeated K/V)."""
    b, h, s_q, d_head = q.shape
    h_kv, s_k = k.shape[1], k.shape[2]
    g = h // h_kv
    qg = q.reshape(b, h_kv, g * s_q, d_head)                      # (B, h_kv, g*S_q, d)
    scores = qg @ k.transpose(-2, -1) / math.sqrt(d_head)         # (B, h_kv, g*S_q, S_k)
    scores = scores.view(b, h_kv, g, s_q, s_k)
    if causal:
        allowed = torch.ones(s_q, s_k, dtype=torch.bool, device=q.device).tril(s_k - s_q)
        scores = scores.masked_fill(~allowed, float("-inf"))
    p = torch.softmax(scores, dim=-1, dtype=torch.float32).type_as(scores).view(b, h_kv, g * s_q, s_k)
    return (p @ v).view(b, h, s_q, d_head)


def _rope(x, positions, base):
    """Rotate-half RoPE of ``x`` ``(..., S, d_head)`` at ``positions`` ``(S,)``."""
    d_head = x.shape[-1]
    half = d_head // 2
    freq = 1.0 / (base ** (torch.arange(0, d_head, 2, dtype=torch.float32)[:half] / d_head))
    angle = torch.outer(positions.to(torch.float32), freq)                   # (S, half)
    cos, sin = angle.cos().to(x.dtype), angle.sin().to(x.dtype)
    x1, x2 = x[..., :half], x[..., half:]
    return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], dim=-1)


def _heads(x, n):
    """``(B, S, n*d_head)`` -> ``(B, n, S, d_head)``."""
    b, s, width = x.shape
    return x.view(b, s, n, width // n).transpose(1, 2)


def prefill_attention(q, k, v):
    """Causal attention of a whole prompt: ``S_q == S_k``.

    ``q``: ``(B, h, S, d_head)``, ``k`` and ``v``: ``(B, h_kv, S, d_head)``
    with ``h % h_kv == 0`` (``h_kv == h`` is plain multi-head attention).
    Scores scaled by ``1/sqrt(d_head)``, lower-triangular mask (a query sees
    itself and the past), softmax over keys.  Returns ``(B, h, S, d_head)``
    in the dtype of ``q``.
    """
    return _attend(q, k, v, causal=True)


def decode_attention(q, k_cache, v_cache):
    """One decode step: ``q`` ``(B, h, 1, d_head)`` against the whole cache.

    ``k_cache``/``v_cache``: ``(B, h_kv, S, d_head)``.  The new token is the
    last position, so it sees every cached key (no key is masked).  Returns
    ``(B, h, 1, d_head)``.
    """
    return _attend(q, k_cache, v_cache, causal=False)


def attention_flops(batch, n_heads, s_q, s_k, d_head, causal=False):
    """FLOPs of attention: ``4 * d_head * pairs * batch * n_heads`` (an int).

    ``pairs`` is the number of (query, key) pairs computed: ``s_q * s_k``
    without a mask; with ``causal``, only the pairs the end-aligned mask
    allows (query ``i`` sees ``s_k - s_q + i + 1`` keys, at most ``s_k`` and
    at least 0).
    """
    if causal:
        pairs = sum(min(s_k, max(0, s_k - s_q + i + 1)) for i in range(s_q))
    else:
        pairs = s_q * s_k
    return 4 * d_head * pairs * batch * n_heads


def attention_bytes(batch, n_heads, n_kv_heads, s_q, s_k, d_head, bytes_per_elem=2):
    """The least bytes attention must move (an int): read Q, K and V once and
    write O once.  Q and O have ``n_heads`` heads of ``s_q`` rows; K and V
    have ``n_kv_heads`` heads of ``s_k`` rows."""
    q_and_o = 2 * batch * n_heads * s_q * d_head
    k_and_v = 2 * batch * n_kv_heads * s_k * d_head
    return (q_and_o + k_and_v) * bytes_per_elem


def achieved(fn, args, flops, nbytes):
    """Time ``fn(*args)`` and report what it achieved.

    Time it like ``ex04_quadratic.time_fn`` does (warm-up, CUDA
    synchronization, median of repeats).  Returns a dict:
    ``{"seconds": s, "tflops": flops / s / 1e12, "gbps": nbytes / s / 1e9}``.
    """
    def sync():
        if torch.cuda.is_available() and torch.cuda.is_initialized():
            torch.cuda.synchronize()

    for _ in range(2):
        fn(*args)
    times = []
    for _ in range(5):
        sync()
        start = time.perf_counter()
        fn(*args)
        sync()
        times.append(time.perf_counter() - start)
    seconds = statistics.median(times)
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
    """
    b, s, _ = x.shape
    d_head = w_q.shape[0] // n_heads
    k_cache = x.new_empty(b, n_kv_heads, s, d_head)
    v_cache = x.new_empty(b, n_kv_heads, s, d_head)
    outs = []
    for t in range(s):
        xt = x[:, t:t + 1]                                         # (B, 1, d)
        pos = torch.tensor([t], device=x.device)
        q = _rope(_heads(xt @ w_q.T, n_heads), pos, rope_base)     # (B, h, 1, d_head)
        k = _rope(_heads(xt @ w_k.T, n_kv_heads), pos, rope_base)  # (B, h_kv, 1, d_head)
        v = _heads(xt @ w_v.T, n_kv_heads)
        k_cache[:, :, t:t + 1] = k
        v_cache[:, :, t:t + 1] = v
        o = decode_attention(q, k_cache[:, :, :t + 1], v_cache[:, :, :t + 1])
        outs.append(o.transpose(1, 2).reshape(b, 1, n_heads * d_head))
    out = torch.cat(outs, dim=1) @ w_o.T                           # (B, S, d)
    return out, k_cache, v_cache
