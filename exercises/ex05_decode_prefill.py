"""Exercise E: decode vs prefill, in PyTorch.

Usually takes about 2 hours.  From the chapters: "Attention from First
Principles", section 6 (Under the hood: the prefill and decode shapes) and
hands-on exercise E; "Attention" (chapter 03), the interview check
"Prefill vs decode: how does attention's cost scale in each?".

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
* Accuracy (the course's precision rule): ``prefill_attention``,
  ``decode_attention`` and ``decode_with_cache`` are compared with a float64
  reference to ``atol=2e-5, rtol=2e-4``; the counts exactly.

Run the public tests with ``attn-grade check ex05``.
"""
from __future__ import annotations

import math
import statistics
import time

import torch

# Helpers of your own (RoPE, splitting heads, attention with GQA grouping) go here.


def prefill_attention(q, k, v):
    """Causal attention of a whole prompt: ``S_q == S_k``.

    ``q``: ``(B, h, S, d_head)``, ``k`` and ``v``: ``(B, h_kv, S, d_head)``
    with ``h % h_kv == 0`` (``h_kv == h`` is plain multi-head attention).
    Scores scaled by ``1/sqrt(d_head)``, lower-triangular mask (a query sees
    itself and the past), softmax over keys.  Returns ``(B, h, S, d_head)``
    in the dtype of ``q``.
    """
    raise NotImplementedError("ex05_decode_prefill.prefill_attention: your code here")


def decode_attention(q, k_cache, v_cache):
    """One decode step: ``q`` ``(B, h, 1, d_head)`` against the whole cache.

    ``k_cache``/``v_cache``: ``(B, h_kv, S, d_head)``.  The new token is the
    last position, so it sees every cached key (no key is masked).  Returns
    ``(B, h, 1, d_head)``.
    """
    raise NotImplementedError("ex05_decode_prefill.decode_attention: your code here")


def attention_flops(batch, n_heads, s_q, s_k, d_head, causal=False):
    """FLOPs of attention: ``4 * d_head * pairs * batch * n_heads`` (an int).

    ``pairs`` is the number of (query, key) pairs computed: ``s_q * s_k``
    without a mask; with ``causal``, only the pairs the end-aligned mask
    allows (query ``i`` sees ``s_k - s_q + i + 1`` keys, at most ``s_k`` and
    at least 0).
    """
    raise NotImplementedError("ex05_decode_prefill.attention_flops: your code here")


def attention_bytes(batch, n_heads, n_kv_heads, s_q, s_k, d_head, bytes_per_elem=2):
    """The least bytes attention must move (an int): read Q, K and V once and
    write O once.  Q and O have ``n_heads`` heads of ``s_q`` rows; K and V
    have ``n_kv_heads`` heads of ``s_k`` rows."""
    raise NotImplementedError("ex05_decode_prefill.attention_bytes: your code here")


def achieved(fn, args, flops, nbytes):
    """Time ``fn(*args)`` and report what it achieved.

    Time it like ``ex04_quadratic.time_fn`` does (warm-up, CUDA
    synchronization, median of repeats).  Returns a dict:
    ``{"seconds": s, "tflops": flops / s / 1e12, "gbps": nbytes / s / 1e9}``.
    """
    raise NotImplementedError("ex05_decode_prefill.achieved: your code here")


def bound(intensity, peak_flops, peak_bytes_per_s):
    """``"compute"`` or ``"memory"``: which roof limits a kernel of this
    arithmetic ``intensity`` (FLOPs per byte) on a machine with these peaks.

    The ridge point is ``peak_flops / peak_bytes_per_s``; an intensity at or
    above it is compute-bound, below it memory-bound.
    """
    raise NotImplementedError("ex05_decode_prefill.bound: your code here")


def decode_with_cache(x, w_q, w_k, w_v, w_o, n_heads, n_kv_heads, *, rope_base=10000.0):
    """Generate position by position with a growing KV cache.

    ``x``: ``(B, S, d)``.  For each position ``t`` in order: project
    ``x[:, t]`` to q, k, v; rotate q and k with RoPE at position ``t``; append
    k (rotated) and v to the cache; attend from q to the cache (one query
    against ``t + 1`` keys); project the result with ``w_o``.  Returns
    ``(out, k_cache, v_cache)``: ``out`` ``(B, S, d)`` equals full causal
    attention over ``x``; the caches are ``(B, h_kv, S, d_head)``.
    """
    raise NotImplementedError("ex05_decode_prefill.decode_with_cache: your code here")
