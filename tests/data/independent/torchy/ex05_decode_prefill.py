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
from dataclasses import dataclass, field
from functools import lru_cache

import torch

# Helpers of your own (RoPE, splitting heads, attention with GQA grouping) go here.


@lru_cache(maxsize=64)
def _inv_freq(d_head: int, base: float) -> torch.Tensor:
    """``base ** (-2j / d_head)``, ``j = 0 .. d_head/2 - 1``, float64 on the CPU."""
    j = torch.arange(d_head // 2, dtype=torch.float64)
    return torch.tensor(float(base), dtype=torch.float64) ** (-2.0 * j / d_head)


@dataclass(frozen=True)
class _RoPE:
    """Rotate-half RoPE for one head width; angles in float64, result in ``x``'s dtype."""

    d_head: int
    base: float = 10000.0

    def __post_init__(self):
        if self.d_head % 2:
            raise ValueError(f"RoPE needs an even d_head, got {self.d_head}")

    def __call__(self, x: torch.Tensor, positions) -> torch.Tensor:
        pos = torch.as_tensor(positions, dtype=torch.float64).reshape(-1)
        ang = pos.unsqueeze(-1) * _inv_freq(self.d_head, float(self.base))
        ang = ang.to(x.device)
        cos = torch.cat([ang.cos(), ang.cos()], dim=-1)
        sin = torch.cat([ang.sin(), ang.sin()], dim=-1)
        x64 = x.to(torch.float64)
        x1, x2 = x64.chunk(2, dim=-1)
        return (x64 * cos + torch.cat([-x2, x1], dim=-1) * sin).to(x.dtype)


def _split_heads(x: torch.Tensor, n_heads: int) -> torch.Tensor:
    b, s, width = x.shape
    return x.view(b, s, n_heads, width // n_heads).transpose(1, 2)


def _merge_heads(x: torch.Tensor) -> torch.Tensor:
    b, h, s, dh = x.shape
    return x.transpose(1, 2).reshape(b, s, h * dh)


def _grouped_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *,
                       causal: bool) -> torch.Tensor:
    """Attention with GQA grouping and the end-aligned causal mask.

    ``q`` ``(B, h, S_q, d)``, ``k``/``v`` ``(B, h_kv, S_k, d)``.  The ``r = h //
    h_kv`` query heads of a group are stacked along the row axis (a view of
    ``q``) and meet their one K/V head as it is: K/V are never repeated.
    """
    b, h, s_q, dh = q.shape
    _, h_kv, s_k, _ = k.shape
    if k.shape != v.shape[:3] + (dh,) or v.shape[:3] != (b, h_kv, s_k):
        raise ValueError(f"k {tuple(k.shape)} and v {tuple(v.shape)} do not fit q {tuple(q.shape)}")
    if h_kv == 0 or h % h_kv:
        raise ValueError(f"{h} query heads do not group onto {h_kv} KV heads")
    r = h // h_kv
    qg = q.reshape(b, h_kv, r * s_q, dh)                       # view when q is contiguous
    scores = torch.matmul(qg, k.transpose(-2, -1)) * (1.0 / math.sqrt(dh))
    scores = scores.view(b, h_kv, r, s_q, s_k)
    acc = torch.float32 if scores.dtype in (torch.float16, torch.bfloat16) else scores.dtype
    if causal and s_q > 1:
        allowed = torch.ones(s_q, s_k, dtype=torch.bool, device=q.device).tril(s_k - s_q)
        scores = scores.masked_fill(~allowed, float("-inf"))
        w = torch.softmax(scores, dim=-1, dtype=acc)
        if s_q > s_k:
            w = w.masked_fill(~allowed.any(-1, keepdim=True), 0.0)
    else:
        w = torch.softmax(scores, dim=-1, dtype=acc)
    out = torch.matmul(w.to(v.dtype).view(b, h_kv, r * s_q, s_k), v)
    return out.view(b, h, s_q, v.shape[-1]).to(q.dtype)


def prefill_attention(q, k, v):
    """Causal attention of a whole prompt: ``S_q == S_k``.

    ``q``: ``(B, h, S, d_head)``, ``k`` and ``v``: ``(B, h_kv, S, d_head)``
    with ``h % h_kv == 0`` (``h_kv == h`` is plain multi-head attention).
    Scores scaled by ``1/sqrt(d_head)``, lower-triangular mask (a query sees
    itself and the past), softmax over keys.  Returns ``(B, h, S, d_head)``
    in the dtype of ``q``.  (With ``S_q != S_k`` the mask is end-aligned.)
    """
    return _grouped_attention(q, k, v, causal=True)


def decode_attention(q, k_cache, v_cache):
    """One decode step: ``q`` ``(B, h, 1, d_head)`` against the whole cache.

    ``k_cache``/``v_cache``: ``(B, h_kv, S, d_head)``.  The new token is the
    last position, so it sees every cached key (no key is masked).  Returns
    ``(B, h, 1, d_head)``.  (Several new positions, ``S_q > 1``, get the
    end-aligned causal mask: a chunk of decode.)
    """
    return _grouped_attention(q, k_cache, v_cache, causal=True)


def _causal_pairs(s_q: int, s_k: int) -> int:
    """(query, key) pairs the end-aligned mask allows: query ``i`` sees
    ``clamp(s_k - s_q + i + 1, 0, s_k)`` keys; the last ``min(s_q, s_k)``
    rows see ``s_k - n + 1 .. s_k`` keys, the others none."""
    n = max(0, min(s_q, s_k))
    return n * (2 * s_k - n + 1) // 2


def attention_flops(batch, n_heads, s_q, s_k, d_head, causal=False):
    """FLOPs of attention: ``4 * d_head * pairs * batch * n_heads`` (an int).

    ``pairs`` is the number of (query, key) pairs computed: ``s_q * s_k``
    without a mask; with ``causal``, only the pairs the end-aligned mask
    allows (query ``i`` sees ``s_k - s_q + i + 1`` keys, at most ``s_k`` and
    at least 0).
    """
    s_q, s_k = int(s_q), int(s_k)
    pairs = _causal_pairs(s_q, s_k) if causal else s_q * s_k
    return int(4 * d_head * pairs * batch * n_heads)


def attention_bytes(batch, n_heads, n_kv_heads, s_q, s_k, d_head, bytes_per_elem=2):
    """The least bytes attention must move (an int): read Q, K and V once and
    write O once.  Q and O have ``n_heads`` heads of ``s_q`` rows; K and V
    have ``n_kv_heads`` heads of ``s_k`` rows."""
    elems = batch * d_head * (2 * n_heads * s_q + 2 * n_kv_heads * s_k)
    return int(elems * bytes_per_elem)


def _synchronize() -> None:
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        torch.cuda.synchronize()


@dataclass(frozen=True)
class _Timer:
    """Untimed warm-up calls, then the median of synchronized repeats."""

    warmup: int = 2
    repeats: int = 5

    def __call__(self, fn, *args, **kwargs) -> float:
        for _ in range(self.warmup):
            fn(*args, **kwargs)
        samples = []
        for _ in range(self.repeats):
            _synchronize()
            t0 = time.perf_counter()
            fn(*args, **kwargs)
            _synchronize()
            samples.append(time.perf_counter() - t0)
        return float(statistics.median(samples))


def achieved(fn, args, flops, nbytes):
    """Time ``fn(*args)`` and report what it achieved.

    Time it like ``ex04_quadratic.time_fn`` does (warm-up, CUDA
    synchronization, median of repeats).  Returns a dict:
    ``{"seconds": s, "tflops": flops / s / 1e12, "gbps": nbytes / s / 1e9}``.
    (A single tensor for ``args`` is taken as ``(args,)``.)
    """
    if isinstance(args, torch.Tensor):
        args = (args,)
    with torch.inference_mode():
        seconds = _Timer()(fn, *tuple(args))
    seconds = max(seconds, 1e-12)  # a clock tick of 0 must not divide by zero
    return {"seconds": seconds, "tflops": flops / seconds / 1e12, "gbps": nbytes / seconds / 1e9}


def bound(intensity, peak_flops, peak_bytes_per_s):
    """``"compute"`` or ``"memory"``: which roof limits a kernel of this
    arithmetic ``intensity`` (FLOPs per byte) on a machine with these peaks.

    The ridge point is ``peak_flops / peak_bytes_per_s``; an intensity at or
    above it is compute-bound, below it memory-bound.
    """
    ridge = peak_flops / peak_bytes_per_s
    return "compute" if intensity >= ridge else "memory"


@dataclass
class _KVCache:
    """A preallocated K/V buffer that grows one position at a time."""

    k: torch.Tensor
    v: torch.Tensor
    length: int = field(default=0)

    @classmethod
    def empty(cls, batch, n_kv_heads, max_len, d_head, *, like: torch.Tensor):
        shape = (batch, n_kv_heads, max_len, d_head)
        return cls(like.new_zeros(shape), like.new_zeros(shape))

    def append(self, k_t: torch.Tensor, v_t: torch.Tensor):
        n = k_t.shape[-2]
        self.k[:, :, self.length:self.length + n] = k_t
        self.v[:, :, self.length:self.length + n] = v_t
        self.length += n
        return self.k[:, :, :self.length], self.v[:, :, :self.length]


def decode_with_cache(x, w_q, w_k, w_v, w_o, n_heads, n_kv_heads, *, rope_base=10000.0):
    """Generate position by position with a growing KV cache.

    ``x``: ``(B, S, d)``.  For each position ``t`` in order: project
    ``x[:, t]`` to q, k, v; rotate q and k with RoPE at position ``t``; append
    k (rotated) and v to the cache; attend from q to the cache (one query
    against ``t + 1`` keys); project the result with ``w_o``.  Returns
    ``(out, k_cache, v_cache)``: ``out`` ``(B, S, d)`` equals full causal
    attention over ``x``; the caches are ``(B, h_kv, S, d_head)``.
    ``ValueError`` when the weights do not fit ``x`` and the head counts.
    """
    if x.dim() != 3:
        raise ValueError(f"x must be (B, S, d), got {tuple(x.shape)}")
    b, s, d = x.shape
    n_heads, n_kv_heads = int(n_heads), int(n_kv_heads)
    if n_heads <= 0 or n_kv_heads <= 0 or n_heads % n_kv_heads:
        raise ValueError(f"n_heads={n_heads} must be a multiple of n_kv_heads={n_kv_heads}")
    if w_q.dim() != 2 or w_q.shape[1] != d or w_q.shape[0] % n_heads:
        raise ValueError(f"w_q {tuple(w_q.shape)} does not fit d={d}, n_heads={n_heads}")
    dh = w_q.shape[0] // n_heads
    for name, w, shape in (("w_k", w_k, (n_kv_heads * dh, d)), ("w_v", w_v, (n_kv_heads * dh, d)),
                           ("w_o", w_o, (d, n_heads * dh))):
        if tuple(w.shape) != shape:
            raise ValueError(f"{name} has shape {tuple(w.shape)}, expected {shape}")

    rope = _RoPE(dh, float(rope_base))
    dtype = torch.promote_types(x.dtype, w_q.dtype)
    cache = _KVCache.empty(b, n_kv_heads, s, dh, like=x.new_empty(0, dtype=dtype))
    outs = []
    with torch.no_grad():
        for t in range(s):
            x_t = x[:, t:t + 1].to(dtype)                                  # (B, 1, d)
            q = rope(_split_heads(x_t @ w_q.T.to(dtype), n_heads), [t])     # (B, h, 1, dh)
            k = rope(_split_heads(x_t @ w_k.T.to(dtype), n_kv_heads), [t])  # rotated, then cached
            v = _split_heads(x_t @ w_v.T.to(dtype), n_kv_heads)
            k_all, v_all = cache.append(k, v)
            o = decode_attention(q, k_all, v_all)                          # (B, h, 1, dh)
            outs.append(_merge_heads(o) @ w_o.T.to(dtype))
    out = torch.cat(outs, dim=1) if outs else x.new_zeros(b, 0, d, dtype=dtype)
    return out, cache.k, cache.v
