"""Exercise F: the arithmetic intensity of GQA decode, in PyTorch.

In a decode step every query head reads the KV cache to do ``4 * d_head``
FLOPs per cached position.  With multi-head attention each head has its own
K and V, so a byte read serves about one FLOP: decode is memory-bound.  With
grouped-query attention, ``h / h_kv`` query heads share each K/V head: read
once, the same bytes serve ``h / h_kv`` heads, and the intensity rises by
that factor, as long as the kernel does not copy K/V once per query head.

1. ``gqa_decode_attention``: decode attention that groups the queries of a
   K/V head together instead of repeating K/V (no ``repeat_interleave``,
   no ``expand(...).reshape(...)`` copy).
2. ``decode_intensity``: the ideal intensity, from the formulas.
3. ``measure_intensity``: the intensity your ``gqa_decode_attention``
   actually has, counted from the operations it executes.
4. ``intensity_table``: measured intensity for several ``h_kv``.

Conventions: ``q`` is ``(B, h, 1, d_head)``; caches are
``(B, h_kv, S, d_head)``; query head ``i`` uses KV head ``i // (h // h_kv)``
(the grouping of ``repeat_interleave``, not of ``tile``).  Scores are
scaled by ``1/sqrt(d_head)``; one decode query sees the whole cache.

Run the public tests with ``attn-grade check ex06``.
"""
from __future__ import annotations

import math

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten
from torch.utils.flop_counter import FlopCounterMode


class ReadBytes(TorchDispatchMode):
    """Counts the bytes of the tensors that PyTorch's operations read.

    Inside ``with ReadBytes() as rb:``, every operation (``aten`` op) that
    runs adds the sizes of its tensor inputs to ``rb.bytes``, except views
    (``transpose``, ``view``, ``expand``...), which read nothing.
    ``aten._unsafe_view`` is a view too (a reshape that never copies), even
    though PyTorch does not mark it as one.  Given to you; use it with
    ``torch.utils.flop_counter.FlopCounterMode``, which counts the FLOPs of
    matrix multiplies.
    """

    def __init__(self):
        super().__init__()
        self.bytes = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if not (func.is_view or func is torch.ops.aten._unsafe_view.default):
            for t in tree_flatten((args, kwargs))[0]:
                if isinstance(t, torch.Tensor):
                    self.bytes += t.numel() * t.element_size()
        return func(*args, **kwargs)


def gqa_decode_attention(q, k_cache, v_cache):
    """One decode step of grouped-query attention, without repeating K/V.

    ``q``: ``(B, h, 1, d_head)``; ``k_cache``, ``v_cache``:
    ``(B, h_kv, S, d_head)``.  Reshape the queries so that the ``h // h_kv``
    query heads of a group sit together against their one K/V head, and
    multiply against the cache as it is.  Returns ``(B, h, 1, d_head)``.
    Raises ``ValueError`` unless ``q`` has exactly one query position and
    ``h % h_kv == 0``.

    The queries are viewed as ``(B, h_kv, group, 1, d_head)`` and the caches
    as ``(B, h_kv, 1, S, d_head)`` (views, no copies): the einsums broadcast
    the group axis, so each K/V head is one operand of a batched product over
    ``(B, h_kv)``, ``(group, d) x (d, S)`` for the scores and ``(group, S) x
    (S, d)`` for the output, and is read once for its whole group.  The scale goes on the
    (small) queries, not on the scores, and the softmax is one fused op: the
    ``(B, h_kv, group, S)`` score intermediates are read as few times as an
    unfused kernel allows.
    """
    if q.dim() != 4 or k_cache.dim() != 4 or v_cache.dim() != 4:
        raise ValueError("gqa_decode_attention: q, k_cache and v_cache must be 4-D")
    b, h, s_q, d_head = q.shape
    if s_q != 1:
        raise ValueError(f"gqa_decode_attention: q must have exactly one position, got {s_q}")
    if k_cache.shape != v_cache.shape:
        raise ValueError(f"gqa_decode_attention: k_cache {tuple(k_cache.shape)} and v_cache "
                         f"{tuple(v_cache.shape)} differ")
    h_kv = k_cache.shape[1]
    if h_kv == 0 or h % h_kv:
        raise ValueError(f"gqa_decode_attention: h={h} is not a multiple of h_kv={h_kv}")
    if k_cache.shape[0] != b or k_cache.shape[-1] != d_head:
        raise ValueError(f"gqa_decode_attention: caches {tuple(k_cache.shape)} do not fit q {tuple(q.shape)}")
    group = h // h_kv
    qg = q.view(b, h_kv, group, 1, d_head) * (1.0 / math.sqrt(d_head))   # (B, h_kv, g, 1, d)
    k, v = k_cache[:, :, None], v_cache[:, :, None]                       # (B, h_kv, 1, S, d): views
    scores = torch.einsum("bjrqe,bjrke->bjrqk", qg, k)                     # (B, h_kv, g, 1, S)
    weights = torch.softmax(scores, dim=-1)
    out = torch.einsum("bjrqk,bjrke->bjrqe", weights, v)                   # (B, h_kv, g, 1, d)
    return out.reshape(b, h, 1, d_head)


def decode_intensity(n_heads, n_kv_heads, seq_len, d_head, batch=1, bytes_per_elem=2):
    """Ideal FLOPs per byte of one decode step, from the formulas (a float).

    FLOPs: ``4 * batch * n_heads * seq_len * d_head`` (one query per head,
    ``seq_len`` keys, ``4 * d_head`` per pair).  Bytes: read q, K and V once,
    write the output once: ``bytes_per_elem * batch * d_head * (2 * n_heads
    + 2 * n_kv_heads * seq_len)``.  About ``n_heads / n_kv_heads`` for long
    contexts at 2 bytes per element.
    """
    flops = 4 * batch * n_heads * seq_len * d_head
    nbytes = bytes_per_elem * batch * d_head * (2 * n_heads + 2 * n_kv_heads * seq_len)
    return float(flops) / float(nbytes)


def measure_intensity(n_heads, n_kv_heads, seq_len, d_head, batch=1, device="cpu"):
    """Count what ``gqa_decode_attention`` really executes, in fp16.

    Make random fp16 ``q`` ``(batch, n_heads, 1, d_head)`` and caches
    ``(batch, n_kv_heads, seq_len, d_head)`` on ``device``, run
    ``gqa_decode_attention`` once inside both ``FlopCounterMode`` (FLOPs)
    and ``ReadBytes`` (bytes read by its operations; views read nothing),
    and return ``{"flops": int, "bytes": int, "intensity": flops / bytes}``.
    Do not use the formulas here: the point is what the code does.
    """
    dtype = torch.float16
    q = torch.randn(batch, n_heads, 1, d_head, device=device, dtype=dtype)
    k_cache = torch.randn(batch, n_kv_heads, seq_len, d_head, device=device, dtype=dtype)
    v_cache = torch.randn(batch, n_kv_heads, seq_len, d_head, device=device, dtype=dtype)
    flop_counter = FlopCounterMode(display=False)
    with torch.no_grad(), flop_counter, ReadBytes() as reads:
        gqa_decode_attention(q, k_cache, v_cache)
    flops = int(flop_counter.get_total_flops())
    nbytes = int(reads.bytes)
    return {"flops": flops, "bytes": nbytes, "intensity": flops / nbytes if nbytes else float("nan")}


def intensity_table(n_heads=32, kv_heads=(1, 8, 32), seq_len=4096, d_head=128):
    """``{h_kv: measured intensity}`` for each ``h_kv`` in ``kv_heads``
    (``measure_intensity`` at batch 1 on the CPU).  The intensity rises with
    ``n_heads / h_kv``."""
    return {int(h_kv): measure_intensity(n_heads, h_kv, seq_len, d_head)["intensity"]
            for h_kv in kv_heads}


def kv_bytes_per_token(n_layers, n_kv_heads, d_head, bytes_per_elem=2):
    """K and V rows of every KV head of every layer, for one token."""
    return n_layers * (2 * n_kv_heads * d_head) * bytes_per_elem


def kv_cache_over_weights(n_layers, n_kv_heads, d_head, seq_len, weight_bytes, batch=1,
                          bytes_per_elem=2):
    tokens = batch * seq_len
    return (tokens * kv_bytes_per_token(n_layers, n_kv_heads, d_head, bytes_per_elem)) \
        / weight_bytes


def gqa_bytes_saved(n_layers, n_heads, n_kv_heads, d_head, seq_len=1, batch=1,
                    bytes_per_elem=2):
    caches = [batch * seq_len * kv_bytes_per_token(n_layers, heads, d_head, bytes_per_elem)
              for heads in (n_heads, n_kv_heads)]
    return caches[0] - caches[1]


def attention_ffn_crossover(d_model, d_ff, n_heads, n_kv_heads, d_head):
    # Solve core * (n + 1) > ffn - projections for the smallest whole n >= 1,
    # with a float guess corrected by exact integer checks.
    ffn = 6 * d_model * d_ff
    projections = 2 * d_model * d_head * 2 * (n_heads + n_kv_heads)
    core = 2 * d_head * n_heads
    n = max(1, math.floor((ffn - projections) / core))
    while n > 1 and core * n > ffn - projections:        # n - 1 would pass too
        n -= 1
    while core * (n + 1) <= ffn - projections:
        n += 1
    return int(n)
