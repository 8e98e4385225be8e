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

import torch

# ---------------------------------------------------------------------------
# Helpers: RoPE in PyTorch, the widths, a hand-written softmax
# ---------------------------------------------------------------------------

def _rope(x, positions, base=10000.0):
    """Rotate-half RoPE on the last axis of ``x`` ``(..., S, d_rope)`` at
    ``positions`` ``(S,)``; float64 math, returned in ``x``'s dtype."""
    d_rope = x.shape[-1]
    if d_rope % 2 != 0:
        raise ValueError(f"RoPE needs an even d_rope, got {d_rope}")
    half = d_rope // 2
    inv_freq = torch.zeros(half, dtype=torch.float64, device=x.device)
    for j in range(half):
        inv_freq[j] = float(base) ** (-2.0 * j / d_rope)
    positions = torch.as_tensor(positions, dtype=torch.float64, device=x.device).reshape(-1)
    if positions.shape[0] != x.shape[-2]:
        raise ValueError(f"{positions.shape[0]} positions for {x.shape[-2]} rows")
    angles = torch.outer(positions, inv_freq)       # (S, half)
    cos = torch.cos(angles)
    sin = torch.sin(angles)
    x64 = x.to(torch.float64)
    first = x64[..., :half]
    second = x64[..., half:]
    out = torch.zeros(x64.shape, dtype=torch.float64, device=x.device)
    out[..., :half] = first * cos - second * sin
    out[..., half:] = second * cos + first * sin
    return out.to(x.dtype)


def _softmax_rows(scores):
    """Softmax over the last axis, by hand: subtract each row's max, exp,
    divide by the row's sum.  A row that is all ``-inf`` gives zeros."""
    row_max = torch.amax(scores, dim=-1, keepdim=True)
    row_max = torch.where(row_max == float("-inf"), torch.zeros_like(row_max), row_max)
    exps = torch.exp(scores - row_max)
    total = torch.sum(exps, dim=-1, keepdim=True)
    total = torch.where(total == 0, torch.ones_like(total), total)
    return exps / total


def _check_x(x, name="x"):
    if not isinstance(x, torch.Tensor) or x.dim() != 3:
        raise ValueError(f"{name} must be a (B, S, d) tensor")


def _widths(n_heads, d_model, w_q, w_uk, w_uv, w_o, d_c=None, d_rope=None):
    """Read ``d_nope``, ``d_rope``, ``d_v`` (and check ``d_c``) from the
    weights' shapes; ``ValueError`` when something does not fit."""
    if n_heads <= 0:
        raise ValueError("n_heads must be positive")
    for name, w in (("w_q", w_q), ("w_uk", w_uk), ("w_uv", w_uv), ("w_o", w_o)):
        if w.dim() != 2:
            raise ValueError(f"{name} must be a matrix")
    if w_uk.shape[0] % n_heads != 0:
        raise ValueError(f"w_uk has {w_uk.shape[0]} rows, not a multiple of {n_heads} heads")
    if w_uv.shape[0] % n_heads != 0:
        raise ValueError(f"w_uv has {w_uv.shape[0]} rows, not a multiple of {n_heads} heads")
    if w_q.shape[0] % n_heads != 0:
        raise ValueError(f"w_q has {w_q.shape[0]} rows, not a multiple of {n_heads} heads")
    d_nope = w_uk.shape[0] // n_heads
    d_v = w_uv.shape[0] // n_heads
    if d_c is None:
        d_c = w_uk.shape[1]
    if w_uk.shape[1] != d_c or w_uv.shape[1] != d_c:
        raise ValueError(f"w_uk and w_uv must have d_c = {d_c} columns")
    q_width = w_q.shape[0] // n_heads
    if d_rope is None:
        d_rope = q_width - d_nope
    if d_rope <= 0 or q_width != d_nope + d_rope:
        raise ValueError(f"w_q must be (n_heads*(d_nope+d_rope), d) = "
                         f"({n_heads * (d_nope + d_rope)}, {d_model}), got {tuple(w_q.shape)}")
    if d_rope % 2 != 0:
        raise ValueError(f"d_rope must be even, got {d_rope}")
    if w_q.shape[1] != d_model:
        raise ValueError(f"w_q must have d = {d_model} columns, got {w_q.shape[1]}")
    if tuple(w_o.shape) != (d_model, n_heads * d_v):
        raise ValueError(f"w_o must be {(d_model, n_heads * d_v)}, got {tuple(w_o.shape)}")
    return d_nope, d_rope, d_v, d_c


def _queries(x, w_q, n_heads, d_nope, d_rope, positions, rope_base):
    """Per-head queries of ``x`` ``(B, S, d)``: ``q_nope`` ``(B, h, S, d_nope)``
    (plain) and ``q_rope`` ``(B, h, S, d_rope)`` (rotated at ``positions``)."""
    batch, seq_len, _ = x.shape
    width = d_nope + d_rope
    q_flat = torch.zeros((batch, seq_len, n_heads * width), dtype=x.dtype, device=x.device)
    for b in range(batch):
        q_flat[b] = x[b] @ w_q.T
    q_nope = torch.zeros((batch, n_heads, seq_len, d_nope), dtype=x.dtype, device=x.device)
    q_rope = torch.zeros((batch, n_heads, seq_len, d_rope), dtype=x.dtype, device=x.device)
    for head in range(n_heads):
        first = head * width
        q_nope[:, head] = q_flat[:, :, first:first + d_nope]
        q_rope[:, head] = q_flat[:, :, first + d_nope:first + width]
    q_rope = _rope(q_rope, positions, rope_base)
    return q_nope, q_rope


# ---------------------------------------------------------------------------
# The exercise
# ---------------------------------------------------------------------------

def mla_cache(x, w_dkv, w_kr, *, positions=None, rope_base=10000.0):
    """What MLA caches for the tokens ``x`` ``(B, S, d)``.

    Returns ``(c_kv, k_rope)``: the latent ``x @ w_dkv.T`` ``(B, S, d_c)``
    and the shared RoPE key ``x @ w_kr.T`` ``(B, S, d_rope)``, already
    rotated at each token's position (``positions`` ``(S,)`` integers,
    default ``0 .. S-1``).  The latent is NOT rotated.  ``ValueError`` for an
    odd ``d_rope``.
    """
    _check_x(x)
    batch, seq_len, d_model = x.shape
    if w_dkv.dim() != 2 or w_dkv.shape[1] != d_model:
        raise ValueError(f"w_dkv must be (d_c, {d_model}), got {tuple(w_dkv.shape)}")
    if w_kr.dim() != 2 or w_kr.shape[1] != d_model:
        raise ValueError(f"w_kr must be (d_rope, {d_model}), got {tuple(w_kr.shape)}")
    d_c = w_dkv.shape[0]
    d_rope = w_kr.shape[0]
    if d_rope % 2 != 0:
        raise ValueError(f"d_rope must be even, got {d_rope}")
    if positions is None:
        positions = torch.arange(seq_len)
    f64 = torch.float64
    x64 = x.to(f64)
    c_kv = torch.zeros((batch, seq_len, d_c), dtype=f64, device=x.device)
    k_rope = torch.zeros((batch, seq_len, d_rope), dtype=f64, device=x.device)
    for b in range(batch):
        c_kv[b] = x64[b] @ w_dkv.to(f64).T          # the latent: no RoPE
        k_rope[b] = x64[b] @ w_kr.to(f64).T
    k_rope = _rope(k_rope, positions, rope_base)     # rotated once, before caching
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
    shape does not fit ``n_heads`` and the others.  (Computed in float64 with
    loops over batch and heads.)
    """
    _check_x(x)
    batch, seq_len, d_model = x.shape
    if w_dkv.dim() != 2 or w_kr.dim() != 2:
        raise ValueError("w_dkv and w_kr must be matrices")
    d_c = w_dkv.shape[0]
    d_rope = w_kr.shape[0]
    d_nope, d_rope, d_v, d_c = _widths(n_heads, d_model, w_q, w_uk, w_uv, w_o,
                                       d_c=d_c, d_rope=d_rope)
    if positions is None:
        positions = torch.arange(seq_len)
    f64 = torch.float64
    x64 = x.to(f64)

    # 1. the cache
    c_kv, k_rope = mla_cache(x64, w_dkv.to(f64), w_kr.to(f64), positions=positions,
                             rope_base=rope_base)
    # 3. the queries
    q_nope, q_rope = _queries(x64, w_q.to(f64), n_heads, d_nope, d_rope, positions, rope_base)
    w_uk64 = w_uk.to(f64)
    w_uv64 = w_uv.to(f64)
    scale = 1.0 / math.sqrt(d_nope + d_rope)

    if causal:
        hidden = torch.triu(torch.ones((seq_len, seq_len), dtype=torch.bool, device=x.device),
                            diagonal=1)          # S_q == S_k: the usual lower triangle

    merged = torch.zeros((batch, seq_len, n_heads * d_v), dtype=f64, device=x.device)
    for b in range(batch):
        for head in range(n_heads):
            w_uk_i = w_uk64[head * d_nope:(head + 1) * d_nope]     # (d_nope, d_c)
            w_uv_i = w_uv64[head * d_v:(head + 1) * d_v]           # (d_v, d_c)
            # 2. rebuild this head's keys and values from the latent
            k_i = torch.cat([c_kv[b] @ w_uk_i.T, k_rope[b]], dim=-1)   # (S, d_nope+d_rope)
            v_i = c_kv[b] @ w_uv_i.T                                 # (S, d_v)
            q_i = torch.cat([q_nope[b, head], q_rope[b, head]], dim=-1)  # (S, d_nope+d_rope)
            # 4. attend
            scores = (q_i @ k_i.T) * scale                           # (S, S)
            if causal:
                scores = scores.masked_fill(hidden, float("-inf"))
            weights = _softmax_rows(scores)
            merged[b, :, head * d_v:(head + 1) * d_v] = weights @ v_i
    out = torch.zeros((batch, seq_len, d_model), dtype=f64, device=x.device)
    for b in range(batch):
        out[b] = merged[b] @ w_o.to(f64).T
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

    Style note: the loop runs over the batch; inside it, the ``h`` absorbed
    queries of one sequence meet its cache in ONE matrix multiply, so the
    cache is read once for all heads (a loop over heads here would read it
    ``h`` times, which is what MLA avoids).  The per-head work (absorbing
    ``w_uk`` and ``w_uv``) involves no cached token and loops over heads.
    The step runs in the inputs' dtype (no float64 copy of the cache), so
    what it reads is what a real decode step reads.
    """
    _check_x(x_t, "x_t")
    batch, one, d_model = x_t.shape
    if one != 1:
        raise ValueError(f"x_t must hold one new token, got {one}")
    if c_kv.dim() != 3 or k_rope.dim() != 3:
        raise ValueError("c_kv and k_rope must be (B, S, width)")
    if c_kv.shape[0] != batch or k_rope.shape[0] != batch or c_kv.shape[1] != k_rope.shape[1]:
        raise ValueError("c_kv and k_rope must hold the same B sequences of S tokens")
    seq_len = c_kv.shape[1]
    d_c = c_kv.shape[2]
    d_rope = k_rope.shape[2]
    d_nope, d_rope, d_v, d_c = _widths(n_heads, d_model, w_q, w_uk, w_uv, w_o,
                                       d_c=d_c, d_rope=d_rope)
    if position is None:
        position = seq_len - 1
    dtype = x_t.dtype
    device = x_t.device
    scale = 1.0 / math.sqrt(d_nope + d_rope)

    # 1. the new token's queries: (B, h, 1, d_nope) and (B, h, 1, d_rope), rotated
    q_nope, q_rope = _queries(x_t, w_q, n_heads, d_nope, d_rope, [position], rope_base)

    # 2. absorb w_uk into the queries, head by head: q_lat_i = q_nope_i @ W_uk_i
    q_lat = torch.zeros((batch, n_heads, d_c), dtype=dtype, device=device)
    for head in range(n_heads):
        w_uk_i = w_uk[head * d_nope:(head + 1) * d_nope]       # (d_nope, d_c)
        q_lat[:, head, :] = q_nope[:, head, 0, :] @ w_uk_i
    # the score scale goes on the h queries, not on the h*S scores
    q_lat = q_lat * scale
    q_rot = q_rope[:, :, 0, :] * scale                         # (B, h, d_rope)

    # 3.-4. attention core: all heads of a sequence against its one cache
    o_lat = torch.zeros((batch, n_heads, d_c), dtype=dtype, device=device)
    for b in range(batch):
        scores = q_lat[b] @ c_kv[b].T + q_rot[b] @ k_rope[b].T   # (h, S)
        weights = _softmax_rows(scores)                          # over the cache
        o_lat[b] = weights @ c_kv[b]                             # (h, d_c)

    # 5. absorb w_uv after the weighted sum, head by head, and project
    merged = torch.zeros((batch, n_heads * d_v), dtype=dtype, device=device)
    for head in range(n_heads):
        w_uv_i = w_uv[head * d_v:(head + 1) * d_v]             # (d_v, d_c)
        merged[:, head * d_v:(head + 1) * d_v] = o_lat[:, head, :] @ w_uv_i.T
    out = merged @ w_o.T                                       # (B, d)
    return out.reshape(batch, 1, d_model)


def mla_cache_bytes(n_layers, d_c, d_rope, seq_len, batch=1, bytes_per_elem=2):
    """Bytes of the MLA cache (an int): per token and layer, one latent of
    ``d_c`` values and one shared RoPE key of ``d_rope`` values, for
    ``batch`` sequences of ``seq_len`` tokens."""
    per_token_per_layer = d_c + d_rope
    return int(n_layers * per_token_per_layer * seq_len * batch * bytes_per_elem)


def mla_cache_saving(n_kv_heads, d_nope, d_rope, d_v, d_c):
    """How many times larger the cache of the same model is with ``n_kv_heads``
    K/V heads (each K of width ``d_nope + d_rope``, each V of width ``d_v``;
    ``n_kv_heads == n_heads`` is MHA) than the MLA cache (``d_c + d_rope``
    values per token and layer).  A float."""
    kv_values = n_kv_heads * (d_nope + d_rope + d_v)
    mla_values = d_c + d_rope
    return float(kv_values) / float(mla_values)


# DeepSeek-V3: 61 layers, d_c 512, d_rope 64, bf16 (2 bytes):
# 61 * (512 + 64) * 2 = 61 * 1152 = 70272 bytes per token.
DEEPSEEK_V3_MLA_BYTES_PER_TOKEN = 61 * (512 + 64) * 2
# MHA with 128 heads, K of 128 + 64 and V of 128 per head:
# 128 * (128 + 64 + 128) = 40960 values per layer, over 576: 71.11...
DEEPSEEK_V3_MHA_OVER_MLA = 128.0 * (128 + 64 + 128) / (512 + 64)


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
    flops_per_head_token = 2 * (d_c + d_rope) + 2 * d_c
    flops = batch * n_heads * seq_len * flops_per_head_token
    cache_values = seq_len * (d_c + d_rope)
    query_values = n_heads * (d_c + d_rope)
    output_values = n_heads * d_c
    nbytes = batch * bytes_per_elem * (cache_values + query_values + output_values)
    return float(flops) / float(nbytes)


def plot_mla_heads(x, w_q, w_dkv, w_uk, w_kr, n_heads, path, *, positions=None,
                   rope_base=10000.0):
    """Head by head and query by query, from the cache; a 2-row grid."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    x3 = x.to(torch.float64).unsqueeze(0)                                  # (1, S, d)
    seq_len = x3.shape[1]
    d_c, d_rope = w_dkv.shape[0], w_kr.shape[0]
    d_nope = w_uk.shape[0] // n_heads
    pos = torch.arange(seq_len) if positions is None else torch.as_tensor(positions)
    c_kv, k_rope = mla_cache(x3, w_dkv.to(torch.float64), w_kr.to(torch.float64),
                             positions=pos, rope_base=rope_base)
    q_nope, q_rope = _queries(x3, w_q.to(torch.float64), n_heads, d_nope, d_rope, pos,
                              rope_base)
    w_uk64 = w_uk.to(torch.float64)
    n_rows = 2
    n_cols = -(-n_heads // n_rows)
    fig, axes = plt.subplots(n_rows, n_cols, figsize=(3 * n_cols, 6), squeeze=False)
    for head in range(n_heads):
        block = w_uk64[head * d_nope:(head + 1) * d_nope]                   # (d_nope, d_c)
        scores = torch.full((seq_len, seq_len), float("-inf"), dtype=torch.float64)
        for i in range(seq_len):
            for j in range(i + 1):
                k_nope = block @ c_kv[0, j]
                dot = q_nope[0, head, i] @ k_nope + q_rope[0, head, i] @ k_rope[0, j]
                scores[i, j] = dot / math.sqrt(d_nope + d_rope)
        ax = axes[head // n_cols][head % n_cols]
        ax.imshow(_softmax_rows(scores).numpy())
        ax.set_title("head " + str(head))
        ax.set_xlabel("key")
        ax.set_ylabel("query")
    for n in range(n_heads, n_rows * n_cols):
        axes[n // n_cols][n % n_cols].axis("off")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
