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
    # BEGIN SOLUTION
    b, h_kv, s, d_head = x.shape
    return np.broadcast_to(x[:, :, None], (b, h_kv, n_rep, s, d_head)).reshape(
        b, h_kv * n_rep, s, d_head)
    # END SOLUTION


def grouped_query_attention(x, w_q, w_k, w_v, w_o, n_heads, n_kv_heads, *, causal=True,
                            positions=None, rope_base=10000.0):
    """Grouped-query self-attention of ``x`` ``(B, S, d)`` -> ``(B, S, d)``.

    Equal to ``multi_head_attention`` when ``n_kv_heads == n_heads``.
    Raises ``ValueError`` when ``n_heads % n_kv_heads != 0`` or when a
    weight's shape does not fit ``x``, ``n_heads`` and ``n_kv_heads``.
    """
    # BEGIN SOLUTION
    b, s, d = x.shape
    if n_kv_heads < 1 or n_heads % n_kv_heads:
        raise ValueError(f"n_heads={n_heads} is not a multiple of n_kv_heads={n_kv_heads}")
    if w_q.ndim != 2 or w_q.shape[1] != d or w_q.shape[0] % n_heads:
        raise ValueError(f"w_q has shape {w_q.shape}; expected (n_heads*d_head, {d})")
    d_head = w_q.shape[0] // n_heads
    for name, w in (("w_k", w_k), ("w_v", w_v)):
        if w.shape != (n_kv_heads * d_head, d):
            raise ValueError(f"{name} has shape {w.shape}; expected "
                             f"({n_kv_heads * d_head}, {d})")
    if w_o.shape != (d, n_heads * d_head):
        raise ValueError(f"w_o has shape {w_o.shape}; expected ({d}, {n_heads * d_head})")
    positions = np.arange(s) if positions is None else np.asarray(positions)
    q = split_heads(x @ w_q.T, n_heads)                 # (B, h, S, d_head)
    k = split_heads(x @ w_k.T, n_kv_heads)              # (B, h_kv, S, d_head)
    v = split_heads(x @ w_v.T, n_kv_heads)
    q, k = rope(q, positions, rope_base), rope(k, positions, rope_base)
    n_rep = n_heads // n_kv_heads
    k, v = repeat_kv(k, n_rep), repeat_kv(v, n_rep)     # (B, h, S, d_head)
    mask = causal_mask(s).astype(x.dtype) if causal else None
    return merge_heads(attention(q, k, v, mask)) @ w_o.T
    # END SOLUTION


def kv_cache_bytes(n_layers, n_kv_heads, d_head, seq_len, batch=1, bytes_per_elem=2):
    """Bytes of the KV cache: K and V, for every layer, KV head, position and
    sequence of the batch.  Returns an int."""
    # BEGIN SOLUTION
    return 2 * n_layers * n_kv_heads * d_head * seq_len * batch * bytes_per_elem
    # END SOLUTION


def kv_cache_saving(n_heads, n_kv_heads):
    """How many times smaller this cache is than multi-head attention's
    (``h`` KV heads) for the same model: a float."""
    # BEGIN SOLUTION
    return n_heads / n_kv_heads
    # END SOLUTION


# Llama-3-70B: 80 layers, 64 query heads, 8 KV heads, d_head 128.
# BEGIN SOLUTION
LLAMA3_70B_KV_SAVING = 64 / 8
# END SOLUTION


def kv_exceeds_weights_at(n_layers, n_kv_heads, d_head, weight_bytes, bytes_per_elem=2):
    """The smallest context length (batch 1) whose KV cache is strictly
    larger than ``weight_bytes``: an int.

    Example: Llama-3-8B (32 layers, 8 KV heads, ``d_head`` 128, fp16,
    16 GB = 16e9 bytes of weights) gives 122071.
    """
    # BEGIN SOLUTION
    per_token = kv_cache_bytes(n_layers, n_kv_heads, d_head, 1, 1, bytes_per_elem)
    return int(weight_bytes // per_token) + 1
    # END SOLUTION


def plot_gqa_heads(q, k, path, *, causal=True):
    """Save one heatmap per query head to ``path`` (PNG), one row per K/V head.

    ``q``: ``(h, S_q, d_head)``, ``k``: ``(h_kv, S_k, d_head)``, one
    sequence; query head ``i`` reads K/V head ``g = i // (h / h_kv)``.
    Panel ``"q{i} / kv{g}"`` draws head ``i``'s weights ``(S_q, S_k)``
    unchanged, x axis "key", y axis "query"; the end-aligned causal mask
    when ``causal``.  Returns nothing.  Without matplotlib: ``ImportError``
    saying how to install it.
    """
    # BEGIN SOLUTION
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as exc:
        raise ImportError("plot_gqa_heads needs matplotlib: pip install matplotlib") from exc
    q, k = np.asarray(q, dtype=np.float64), np.asarray(k, dtype=np.float64)
    h, s_q, d_head = q.shape
    h_kv, s_k, _ = k.shape
    n_rep = h // h_kv
    fig, axes = plt.subplots(h_kv, n_rep, figsize=(2.8 * n_rep, 2.8 * h_kv), squeeze=False,
                             layout="constrained")
    for i in range(h):
        g = i // n_rep                                   # the K/V head query head i reads
        logits = q[i] @ k[g].T / np.sqrt(d_head)         # (S_q, S_k)
        if causal:
            logits = logits + causal_mask(s_q, s_k)
        ax = axes[g, i % n_rep]                          # row g: the heads sharing kv g
        image = ax.imshow(softmax(logits, axis=-1), vmin=0.0, vmax=1.0, cmap="viridis")
        ax.set_title(f"q{i} / kv{g}")
        ax.set_xlabel("key")
        ax.set_ylabel("query")
    fig.colorbar(image, ax=axes.ravel().tolist(), label="weight")
    fig.savefig(path)
    plt.close(fig)
    # END SOLUTION
