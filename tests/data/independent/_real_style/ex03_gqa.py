"""ex03_gqa with Hugging Face's repeat_kv (expand, then reshape) over the
Llama-numerics ex02 beside it (a real-style submission for the grader's own
tests)."""
from __future__ import annotations

import numpy as np

from ex02_mha import attention, causal_mask, merge_heads, rope, softmax, split_heads


def repeat_kv(x, n_rep):
    """``(B, h_kv, S, d_head)`` -> ``(B, h_kv*n_rep, S, d_head)``.

    Key/value head ``j`` serves query heads ``j*n_rep .. (j+1)*n_rep - 1``,
    so the output's heads read ``0, 0, .., 1, 1, ..`` (each repeated
    ``n_rep`` times in a row), not ``0, 1, .., 0, 1, ..``.
    """
    b, h_kv, s, d_head = x.shape
    return np.broadcast_to(x[:, :, None], (b, h_kv, n_rep, s, d_head)).reshape(
        b, h_kv * n_rep, s, d_head)


def grouped_query_attention(x, w_q, w_k, w_v, w_o, n_heads, n_kv_heads, *, causal=True,
                            positions=None, rope_base=10000.0):
    """Grouped-query self-attention of ``x`` ``(B, S, d)`` -> ``(B, S, d)``.

    Equal to ``multi_head_attention`` when ``n_kv_heads == n_heads``.
    Raises ``ValueError`` when ``n_heads % n_kv_heads != 0`` or when a
    weight's shape does not fit ``x``, ``n_heads`` and ``n_kv_heads``.
    """
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


def kv_cache_bytes(n_layers, n_kv_heads, d_head, seq_len, batch=1, bytes_per_elem=2):
    """Bytes of the KV cache: K and V, for every layer, KV head, position and
    sequence of the batch.  Returns an int."""
    return 2 * n_layers * n_kv_heads * d_head * seq_len * batch * bytes_per_elem


def kv_cache_saving(n_heads, n_kv_heads):
    """How many times smaller this cache is than multi-head attention's
    (``h`` KV heads) for the same model: a float."""
    return n_heads / n_kv_heads


# Llama-3-70B: 80 layers, 64 query heads, 8 KV heads, d_head 128.
LLAMA3_70B_KV_SAVING = 64 / 8


def kv_exceeds_weights_at(n_layers, n_kv_heads, d_head, weight_bytes, bytes_per_elem=2):
    """The smallest context length (batch 1) whose KV cache is strictly
    larger than ``weight_bytes``: an int.

    Example: Llama-3-8B (32 layers, 8 KV heads, ``d_head`` 128, fp16,
    16 GB = 16e9 bytes of weights) gives 122071.
    """
    per_token = kv_cache_bytes(n_layers, n_kv_heads, d_head, 1, 1, bytes_per_elem)
    return int(weight_bytes // per_token) + 1


def plot_gqa_heads(q, k, path, *, causal=True):
    """Save one heatmap per query head to ``path`` (PNG), one row per K/V head.

    ``q``: ``(h, S_q, d_head)``, ``k``: ``(h_kv, S_k, d_head)``, one
    sequence; query head ``i`` reads K/V head ``g = i // (h / h_kv)``.
    Panel ``"q{i} / kv{g}"`` draws head ``i``'s weights ``(S_q, S_k)``
    unchanged, x axis "key", y axis "query"; the end-aligned causal mask
    when ``causal``.  Returns nothing.  Without matplotlib: ``ImportError``
    saying how to install it.
    """
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
