"""Exercise H: multi-head latent attention (MLA), in PyTorch.

Exercises C and F shrank the KV cache by sharing K/V heads between query
heads.  DeepSeek-V2/V3 go further: per token and layer they cache ONE
compressed vector, the latent ``c_kv`` (width ``d_c``), from which every
head's key and value can be rebuilt with an up-projection, plus ONE small
RoPE key ``k_rope`` (width ``d_rope``) shared by all heads.

What is cached, and why it is enough
------------------------------------
For head ``i`` (weights act as ``y = x @ W.T``; ``W_uk_i`` is rows
``i*d_nope .. (i+1)*d_nope - 1`` of ``w_uk``, a ``(d_nope, d_c)`` block;
``W_uv_i`` likewise a ``(d_v, d_c)`` block of ``w_uv``)::

    c_j       = W_dkv x_j                      (d_c,)    cached
    k_rope_j  = RoPE(W_kr x_j, p_j)            (d_rope,) cached, shared by all heads
    k_i,j     = [W_uk_i c_j ; k_rope_j]        (d_nope + d_rope,)  rebuilt
    v_i,j     = W_uv_i c_j                     (d_v,)              rebuilt
    q_i       = [q_nope_i ; RoPE(q_rope_i, p)] from w_q: per head, the first
                d_nope features plain, the last d_rope rotated

Scores are scaled by ``1/sqrt(d_nope + d_rope)``, the width of the
dot product of the explicit form (not ``d_c``, not ``d_nope``).

Absorbing the up-projections (the trick that makes decode cheap)
----------------------------------------------------------------
The non-rotary part of a score is a dot product, so ``W_uk_i`` can move to
the query side::

    q_nope_i . (W_uk_i c_j) = (W_uk_i^T q_nope_i) . c_j = q_lat_i . c_j

``q_lat_i = q_nope_i @ W_uk_i`` has width ``d_c``: computed once per step,
it meets the cached latent directly.  Likewise for the values::

    sum_j a_ij (W_uv_i c_j) = W_uv_i (sum_j a_ij c_j)

so the weighted sum runs over ``c_kv`` (width ``d_c``) and ``W_uv_i`` is
applied once, afterwards.  No head ever rebuilds K or V for the cached
tokens: all ``h`` heads read the SAME cache, so a byte read serves ``h``
heads.  That is why MLA decode reaches a GPU's ridge point, where GQA decode
(exercise F) stays at the group size ``h / h_kv``.

Why RoPE cannot go on the latent
--------------------------------
RoPE rotates by a matrix ``R(p)`` that depends on the token's position.  If
the latent were rotated, the key would be ``W_uk_i R(p_j) c_j``, and::

    q_nope_i . (W_uk_i R(p_j) c_j) = (R(p_j)^T W_uk_i^T q_nope_i) . c_j

needs a different absorbed query for every cached token ``j``: as much work
as rebuilding the keys, so nothing is saved.  (The rotation would also turn
latent features, not pairs of the head's features, so q . k would no longer
depend on relative positions only.)  So the position goes into a separate,
small key ``k_rope`` (``d_rope`` features, rotated before caching) and a
matching part of each query, and the latent stays position-free.

DeepSeek-V3's numbers
---------------------
61 layers, 128 heads, ``d_c = 512``, ``d_rope = 64``, ``d_nope = 128``,
``d_v = 128``.  Per token and layer the cache holds ``512 + 64 = 576``
values: ``61 * 576 * 2 = 70272`` bytes per token in bf16, where MHA with
the same heads would cache ``128 * (128 + 64 + 128) = 40960`` values per
layer, 71.1 times more.

Shapes: ``x`` ``(B, S, d)``; ``w_dkv`` ``(d_c, d)``; ``w_kr`` ``(d_rope, d)``;
``w_uk`` ``(h*d_nope, d_c)``; ``w_uv`` ``(h*d_v, d_c)``;
``w_q`` ``(h*(d_nope+d_rope), d)``; ``w_o`` ``(d, h*d_v)``.  Widths are read
from the weights' shapes and ``n_heads``.  RoPE is rotate-half (feature
``j`` pairs with ``j + d_rope/2``, angle ``position * base ** (-2j /
d_rope)``), on the ``d_rope`` parts only.  Inputs are float32 or float64
tensors; outputs keep the input's dtype.

Decisions where the course's contract is silent (the grader follows them):

* A weight whose shape does not fit (or ``d_rope`` odd) raises ``ValueError``.
* ``mla_decode``'s ``position`` only sets the new query's RoPE angle: the one
  decode query sees the whole cache it is given (end-aligned mask), whatever
  positions the cached tokens had.
* ``mla_cache_saving`` and the byte formulas count K and V (or the latent and
  the RoPE key) at the same ``bytes_per_elem``; the saving is a plain float.

The grader runs your ``mla_decode`` under an operation trace (as in
exercise F): no tensor may hold a vector per head and cached token (a
rebuilt K or V, or the latent copied per head), and what one more cached
token costs is counted (FLOPs of its matrix multiplies, bytes its operations
read) and set beside ``mla_decode_intensity``, with the gap explained.

Run the public tests with ``attn-grade check ex08``.
"""
from __future__ import annotations

import math
import numbers
import operator
from dataclasses import dataclass
from typing import Any, Optional, Tuple

import torch

__all__ = [
    "mla_cache",
    "mla_attention",
    "mla_decode",
    "mla_cache_bytes",
    "mla_cache_saving",
    "mla_decode_intensity",
    "DEEPSEEK_V3_MLA_BYTES_PER_TOKEN",
    "DEEPSEEK_V3_MHA_OVER_MLA",
]


# --------------------------------------------------------------------------
# Helpers: validation, widths, RoPE
# --------------------------------------------------------------------------


def _as_int(value: Any, name: str, minimum: int = 1) -> int:
    """``value`` as an int >= ``minimum`` (no bools, no floats), else ``ValueError``."""
    if isinstance(value, bool):
        raise ValueError(f"{name} must be an integer, got a bool")
    if isinstance(value, torch.Tensor):
        if value.numel() != 1 or value.dtype.is_floating_point or value.dtype == torch.bool:
            raise ValueError(f"{name} must be an integer, got a tensor {value!r}")
        value = int(value.item())
    try:
        out = operator.index(value)
    except TypeError:
        raise ValueError(f"{name} must be an integer, got {type(value).__name__} ({value!r})") from None
    if out < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {out}")
    return int(out)


def _as_positive_real(value: Any, name: str) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not math.isfinite(float(value)) \
            or value <= 0:
        raise ValueError(f"{name} must be a positive, finite number, got {value!r}")
    return value


def _check_tensor(t: Any, name: str, ndim: int) -> torch.Tensor:
    if not isinstance(t, torch.Tensor):
        raise ValueError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
    if t.ndim != ndim:
        raise ValueError(f"{name} must be {ndim}-D, got shape {tuple(t.shape)}")
    if not t.dtype.is_floating_point:
        raise ValueError(f"{name} must be a floating tensor, got {t.dtype}")
    return t


def _check_same(ref: torch.Tensor, ref_name: str, **tensors: torch.Tensor) -> None:
    """All tensors on ``ref``'s device and of its dtype."""
    for name, t in tensors.items():
        if t.device != ref.device:
            raise ValueError(f"{name} is on {t.device}, {ref_name} on {ref.device}")
        if t.dtype != ref.dtype:
            raise ValueError(f"{name} has dtype {t.dtype}, {ref_name} has {ref.dtype}")


@dataclass(frozen=True)
class _MLAWidths:
    """The widths of an MLA layer, read from its weights' shapes."""

    n_heads: int
    d_model: int
    d_c: int
    d_rope: int
    d_nope: int
    d_v: int

    @property
    def d_qk(self) -> int:
        """Width of one head's query/key dot product (what the scores are scaled by)."""
        return self.d_nope + self.d_rope


def _per_head_width(w: torch.Tensor, n_heads: int, name: str, cols: int, cols_name: str) -> int:
    if w.shape[1] != cols:
        raise ValueError(f"{name} must have {cols} columns ({cols_name}), got shape {tuple(w.shape)}")
    if w.shape[0] == 0 or w.shape[0] % n_heads != 0:
        raise ValueError(f"{name}'s rows ({w.shape[0]}) must be a positive multiple of n_heads ({n_heads})")
    return w.shape[0] // n_heads


def _check_rope_width(d_rope: int) -> None:
    if d_rope <= 0 or d_rope % 2 != 0:
        raise ValueError(f"d_rope must be even and positive (RoPE rotates pairs), got {d_rope}")


def _decode_widths(n_heads: int, d_model: int, d_c: int, d_rope: int, w_q: torch.Tensor,
                   w_uk: torch.Tensor, w_uv: torch.Tensor, w_o: torch.Tensor) -> _MLAWidths:
    """Check the query/up/output weights against the latent and RoPE widths."""
    _check_rope_width(d_rope)
    d_nope = _per_head_width(w_uk, n_heads, "w_uk", d_c, "d_c")
    d_v = _per_head_width(w_uv, n_heads, "w_uv", d_c, "d_c")
    expected_q = (n_heads * (d_nope + d_rope), d_model)
    if tuple(w_q.shape) != expected_q:
        raise ValueError(f"w_q must have shape (n_heads*(d_nope+d_rope), d) = {expected_q}, got {tuple(w_q.shape)}")
    expected_o = (d_model, n_heads * d_v)
    if tuple(w_o.shape) != expected_o:
        raise ValueError(f"w_o must have shape (d, n_heads*d_v) = {expected_o}, got {tuple(w_o.shape)}")
    return _MLAWidths(n_heads, d_model, d_c, d_rope, d_nope, d_v)


def _positions(positions: Any, seq_len: int, device: torch.device) -> torch.Tensor:
    """``positions`` as a 1-D tensor of ``seq_len`` entries (default ``0..S-1``)."""
    if positions is None:
        return torch.arange(seq_len, device=device)
    pos = torch.as_tensor(positions, device=device)
    if pos.dtype == torch.bool or pos.is_complex():
        raise ValueError(f"positions must be integers, got dtype {pos.dtype}")
    if pos.ndim != 1 or pos.shape[0] != seq_len:
        raise ValueError(f"positions must have shape ({seq_len},), got {tuple(pos.shape)}")
    if pos.dtype.is_floating_point and not bool(torch.isfinite(pos).all()):
        raise ValueError("positions must be finite")
    return pos


def _rope(x: torch.Tensor, positions: torch.Tensor, base: float) -> torch.Tensor:
    """Rotate-half RoPE of ``x`` ``(..., S, d)`` at ``positions`` ``(S,)``.

    Feature ``j`` pairs with ``j + d/2`` and turns by ``p * base ** (-2j/d)``;
    angles in float64, the rotation in ``x``'s dtype.
    """
    d = x.shape[-1]
    _check_rope_width(d)
    half = d // 2
    inv_freq = float(base) ** (-(2.0 * torch.arange(half, dtype=torch.float64, device=x.device)) / d)
    angles = positions.to(device=x.device, dtype=torch.float64).unsqueeze(-1) * inv_freq   # (S, d/2)
    cos = torch.cos(angles).to(x.dtype)
    sin = torch.sin(angles).to(x.dtype)
    x1, x2 = x[..., :half], x[..., half:]
    return torch.cat((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1)


# --------------------------------------------------------------------------
# Public functions
# --------------------------------------------------------------------------


def mla_cache(x, w_dkv, w_kr, *, positions=None, rope_base=10000.0):
    """What MLA caches for the tokens ``x`` ``(B, S, d)``.

    Returns ``(c_kv, k_rope)``: the latent ``x @ w_dkv.T`` ``(B, S, d_c)``
    and the shared RoPE key ``x @ w_kr.T`` ``(B, S, d_rope)``, already
    rotated at each token's position (``positions`` ``(S,)`` integers,
    default ``0 .. S-1``).  The latent is NOT rotated.  ``ValueError`` for an
    odd ``d_rope``.

    Also ``ValueError`` when ``x`` is not 3-D or a weight does not have
    ``d`` columns, or dtypes/devices differ.
    """
    _check_tensor(x, "x", 3)
    _check_tensor(w_dkv, "w_dkv", 2)
    _check_tensor(w_kr, "w_kr", 2)
    _check_same(x, "x", w_dkv=w_dkv, w_kr=w_kr)
    base = _as_positive_real(rope_base, "rope_base")
    b, s, d = x.shape
    if s == 0 or d == 0:
        raise ValueError(f"x must have positive S and d, got shape {tuple(x.shape)}")
    if w_dkv.shape[1] != d or w_dkv.shape[0] == 0:
        raise ValueError(f"w_dkv must have shape (d_c, d) with d = {d}, got {tuple(w_dkv.shape)}")
    if w_kr.shape[1] != d:
        raise ValueError(f"w_kr must have shape (d_rope, d) with d = {d}, got {tuple(w_kr.shape)}")
    _check_rope_width(w_kr.shape[0])
    pos = _positions(positions, s, x.device)
    c_kv = x @ w_dkv.T                         # (B, S, d_c): position-free
    k_rope = _rope(x @ w_kr.T, pos, base)      # (B, S, d_rope): rotated before caching
    return c_kv, k_rope


def mla_attention(x, w_q, w_dkv, w_uk, w_uv, w_kr, w_o, n_heads, *, causal=True,
                  positions=None, rope_base=10000.0):
    """MLA in its explicit form: rebuild every head's K and V, then attend.

    1. ``c_kv, k_rope = mla_cache(x, ...)``.
    2. Per head ``i``: ``K_i = [c_kv @ W_uk_i.T ; k_rope]`` ``(B, S, d_nope +
       d_rope)`` (the same ``k_rope`` for every head), ``V_i = c_kv @
       W_uv_i.T`` ``(B, S, d_v)``.  Batched: ``(B, h, S, ...)``.
    3. Queries from ``w_q``: per head ``d_nope`` plain features, then
       ``d_rope`` features rotated at their positions.
    4. Scores ``q . k / sqrt(d_nope + d_rope)``, end-aligned causal mask
       when ``causal``, softmax over keys, weighted sum of ``V``
       ``(B, h, S, d_v)``, heads merged ``(B, S, h*d_v)``, then ``@ w_o.T``.

    Returns ``(B, S, d)`` in ``x``'s dtype.  ``ValueError`` when a weight's
    shape does not fit ``n_heads`` and the others.
    """
    _check_tensor(x, "x", 3)
    for name, w in (("w_q", w_q), ("w_dkv", w_dkv), ("w_uk", w_uk), ("w_uv", w_uv),
                    ("w_kr", w_kr), ("w_o", w_o)):
        _check_tensor(w, name, 2)
    _check_same(x, "x", w_q=w_q, w_dkv=w_dkv, w_uk=w_uk, w_uv=w_uv, w_kr=w_kr, w_o=w_o)
    n_heads = _as_int(n_heads, "n_heads")
    base = _as_positive_real(rope_base, "rope_base")
    b, s, d = x.shape
    if w_dkv.shape[1] != d or w_dkv.shape[0] == 0:
        raise ValueError(f"w_dkv must have shape (d_c, d) with d = {d}, got {tuple(w_dkv.shape)}")
    if w_kr.shape[1] != d:
        raise ValueError(f"w_kr must have shape (d_rope, d) with d = {d}, got {tuple(w_kr.shape)}")
    dims = _decode_widths(n_heads, d, w_dkv.shape[0], w_kr.shape[0], w_q, w_uk, w_uv, w_o)
    h, d_nope, d_rope, d_v = dims.n_heads, dims.d_nope, dims.d_rope, dims.d_v
    pos = _positions(positions, s, x.device)

    # 1. the cache
    c_kv, k_rope = mla_cache(x, w_dkv, w_kr, positions=pos, rope_base=base)
    # 2. rebuilt per-head keys and values (the explicit form does this on purpose)
    k_nope = (c_kv @ w_uk.T).view(b, s, h, d_nope).transpose(1, 2)            # (B, h, S, d_nope)
    k_rope_h = k_rope.unsqueeze(1).expand(b, h, s, d_rope)                    # one key, all heads
    k = torch.cat((k_nope, k_rope_h), dim=-1)                                 # (B, h, S, d_qk)
    v = (c_kv @ w_uv.T).view(b, s, h, d_v).transpose(1, 2)                    # (B, h, S, d_v)
    # 3. queries: per head d_nope plain features, then d_rope rotated ones
    q = (x @ w_q.T).view(b, s, h, dims.d_qk).transpose(1, 2)                  # (B, h, S, d_qk)
    q = torch.cat((q[..., :d_nope], _rope(q[..., d_nope:], pos, base)), dim=-1)
    # 4. attend
    scores = torch.matmul(q, k.transpose(-1, -2)) * (1.0 / math.sqrt(dims.d_qk))  # (B, h, S, S)
    if causal:
        hidden = torch.ones(s, s, dtype=torch.bool, device=x.device).triu(1)  # S_q == S_k here
        scores = scores.masked_fill(hidden, float("-inf"))
    weights = torch.softmax(scores, dim=-1)
    out = torch.matmul(weights, v)                                            # (B, h, S, d_v)
    out = out.transpose(1, 2).reshape(b, s, h * d_v)
    return (out @ w_o.T).to(x.dtype)


def mla_decode(x_t, c_kv, k_rope, w_q, w_uk, w_uv, w_o, n_heads, *, position=None,
               rope_base=10000.0):
    """One decode step with the up-projections absorbed.

    ``x_t`` ``(B, 1, d)``: the new token's hidden state; ``c_kv``
    ``(B, S, d_c)`` and ``k_rope`` ``(B, S, d_rope)``: the caches, already
    holding the new token's entry (from ``mla_cache``), so its ``position``
    defaults to ``S - 1``.  ``position`` sets the query's RoPE angle only;
    the one query sees the whole cache.

    1. ``q_nope`` ``(B, h, d_nope)``, ``q_rope`` ``(B, h, d_rope)`` (rotated).
    2. Absorb ``w_uk``: ``q_lat_i = q_nope_i @ W_uk_i`` ``(B, h, d_c)``.
    3. Scores ``(q_lat @ c_kv^T + q_rope @ k_rope^T) / sqrt(d_nope + d_rope)``
       ``(B, h, S)``; softmax over the cache.
    4. Weighted sum over the latent: ``o_lat = weights @ c_kv`` ``(B, h, d_c)``.
    5. Absorb ``w_uv``: ``o_i = o_lat_i @ W_uv_i.T`` ``(B, h, d_v)``; merge
       the heads ``(B, 1, h*d_v)`` and ``@ w_o.T``.

    Returns ``(B, 1, d)``, equal to the last row of ``mla_attention`` over
    the same tokens.  Never build a tensor of per-head keys or values for the
    cached tokens (no ``(B, h, S, d_nope)`` or ``(B, h, S, d_v)``), and do
    not copy the latent once per head: every head reads the same ``c_kv``.

    The scale is folded into the two (small) absorbed queries, and the RoPE
    part of the scores is added by ``baddbmm`` onto the latent part, so the
    only per-token tensors are the ``(B, h, S)`` scores and weights.
    """
    _check_tensor(x_t, "x_t", 3)
    _check_tensor(c_kv, "c_kv", 3)
    _check_tensor(k_rope, "k_rope", 3)
    for name, w in (("w_q", w_q), ("w_uk", w_uk), ("w_uv", w_uv), ("w_o", w_o)):
        _check_tensor(w, name, 2)
    _check_same(x_t, "x_t", c_kv=c_kv, k_rope=k_rope, w_q=w_q, w_uk=w_uk, w_uv=w_uv, w_o=w_o)
    n_heads = _as_int(n_heads, "n_heads")
    base = _as_positive_real(rope_base, "rope_base")
    b, one, d = x_t.shape
    if one != 1:
        raise ValueError(f"x_t must be (B, 1, d): one new token, got shape {tuple(x_t.shape)}")
    if c_kv.shape[0] != b or k_rope.shape[0] != b or c_kv.shape[1] != k_rope.shape[1]:
        raise ValueError(
            f"caches c_kv {tuple(c_kv.shape)} and k_rope {tuple(k_rope.shape)} must be (B, S, ...) with B = {b}"
        )
    s = c_kv.shape[1]
    if s == 0:
        raise ValueError("the caches must hold at least the new token's entry")
    dims = _decode_widths(n_heads, d, c_kv.shape[2], k_rope.shape[2], w_q, w_uk, w_uv, w_o)
    h, d_c, d_nope, d_rope, d_v = dims.n_heads, dims.d_c, dims.d_nope, dims.d_rope, dims.d_v
    pos = s - 1 if position is None else _as_int(position, "position", minimum=0)
    scale = 1.0 / math.sqrt(dims.d_qk)

    # 1. the new token's query, per head: d_nope plain, d_rope rotated at `pos`
    q = (x_t @ w_q.T).view(b, h, dims.d_qk)                                     # (B, h, d_qk)
    q_nope = q[..., :d_nope]                                                    # (B, h, d_nope)
    q_rope = _rope(q[..., d_nope:].unsqueeze(-2),
                   torch.tensor([pos], device=x_t.device), base).squeeze(-2)   # (B, h, d_rope)
    # 2. absorb w_uk: q_lat_i = q_nope_i @ W_uk_i, W_uk_i = w_uk[i*d_nope:(i+1)*d_nope] (d_nope, d_c)
    w_uk_h = w_uk.view(h, d_nope, d_c)
    q_lat = torch.matmul(q_nope.transpose(0, 1), w_uk_h).transpose(0, 1)       # (B, h, d_c)
    # 3. scores against the shared caches: (B, h, S), every head reads the same c_kv / k_rope
    scores_lat = torch.bmm(q_lat * scale, c_kv.transpose(1, 2))                # (B, h, S)
    scores = torch.baddbmm(scores_lat, q_rope * scale, k_rope.transpose(1, 2))  # + rope part
    weights = torch.softmax(scores, dim=-1)                                     # the whole cache
    # 4. weighted sum over the latent
    o_lat = torch.bmm(weights, c_kv)                                            # (B, h, d_c)
    # 5. absorb w_uv: o_i = o_lat_i @ W_uv_i.T, W_uv_i (d_v, d_c)
    w_uv_h = w_uv.view(h, d_v, d_c)
    o = torch.matmul(o_lat.transpose(0, 1), w_uv_h.transpose(1, 2)).transpose(0, 1)  # (B, h, d_v)
    out = o.reshape(b, 1, h * d_v) @ w_o.T
    return out.to(x_t.dtype)


def mla_cache_bytes(n_layers, d_c, d_rope, seq_len, batch=1, bytes_per_elem=2):
    """Bytes of the MLA cache (an int): per token and layer, one latent of
    ``d_c`` values and one shared RoPE key of ``d_rope`` values, for
    ``batch`` sequences of ``seq_len`` tokens.

    ``n_layers * (d_c + d_rope) * seq_len * batch * bytes_per_elem``.
    """
    n_layers = _as_int(n_layers, "n_layers")
    d_c = _as_int(d_c, "d_c")
    d_rope = _as_int(d_rope, "d_rope", minimum=0)
    seq_len = _as_int(seq_len, "seq_len", minimum=0)
    batch = _as_int(batch, "batch")
    elems = n_layers * (d_c + d_rope) * seq_len * batch
    if isinstance(bytes_per_elem, numbers.Integral) and not isinstance(bytes_per_elem, bool):
        return elems * _as_int(bytes_per_elem, "bytes_per_elem")
    return int(math.ceil(elems * _as_positive_real(bytes_per_elem, "bytes_per_elem")))


def mla_cache_saving(n_kv_heads, d_nope, d_rope, d_v, d_c):
    """How many times larger the cache of the same model is with ``n_kv_heads``
    K/V heads (each K of width ``d_nope + d_rope``, each V of width ``d_v``;
    ``n_kv_heads == n_heads`` is MHA) than the MLA cache (``d_c + d_rope``
    values per token and layer).  A float.

    ``n_kv_heads * (d_nope + d_rope + d_v) / (d_c + d_rope)``.
    """
    n_kv_heads = _as_int(n_kv_heads, "n_kv_heads")
    d_nope = _as_int(d_nope, "d_nope", minimum=0)
    d_rope = _as_int(d_rope, "d_rope", minimum=0)
    d_v = _as_int(d_v, "d_v")
    d_c = _as_int(d_c, "d_c")
    return float(n_kv_heads * (d_nope + d_rope + d_v)) / float(d_c + d_rope)


# DeepSeek-V3: 61 layers, d_c 512, d_rope 64, bf16 -> 61 * 576 * 2 bytes per token.
DEEPSEEK_V3_MLA_BYTES_PER_TOKEN = 61 * (512 + 64) * 2          # 70272
# 128 heads, d_nope 128, d_v 128: 128 * (128 + 64 + 128) / 576.
DEEPSEEK_V3_MHA_OVER_MLA = 128 * (128 + 64 + 128) / (512 + 64)  # 71.11...


def mla_decode_intensity(n_heads, seq_len, d_c, d_rope, batch=1, bytes_per_elem=2):
    """FLOPs per byte of the absorbed decode's attention core (a float).

    FLOPs, for every head and cached token: ``2 * (d_c + d_rope)`` for its
    score (``q_lat . c`` and ``q_rope . k_rope``) and ``2 * d_c`` for its
    share of the weighted sum over ``c_kv``.  Bytes: the two caches read
    once (``seq_len * (d_c + d_rope)`` per sequence), the absorbed queries
    read once (``n_heads * (d_c + d_rope)``) and the latent outputs written
    once (``n_heads * d_c``), at ``bytes_per_elem`` each, for ``batch``
    sequences.  The projections (``w_q``, ``w_uk``, ``w_uv``, ``w_o``) are
    not part of the core.  For a long context it tends to
    ``2 * n_heads * (2*d_c + d_rope) / (bytes_per_elem * (d_c + d_rope))``:
    it grows with the number of heads.
    """
    n_heads = _as_int(n_heads, "n_heads")
    seq_len = _as_int(seq_len, "seq_len")
    d_c = _as_int(d_c, "d_c")
    d_rope = _as_int(d_rope, "d_rope", minimum=0)
    batch = _as_int(batch, "batch")
    bpe = _as_positive_real(bytes_per_elem, "bytes_per_elem")
    flops = batch * n_heads * seq_len * (2 * (d_c + d_rope) + 2 * d_c)
    elems = batch * (seq_len * (d_c + d_rope) + n_heads * (d_c + d_rope) + n_heads * d_c)
    return float(flops) / (float(elems) * float(bpe))


def plot_mla_heads(x, w_q, w_dkv, w_uk, w_kr, n_heads, path, *, positions=None,
                   rope_base=10000.0):
    """One heatmap per head (the explicit form's weights), each with a colorbar."""
    x = _check_tensor(x, "x", 2)
    w_q, w_dkv = _check_tensor(w_q, "w_q", 2), _check_tensor(w_dkv, "w_dkv", 2)
    w_uk, w_kr = _check_tensor(w_uk, "w_uk", 2), _check_tensor(w_kr, "w_kr", 2)
    h = _as_int(n_heads, "n_heads")
    seq_len, d_model = x.shape
    d_c, d_rope = w_dkv.shape[0], w_kr.shape[0]
    _check_rope_width(d_rope)
    d_nope = _per_head_width(w_uk, h, "w_uk", d_c, "d_c")
    if tuple(w_q.shape) != (h * (d_nope + d_rope), d_model):
        raise ValueError(f"w_q {tuple(w_q.shape)} should be {(h * (d_nope + d_rope), d_model)}")
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as exc:
        raise ImportError("plot_mla_heads needs matplotlib: pip install matplotlib") from exc
    x64 = x.to(torch.float64)
    pos = _positions(positions, seq_len, x.device)
    c_kv = x64 @ w_dkv.to(torch.float64).T                                  # (S, d_c)
    k_rope = _rope(x64 @ w_kr.to(torch.float64).T, pos, rope_base)          # (S, d_rope)
    q = (x64 @ w_q.to(torch.float64).T).view(seq_len, h, d_nope + d_rope).transpose(0, 1)
    q = torch.cat([q[..., :d_nope], _rope(q[..., d_nope:], pos, rope_base)], dim=-1)
    k_nope = torch.einsum("sc,hnc->hsn", c_kv, w_uk.to(torch.float64).view(h, d_nope, d_c))
    k = torch.cat([k_nope, k_rope.expand(h, seq_len, d_rope)], dim=-1)      # (h, S, dn+dr)
    scores = q @ k.transpose(1, 2) / math.sqrt(d_nope + d_rope)
    allowed = torch.ones(seq_len, seq_len, dtype=torch.bool).tril()
    weights = torch.softmax(scores.masked_fill(~allowed, float("-inf")), dim=-1)
    fig, axes = plt.subplots(1, h, figsize=(3.5 * h, 3), squeeze=False)
    for i in range(h):
        ax = axes[0, i]
        image = ax.matshow(weights[i].numpy(), vmin=0.0, vmax=1.0)
        fig.colorbar(image, ax=ax, fraction=0.046)
        ax.set_title(f"head {i}", pad=18)
        ax.set_xlabel("keys")
        ax.set_ylabel("queries")
    fig.savefig(str(path))
    plt.close(fig)
