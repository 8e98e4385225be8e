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

# Helpers of your own (RoPE in PyTorch, the widths, the causal mask) go here.


def _rope(x, positions, base=10000.0):
    """Rotate-half RoPE on the last axis of ``x`` ``(..., S, d_rope)``.

    ``positions`` broadcasts against ``x.shape[:-1]`` (``(S,)`` for a
    sequence, a scalar for one token).  The last axis is viewed as ``(2,
    d_rope/2)`` and turned by one broadcast expression; angles in float64.
    """
    d_rope = x.shape[-1]
    if d_rope % 2:
        raise ValueError(f"RoPE needs an even width, got d_rope={d_rope}")
    half = d_rope // 2
    pos = torch.as_tensor(positions, device=x.device).to(torch.float64)
    inv_freq = float(base) ** (-2.0 * torch.arange(half, device=x.device, dtype=torch.float64) / d_rope)
    ang = (pos[..., None] * inv_freq)[..., None, :]                 # (..., 1, half)
    cos, sin = ang.cos().to(x.dtype), ang.sin().to(x.dtype)
    halves = x.unflatten(-1, (2, half))                             # (..., 2, half)
    sign = torch.tensor([[-1.0], [1.0]], dtype=x.dtype, device=x.device)
    return (halves * cos + sign * halves.flip(-2) * sin).flatten(-2)


def _widths(n_heads, w_q=None, w_dkv=None, w_uk=None, w_uv=None, w_kr=None, w_o=None, d=None, d_c=None,
            d_rope=None):
    """Read ``d, d_c, d_rope, d_nope, d_v`` from the weights given; ``ValueError`` on a misfit."""
    def fail(msg):
        raise ValueError(f"MLA weights do not fit: {msg}")
    if int(n_heads) != n_heads or n_heads < 1:
        fail(f"n_heads={n_heads}")
    h = int(n_heads)
    for name, w in (("w_q", w_q), ("w_dkv", w_dkv), ("w_uk", w_uk), ("w_uv", w_uv), ("w_kr", w_kr), ("w_o", w_o)):
        if w is not None and w.dim() != 2:
            fail(f"{name} must be 2-D, got {tuple(w.shape)}")
    if w_dkv is not None:
        if d is not None and w_dkv.shape[1] != d:
            fail(f"w_dkv {tuple(w_dkv.shape)} vs d={d}")
        d_c, d = w_dkv.shape
    if w_kr is not None:
        if d is not None and w_kr.shape[1] != d:
            fail(f"w_kr {tuple(w_kr.shape)} vs d={d}")
        d, d_rope = w_kr.shape[1], w_kr.shape[0]
    if d_rope is not None and d_rope % 2:
        fail(f"d_rope={d_rope} must be even for RoPE")
    d_nope = d_v = None
    if w_uk is not None:
        if w_uk.shape[0] % h or (d_c is not None and w_uk.shape[1] != d_c):
            fail(f"w_uk {tuple(w_uk.shape)} vs h={h}, d_c={d_c}")
        d_nope, d_c = w_uk.shape[0] // h, w_uk.shape[1]
    if w_uv is not None:
        if w_uv.shape[0] % h or (d_c is not None and w_uv.shape[1] != d_c):
            fail(f"w_uv {tuple(w_uv.shape)} vs h={h}, d_c={d_c}")
        d_v, d_c = w_uv.shape[0] // h, w_uv.shape[1]
    if w_q is not None:
        if d is not None and w_q.shape[1] != d:
            fail(f"w_q {tuple(w_q.shape)} vs d={d}")
        d = w_q.shape[1]
        if d_nope is not None and d_rope is not None and w_q.shape[0] != h * (d_nope + d_rope):
            fail(f"w_q {tuple(w_q.shape)} vs h*(d_nope+d_rope)={h * (d_nope + d_rope)}")
    if w_o is not None and d_v is not None and tuple(w_o.shape) != (d, h * d_v):
        fail(f"w_o {tuple(w_o.shape)} vs (d, h*d_v)=({d}, {h * d_v})")
    return dict(h=h, d=d, d_c=d_c, d_rope=d_rope, d_nope=d_nope, d_v=d_v)


def mla_cache(x, w_dkv, w_kr, *, positions=None, rope_base=10000.0):
    """What MLA caches for the tokens ``x`` ``(B, S, d)``.

    Returns ``(c_kv, k_rope)``: the latent ``x @ w_dkv.T`` ``(B, S, d_c)``
    and the shared RoPE key ``x @ w_kr.T`` ``(B, S, d_rope)``, already
    rotated at each token's position (``positions`` ``(S,)`` integers,
    default ``0 .. S-1``).  The latent is NOT rotated.  ``ValueError`` for an
    odd ``d_rope``.
    """
    if x.dim() != 3:
        raise ValueError(f"mla_cache: x must be (B, S, d), got {tuple(x.shape)}")
    _widths(1, w_dkv=w_dkv, w_kr=w_kr, d=x.shape[-1])
    positions = torch.arange(x.shape[1], device=x.device) if positions is None else positions
    c_kv = torch.einsum("bsd,cd->bsc", x, w_dkv.to(x.dtype))
    k_rope = _rope(torch.einsum("bsd,rd->bsr", x, w_kr.to(x.dtype)), positions, rope_base)
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

    The per-head weights are views (``w_uk`` as ``(h, d_nope, d_c)``, ``w_q``
    as ``(h, d_nope + d_rope, d)``, ``w_o`` as ``(d, h, d_v)``) and every
    product is one einsum; the shared ``k_rope`` is broadcast to the heads
    (``expand``) before it is concatenated.  Softmax by ``exp(x -
    logsumexp(x))``.
    """
    if x.dim() != 3:
        raise ValueError(f"mla_attention: x must be (B, S, d), got {tuple(x.shape)}")
    wd = _widths(n_heads, w_q=w_q, w_dkv=w_dkv, w_uk=w_uk, w_uv=w_uv, w_kr=w_kr, w_o=w_o, d=x.shape[-1])
    h, d, d_nope, d_rope, d_v, d_c = wd["h"], wd["d"], wd["d_nope"], wd["d_rope"], wd["d_v"], wd["d_c"]
    b, s, _ = x.shape
    positions = torch.arange(s, device=x.device) if positions is None else positions
    dt = x.dtype

    c_kv, k_rope = mla_cache(x, w_dkv, w_kr, positions=positions, rope_base=rope_base)
    k_nope = torch.einsum("bsc,hnc->bhsn", c_kv, w_uk.to(dt).view(h, d_nope, d_c))    # (B, h, S, d_nope)
    k = torch.cat([k_nope, k_rope[:, None].expand(b, h, s, d_rope)], dim=-1)       # (B, h, S, d_nope+d_rope)
    v = torch.einsum("bsc,hvc->bhsv", c_kv, w_uv.to(dt).view(h, d_v, d_c))         # (B, h, S, d_v)

    q = torch.einsum("bsd,hed->bhse", x, w_q.to(dt).view(h, d_nope + d_rope, d))   # (B, h, S, d_nope+d_rope)
    q = torch.cat([q[..., :d_nope], _rope(q[..., d_nope:], positions, rope_base)], dim=-1)

    scores = torch.einsum("bhqe,bhke->bhqk", q, k) * (1.0 / math.sqrt(d_nope + d_rope))
    if causal:
        allowed = torch.arange(s, device=x.device)[None, :] <= torch.arange(s, device=x.device)[:, None]
        scores = torch.where(allowed, scores, float("-inf"))
    lse = torch.logsumexp(scores, dim=-1, keepdim=True)
    weights = torch.exp(scores - lse)
    o = torch.einsum("bhqk,bhkv->bqhv", weights, v)                                 # heads merged by the view below
    return torch.einsum("bqhv,dhv->bqd", o, w_o.to(dt).view(d, h, d_v))


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

    The caches are read through views with the sequence axis last, ``(B,
    d_c, S)`` and ``(B, d_rope, S)``: each score term is one batched product
    ``(B, h, r) x (B, r, S) -> (B, h, S)`` in which all heads meet the same
    cache.  The scale is folded into the (small) absorbed queries, and the
    softmax over the cache is one fused op, so the ``(B, h, S)`` scores are
    read no more often than needed.
    """
    if x_t.dim() != 3 or x_t.shape[1] != 1:
        raise ValueError(f"mla_decode: x_t must be (B, 1, d), got {tuple(x_t.shape)}")
    if c_kv.dim() != 3 or k_rope.dim() != 3 or c_kv.shape[:2] != k_rope.shape[:2] or c_kv.shape[0] != x_t.shape[0]:
        raise ValueError(f"mla_decode: caches {tuple(c_kv.shape)}, {tuple(k_rope.shape)} do not fit "
                         f"x_t {tuple(x_t.shape)}")
    wd = _widths(n_heads, w_q=w_q, w_uk=w_uk, w_uv=w_uv, w_o=w_o, d=x_t.shape[-1], d_c=c_kv.shape[-1],
                 d_rope=k_rope.shape[-1])
    h, d, d_nope, d_rope, d_v, d_c = wd["h"], wd["d"], wd["d_nope"], wd["d_rope"], wd["d_v"], wd["d_c"]
    s = c_kv.shape[1]
    position = s - 1 if position is None else position
    dt = x_t.dtype

    q = torch.einsum("bd,hed->bhe", x_t[:, 0], w_q.to(dt).view(h, d_nope + d_rope, d))   # (B, h, d_nope+d_rope)
    q = q * (1.0 / math.sqrt(d_nope + d_rope))
    q_rope = _rope(q[..., d_nope:], position, rope_base)                                  # (B, h, d_rope)
    q_lat = torch.einsum("bhn,hnc->bhc", q[..., :d_nope], w_uk.to(dt).view(h, d_nope, d_c))   # (B, h, d_c)

    c_t, r_t = c_kv.to(dt).transpose(1, 2), k_rope.to(dt).transpose(1, 2)                # (B, d_c, S), (B, d_rope, S)
    scores = torch.baddbmm(torch.einsum("bhr,brs->bhs", q_rope, r_t), q_lat, c_t)        # (B, h, S)
    weights = torch.softmax(scores, dim=-1)
    o_lat = torch.einsum("bhs,bcs->bhc", weights, c_t)                                    # (B, h, d_c)
    o = torch.einsum("bhc,hvc->bhv", o_lat, w_uv.to(dt).view(h, d_v, d_c))               # (B, h, d_v)
    return torch.einsum("bhv,dhv->bd", o, w_o.to(dt).view(d, h, d_v))[:, None]


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


DEEPSEEK_V3_MLA_BYTES_PER_TOKEN = mla_cache_bytes(61, 512, 64, 1)      # 70272
DEEPSEEK_V3_MHA_OVER_MLA = mla_cache_saving(128, 128, 64, 128, 512)    # 71.11...


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
    nbytes = bytes_per_elem * batch * (seq_len * (d_c + d_rope) + n_heads * (d_c + d_rope) + n_heads * d_c)
    return float(flops) / float(nbytes)


def plot_mla_heads(x, w_q, w_dkv, w_uk, w_kr, n_heads, path, *, positions=None,
                   rope_base=10000.0):
    """The absorbed form broadcast over heads; each head's rotated query part
    made by mla_cache itself (it rotates x @ W.T at the tokens' positions, the
    same for a query's rows of w_q as for w_kr)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    x = x.to(torch.float64)
    s, h = x.shape[0], n_heads
    d_c, d_rope = w_dkv.shape[0], w_kr.shape[0]
    d_nope = w_uk.shape[0] // h
    w_q, w_dkv = w_q.to(torch.float64), w_dkv.to(torch.float64)
    w_uk, w_kr = w_uk.to(torch.float64), w_kr.to(torch.float64)
    kw = {"positions": positions, "rope_base": rope_base}
    c_kv, k_rope = mla_cache(x[None], w_dkv, w_kr, **kw)                  # (1, S, d_c), (1, S, dr)
    per_head = w_q.view(h, d_nope + d_rope, -1)
    q_rope = torch.stack([mla_cache(x[None], w_dkv, per_head[i, d_nope:], **kw)[1][0]
                          for i in range(h)])                               # (h, S, dr)
    q_nope = torch.einsum("sd,hnd->hsn", x, per_head[:, :d_nope])            # (h, S, dn)
    q_lat = torch.einsum("hsn,hnc->hsc", q_nope, w_uk.view(h, d_nope, d_c))  # (h, S, d_c)
    scores = (q_lat @ c_kv[0].T + q_rope @ k_rope[0].T) / math.sqrt(d_nope + d_rope)
    future = torch.triu(torch.ones(s, s, dtype=torch.bool), diagonal=1)
    weights = torch.softmax(scores.masked_fill(future, -math.inf), dim=-1)
    fig, axes = plt.subplots(1, h, figsize=(3 * h, 3), squeeze=False, layout="constrained")
    for i, ax in enumerate(axes.ravel()):
        ax.imshow(weights[i].numpy(), cmap="viridis")
        ax.set(title=f"head {i}", xlabel="key", ylabel="query")
    fig.savefig(path)
    plt.close(fig)
