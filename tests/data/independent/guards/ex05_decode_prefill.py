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
import numbers
import operator
import statistics
import time
from typing import Any, Callable, Dict, Optional, Sequence, Tuple

import torch

__all__ = [
    "prefill_attention",
    "decode_attention",
    "attention_flops",
    "attention_bytes",
    "achieved",
    "bound",
    "decode_with_cache",
]

# --------------------------------------------------------------------------
# Helpers: validation, RoPE, attention with GQA grouping, timing
# --------------------------------------------------------------------------


def _as_int(value: Any, name: str, minimum: int = 1) -> int:
    """``value`` as an int >= ``minimum`` (no bools, no floats), else ``ValueError``."""
    if isinstance(value, bool):
        raise ValueError(f"{name} must be an integer, got a bool")
    try:
        out = operator.index(value)
    except TypeError:
        raise ValueError(f"{name} must be an integer, got {type(value).__name__} ({value!r})") from None
    if out < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {out}")
    return int(out)


def _as_real(value: Any, name: str, *, positive: bool) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise ValueError(f"{name} must be a real number, got {type(value).__name__}")
    f = float(value)
    if math.isnan(f):
        raise ValueError(f"{name} must not be NaN")
    if positive and not f > 0:
        raise ValueError(f"{name} must be > 0, got {value!r}")
    if not positive and f < 0:
        raise ValueError(f"{name} must be >= 0, got {value!r}")
    return f


def _check_tensor(t: Any, name: str, ndim: int) -> torch.Tensor:
    if not isinstance(t, torch.Tensor):
        raise ValueError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
    if t.ndim != ndim:
        raise ValueError(f"{name} must be {ndim}-D, got shape {tuple(t.shape)}")
    if not t.dtype.is_floating_point:
        raise ValueError(f"{name} must be a floating tensor, got {t.dtype}")
    return t


def _check_qkv(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> Tuple[int, int]:
    """Validate ``(B, h, S_q, d)`` / ``(B, h_kv, S_k, d)`` inputs; returns ``(h, h_kv)``."""
    _check_tensor(q, "q", 4)
    _check_tensor(k, "k", 4)
    _check_tensor(v, "v", 4)
    if not (q.device == k.device == v.device):
        raise ValueError(f"q, k, v must share a device, got {q.device}, {k.device}, {v.device}")
    if k.shape != v.shape:
        raise ValueError(f"k and v must have the same shape, got {tuple(k.shape)} and {tuple(v.shape)}")
    if q.shape[0] != k.shape[0]:
        raise ValueError(f"batch sizes differ: q has {q.shape[0]}, k has {k.shape[0]}")
    if q.shape[-1] != k.shape[-1] or q.shape[-1] == 0:
        raise ValueError(f"q and k need the same positive d_head, got {q.shape[-1]} and {k.shape[-1]}")
    h, h_kv = q.shape[1], k.shape[1]
    if h == 0 or h_kv == 0 or h % h_kv != 0:
        raise ValueError(f"query heads ({h}) must be a positive multiple of KV heads ({h_kv})")
    if q.shape[2] == 0 or k.shape[2] == 0:
        raise ValueError("attention needs at least one query and one key")
    return h, h_kv


def _grouped_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool) -> torch.Tensor:
    """Attention with GQA grouping by a reshape of the queries (no K/V copies).

    ``q`` ``(B, h, S_q, d)``, ``k``/``v`` ``(B, h_kv, S_k, d)``; query head
    ``i`` reads K/V head ``i // (h // h_kv)``.  End-aligned causal mask;
    query rows that see no key return zeros.  Softmax in float32 for half
    inputs; output in ``q``'s dtype.
    """
    b, h, s_q, d = q.shape
    h_kv, s_k = k.shape[1], k.shape[2]
    g = h // h_kv
    k = k.to(q.dtype)
    v = v.to(q.dtype)
    qg = q.reshape(b, h_kv, g * s_q, d)               # heads j*g .. j*g+g-1 side by side
    scores = torch.matmul(qg * (1.0 / math.sqrt(d)), k.transpose(-1, -2))  # (B, h_kv, g*S_q, S_k)
    scores = scores.view(b, h_kv, g, s_q, s_k)
    blocked = None
    if causal:
        rows = torch.arange(s_q, device=q.device).unsqueeze(1) + (s_k - s_q)
        cols = torch.arange(s_k, device=q.device).unsqueeze(0)
        blocked = cols > rows                          # (S_q, S_k), True = hidden
        scores = scores.masked_fill(blocked, float("-inf"))
    soft_dtype = torch.float32 if q.dtype in (torch.float16, torch.bfloat16) else q.dtype
    weights = torch.softmax(scores, dim=-1, dtype=soft_dtype)
    if blocked is not None and s_q > s_k:
        weights = weights.masked_fill(blocked.all(dim=-1, keepdim=True), 0.0)
    out = torch.matmul(weights.to(v.dtype).view(b, h_kv, g * s_q, s_k), v)   # (B, h_kv, g*S_q, d)
    return out.view(b, h, s_q, d).to(q.dtype)


def _rope(x: torch.Tensor, positions: torch.Tensor, base: float) -> torch.Tensor:
    """Rotate-half RoPE of ``x`` ``(..., S, d)`` at ``positions`` ``(S,)``.

    Angles in float64, applied in ``x``'s dtype.
    """
    d = x.shape[-1]
    if d % 2 != 0:
        raise ValueError(f"RoPE needs an even d_head, got {d}")
    half = d // 2
    inv_freq = float(base) ** (-(2.0 * torch.arange(half, dtype=torch.float64, device=x.device)) / d)
    angles = positions.to(device=x.device, dtype=torch.float64).unsqueeze(-1) * inv_freq  # (S, d/2)
    cos = torch.cos(angles).to(x.dtype)
    sin = torch.sin(angles).to(x.dtype)
    x1, x2 = x[..., :half], x[..., half:]
    return torch.cat((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1)


def _sync_if_cuda() -> None:
    if torch.cuda.is_available():
        torch.cuda.synchronize()


def _median_seconds(fn: Callable, args: Sequence, warmup: int, repeats: int) -> float:
    """Median seconds of ``fn(*args)``: warm-up untimed, synchronized around each call."""
    for _ in range(warmup):
        fn(*args)
    _sync_if_cuda()
    samples = []
    for _ in range(repeats):
        _sync_if_cuda()
        start = time.perf_counter()
        fn(*args)
        _sync_if_cuda()
        samples.append(time.perf_counter() - start)
    return float(statistics.median(samples))


# --------------------------------------------------------------------------
# Public functions
# --------------------------------------------------------------------------


def prefill_attention(q, k, v):
    """Causal attention of a whole prompt: ``S_q == S_k``.

    ``q``: ``(B, h, S, d_head)``, ``k`` and ``v``: ``(B, h_kv, S, d_head)``
    with ``h % h_kv == 0`` (``h_kv == h`` is plain multi-head attention).
    Scores scaled by ``1/sqrt(d_head)``, lower-triangular mask (a query sees
    itself and the past), softmax over keys.  Returns ``(B, h, S, d_head)``
    in the dtype of ``q``.  ``ValueError`` when ``S_q != S_k`` or the shapes
    do not fit.
    """
    _check_qkv(q, k, v)
    if q.shape[2] != k.shape[2]:
        raise ValueError(f"prefill needs S_q == S_k, got {q.shape[2]} and {k.shape[2]}")
    return _grouped_attention(q, k, v, causal=True)


def decode_attention(q, k_cache, v_cache):
    """One decode step: ``q`` ``(B, h, 1, d_head)`` against the whole cache.

    ``k_cache``/``v_cache``: ``(B, h_kv, S, d_head)``.  The new token is the
    last position, so it sees every cached key (no key is masked).  Returns
    ``(B, h, 1, d_head)``.  ``ValueError`` unless ``q`` has exactly one
    position and the shapes fit.
    """
    _check_qkv(q, k_cache, v_cache)
    if q.shape[2] != 1:
        raise ValueError(f"decode takes exactly one query position, got {q.shape[2]}")
    return _grouped_attention(q, k_cache, v_cache, causal=False)


def _causal_pairs(s_q: int, s_k: int) -> int:
    """Number of (query, key) pairs the end-aligned causal mask keeps.

    Query ``i`` sees ``clamp(s_k - s_q + i + 1, 0, s_k)`` keys; the sum is
    done in closed form (exact integers).
    """
    first = s_k - s_q + 1            # keys seen by query 0 (may be <= 0)
    i0 = max(0, -first + 1) if first <= 0 else 0   # first query that sees >= 1 key
    i0 = min(i0, s_q)
    n = s_q - i0
    if n <= 0:
        return 0
    lo = first + i0                  # >= 1
    hi = first + s_q - 1             # == s_k
    return n * (lo + hi) // 2


def attention_flops(batch, n_heads, s_q, s_k, d_head, causal=False):
    """FLOPs of attention: ``4 * d_head * pairs * batch * n_heads`` (an int).

    ``pairs`` is the number of (query, key) pairs computed: ``s_q * s_k``
    without a mask; with ``causal``, only the pairs the end-aligned mask
    allows (query ``i`` sees ``s_k - s_q + i + 1`` keys, at most ``s_k`` and
    at least 0).
    """
    batch = _as_int(batch, "batch")
    n_heads = _as_int(n_heads, "n_heads")
    s_q = _as_int(s_q, "s_q", minimum=0)
    s_k = _as_int(s_k, "s_k", minimum=0)
    d_head = _as_int(d_head, "d_head")
    if not isinstance(causal, (bool, int)):
        raise ValueError(f"causal must be a bool, got {type(causal).__name__}")
    pairs = _causal_pairs(s_q, s_k) if causal else s_q * s_k
    return 4 * d_head * pairs * batch * n_heads


def attention_bytes(batch, n_heads, n_kv_heads, s_q, s_k, d_head, bytes_per_elem=2):
    """The least bytes attention must move (an int): read Q, K and V once and
    write O once.  Q and O have ``n_heads`` heads of ``s_q`` rows; K and V
    have ``n_kv_heads`` heads of ``s_k`` rows.

    ``bytes_per_elem * batch * d_head * (2 * n_heads * s_q + 2 * n_kv_heads * s_k)``.
    """
    batch = _as_int(batch, "batch")
    n_heads = _as_int(n_heads, "n_heads")
    n_kv_heads = _as_int(n_kv_heads, "n_kv_heads")
    s_q = _as_int(s_q, "s_q", minimum=0)
    s_k = _as_int(s_k, "s_k", minimum=0)
    d_head = _as_int(d_head, "d_head")
    if n_heads % n_kv_heads != 0:
        raise ValueError(f"n_heads ({n_heads}) must be a multiple of n_kv_heads ({n_kv_heads})")
    elems = batch * d_head * (2 * n_heads * s_q + 2 * n_kv_heads * s_k)
    if isinstance(bytes_per_elem, numbers.Integral) and not isinstance(bytes_per_elem, bool):
        bpe = _as_int(bytes_per_elem, "bytes_per_elem")
        return elems * bpe
    bpe_f = _as_real(bytes_per_elem, "bytes_per_elem", positive=True)
    return int(math.ceil(elems * bpe_f))


def achieved(fn, args, flops, nbytes, *, warmup=2, repeats=5):
    """Time ``fn(*args)`` and report what it achieved.

    Time it like ``ex04_quadratic.time_fn`` does (warm-up, CUDA
    synchronization, median of repeats).  Returns a dict:
    ``{"seconds": s, "tflops": flops / s / 1e12, "gbps": nbytes / s / 1e9}``.

    ``args`` is the tuple (or list) of positional arguments; a single tensor
    is taken as the only argument.  ``warmup``/``repeats`` (extensions, with
    the timer's defaults) set the timing.
    """
    if not callable(fn):
        raise ValueError(f"fn must be callable, got {type(fn).__name__}")
    if isinstance(args, torch.Tensor) or not isinstance(args, (tuple, list)):
        args = (args,)
    flops_f = _as_real(flops, "flops", positive=False)
    bytes_f = _as_real(nbytes, "nbytes", positive=False)
    warmup = _as_int(warmup, "warmup", minimum=0)
    repeats = _as_int(repeats, "repeats", minimum=1)
    seconds = _median_seconds(fn, tuple(args), warmup, repeats)
    if seconds <= 0:  # a timer too coarse for the call: report "infinitely fast" honestly
        return {"seconds": seconds, "tflops": math.inf, "gbps": math.inf}
    return {
        "seconds": seconds,
        "tflops": flops_f / seconds / 1e12,
        "gbps": bytes_f / seconds / 1e9,
    }


def bound(intensity, peak_flops, peak_bytes_per_s):
    """``"compute"`` or ``"memory"``: which roof limits a kernel of this
    arithmetic ``intensity`` (FLOPs per byte) on a machine with these peaks.

    The ridge point is ``peak_flops / peak_bytes_per_s``; an intensity at or
    above it is compute-bound, below it memory-bound.
    """
    i = _as_real(intensity, "intensity", positive=False)
    pf = _as_real(peak_flops, "peak_flops", positive=True)
    pb = _as_real(peak_bytes_per_s, "peak_bytes_per_s", positive=True)
    ridge = pf / pb
    return "compute" if i >= ridge else "memory"


def decode_with_cache(x, w_q, w_k, w_v, w_o, n_heads, n_kv_heads, *, rope_base=10000.0):
    """Generate position by position with a growing KV cache.

    ``x``: ``(B, S, d)``.  For each position ``t`` in order: project
    ``x[:, t]`` to q, k, v; rotate q and k with RoPE at position ``t``; append
    k (rotated) and v to the cache; attend from q to the cache (one query
    against ``t + 1`` keys); project the result with ``w_o``.  Returns
    ``(out, k_cache, v_cache)``: ``out`` ``(B, S, d)`` equals full causal
    attention over ``x``; the caches are ``(B, h_kv, S, d_head)``.

    The cache is allocated once at its final size and filled one position
    per step (step ``t`` only ever reads entries ``0 .. t``): the growing
    cache without re-copying it every step.  ``ValueError`` when shapes,
    dtypes or devices do not fit.
    """
    _check_tensor(x, "x", 3)
    n_heads = _as_int(n_heads, "n_heads")
    n_kv_heads = _as_int(n_kv_heads, "n_kv_heads")
    if n_heads % n_kv_heads != 0:
        raise ValueError(f"n_heads ({n_heads}) must be a multiple of n_kv_heads ({n_kv_heads})")
    base = _as_real(rope_base, "rope_base", positive=True)
    b, s, d = x.shape
    if s == 0 or d == 0:
        raise ValueError(f"x must have positive S and d, got shape {tuple(x.shape)}")
    for name, w in (("w_q", w_q), ("w_k", w_k), ("w_v", w_v), ("w_o", w_o)):
        _check_tensor(w, name, 2)
        if w.device != x.device:
            raise ValueError(f"{name} is on {w.device}, x on {x.device}")
        if w.dtype != x.dtype:
            raise ValueError(f"{name} has dtype {w.dtype}, x has {x.dtype}")
    if w_q.shape[1] != d or w_q.shape[0] == 0 or w_q.shape[0] % n_heads != 0:
        raise ValueError(f"w_q must be (n_heads*d_head, d) with d = {d}, got {tuple(w_q.shape)}")
    d_head = w_q.shape[0] // n_heads
    if d_head % 2 != 0:
        raise ValueError(f"RoPE needs an even d_head, got {d_head}")
    kv_shape = (n_kv_heads * d_head, d)
    for name, w in (("w_k", w_k), ("w_v", w_v)):
        if tuple(w.shape) != kv_shape:
            raise ValueError(f"{name} must be (n_kv_heads*d_head, d) = {kv_shape}, got {tuple(w.shape)}")
    if tuple(w_o.shape) != (d, n_heads * d_head):
        raise ValueError(f"w_o must be (d, n_heads*d_head) = {(d, n_heads * d_head)}, got {tuple(w_o.shape)}")

    k_cache = x.new_empty((b, n_kv_heads, s, d_head))
    v_cache = x.new_empty((b, n_kv_heads, s, d_head))
    out = x.new_empty((b, s, d))
    for t in range(s):
        x_t = x[:, t : t + 1, :]                                              # (B, 1, d)
        pos = torch.tensor([t], device=x.device)
        q_t = (x_t @ w_q.T).view(b, 1, n_heads, d_head).transpose(1, 2)       # (B, h, 1, dh)
        k_t = (x_t @ w_k.T).view(b, 1, n_kv_heads, d_head).transpose(1, 2)    # (B, h_kv, 1, dh)
        v_t = (x_t @ w_v.T).view(b, 1, n_kv_heads, d_head).transpose(1, 2)
        q_t = _rope(q_t, pos, base)
        k_t = _rope(k_t, pos, base)            # rotated at its own position, then cached
        k_cache[:, :, t : t + 1, :] = k_t
        v_cache[:, :, t : t + 1, :] = v_t
        o_t = decode_attention(q_t, k_cache[:, :, : t + 1], v_cache[:, :, : t + 1])  # (B, h, 1, dh)
        out[:, t : t + 1, :] = o_t.transpose(1, 2).reshape(b, 1, n_heads * d_head) @ w_o.T
    return out, k_cache, v_cache
