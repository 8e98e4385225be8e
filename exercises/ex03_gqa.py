"""Exercise C: grouped-query attention (GQA), in NumPy.

Usually takes about 1.5 hours.  From the chapters: "Attention from First
Principles", section 5 (MHA, GQA, MQA: the KV cache lever) and hands-on
exercise C; "Attention" (chapter 03), "The serving problem: K and V must be
kept".

With GQA, ``h`` query heads share ``h_kv`` key/value heads (``h_kv``
divides ``h``): each group of ``h / h_kv`` consecutive query heads reads the
same K and V.  ``h_kv == h`` is ordinary multi-head attention, ``h_kv == 1``
is multi-query attention.  The KV cache shrinks by ``h / h_kv``.

Conventions as in ``ex02_mha`` (weights act as ``y = x @ W.T``; end-aligned
causal mask; rotate-half RoPE on q and k only): ``w_q`` is
``(h*d_head, d)``, ``w_k`` and ``w_v`` are ``(h_kv*d_head, d)``, ``w_o`` is
``(d, h*d_head)``.  You may import your own functions from ``ex02_mha``
(both files sit in the same folder when graded).

Accuracy (the course's precision rule): ``grouped_query_attention`` is
compared with a float64 reference to ``atol=2e-4, rtol=2e-3`` whatever the
input's dtype (float32 arithmetic inside is fine), and keeps the input's
dtype; ``repeat_kv`` exactly.

Sizes are in bytes, decimal (1 GB = 1e9 bytes).

Then look at what is shared: ``plot_gqa_heads(q, k, path, *,
causal=True)`` draws every query head's attention weights and marks the
K/V head it reads.  ``q`` ``(h, S_q, d_head)`` and ``k`` ``(h_kv, S_k,
d_head)`` are ONE sequence's queries and keys, split into heads; query head
``i`` reads K/V head ``i // (h / h_kv)``.  The weights are as in
``ex02_mha.plot_attention_heads`` (``softmax(q_i @ k_g^T / sqrt(d_head) +
mask)``, end-aligned causal mask when ``causal``).  The PNG saved at
``path`` has one panel per query head, titled ``"q{i} / kv{g}"`` (the
grader reads the integer after "q" and the one after "kv"), drawing that
head's ``(S_q, S_k)`` weights unchanged (``ax.imshow(w)``: row ``j`` is
query ``j``), x axis labelled "key", y axis "query" (on the leftmost panel
of each row at least).  Lay the panels out one row per K/V head (row ``g``
holds the ``h / h_kv`` query heads that share K/V head ``g``): a row is
what one cached K/V head serves.  Needs matplotlib.

Run the public tests with ``attn-grade check ex03``.
"""
from __future__ import annotations

import numpy as np

from ex02_mha import attention, causal_mask, merge_heads, rope, softmax, split_heads


def repeat_kv(x, n_rep):
    """``(B, h_kv, S, d_head)`` -> ``(B, h_kv*n_rep, S, d_head)``.

    Key/value head ``j`` serves query heads ``j*n_rep .. (j+1)*n_rep - 1``,
    so the output's heads read ``0, 0, .., 1, 1, ..`` (each repeated
    ``n_rep`` times in a row), not ``0, 1, .., 0, 1, ..``.
    """
    raise NotImplementedError("ex03_gqa.repeat_kv: your code here")


def grouped_query_attention(x, w_q, w_k, w_v, w_o, n_heads, n_kv_heads, *, causal=True,
                            positions=None, rope_base=10000.0):
    """Grouped-query self-attention of ``x`` ``(B, S, d)`` -> ``(B, S, d)``.

    Equal to ``multi_head_attention`` when ``n_kv_heads == n_heads``.
    Raises ``ValueError`` when ``n_heads % n_kv_heads != 0`` or when a
    weight's shape does not fit ``x``, ``n_heads`` and ``n_kv_heads``.
    """
    raise NotImplementedError("ex03_gqa.grouped_query_attention: your code here")


def kv_cache_bytes(n_layers, n_kv_heads, d_head, seq_len, batch=1, bytes_per_elem=2):
    """Bytes of the KV cache: K and V, for every layer, KV head, position and
    sequence of the batch.  Returns an int."""
    raise NotImplementedError("ex03_gqa.kv_cache_bytes: your code here")


def kv_cache_saving(n_heads, n_kv_heads):
    """How many times smaller this cache is than multi-head attention's
    (``h`` KV heads) for the same model: a float."""
    raise NotImplementedError("ex03_gqa.kv_cache_saving: your code here")


# Llama-3-70B: 80 layers, 64 query heads, 8 KV heads, d_head 128.
LLAMA3_70B_KV_SAVING = None  # TODO: your answer


def kv_exceeds_weights_at(n_layers, n_kv_heads, d_head, weight_bytes, bytes_per_elem=2):
    """The smallest context length (batch 1) whose KV cache is strictly
    larger than ``weight_bytes``: an int.

    Example: Llama-3-8B (32 layers, 8 KV heads, ``d_head`` 128, fp16,
    16 GB = 16e9 bytes of weights) gives 122071.
    """
    raise NotImplementedError("ex03_gqa.kv_exceeds_weights_at: your code here")


def plot_gqa_heads(q, k, path, *, causal=True):
    """Save one heatmap per query head to ``path`` (PNG), one row per K/V head.

    ``q``: ``(h, S_q, d_head)``, ``k``: ``(h_kv, S_k, d_head)``, one
    sequence; query head ``i`` reads K/V head ``g = i // (h / h_kv)``.
    Panel ``"q{i} / kv{g}"`` draws head ``i``'s weights ``(S_q, S_k)``
    unchanged, x axis "key", y axis "query"; the end-aligned causal mask
    when ``causal``.  Returns nothing.  Without matplotlib: ``ImportError``
    saying how to install it.
    """
    raise NotImplementedError("ex03_gqa.plot_gqa_heads: your code here")
