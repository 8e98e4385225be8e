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
from dataclasses import dataclass
from functools import lru_cache

import torch

# Helpers of your own (RoPE in PyTorch, the widths, the causal mask) go here.


@lru_cache(maxsize=64)
def _inv_freq(d_rope: int, base: float) -> torch.Tensor:
    """``base ** (-2j / d_rope)``, ``j = 0 .. d_rope/2 - 1`` (float64, CPU)."""
    j = torch.arange(d_rope // 2, dtype=torch.float64)
    return torch.tensor(float(base), dtype=torch.float64) ** (-2.0 * j / d_rope)


@dataclass(frozen=True)
class _RoPE:
    """Rotate-half RoPE over the last axis (width ``d_rope``)."""

    d_rope: int
    base: float = 10000.0

    def __post_init__(self):
        if self.d_rope % 2:
            raise ValueError(f"RoPE needs an even d_rope, got {self.d_rope}")

    def cos_sin(self, positions: torch.Tensor, *, device, dtype):
        ang = positions.to(torch.float64).unsqueeze(-1) * _inv_freq(self.d_rope, float(self.base))
        cos, sin = ang.cos(), ang.sin()
        cos = torch.cat([cos, cos], dim=-1).to(device=device, dtype=dtype)
        sin = torch.cat([sin, sin], dim=-1).to(device=device, dtype=dtype)
        return cos, sin

    def __call__(self, x: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        """``positions`` broadcasts against ``x.shape[:-1]``."""
        if self.d_rope == 0:
            return x
        cos, sin = self.cos_sin(positions, device=x.device, dtype=x.dtype)
        x1, x2 = x.chunk(2, dim=-1)
        return x * cos + torch.cat([-x2, x1], dim=-1) * sin


@dataclass(frozen=True)
class _MLAWidths:
    """``n_heads`` and the widths read from the weights' shapes."""

    d_model: int
    n_heads: int
    d_c: int
    d_rope: int
    d_nope: int
    d_v: int

    @property
    def d_qk(self) -> int:
        return self.d_nope + self.d_rope

    @property
    def scale(self) -> float:
        # The width of the explicit q . k dot product: not d_c, not d_nope.
        return 1.0 / math.sqrt(self.d_qk)

    @classmethod
    def read(cls, *, d_model, n_heads, d_c, d_rope, w_q, w_uk, w_uv, w_o) -> "_MLAWidths":
        n_heads = int(n_heads)
        if n_heads <= 0:
            raise ValueError(f"n_heads must be positive, got {n_heads}")
        if d_rope % 2:
            raise ValueError(f"d_rope must be even for RoPE, got {d_rope}")
        for name, w in (("w_q", w_q), ("w_uk", w_uk), ("w_uv", w_uv), ("w_o", w_o)):
            if w.dim() != 2:
                raise ValueError(f"{name} must be 2-D, got {tuple(w.shape)}")
        if w_uk.shape[0] % n_heads or w_uk.shape[1] != d_c:
            raise ValueError(f"w_uk {tuple(w_uk.shape)} should be (n_heads*d_nope, d_c={d_c})")
        if w_uv.shape[0] % n_heads or w_uv.shape[1] != d_c:
            raise ValueError(f"w_uv {tuple(w_uv.shape)} should be (n_heads*d_v, d_c={d_c})")
        d_nope, d_v = w_uk.shape[0] // n_heads, w_uv.shape[0] // n_heads
        if tuple(w_q.shape) != (n_heads * (d_nope + d_rope), d_model):
            raise ValueError(f"w_q {tuple(w_q.shape)} should be "
                             f"{(n_heads * (d_nope + d_rope), d_model)}")
        if tuple(w_o.shape) != (d_model, n_heads * d_v):
            raise ValueError(f"w_o {tuple(w_o.shape)} should be {(d_model, n_heads * d_v)}")
        if d_nope + d_rope == 0:
            raise ValueError("queries and keys have zero width")
        return cls(d_model, n_heads, d_c, d_rope, d_nope, d_v)


def _compute_dtype(*tensors) -> torch.dtype:
    dt = tensors[0].dtype
    for t in tensors[1:]:
        dt = torch.promote_types(dt, t.dtype)
    return dt if dt.is_floating_point else torch.float64


def _positions(positions, seq: int, device) -> torch.Tensor:
    if positions is None:
        return torch.arange(seq, device=device)
    pos = torch.as_tensor(positions)
    if pos.shape[-1:] != (seq,):
        raise ValueError(f"positions {tuple(pos.shape)} do not fit {seq} tokens")
    return pos


def _causal_allowed(s_q: int, s_k: int, device) -> torch.Tensor:
    """True where query ``i`` may see key ``j <= s_k - s_q + i`` (end-aligned)."""
    return torch.ones(s_q, s_k, dtype=torch.bool, device=device).tril(diagonal=s_k - s_q)


def _queries(x: torch.Tensor, w_q: torch.Tensor, widths: _MLAWidths, rope: _RoPE, pos):
    """``(q_nope, q_rope)``: ``(B, h, S, d_nope)`` plain and ``(B, h, S, d_rope)``
    rotated at ``pos`` (broadcast against ``(B, h, S)``)."""
    b, s, _ = x.shape
    q = (x @ w_q.T).view(b, s, widths.n_heads, widths.d_qk).transpose(1, 2)
    q_nope, q_rope = q.split([widths.d_nope, widths.d_rope], dim=-1)
    return q_nope, rope(q_rope, pos)


def mla_cache(x, w_dkv, w_kr, *, positions=None, rope_base=10000.0):
    """What MLA caches for the tokens ``x`` ``(B, S, d)``.

    Returns ``(c_kv, k_rope)``: the latent ``x @ w_dkv.T`` ``(B, S, d_c)``
    and the shared RoPE key ``x @ w_kr.T`` ``(B, S, d_rope)``, already
    rotated at each token's position (``positions`` ``(S,)`` integers,
    default ``0 .. S-1``).  The latent is NOT rotated.  ``ValueError`` for an
    odd ``d_rope``.
    """
    if x.dim() != 3:
        raise ValueError(f"x must be (B, S, d), got {tuple(x.shape)}")
    d = x.shape[-1]
    for name, w in (("w_dkv", w_dkv), ("w_kr", w_kr)):
        if w.dim() != 2 or w.shape[1] != d:
            raise ValueError(f"{name} {tuple(w.shape)} should be (width, d={d})")
    rope = _RoPE(int(w_kr.shape[0]), float(rope_base))
    dt = _compute_dtype(x, w_dkv, w_kr)
    xc = x.to(dt)
    pos = _positions(positions, x.shape[1], x.device)
    c_kv = xc @ w_dkv.to(dt).T
    k_rope = rope(xc @ w_kr.to(dt).T, pos)
    return c_kv.to(x.dtype), k_rope.to(x.dtype)


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
    if x.dim() != 3:
        raise ValueError(f"x must be (B, S, d), got {tuple(x.shape)}")
    b, s, d = x.shape
    if w_dkv.dim() != 2 or w_kr.dim() != 2:
        raise ValueError("w_dkv and w_kr must be 2-D")
    widths = _MLAWidths.read(d_model=d, n_heads=n_heads, d_c=int(w_dkv.shape[0]),
                             d_rope=int(w_kr.shape[0]), w_q=w_q, w_uk=w_uk, w_uv=w_uv, w_o=w_o)
    dt = _compute_dtype(x, w_q, w_dkv, w_uk, w_uv, w_kr, w_o)
    xc, w_q, w_uk, w_uv, w_o = (t.to(dt) for t in (x, w_q, w_uk, w_uv, w_o))
    h = widths.n_heads
    rope = _RoPE(widths.d_rope, float(rope_base))
    pos = _positions(positions, s, x.device)

    c_kv, k_rope = mla_cache(xc, w_dkv.to(dt), w_kr.to(dt), positions=pos, rope_base=rope_base)
    k_nope = (c_kv @ w_uk.T).view(b, s, h, widths.d_nope).transpose(1, 2)       # (B, h, S, d_nope)
    v = (c_kv @ w_uv.T).view(b, s, h, widths.d_v).transpose(1, 2)               # (B, h, S, d_v)
    k = torch.cat([k_nope, k_rope.unsqueeze(1).expand(b, h, s, widths.d_rope)], dim=-1)

    q_nope, q_rope = _queries(xc, w_q, widths, rope, pos)
    q = torch.cat([q_nope, q_rope], dim=-1)                                     # (B, h, S, d_qk)
    scores = torch.matmul(q, k.transpose(-2, -1)) * widths.scale
    if causal:
        scores = scores.masked_fill(~_causal_allowed(s, s, x.device), float("-inf"))
    weights = torch.softmax(scores, dim=-1)
    o = torch.matmul(weights, v)                                                # (B, h, S, d_v)
    out = o.transpose(1, 2).reshape(b, s, h * widths.d_v) @ w_o.T
    return out.to(x.dtype)


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

    Written with ``torch.bmm`` throughout.  The per-head absorptions batch
    over the ``h`` heads (``B`` rows each, the weights viewed
    ``(h, d_nope, d_c)`` / ``(h, d_v, d_c)``); the two products with the
    cache batch over the ``B`` sequences with all ``h`` query rows of a
    sequence merged against its one latent, so the cache is never expanded
    or copied per head.  ``position`` may also be a ``(B,)`` tensor (one
    position per sequence).
    """
    if x_t.dim() != 3 or x_t.shape[1] != 1:
        raise ValueError(f"x_t must be (B, 1, d), got {tuple(x_t.shape)}")
    b, _, d = x_t.shape
    if c_kv.dim() != 3 or k_rope.dim() != 3 or c_kv.shape[:2] != k_rope.shape[:2] \
            or c_kv.shape[0] != b:
        raise ValueError(f"caches {tuple(c_kv.shape)}, {tuple(k_rope.shape)} do not fit "
                         f"x_t {tuple(x_t.shape)}")
    s = c_kv.shape[1]
    widths = _MLAWidths.read(d_model=d, n_heads=n_heads, d_c=int(c_kv.shape[-1]),
                             d_rope=int(k_rope.shape[-1]), w_q=w_q, w_uk=w_uk, w_uv=w_uv, w_o=w_o)
    h, d_c, d_nope, d_v = widths.n_heads, widths.d_c, widths.d_nope, widths.d_v
    out_dtype = x_t.dtype
    dt = _compute_dtype(x_t, c_kv, k_rope, w_q, w_uk, w_uv, w_o)
    x_t, c_kv, k_rope, w_q, w_uk, w_uv, w_o = (
        t.to(dt) for t in (x_t, c_kv, k_rope, w_q, w_uk, w_uv, w_o))

    pos = torch.as_tensor(s - 1 if position is None else position)
    pos = pos.reshape(-1)
    if pos.numel() not in (1, b):
        raise ValueError(f"position must be an int or one per sequence, got {tuple(pos.shape)}")
    pos = pos.view(-1, 1) if pos.numel() == b and b != 1 else pos.reshape(())

    # 1. the new token's queries: (B, h, d_nope) plain, (B, h, d_rope) rotated.
    q = (x_t[:, 0] @ w_q.T).view(b, h, widths.d_qk)
    q_nope, q_rope = q.split([d_nope, widths.d_rope], dim=-1)
    q_rope = _RoPE(widths.d_rope, float(rope_base))(q_rope, pos)

    # 2. absorb w_uk, one bmm over the heads: (h, B, d_nope) @ (h, d_nope, d_c).
    q_lat = torch.bmm(q_nope.transpose(0, 1), w_uk.view(h, d_nope, d_c)).transpose(0, 1)

    # 3. scores against the shared cache, the scale folded into the small queries:
    #    (B, h, d_c) @ (B, d_c, S)  +  (B, h, d_rope) @ (B, d_rope, S)  ->  (B, h, S).
    scale = widths.scale
    scores = torch.bmm(q_rope * scale, k_rope.transpose(1, 2))
    scores = torch.baddbmm(scores, q_lat * scale, c_kv.transpose(1, 2))
    weights = torch.softmax(scores, dim=-1)

    # 4. weighted sum over the latent: (B, h, S) @ (B, S, d_c) -> (B, h, d_c).
    o_lat = torch.bmm(weights, c_kv)

    # 5. absorb w_uv, one bmm over the heads: (h, B, d_c) @ (h, d_c, d_v).
    o = torch.bmm(o_lat.transpose(0, 1), w_uv.view(h, d_v, d_c).transpose(1, 2))
    o = o.transpose(0, 1).reshape(b, 1, h * d_v)
    return (o @ w_o.T).to(out_dtype)


def mla_cache_bytes(n_layers, d_c, d_rope, seq_len, batch=1, bytes_per_elem=2):
    """Bytes of the MLA cache (an int): per token and layer, one latent of
    ``d_c`` values and one shared RoPE key of ``d_rope`` values, for
    ``batch`` sequences of ``seq_len`` tokens."""
    return int(n_layers * (d_c + d_rope) * seq_len * batch * bytes_per_elem)


def mla_cache_saving(n_kv_heads, d_nope, d_rope, d_v, d_c):
    """How many times larger the cache of the same model is with ``n_kv_heads``
    K/V heads (each K of width ``d_nope + d_rope``, each V of width ``d_v``;
    ``n_kv_heads == n_heads`` is MHA) than the MLA cache (``d_c + d_rope``
    values per token and layer).  A float."""
    return float(n_kv_heads * (d_nope + d_rope + d_v)) / float(d_c + d_rope)


# DeepSeek-V3: 61 layers, d_c 512, d_rope 64, bf16 -> 61 * 576 * 2 = 70272 bytes per token.
DEEPSEEK_V3_MLA_BYTES_PER_TOKEN = mla_cache_bytes(61, 512, 64, 1)
# 128 heads of d_nope 128, d_rope 64, d_v 128: 128 * 320 / 576 = 71.1.
DEEPSEEK_V3_MHA_OVER_MLA = mla_cache_saving(128, 128, 64, 128, 512)


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
    flops = batch * n_heads * seq_len * (2 * (d_c + d_rope) + 2 * d_c)
    elems = batch * (seq_len * (d_c + d_rope) + n_heads * (d_c + d_rope) + n_heads * d_c)
    return float(flops) / float(elems * bytes_per_elem)


def plot_mla_heads(x, w_q, w_dkv, w_uk, w_kr, n_heads, path, *, positions=None,
                   rope_base=10000.0):
    """Weights from the cache with the up-projection absorbed, drawn with
    pyplot's state machine."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    x3 = x.to(torch.float64).unsqueeze(0)
    s, d_model = x.shape
    d_c, d_rope = w_dkv.shape[0], w_kr.shape[0]
    widths = _MLAWidths(d_model, int(n_heads), d_c, d_rope, w_uk.shape[0] // n_heads, 0)
    pos = _positions(positions, s, x.device)
    c_kv, k_rope = mla_cache(x3, w_dkv.to(torch.float64), w_kr.to(torch.float64),
                             positions=pos, rope_base=rope_base)
    q_nope, q_rope = _queries(x3, w_q.to(torch.float64), widths, _RoPE(d_rope, rope_base), pos)
    q_lat = q_nope @ w_uk.to(torch.float64).view(widths.n_heads, widths.d_nope, d_c)
    scores = (q_lat @ c_kv.unsqueeze(1).transpose(-1, -2)
              + q_rope @ k_rope.unsqueeze(1).transpose(-1, -2)) * widths.scale
    scores = scores.masked_fill(~_causal_allowed(s, s, x.device), float("-inf"))
    weights = torch.softmax(scores, dim=-1)[0]
    plt.figure(figsize=(3 * widths.n_heads, 3))
    for i in range(widths.n_heads):
        plt.subplot(1, widths.n_heads, i + 1)
        plt.imshow(weights[i].numpy())
        plt.title(f"head {i}")
        plt.xlabel("key")
        plt.ylabel("query")
    plt.savefig(path)
    plt.close()
