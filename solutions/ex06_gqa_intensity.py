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
``gqa_decode_attention`` is compared with a float64 reference to
``atol=2e-5, rtol=2e-4`` (the course's precision rule).

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
    """
    # BEGIN SOLUTION
    b, h, s_q, d_head = q.shape
    h_kv = k_cache.shape[1]
    if s_q != 1:
        raise ValueError(f"decode takes one query position, got {s_q}")
    if h % h_kv:
        raise ValueError(f"{h} query heads cannot be grouped over {h_kv} KV heads")
    qg = q.reshape(b, h_kv, h // h_kv, d_head) * (1.0 / math.sqrt(d_head))   # (B, h_kv, g, d)
    scores = qg @ k_cache.transpose(-2, -1)                                  # (B, h_kv, g, S)
    out = torch.softmax(scores, dim=-1) @ v_cache                           # (B, h_kv, g, d)
    return out.reshape(b, h, 1, d_head)
    # END SOLUTION


def decode_intensity(n_heads, n_kv_heads, seq_len, d_head, batch=1, bytes_per_elem=2):
    """Ideal FLOPs per byte of one decode step, from the formulas (a float).

    FLOPs: ``4 * batch * n_heads * seq_len * d_head`` (one query per head,
    ``seq_len`` keys, ``4 * d_head`` per pair).  Bytes: read q, K and V once,
    write the output once: ``bytes_per_elem * batch * d_head * (2 * n_heads
    + 2 * n_kv_heads * seq_len)``.  About ``n_heads / n_kv_heads`` for long
    contexts at 2 bytes per element.
    """
    # BEGIN SOLUTION
    flops = 4 * batch * n_heads * seq_len * d_head
    nbytes = bytes_per_elem * batch * d_head * (2 * n_heads + 2 * n_kv_heads * seq_len)
    return flops / nbytes
    # END SOLUTION


def measure_intensity(n_heads, n_kv_heads, seq_len, d_head, batch=1, device="cpu"):
    """Count what ``gqa_decode_attention`` really executes, in fp16.

    Make random fp16 ``q`` ``(batch, n_heads, 1, d_head)`` and caches
    ``(batch, n_kv_heads, seq_len, d_head)`` on ``device``, run
    ``gqa_decode_attention`` once inside both ``FlopCounterMode`` (FLOPs)
    and ``ReadBytes`` (bytes read by its operations; views read nothing),
    and return ``{"flops": int, "bytes": int, "intensity": flops / bytes}``.
    Do not use the formulas here: the point is what the code does.
    """
    # BEGIN SOLUTION
    q = torch.randn(batch, n_heads, 1, d_head, device=device, dtype=torch.float16)
    k = torch.randn(batch, n_kv_heads, seq_len, d_head, device=device, dtype=torch.float16)
    v = torch.randn_like(k)
    with FlopCounterMode(display=False) as flop_counter, ReadBytes() as reads:
        gqa_decode_attention(q, k, v)
    flops = flop_counter.get_total_flops()
    return {"flops": int(flops), "bytes": int(reads.bytes), "intensity": flops / reads.bytes}
    # END SOLUTION


def intensity_table(n_heads=32, kv_heads=(1, 8, 32), seq_len=4096, d_head=128):
    """``{h_kv: measured intensity}`` for each ``h_kv`` in ``kv_heads``
    (``measure_intensity`` at batch 1 on the CPU).  The intensity rises with
    ``n_heads / h_kv``."""
    # BEGIN SOLUTION
    return {h_kv: measure_intensity(n_heads, h_kv, seq_len, d_head)["intensity"]
            for h_kv in kv_heads}
    # END SOLUTION


def kv_bytes_per_token(n_layers, n_kv_heads, d_head, bytes_per_elem=2):
    """Bytes of KV cache one token adds (an ``int``): a K row and a V row of
    ``d_head`` elements for each of the ``n_kv_heads`` KV heads of each of
    the ``n_layers`` layers, ``bytes_per_elem`` bytes each.  Llama-3-8B in
    fp16: ``kv_bytes_per_token(32, 8, 128) == 131072`` (128 KiB).
    """
    # BEGIN SOLUTION
    return 2 * n_layers * n_kv_heads * d_head * bytes_per_elem    # K and V
    # END SOLUTION


def kv_cache_over_weights(n_layers, n_kv_heads, d_head, seq_len, weight_bytes, batch=1,
                          bytes_per_elem=2):
    """How many times the weights the KV cache is (a ``float``): the cache of
    ``batch`` sequences of ``seq_len`` tokens, in bytes, over
    ``weight_bytes`` (bytes, decimal: 16 GB is ``16e9``).  Above 1 the cache
    is bigger than the model.  Llama-3-8B at 128k tokens (``seq_len``
    131072, fp16, 16e9 bytes of weights): 17.18e9 / 16e9, about 1.07.
    """
    # BEGIN SOLUTION
    cache = batch * seq_len * kv_bytes_per_token(n_layers, n_kv_heads, d_head, bytes_per_elem)
    return cache / weight_bytes
    # END SOLUTION


def gqa_bytes_saved(n_layers, n_heads, n_kv_heads, d_head, seq_len=1, batch=1,
                    bytes_per_elem=2):
    """Bytes of KV cache that GQA with ``n_kv_heads`` KV heads saves over MHA
    (one K/V head per query head, ``n_heads``) for ``batch`` sequences of
    ``seq_len`` tokens (an ``int``; ``seq_len=1``: per token).  Llama-3-70B
    in fp16: 2,293,760 bytes per token (MHA's 2,621,440 less GQA's
    327,680), about 300.6 GB per sequence of 131,072 tokens.
    """
    # BEGIN SOLUTION
    per_token = kv_bytes_per_token(n_layers, n_heads - n_kv_heads, d_head, bytes_per_elem)
    return batch * seq_len * per_token
    # END SOLUTION


def attention_ffn_crossover(d_model, d_ff, n_heads, n_kv_heads, d_head):
    """The smallest prompt length ``n`` (an ``int``) at which one layer's
    attention does more FLOPs than its FFN in a causal prefill of ``n``
    tokens.

    * FFN (SwiGLU: gate, up and down matrices of ``d_model * d_ff``
      weights): ``2 * 3 * d_model * d_ff * n``.
    * attention: its projections (``w_q`` and ``w_o`` of ``d_model *
      n_heads * d_head`` weights, ``w_k`` and ``w_v`` of ``d_model *
      n_kv_heads * d_head``), 2 FLOPs per weight per token, plus the core:
      ``4 * d_head`` FLOPs per head for each of the ``n * (n + 1) / 2``
      (query, key) pairs the causal mask keeps.

    Returns the smallest ``n >= 1`` with attention's FLOPs strictly above
    the FFN's.  Llama-3-8B (4096, 14336, 32, 8, 128): 32768, the chapter's
    "below about 30k context the FFN dominates FLOPs".
    """
    # BEGIN SOLUTION
    ffn = 2 * 3 * d_model * d_ff                                         # FLOPs per token
    projections = 2 * d_model * d_head * (2 * n_heads + 2 * n_kv_heads)   # q, o; k, v
    core = 2 * d_head * n_heads               # core FLOPs of a prefill of n: core * n * (n + 1)
    # attention > FFN  <=>  core * (n + 1) > ffn - projections
    return max(1, (ffn - projections) // core)
    # END SOLUTION
