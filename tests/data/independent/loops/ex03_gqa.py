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

import math

import numpy as np

from ex02_mha import attention, causal_mask, merge_heads, rope, split_heads


def repeat_kv(x, n_rep):
    """``(B, h_kv, S, d_head)`` -> ``(B, h_kv*n_rep, S, d_head)``.

    Key/value head ``j`` serves query heads ``j*n_rep .. (j+1)*n_rep - 1``,
    so the output's heads read ``0, 0, .., 1, 1, ..`` (each repeated
    ``n_rep`` times in a row), not ``0, 1, .., 0, 1, ..``.
    """
    x = np.asarray(x)
    if x.ndim != 4:
        raise ValueError("repeat_kv: x must be (B, h_kv, S, d_head)")
    n_rep = int(n_rep)
    if n_rep < 1:
        raise ValueError("repeat_kv: n_rep must be at least 1")
    batch, n_kv_heads, seq_len, d_head = x.shape
    out = np.zeros((batch, n_kv_heads * n_rep, seq_len, d_head), dtype=x.dtype)
    for j in range(n_kv_heads):
        for r in range(n_rep):
            out[:, j * n_rep + r] = x[:, j]
    return out


def _project(x, w):
    """``x @ w.T`` batch element by batch element (float64)."""
    out = np.zeros((x.shape[0], x.shape[1], w.shape[0]), dtype=np.float64)
    for b in range(x.shape[0]):
        out[b] = x[b] @ w.T
    return out


def grouped_query_attention(x, w_q, w_k, w_v, w_o, n_heads, n_kv_heads, *, causal=True,
                            positions=None, rope_base=10000.0):
    """Grouped-query self-attention of ``x`` ``(B, S, d)`` -> ``(B, S, d)``.

    Equal to ``multi_head_attention`` when ``n_kv_heads == n_heads``.
    Raises ``ValueError`` when ``n_heads % n_kv_heads != 0`` or when a
    weight's shape does not fit ``x``, ``n_heads`` and ``n_kv_heads``.

    K/V are never repeated: a loop over the query heads sends query head
    ``i`` to K/V head ``i // (n_heads // n_kv_heads)``.
    """
    x = np.asarray(x)
    w_q = np.asarray(w_q)
    w_k = np.asarray(w_k)
    w_v = np.asarray(w_v)
    w_o = np.asarray(w_o)
    out_dtype = x.dtype if np.issubdtype(x.dtype, np.floating) else np.dtype(np.float64)
    if x.ndim != 3:
        raise ValueError("grouped_query_attention: x must be (B, S, d)")
    batch, seq_len, d_model = x.shape
    if n_heads <= 0 or n_kv_heads <= 0:
        raise ValueError("grouped_query_attention: head counts must be positive")
    if n_heads % n_kv_heads != 0:
        raise ValueError(f"grouped_query_attention: {n_heads} heads are not a multiple of "
                         f"{n_kv_heads} KV heads")
    if w_q.ndim != 2 or w_q.shape[0] % n_heads != 0:
        raise ValueError("grouped_query_attention: w_q must be (n_heads*d_head, d)")
    d_head = w_q.shape[0] // n_heads
    if w_q.shape != (n_heads * d_head, d_model):
        raise ValueError(f"grouped_query_attention: w_q is {w_q.shape}, "
                         f"expected {(n_heads * d_head, d_model)}")
    kv_shape = (n_kv_heads * d_head, d_model)
    if w_k.shape != kv_shape or w_v.shape != kv_shape:
        raise ValueError(f"grouped_query_attention: w_k and w_v must be {kv_shape}, "
                         f"got {w_k.shape} and {w_v.shape}")
    if w_o.shape != (d_model, n_heads * d_head):
        raise ValueError(f"grouped_query_attention: w_o is {w_o.shape}, "
                         f"expected {(d_model, n_heads * d_head)}")
    if positions is None:
        positions = np.arange(seq_len)
    group = n_heads // n_kv_heads

    x64 = x.astype(np.float64)
    q = split_heads(_project(x64, w_q.astype(np.float64)), n_heads)      # (B, h, S, dh)
    k = split_heads(_project(x64, w_k.astype(np.float64)), n_kv_heads)   # (B, h_kv, S, dh)
    v = split_heads(_project(x64, w_v.astype(np.float64)), n_kv_heads)
    q = rope(q, positions, rope_base)
    k = rope(k, positions, rope_base)
    mask = causal_mask(seq_len, seq_len) if causal else None

    heads = np.zeros((batch, n_heads, seq_len, d_head), dtype=np.float64)
    for b in range(batch):
        for head in range(n_heads):
            kv_head = head // group
            heads[b:b + 1, head:head + 1] = attention(q[b:b + 1, head:head + 1],
                                                      k[b:b + 1, kv_head:kv_head + 1],
                                                      v[b:b + 1, kv_head:kv_head + 1],
                                                      mask)
    merged = merge_heads(heads)
    out = _project(merged, w_o.astype(np.float64))
    return out.astype(out_dtype)


def kv_cache_bytes(n_layers, n_kv_heads, d_head, seq_len, batch=1, bytes_per_elem=2):
    """Bytes of the KV cache: K and V, for every layer, KV head, position and
    sequence of the batch.  Returns an int."""
    k_and_v = 2
    return int(k_and_v * n_layers * n_kv_heads * d_head * seq_len * batch * bytes_per_elem)


def kv_cache_saving(n_heads, n_kv_heads):
    """How many times smaller this cache is than multi-head attention's
    (``h`` KV heads) for the same model: a float."""
    return float(n_heads) / float(n_kv_heads)


# Llama-3-70B: 80 layers, 64 query heads, 8 KV heads, d_head 128.
# MHA would cache 64 K/V heads per layer, GQA caches 8: 64 / 8 = 8 times less.
LLAMA3_70B_KV_SAVING = 64.0 / 8.0


def kv_exceeds_weights_at(n_layers, n_kv_heads, d_head, weight_bytes, bytes_per_elem=2):
    """The smallest context length (batch 1) whose KV cache is strictly
    larger than ``weight_bytes``: an int.

    Example: Llama-3-8B (32 layers, 8 KV heads, ``d_head`` 128, fp16,
    16 GB = 16e9 bytes of weights) gives 122071.
    """
    per_token = kv_cache_bytes(n_layers, n_kv_heads, d_head, 1, 1, bytes_per_elem)
    if per_token <= 0:
        raise ValueError("kv_exceeds_weights_at: the cache must grow with the context")
    if isinstance(weight_bytes, float) and weight_bytes.is_integer():
        weight_bytes = int(weight_bytes)
    if isinstance(weight_bytes, int) and isinstance(per_token, int):
        # seq_len * per_token > weight_bytes  <=>  seq_len > weight_bytes / per_token
        seq_len = weight_bytes // per_token + 1
    else:
        seq_len = math.floor(weight_bytes / per_token) + 1
    if seq_len < 0:
        seq_len = 0
    return int(seq_len)


def plot_gqa_heads(q, k, path, *, causal=True):
    """Every weight by explicit loops; one row of panels per K/V head."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    h, s_q, d_head = len(q), len(q[0]), len(q[0][0])
    h_kv, s_k = len(k), len(k[0])
    n_rep = h // h_kv
    fig, axes = plt.subplots(h_kv, n_rep, figsize=(3 * n_rep, 3 * h_kv), squeeze=False)
    for head in range(h):
        kv = head // n_rep
        weights = []
        for i in range(s_q):
            scores = []
            for j in range(s_k):
                if causal and j > s_k - s_q + i:
                    scores.append(None)
                    continue
                dot = 0.0
                for f in range(d_head):
                    dot += float(q[head][i][f]) * float(k[kv][j][f])
                scores.append(dot / math.sqrt(d_head))
            seen = [x for x in scores if x is not None]
            top = max(seen) if seen else 0.0
            exps = [0.0 if x is None else math.exp(x - top) for x in scores]
            total = sum(exps)
            weights.append([e / total if total > 0 else 0.0 for e in exps])
        ax = axes[kv][head % n_rep]
        ax.imshow(weights)
        ax.set_title("q" + str(head) + " / kv" + str(kv))
        ax.set_xlabel("key")
        ax.set_ylabel("query")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
