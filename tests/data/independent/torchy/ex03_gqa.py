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
from dataclasses import dataclass
from fractions import Fraction

import numpy as np
import torch

from ex02_mha import attention, causal_mask, merge_heads, rope, split_heads


def _to_torch(a) -> torch.Tensor:
    arr = np.asarray(a)
    if not arr.flags.writeable or any(s < 0 for s in arr.strides):
        arr = np.array(arr, copy=True)
    return torch.from_numpy(arr)


def repeat_kv(x, n_rep):
    """``(B, h_kv, S, d_head)`` -> ``(B, h_kv*n_rep, S, d_head)``.

    Key/value head ``j`` serves query heads ``j*n_rep .. (j+1)*n_rep - 1``,
    so the output's heads read ``0, 0, .., 1, 1, ..`` (each repeated
    ``n_rep`` times in a row), not ``0, 1, .., 0, 1, ..``.
    """
    x = np.asarray(x)
    n_rep = int(n_rep)
    if n_rep < 1:
        raise ValueError(f"n_rep must be >= 1, got {n_rep}")
    if n_rep == 1:
        return x.copy()
    out = torch.repeat_interleave(_to_torch(x), n_rep, dim=1)
    return out.numpy()


@dataclass(frozen=True)
class _GQAConfig:
    """The widths of a GQA layer, read (and checked) from the weights."""

    d_model: int
    n_heads: int
    n_kv_heads: int
    d_head: int

    @property
    def group(self) -> int:
        return self.n_heads // self.n_kv_heads

    @classmethod
    def from_weights(cls, x, w_q, w_k, w_v, w_o, n_heads, n_kv_heads):
        n_heads, n_kv_heads = int(n_heads), int(n_kv_heads)
        if n_heads <= 0 or n_kv_heads <= 0:
            raise ValueError("n_heads and n_kv_heads must be positive")
        if n_heads % n_kv_heads:
            raise ValueError(f"n_heads={n_heads} is not a multiple of n_kv_heads={n_kv_heads}")
        if x.ndim != 3:
            raise ValueError(f"x must be (B, S, d), got shape {x.shape}")
        d = x.shape[-1]
        if w_q.ndim != 2 or w_q.shape[1] != d or w_q.shape[0] % n_heads:
            raise ValueError(f"w_q {w_q.shape} does not fit d={d} and n_heads={n_heads}")
        dh = w_q.shape[0] // n_heads
        for name, w in (("w_k", w_k), ("w_v", w_v)):
            if w.shape != (n_kv_heads * dh, d):
                raise ValueError(f"{name} has shape {w.shape}, expected {(n_kv_heads * dh, d)}")
        if w_o.shape != (d, n_heads * dh):
            raise ValueError(f"w_o has shape {w_o.shape}, expected {(d, n_heads * dh)}")
        return cls(d, n_heads, n_kv_heads, dh)


def grouped_query_attention(x, w_q, w_k, w_v, w_o, n_heads, n_kv_heads, *, causal=True,
                            positions=None, rope_base=10000.0):
    """Grouped-query self-attention of ``x`` ``(B, S, d)`` -> ``(B, S, d)``.

    Equal to ``multi_head_attention`` when ``n_kv_heads == n_heads``.
    Raises ``ValueError`` when ``n_heads % n_kv_heads != 0`` or when a
    weight's shape does not fit ``x``, ``n_heads`` and ``n_kv_heads``.
    """
    x, w_q, w_k, w_v, w_o = (np.asarray(a) for a in (x, w_q, w_k, w_v, w_o))
    cfg = _GQAConfig.from_weights(x, w_q, w_k, w_v, w_o, n_heads, n_kv_heads)
    dt = np.result_type(x, w_q, w_k, w_v, w_o)
    if not np.issubdtype(dt, np.floating):
        dt = np.dtype(np.float64)
    x, w_q, w_k, w_v, w_o = (a.astype(dt, copy=False) for a in (x, w_q, w_k, w_v, w_o))
    seq = x.shape[1]
    pos = np.arange(seq) if positions is None else np.asarray(positions)

    q = rope(split_heads(x @ w_q.T, cfg.n_heads), pos, rope_base)
    k = rope(split_heads(x @ w_k.T, cfg.n_kv_heads), pos, rope_base)
    v = split_heads(x @ w_v.T, cfg.n_kv_heads)
    k, v = repeat_kv(k, cfg.group), repeat_kv(v, cfg.group)
    mask = causal_mask(seq) if causal else None
    out = merge_heads(attention(q, k, v, mask)) @ w_o.T
    return out.astype(dt, copy=False)


def kv_cache_bytes(n_layers, n_kv_heads, d_head, seq_len, batch=1, bytes_per_elem=2):
    """Bytes of the KV cache: K and V, for every layer, KV head, position and
    sequence of the batch.  Returns an int."""
    return int(2 * n_layers * n_kv_heads * d_head * seq_len * batch * bytes_per_elem)


def kv_cache_saving(n_heads, n_kv_heads):
    """How many times smaller this cache is than multi-head attention's
    (``h`` KV heads) for the same model: a float."""
    if n_kv_heads <= 0:
        raise ValueError("n_kv_heads must be positive")
    return float(n_heads) / float(n_kv_heads)


# Llama-3-70B: 80 layers, 64 query heads, 8 KV heads, d_head 128.
LLAMA3_70B_KV_SAVING = kv_cache_saving(64, 8)  # 8.0


def kv_exceeds_weights_at(n_layers, n_kv_heads, d_head, weight_bytes, bytes_per_elem=2):
    """The smallest context length (batch 1) whose KV cache is strictly
    larger than ``weight_bytes``: an int.

    Example: Llama-3-8B (32 layers, 8 KV heads, ``d_head`` 128, fp16,
    16 GB = 16e9 bytes of weights) gives 122071.  (Exact rational
    arithmetic, so a float ``weight_bytes`` such as 16e9 is not rounded.)
    """
    per_token = Fraction(2 * n_layers * n_kv_heads * d_head) * Fraction(bytes_per_elem)
    if per_token <= 0:
        raise ValueError("the cache must grow with the context")
    return int(math.floor(Fraction(weight_bytes) / per_token)) + 1


def plot_gqa_heads(q, k, path, *, causal=True):
    """Weights in PyTorch (K/V repeated with repeat_interleave), drawn with
    pyplot's state machine, one row per K/V head."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    qt = _to_torch(q).to(torch.float64)
    kt = _to_torch(k).to(torch.float64)
    h, s_q, d_head = qt.shape
    h_kv, s_k, _ = kt.shape
    n_rep = h // h_kv
    scores = qt @ kt.repeat_interleave(n_rep, dim=0).transpose(1, 2) / math.sqrt(d_head)
    if causal:
        allowed = torch.ones(s_q, s_k, dtype=torch.bool).tril(s_k - s_q)
        scores = scores.masked_fill(~allowed, float("-inf"))
    weights = torch.nan_to_num(torch.softmax(scores, dim=-1))
    plt.figure(figsize=(3 * n_rep, 3 * h_kv))
    for i in range(h):
        plt.subplot(h_kv, n_rep, i + 1)
        plt.imshow(weights[i].numpy())
        plt.title(f"q{i} / kv{i // n_rep}")
        plt.xlabel("key")
        plt.ylabel("query")
    plt.savefig(path)
    plt.close()
