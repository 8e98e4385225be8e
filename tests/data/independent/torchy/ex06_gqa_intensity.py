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
from dataclasses import dataclass

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


@dataclass(frozen=True)
class _DecodeShapes:
    """The shapes of one GQA decode step, checked once."""

    batch: int
    n_heads: int
    n_kv_heads: int
    seq_len: int
    d_head: int

    @property
    def group(self) -> int:
        return self.n_heads // self.n_kv_heads

    @classmethod
    def of(cls, q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor) -> "_DecodeShapes":
        if q.dim() != 4 or k_cache.dim() != 4 or v_cache.dim() != 4:
            raise ValueError("q and the caches must be 4-D: (B, heads, S, d_head)")
        b, h, s_q, dh = q.shape
        if s_q != 1:
            raise ValueError(f"decode takes exactly one query position, got {s_q}")
        bk, h_kv, s, dk = k_cache.shape
        if bk != b or dk != dh or tuple(v_cache.shape[:3]) != (b, h_kv, s):
            raise ValueError(f"caches {tuple(k_cache.shape)}, {tuple(v_cache.shape)} "
                             f"do not fit q {tuple(q.shape)}")
        if h_kv == 0 or h % h_kv:
            raise ValueError(f"{h} query heads do not group onto {h_kv} KV heads")
        return cls(b, h, h_kv, s, dh)


def gqa_decode_attention(q, k_cache, v_cache):
    """One decode step of grouped-query attention, without repeating K/V.

    ``q``: ``(B, h, 1, d_head)``; ``k_cache``, ``v_cache``:
    ``(B, h_kv, S, d_head)``.  Reshape the queries so that the ``h // h_kv``
    query heads of a group sit together against their one K/V head, and
    multiply against the cache as it is.  Returns ``(B, h, 1, d_head)``.
    Raises ``ValueError`` unless ``q`` has exactly one query position and
    ``h % h_kv == 0``.

    The ``1/sqrt(d_head)`` scale is applied to the (small) queries rather
    than to the ``(B, h, S)`` scores, so it reads ``h * d_head`` values, not
    ``h * S``.  The softmax stays in the input dtype (the caches are never
    upcast or copied).
    """
    shp = _DecodeShapes.of(q, k_cache, v_cache)
    qg = q.reshape(shp.batch, shp.n_kv_heads, shp.group, shp.d_head)    # a view: (B, h_kv, r, d)
    qg = qg * (1.0 / math.sqrt(shp.d_head))
    scores = torch.matmul(qg, k_cache.transpose(-2, -1))               # (B, h_kv, r, S)
    weights = torch.softmax(scores, dim=-1)
    out = torch.matmul(weights, v_cache)                               # (B, h_kv, r, d_v)
    return out.reshape(shp.batch, shp.n_heads, 1, v_cache.shape[-1])


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
    gen = torch.Generator(device="cpu").manual_seed(0)

    def rand(*shape):
        return torch.randn(*shape, generator=gen).to(device=device, dtype=torch.float16)

    q = rand(batch, n_heads, 1, d_head)
    k_cache = rand(batch, n_kv_heads, seq_len, d_head)
    v_cache = rand(batch, n_kv_heads, seq_len, d_head)
    flop_counter = FlopCounterMode(display=False)
    with torch.no_grad(), flop_counter, ReadBytes() as reader:
        gqa_decode_attention(q, k_cache, v_cache)
    flops = int(flop_counter.get_total_flops())
    nbytes = int(reader.bytes)
    return {"flops": flops, "bytes": nbytes, "intensity": flops / nbytes if nbytes else float("nan")}


def intensity_table(n_heads=32, kv_heads=(1, 8, 32), seq_len=4096, d_head=128):
    """``{h_kv: measured intensity}`` for each ``h_kv`` in ``kv_heads``
    (``measure_intensity`` at batch 1 on the CPU).  The intensity rises with
    ``n_heads / h_kv``."""
    return {int(h_kv): measure_intensity(n_heads, h_kv, seq_len, d_head, batch=1,
                                         device="cpu")["intensity"]
            for h_kv in kv_heads}


@dataclass(frozen=True)
class _CacheShape:
    n_layers: int
    n_kv_heads: int
    d_head: int
    bytes_per_elem: int = 2

    @property
    def per_token(self) -> int:
        return int(torch.tensor([2, self.n_layers, self.n_kv_heads, self.d_head,
                                 self.bytes_per_elem], dtype=torch.int64).prod())


def kv_bytes_per_token(n_layers, n_kv_heads, d_head, bytes_per_elem=2):
    return _CacheShape(n_layers, n_kv_heads, d_head, bytes_per_elem).per_token


def kv_cache_over_weights(n_layers, n_kv_heads, d_head, seq_len, weight_bytes, batch=1,
                          bytes_per_elem=2):
    shape = _CacheShape(n_layers, n_kv_heads, d_head, bytes_per_elem)
    return shape.per_token * seq_len * batch / weight_bytes


def gqa_bytes_saved(n_layers, n_heads, n_kv_heads, d_head, seq_len=1, batch=1,
                    bytes_per_elem=2):
    mha = _CacheShape(n_layers, n_heads, d_head, bytes_per_elem).per_token
    gqa = _CacheShape(n_layers, n_kv_heads, d_head, bytes_per_elem).per_token
    return (mha - gqa) * seq_len * batch


def attention_ffn_crossover(d_model, d_ff, n_heads, n_kv_heads, d_head):
    # All lengths up to a bound at once, in int64: the first where attention wins.
    ffn_tok = 6 * d_model * d_ff
    proj_tok = 4 * d_model * d_head * (n_heads + n_kv_heads)
    bound = max(2, ffn_tok // (2 * d_head * n_heads) + 2)
    n = torch.arange(1, bound + 1, dtype=torch.int64)
    attn = proj_tok * n + 2 * d_head * n_heads * n * (n + 1)
    return int(torch.nonzero(attn > ffn_tok * n)[0, 0]) + 1
