"""Exercise B: multi-head attention with RoPE, in NumPy.

Build the nine steps of a decoder's attention layer from the chapter:
projections, head split, RoPE on q and k, causal mask, softmax over keys,
weighted sum of values, head merge and output projection.

Conventions (the course's contract):

* Shapes: ``B`` batch, ``S`` sequence length, ``h`` heads, ``d`` model width,
  ``d_head`` head width, ``d == h * d_head`` is not required (only
  ``w_q``'s rows must be ``h * d_head``).
* Weights act as ``y = x @ W.T``: ``w_q``, ``w_k``, ``w_v`` are
  ``(h*d_head, d)`` and ``w_o`` is ``(d, h*d_head)``.
* Causal masks are aligned to the end: with ``S_q`` queries and ``S_k``
  keys, query ``i`` sits at position ``S_k - S_q + i`` and sees keys
  ``0 .. S_k - S_q + i``.
* RoPE is rotate-half: feature ``j`` pairs with ``j + d_head/2`` and turns by
  ``position * base ** (-2j / d_head)``.
* Every function works for float32 and float64 inputs and returns the
  input's floating dtype.

Run the public tests with ``attn-grade check ex02``.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

import numpy as np
import torch

# Implementation notes (my choices where the contract is silent):
#
# * The public functions take and return NumPy arrays; inside, the work is
#   done with torch ops on CPU tensors that share memory with the arrays
#   (``torch.from_numpy``) and the result goes back with ``.numpy()``.
# * Output dtype: the NumPy promotion of the floating inputs that carry data
#   (``q, k, v`` for ``attention``, ``x`` and the weights for
#   ``multi_head_attention``); an additive float64 mask never upcasts a
#   float32 computation's result.  Integer inputs are computed in float64.
# * ``attention`` also accepts a boolean mask (True = may attend), the
#   convention of ``torch.nn.functional.scaled_dot_product_attention``.


# --------------------------------------------------------------------------
# NumPy <-> torch plumbing
# --------------------------------------------------------------------------
def _float_dtype(*arrays) -> np.dtype:
    dt = np.result_type(*[np.asarray(a).dtype for a in arrays])
    return dt if np.issubdtype(dt, np.floating) else np.dtype(np.float64)


def _as_torch(a, dtype=None) -> torch.Tensor:
    """A CPU tensor viewing (or, where it must, copying) the array ``a``."""
    arr = np.asarray(a)
    if dtype is not None:
        arr = arr.astype(dtype, copy=False)
    # from_numpy refuses negative strides and warns on read-only memory.
    if not arr.flags.writeable or any(s < 0 for s in arr.strides):
        arr = np.array(arr, copy=True)
    return torch.from_numpy(arr)


def _as_numpy(t: torch.Tensor, dtype) -> np.ndarray:
    return t.detach().cpu().numpy().astype(dtype, copy=False)


# --------------------------------------------------------------------------
# torch kernels (private; the public functions below wrap them)
# --------------------------------------------------------------------------
def _safe_softmax(x: torch.Tensor, dim: int = -1) -> torch.Tensor:
    """Max-subtracted softmax; a slice that is all -inf gives zeros."""
    m = torch.amax(x, dim=dim, keepdim=True)
    m = torch.where(torch.isfinite(m), m, torch.zeros_like(m))
    e = torch.exp(x - m)
    s = e.sum(dim=dim, keepdim=True)
    return e / torch.where(s > 0, s, torch.ones_like(s))


def _causal_mask_t(s_q: int, s_k: int, dtype=torch.float64) -> torch.Tensor:
    i = torch.arange(s_q).unsqueeze(-1)
    j = torch.arange(s_k).unsqueeze(0)
    allowed = j <= (s_k - s_q) + i
    return torch.zeros(s_q, s_k, dtype=dtype).masked_fill(~allowed, float("-inf"))


@lru_cache(maxsize=64)
def _inv_freq(d_head: int, base: float) -> torch.Tensor:
    """``base ** (-2j / d_head)`` for ``j = 0 .. d_head/2 - 1`` (float64)."""
    j = torch.arange(d_head // 2, dtype=torch.float64)
    return torch.pow(torch.tensor(float(base), dtype=torch.float64), -2.0 * j / d_head)


@dataclass(frozen=True)
class _RoPE:
    """Rotate-half rotary embedding for one head width and base."""

    d_head: int
    base: float = 10000.0

    def __post_init__(self):
        if self.d_head % 2:
            raise ValueError(f"RoPE needs an even d_head, got {self.d_head}")

    def cos_sin(self, positions: torch.Tensor):
        angles = positions.to(torch.float64).unsqueeze(-1) * _inv_freq(self.d_head, float(self.base))
        cos, sin = torch.cos(angles), torch.sin(angles)
        return torch.cat([cos, cos], dim=-1), torch.cat([sin, sin], dim=-1)

    @staticmethod
    def rotate_half(x: torch.Tensor) -> torch.Tensor:
        x1, x2 = x.chunk(2, dim=-1)
        return torch.cat([-x2, x1], dim=-1)

    def __call__(self, x: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        cos, sin = self.cos_sin(positions)
        x64 = x.to(torch.float64)
        return (x64 * cos + self.rotate_half(x64) * sin).to(x.dtype)


def _split_heads_t(x: torch.Tensor, n_heads: int) -> torch.Tensor:
    b, s, width = x.shape
    if n_heads <= 0 or width % n_heads:
        raise ValueError(f"width {width} does not split into {n_heads} heads")
    return x.view(b, s, n_heads, width // n_heads).transpose(1, 2)


def _merge_heads_t(x: torch.Tensor) -> torch.Tensor:
    b, h, s, dh = x.shape
    return x.transpose(1, 2).reshape(b, s, h * dh)


def _attention_t(q, k, v, mask=None) -> torch.Tensor:
    scores = torch.matmul(q, k.transpose(-2, -1)) / math.sqrt(q.shape[-1])
    if mask is not None:
        if mask.dtype == torch.bool:
            scores = scores.masked_fill(~mask, float("-inf"))
        else:
            scores = scores + mask.to(scores.dtype)
    return torch.matmul(_safe_softmax(scores, dim=-1), v)


# --------------------------------------------------------------------------
# Public API (NumPy in, NumPy out)
# --------------------------------------------------------------------------
def softmax(x, axis=-1):
    """Softmax of ``x`` along ``axis``, numerically stable.

    Must stay finite for logits as large as 1e4 (subtract the max first).
    Entries of ``-inf`` get weight 0; a slice that is all ``-inf`` (a query
    that may see no key) gives all zeros, not NaN.
    """
    dt = _float_dtype(x)
    return _as_numpy(_safe_softmax(_as_torch(x, dt), dim=axis), dt)


def causal_mask(s_q, s_k=None):
    """Additive causal mask of shape ``(s_q, s_k)``, aligned to the end.

    0.0 where query ``i`` may see key ``j`` (``j <= s_k - s_q + i``), ``-inf``
    elsewhere.  ``s_k`` defaults to ``s_q`` (the usual lower triangle); with
    ``s_q == 1`` the single query sees every key.  Returns float64.
    """
    s_q = int(s_q)
    s_k = s_q if s_k is None else int(s_k)
    return _causal_mask_t(s_q, s_k).numpy()


def rope(x, positions, base=10000.0):
    """Rotary position embedding (rotate-half convention).

    ``x``: ``(..., S, d_head)``; ``positions``: ``(S,)`` integers (absolute
    positions of the rows).  Feature ``j < d_head/2`` pairs with feature
    ``j + d_head/2``; the pair turns by angle ``positions * base ** (-2j /
    d_head)``:

        out[j]          = x[j] * cos - x[j + d/2] * sin
        out[j + d/2]    = x[j + d/2] * cos + x[j] * sin

    Raises ``ValueError`` when ``d_head`` is odd.  (The angles and the
    rotation are computed in float64; the result has ``x``'s dtype.)
    """
    dt = _float_dtype(x)
    xt = _as_torch(x, dt)
    rot = _RoPE(int(xt.shape[-1]), float(base))
    pos = _as_torch(np.asarray(positions))
    return _as_numpy(rot(xt, pos), dt)


def split_heads(x, n_heads):
    """``(B, S, n_heads*d_head)`` -> ``(B, n_heads, S, d_head)``.

    Head ``i`` takes features ``i*d_head .. (i+1)*d_head - 1``.
    """
    x = np.asarray(x)
    return _as_numpy(_split_heads_t(_as_torch(x), int(n_heads)), x.dtype)


def merge_heads(x):
    """``(B, h, S, d_head)`` -> ``(B, S, h*d_head)``: the inverse of ``split_heads``."""
    x = np.asarray(x)
    return _as_numpy(_merge_heads_t(_as_torch(x)), x.dtype)


def attention(q, k, v, mask=None):
    """Scaled dot-product attention on split heads.

    ``q``: ``(B, h, S_q, d_head)``, ``k`` and ``v``: ``(B, h, S_k, d_head)``;
    ``mask``: additive, broadcastable to ``(B, h, S_q, S_k)`` (``None`` for
    no mask).  Scores are ``q @ k^T / sqrt(d_head)``, softmax runs over keys
    (the last axis).  Returns ``(B, h, S_q, d_head)``.
    """
    dt = _float_dtype(q, k, v)
    qt, kt, vt = (_as_torch(a, dt) for a in (q, k, v))
    mt = None if mask is None else _as_torch(mask)
    return _as_numpy(_attention_t(qt, kt, vt, mt), dt)


@dataclass(frozen=True)
class _Shapes:
    batch: int
    seq: int
    d_model: int
    n_heads: int
    n_kv_heads: int
    d_head: int

    @classmethod
    def check(cls, x, w_q, w_k, w_v, w_o, n_heads, n_kv_heads):
        if x.ndim != 3:
            raise ValueError(f"x must be (B, S, d), got {tuple(x.shape)}")
        b, s, d = x.shape
        if n_heads <= 0 or n_kv_heads <= 0 or n_heads % n_kv_heads:
            raise ValueError(f"n_heads={n_heads} is not a multiple of n_kv_heads={n_kv_heads}")
        if w_q.ndim != 2 or w_q.shape[1] != d or w_q.shape[0] % n_heads:
            raise ValueError(f"w_q {tuple(w_q.shape)} does not fit d={d}, n_heads={n_heads}")
        dh = w_q.shape[0] // n_heads
        for name, w in (("w_k", w_k), ("w_v", w_v)):
            if tuple(w.shape) != (n_kv_heads * dh, d):
                raise ValueError(f"{name} {tuple(w.shape)} should be {(n_kv_heads * dh, d)}")
        if tuple(w_o.shape) != (d, n_heads * dh):
            raise ValueError(f"w_o {tuple(w_o.shape)} should be {(d, n_heads * dh)}")
        return cls(b, s, d, n_heads, n_kv_heads, dh)


def _positions_t(positions, seq: int) -> torch.Tensor:
    if positions is None:
        return torch.arange(seq)
    pos = _as_torch(np.asarray(positions))
    if pos.dim() == 0 or pos.shape[-1] != seq:
        raise ValueError(f"positions has {pos.shape[-1]} entries for {seq} tokens")
    return pos


def multi_head_attention(x, w_q, w_k, w_v, w_o, n_heads, *, causal=True, positions=None,
                         rope_base=10000.0):
    """Multi-head self-attention of ``x`` ``(B, S, d)`` -> ``(B, S, d)``.

    ``positions`` (``(S,)`` ints, default ``arange(S)``) are the tokens'
    absolute positions for RoPE; RoPE goes on q and k, never on v.  With
    ``causal`` the end-aligned causal mask is applied.  ``ValueError`` when
    a weight's shape does not fit ``x`` and ``n_heads``.
    """
    dt = _float_dtype(x, w_q, w_k, w_v, w_o)
    xt, wq, wk, wv, wo = (_as_torch(a, dt) for a in (x, w_q, w_k, w_v, w_o))
    shp = _Shapes.check(xt, wq, wk, wv, wo, int(n_heads), int(n_heads))
    rot = _RoPE(shp.d_head, float(rope_base))
    pos = _positions_t(positions, shp.seq)

    q = _split_heads_t(xt @ wq.T, shp.n_heads)          # 1-2: project, split
    k = _split_heads_t(xt @ wk.T, shp.n_heads)
    v = _split_heads_t(xt @ wv.T, shp.n_heads)
    q, k = rot(q, pos), rot(k, pos)                      # 3: RoPE on q and k
    mask = _causal_mask_t(shp.seq, shp.seq, _torch_dtype(dt)) if causal else None   # 4
    o = _attention_t(q, k, v, mask)                      # 5-7: scores, softmax, sum
    out = _merge_heads_t(o) @ wo.T                       # 8-9: merge, project
    return _as_numpy(out, dt)


def _torch_dtype(dt) -> torch.dtype:
    """The torch dtype of a NumPy dtype."""
    return torch.from_numpy(np.zeros(0, dtype=dt)).dtype


def plot_attention_heads(q, k, path, *, causal=True):
    """Weights in PyTorch, drawn with pyplot's state machine."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    qt, kt = _as_torch(q, np.float64), _as_torch(k, np.float64)
    h, s_q, d_head = qt.shape
    scores = qt @ kt.transpose(-1, -2) / math.sqrt(d_head)
    if causal:
        scores = scores + _causal_mask_t(s_q, kt.shape[1])
    weights = _safe_softmax(scores, dim=-1)
    plt.figure(figsize=(3 * h, 3))
    for i in range(h):
        plt.subplot(1, h, i + 1)
        plt.imshow(weights[i].numpy())
        plt.title(f"head {i}")
        plt.xlabel("key")
        plt.ylabel("query")
    plt.savefig(path)
    plt.close()
