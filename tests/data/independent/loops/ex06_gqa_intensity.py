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

    Loops over batch and K/V heads.  For K/V head ``j`` the query heads
    ``j*group .. (j+1)*group - 1`` (those with ``i // group == j``) form a
    ``(group, d_head)`` block (a slice: a view, no copy) that meets the
    cache of head ``j`` in one matrix multiply, so every cached byte is read
    once per step.  Unlike the other exercises this one computes in the
    input's dtype, without a float64 copy: the point here is the bytes the
    operations read, and an upcast would add reads of its own (and read the
    cache at 8 bytes per element instead of 2).
    """
    if q.dim() != 4 or k_cache.dim() != 4 or v_cache.dim() != 4:
        raise ValueError("gqa_decode_attention: q and the caches must be (B, heads, S, d_head)")
    batch, n_heads, s_q, d_head = q.shape
    if s_q != 1:
        raise ValueError(f"gqa_decode_attention takes exactly one query position, got {s_q}")
    if k_cache.shape != v_cache.shape:
        raise ValueError("gqa_decode_attention: k_cache and v_cache must have the same shape")
    kv_batch, n_kv_heads, seq_len, kv_d_head = k_cache.shape
    if kv_batch != batch or kv_d_head != d_head:
        raise ValueError("gqa_decode_attention: the caches do not fit q (batch or d_head)")
    if n_kv_heads == 0 or n_heads % n_kv_heads != 0:
        raise ValueError(f"gqa_decode_attention: {n_heads} query heads are not a multiple of "
                         f"{n_kv_heads} KV heads")
    group = n_heads // n_kv_heads
    scale = 1.0 / math.sqrt(d_head)

    out = torch.zeros((batch, n_heads, 1, d_head), dtype=q.dtype, device=q.device)
    for b in range(batch):
        for j in range(n_kv_heads):
            first = j * group                       # query heads first .. first+group-1
            q_group = q[b, first:first + group, 0, :]   # (group, d_head), a view
            keys = k_cache[b, j]                    # (S, d_head), read as it is
            values = v_cache[b, j]                  # (S, d_head)
            # scale the few queries rather than the S scores
            scores = (q_group * scale) @ keys.transpose(0, 1)     # (group, S)
            # softmax over the cache, by hand: max-subtract, exp, sum, divide
            row_max = torch.amax(scores, dim=-1, keepdim=True)
            exps = torch.exp(scores - row_max)
            total = torch.sum(exps, dim=-1, keepdim=True)
            weights = exps / total
            out[b, first:first + group, 0, :] = weights @ values     # (group, d_head)
    return out


def decode_intensity(n_heads, n_kv_heads, seq_len, d_head, batch=1, bytes_per_elem=2):
    """Ideal FLOPs per byte of one decode step, from the formulas (a float).

    FLOPs: ``4 * batch * n_heads * seq_len * d_head`` (one query per head,
    ``seq_len`` keys, ``4 * d_head`` per pair).  Bytes: read q, K and V once,
    write the output once: ``bytes_per_elem * batch * d_head * (2 * n_heads
    + 2 * n_kv_heads * seq_len)``.  About ``n_heads / n_kv_heads`` for long
    contexts at 2 bytes per element.
    """
    flops = 4 * batch * n_heads * seq_len * d_head
    q_and_out = 2 * n_heads            # one query row in, one output row out, per head
    k_and_v = 2 * n_kv_heads * seq_len
    nbytes = bytes_per_elem * batch * d_head * (q_and_out + k_and_v)
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
    q = torch.randn((batch, n_heads, 1, d_head), dtype=dtype, device=device)
    k_cache = torch.randn((batch, n_kv_heads, seq_len, d_head), dtype=dtype, device=device)
    v_cache = torch.randn((batch, n_kv_heads, seq_len, d_head), dtype=dtype, device=device)
    flop_counter = FlopCounterMode(display=False)
    with flop_counter:
        with ReadBytes() as reader:
            gqa_decode_attention(q, k_cache, v_cache)
    flops = int(flop_counter.get_total_flops())
    nbytes = int(reader.bytes)
    return {"flops": flops, "bytes": nbytes, "intensity": flops / nbytes}


def intensity_table(n_heads=32, kv_heads=(1, 8, 32), seq_len=4096, d_head=128):
    """``{h_kv: measured intensity}`` for each ``h_kv`` in ``kv_heads``
    (``measure_intensity`` at batch 1 on the CPU).  The intensity rises with
    ``n_heads / h_kv``."""
    table = {}
    for h_kv in kv_heads:
        measured = measure_intensity(n_heads, h_kv, seq_len, d_head, batch=1, device="cpu")
        table[h_kv] = measured["intensity"]
    return table


def kv_bytes_per_token(n_layers, n_kv_heads, d_head, bytes_per_elem=2):
    total = 0
    for _layer in range(n_layers):
        for _head in range(n_kv_heads):
            for _tensor in ("k", "v"):
                total += d_head * bytes_per_elem
    return total


def kv_cache_over_weights(n_layers, n_kv_heads, d_head, seq_len, weight_bytes, batch=1,
                          bytes_per_elem=2):
    per_token = kv_bytes_per_token(n_layers, n_kv_heads, d_head, bytes_per_elem)
    cache = 0
    for _seq in range(batch):
        cache += per_token * seq_len
    return cache / weight_bytes


def gqa_bytes_saved(n_layers, n_heads, n_kv_heads, d_head, seq_len=1, batch=1,
                    bytes_per_elem=2):
    saved = 0
    for _seq in range(batch):
        mha = kv_bytes_per_token(n_layers, n_heads, d_head, bytes_per_elem) * seq_len
        gqa = kv_bytes_per_token(n_layers, n_kv_heads, d_head, bytes_per_elem) * seq_len
        saved += mha - gqa
    return saved


def attention_ffn_crossover(d_model, d_ff, n_heads, n_kv_heads, d_head):
    # Walk n up, adding each new token's FLOPs: the n-th token's core sees n keys.
    ffn = attention = 0
    weights = d_model * d_head * (n_heads + n_kv_heads + n_kv_heads + n_heads)
    n = 0
    while True:
        n += 1
        ffn += 2 * 3 * d_model * d_ff
        attention += 2 * weights + 4 * d_head * n_heads * n
        if attention > ffn:
            return n
