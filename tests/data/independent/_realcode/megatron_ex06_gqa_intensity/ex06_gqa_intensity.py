"""Exercise F: the arithmetic intensity of GQA decode, in PyTorch.

Usually takes about 1.5 hours.  From the chapters: "Attention from First
Principles", section 6 (Under the hood: intensity ~ h / h_kv) and hands-on
exercise F, with interview question 5 ("Why does GQA improve decode
arithmetic intensity, not just memory?").

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
5. What the cache costs a server (chapter 1, sections 7 and 9), from the
   formulas: ``kv_bytes_per_token``, ``kv_cache_over_weights`` (at 128k
   the cache of Llama-3-8B is larger than its weights: 17.2 GB against
   16 GB), ``gqa_bytes_saved`` (what GQA saves over MHA, in bytes) and
   ``attention_ffn_crossover`` (below about 30k tokens the FFN, not
   attention, does most of a layer's FLOPs).

Conventions: ``q`` is ``(B, h, 1, d_head)``; caches are
``(B, h_kv, S, d_head)``; query head ``i`` uses KV head ``i // (h // h_kv)``
(the grouping of ``repeat_interleave``, not of ``tile``).  Scores are
scaled by ``1/sqrt(d_head)``; one decode query sees the whole cache.

Conventions of the counting functions (part 5): sizes are bytes, decimal
where they are spoken of (1 GB = 1e9 bytes, never GiB); the cache holds a K
and a V row of ``d_head`` elements per KV head, layer and token; integers
come back as ``int``.  A weight costs 2 FLOPs per token (a multiply and an
add); a (query, key) pair of one head costs ``4 * d_head`` FLOPs.
Llama-3-8B: 32 layers, ``d_model`` 4096, FFN width ``d_ff`` 14336, 32
query heads, 8 KV heads, ``d_head`` 128, 16 GB of fp16 weights.
Llama-3-70B: 80 layers, 64 query heads, 8 KV heads, ``d_head`` 128.

Run the public tests with ``attn-grade check ex06``.
"""
# Style: megatron (see INDEX.md). The ReadBytes class below is the given one, unchanged.
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
    """Megatron-LM core-attention style: fold (batch, kv-group) into the bmm batch and
    baddbmm the group's queries against its one K/V head (no repeat of K/V)."""
    if q.dim() != 4 or q.size(2) != 1:
        raise ValueError("one decode query position expected")
    b, np_, _, hn = q.size()
    ng = k_cache.size(1)
    if ng == 0 or np_ % ng:
        raise ValueError("num_attention_heads must be a multiple of num_query_groups")
    sk = k_cache.size(2)
    q_ = q.reshape(b * ng, np_ // ng, hn)
    k_ = k_cache.reshape(b * ng, sk, hn)
    v_ = v_cache.reshape(b * ng, sk, hn)
    buf = torch.empty(b * ng, np_ // ng, sk, dtype=q.dtype, device=q.device)
    scores = torch.baddbmm(buf, q_, k_.transpose(1, 2), beta=0.0, alpha=1.0 / math.sqrt(hn))
    probs = torch.softmax(scores, dim=-1)
    ctx = torch.bmm(probs, v_)
    return ctx.view(b, np_, 1, hn)


def decode_intensity(n_heads, n_kv_heads, seq_len, d_head, batch=1, bytes_per_elem=2):
    f = 4 * batch * n_heads * seq_len * d_head
    by = bytes_per_elem * batch * d_head * (2 * n_heads + 2 * n_kv_heads * seq_len)
    return float(f) / float(by)


def measure_intensity(n_heads, n_kv_heads, seq_len, d_head, batch=1, device="cpu"):
    q = torch.randn(batch, n_heads, 1, d_head, device=device, dtype=torch.float16)
    k_cache = torch.randn(batch, n_kv_heads, seq_len, d_head, device=device, dtype=torch.float16)
    v_cache = torch.randn(batch, n_kv_heads, seq_len, d_head, device=device, dtype=torch.float16)
    flop_counter = FlopCounterMode(display=False)
    with flop_counter, ReadBytes() as rb:
        gqa_decode_attention(q, k_cache, v_cache)
    flops = int(flop_counter.get_total_flops())
    nbytes = int(rb.bytes)
    return {"flops": flops, "bytes": nbytes, "intensity": flops / nbytes}


def intensity_table(n_heads=32, kv_heads=(1, 8, 32), seq_len=4096, d_head=128):
    return {h_kv: measure_intensity(n_heads, h_kv, seq_len, d_head)["intensity"] for h_kv in kv_heads}


def kv_bytes_per_token(n_layers, n_kv_heads, d_head, bytes_per_elem=2):
    return 2 * n_layers * n_kv_heads * d_head * bytes_per_elem


def kv_cache_over_weights(n_layers, n_kv_heads, d_head, seq_len, weight_bytes, batch=1,
                          bytes_per_elem=2):
    return float(2 * n_layers * n_kv_heads * d_head * bytes_per_elem * seq_len * batch) / weight_bytes


def gqa_bytes_saved(n_layers, n_heads, n_kv_heads, d_head, seq_len=1, batch=1,
                    bytes_per_elem=2):
    per_head_token = 2 * n_layers * d_head * bytes_per_elem
    return per_head_token * (n_heads - n_kv_heads) * seq_len * batch


def attention_ffn_crossover(d_model, d_ff, n_heads, n_kv_heads, d_head):
    from fractions import Fraction
    x = Fraction(6 * d_model * d_ff - 4 * d_model * d_head * (n_heads + n_kv_heads),
                 2 * d_head * n_heads)              # need n + 1 > x
    n = math.floor(x)                              # smallest integer n with n + 1 > x
    return max(1, int(n))
