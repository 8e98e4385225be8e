"""Exercise C: grouped-query attention (GQA), in NumPy.

With GQA, ``h`` query heads share ``h_kv`` key/value heads (``h_kv``
divides ``h``): each group of ``h / h_kv`` consecutive query heads reads the
same K and V.  ``h_kv == h`` is ordinary multi-head attention, ``h_kv == 1``
is multi-query attention.  The KV cache shrinks by ``h / h_kv``.

Conventions as in ``ex02_mha`` (weights act as ``y = x @ W.T``; end-aligned
causal mask; rotate-half RoPE on q and k only): ``w_q`` is
``(h*d_head, d)``, ``w_k`` and ``w_v`` are ``(h_kv*d_head, d)``, ``w_o`` is
``(d, h*d_head)``.  You may import your own functions from ``ex02_mha``
(both files sit in the same folder when graded).

Sizes are in bytes, decimal (1 GB = 1e9 bytes).

Run the public tests with ``attn-grade check ex03``.
"""
from __future__ import annotations

import numpy as np

from ex02_mha import attention, causal_mask, merge_heads, rope, split_heads  # noqa: F401


def repeat_kv(x, n_rep):
    """``(B, h_kv, S, d_head)`` -> ``(B, h_kv*n_rep, S, d_head)``.

    Key/value head ``j`` serves query heads ``j*n_rep .. (j+1)*n_rep - 1``,
    so the output's heads read ``0, 0, .., 1, 1, ..`` (each repeated
    ``n_rep`` times in a row), not ``0, 1, .., 0, 1, ..``.

    A new axis after the head axis is broadcast to ``n_rep`` and folded
    into the head axis (the ``repeat_interleave`` order).  Returns a new
    array (not a view of ``x``).
    """
    x = np.asarray(x)
    if int(n_rep) != n_rep or n_rep < 1:
        raise ValueError(f"repeat_kv: n_rep must be a positive integer, got {n_rep}")
    n_rep = int(n_rep)
    b, h_kv, s, d_head = x.shape
    return np.broadcast_to(x[:, :, None], (b, h_kv, n_rep, s, d_head)).reshape(
        b, h_kv * n_rep, s, d_head).copy()


def _check_shapes(x, w_q, w_k, w_v, w_o, n_heads, n_kv_heads):
    """Validate the shapes; returns ``d_head``."""
    if x.ndim != 3:
        raise ValueError(f"grouped_query_attention: x must be (B, S, d), got {x.shape}")
    if n_heads <= 0 or n_kv_heads <= 0 or n_heads % n_kv_heads:
        raise ValueError(f"grouped_query_attention: n_heads={n_heads} is not a multiple of "
                         f"n_kv_heads={n_kv_heads}")
    d = x.shape[-1]
    if w_q.ndim != 2 or w_q.shape[1] != d or w_q.shape[0] % n_heads:
        raise ValueError(f"grouped_query_attention: w_q is {w_q.shape}, expected (h*d_head, {d})")
    d_head = w_q.shape[0] // n_heads
    for name, w, want in (("w_k", w_k, (n_kv_heads * d_head, d)),
                          ("w_v", w_v, (n_kv_heads * d_head, d)),
                          ("w_o", w_o, (d, n_heads * d_head))):
        if w.shape != want:
            raise ValueError(f"grouped_query_attention: {name} is {w.shape}, expected {want}")
    if d_head % 2:
        raise ValueError(f"grouped_query_attention: d_head={d_head} must be even for RoPE")
    return d_head


def grouped_query_attention(x, w_q, w_k, w_v, w_o, n_heads, n_kv_heads, *, causal=True,
                            positions=None, rope_base=10000.0):
    """Grouped-query self-attention of ``x`` ``(B, S, d)`` -> ``(B, S, d)``.

    Equal to ``multi_head_attention`` when ``n_kv_heads == n_heads``.
    Raises ``ValueError`` when ``n_heads % n_kv_heads != 0`` or when a
    weight's shape does not fit ``x``, ``n_heads`` and ``n_kv_heads``.

    K/V are never repeated: the queries are viewed as ``(B, h_kv, group, S,
    d_head)`` (query head ``j*group + r`` is member ``r`` of group ``j``) and
    K/V as ``(B, h_kv, 1, S, d_head)``; ``attention`` broadcasts the group
    axis.  Returns ``x``'s floating dtype.
    """
    x = np.asarray(x)
    if not np.issubdtype(x.dtype, np.floating):
        x = x.astype(np.float64)
    w_q, w_k, w_v, w_o = (np.asarray(w) for w in (w_q, w_k, w_v, w_o))
    d_head = _check_shapes(x, w_q, w_k, w_v, w_o, n_heads, n_kv_heads)
    b, s, d = x.shape
    group = n_heads // n_kv_heads
    positions = np.arange(s) if positions is None else np.asarray(positions)

    # Projections straight into (B, heads, S, d_head): w viewed as (heads, d_head, d).
    q = np.einsum("bsd,hed->bhse", x, w_q.reshape(n_heads, d_head, d))
    k = np.einsum("bsd,hed->bhse", x, w_k.reshape(n_kv_heads, d_head, d))
    v = np.einsum("bsd,hed->bhse", x, w_v.reshape(n_kv_heads, d_head, d))
    q, k = rope(q, positions, rope_base), rope(k, positions, rope_base)

    q = q.reshape(b, n_kv_heads, group, s, d_head)
    mask = causal_mask(s) if causal else None
    o = attention(q, k[:, :, None], v[:, :, None], mask)        # (B, h_kv, group, S, d_head)
    out = np.einsum("bjrse,djre->bsd", o, w_o.reshape(d, n_kv_heads, group, d_head))
    return out.astype(x.dtype, copy=False)


def kv_cache_bytes(n_layers, n_kv_heads, d_head, seq_len, batch=1, bytes_per_elem=2):
    """Bytes of the KV cache: K and V, for every layer, KV head, position and
    sequence of the batch.  Returns an int."""
    return int(2 * n_layers * n_kv_heads * d_head * seq_len * batch * bytes_per_elem)


def kv_cache_saving(n_heads, n_kv_heads):
    """How many times smaller this cache is than multi-head attention's
    (``h`` KV heads) for the same model: a float."""
    return float(n_heads) / float(n_kv_heads)


# Llama-3-70B: 80 layers, 64 query heads, 8 KV heads, d_head 128.
LLAMA3_70B_KV_SAVING = kv_cache_saving(64, 8)  # 8.0


def kv_exceeds_weights_at(n_layers, n_kv_heads, d_head, weight_bytes, bytes_per_elem=2):
    """The smallest context length (batch 1) whose KV cache is strictly
    larger than ``weight_bytes``: an int.

    Example: Llama-3-8B (32 layers, 8 KV heads, ``d_head`` 128, fp16,
    16 GB = 16e9 bytes of weights) gives 122071.

    The cache grows by ``kv_cache_bytes(..., seq_len=1)`` per token, so the
    answer is ``floor(weight_bytes / per_token) + 1`` (strictly larger: a
    cache exactly as large as the weights does not count).
    """
    per_token = kv_cache_bytes(n_layers, n_kv_heads, d_head, 1, 1, bytes_per_elem)
    if per_token <= 0:
        raise ValueError("kv_exceeds_weights_at: the cache per token must be positive")
    n = int(weight_bytes // per_token) + 1
    while n > 1 and kv_cache_bytes(n_layers, n_kv_heads, d_head, n - 1, 1, bytes_per_elem) > weight_bytes:
        n -= 1
    while kv_cache_bytes(n_layers, n_kv_heads, d_head, n, 1, bytes_per_elem) <= weight_bytes:
        n += 1
    return n


def plot_gqa_heads(q, k, path, *, causal=True):
    """The weights from B's own attention (values = the identity, so the output
    is the weights), the queries reshaped by K/V group; masked cells blank."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    q, k = np.asarray(q, dtype=float), np.asarray(k, dtype=float)
    h, s_q, d = q.shape
    h_kv, s_k, _ = k.shape
    n_rep = h // h_kv
    mask = causal_mask(s_q, s_k) if causal else None
    grouped = q.reshape(1, h_kv, n_rep * s_q, d)                    # a group's queries together
    if mask is not None:
        mask = np.tile(mask, (n_rep, 1))                            # (n_rep*S_q, S_k)
    weights = attention(grouped, k[None], np.eye(s_k)[None, None], mask)
    weights = weights.reshape(h, s_q, s_k)
    fig, axes = plt.subplots(h_kv, n_rep, figsize=(3 * n_rep, 3 * h_kv), squeeze=False,
                             layout="constrained")
    for i in range(h):
        ax = axes[i // n_rep, i % n_rep]
        shown = np.ma.masked_array(weights[i], np.isinf(mask[:s_q])) if causal else weights[i]
        ax.imshow(shown, cmap="viridis")
        ax.set(title=f"q{i} / kv{i // n_rep}", xlabel="key", ylabel="query")
    fig.savefig(path)
    plt.close(fig)
