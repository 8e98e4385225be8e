"""Exercise H: multi-head latent attention (MLA), in PyTorch.

Usually takes about 2.5 hours.  From the chapters: "Attention" (chapter
03), "The serving problem: K and V must be kept" (the MLA row: one latent
of about 576 values) and its interview check "How does MLA reduce the KV
cache further than GQA?"; "Attention from First Principles", section 5
(MHA, GQA, MQA: the KV cache lever) for the cache it improves on.

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
tensors; outputs keep the input's dtype.  Accuracy (the course's precision
rule): ``mla_cache``, ``mla_attention`` and ``mla_decode`` are compared
with a float64 reference to ``atol=2e-4, rtol=2e-3`` whatever the input's
dtype, so RoPE or the softmax in float32 inside (as DeepSeek-V3 computes
them) is fine.

Decisions where the course's contract is silent (the grader follows them):

* A weight whose shape does not fit (or ``d_rope`` odd) raises ``ValueError``.
* ``mla_decode``'s ``position`` only sets the new query's RoPE angle: the one
  decode query sees the whole cache it is given (end-aligned mask), whatever
  positions the cached tokens had.
* ``mla_cache_saving`` and the byte formulas count K and V (or the latent and
  the RoPE key) at the same ``bytes_per_elem``; the saving is a plain float.

The grader runs your ``mla_decode`` under an operation trace (as in
exercise F) that knows which of its inputs each tensor comes from: no tensor
may hold a vector per head and cached token (a rebuilt K or V, ``c_kv``
through ``w_uk`` or ``w_uv``, or the latent copied per head), and what one
more cached token costs is counted (FLOPs of its matrix multiplies, bytes its
operations read) and set beside ``mla_decode_intensity``, with the gap
explained.  One latent broadcast over the heads inside a matmul or einsum is
fine: the copy PyTorch makes there to run one batched matmul is not yours.

One picture: ``plot_mla_heads(x, w_q, w_dkv, w_uk, w_kr, n_heads, path,
*, positions=None, rope_base=10000.0)`` draws each head's causal attention
weights over ONE sequence ``x`` ``(S, d)`` (a 2-D tensor: no batch axis),
the weights of ``mla_attention`` (scores scaled by ``1/sqrt(d_nope +
d_rope)``, causal mask, softmax over keys: ``(S, S)`` per head, rows
summing to 1).  Every head reads the same cached latent, yet the patterns
differ: each head's ``W_uk_i`` (absorbed into its query) and its RoPE part
decide what it looks for.  The PNG saved at ``path`` has one panel per head
(not the heads side by side in one image), panel ``i`` titled ``"head
{i}"`` and drawing head ``i``'s ``(S, S)`` weights unchanged
(``ax.imshow(w[i])``: row ``j`` is query ``j``), its x axis labelled "key"
and its y axis "query" (on the leftmost panel of each row at least).
Needs matplotlib (``pip install matplotlib``).

Run the public tests with ``attn-grade check ex08``.
"""
from __future__ import annotations

import math

import torch

# BEGIN SOLUTION
# STUB: # Helpers of your own (RoPE in PyTorch, the widths, the causal mask) go here.


def _rope(x, positions, base):
    """Rotate-half RoPE of ``x`` ``(..., S, d_rope)`` at ``positions`` ``(S,)``."""
    d_rope = x.shape[-1]
    half = d_rope // 2
    freq = base ** (-2.0 * torch.arange(half, dtype=torch.float64) / d_rope)   # (half,)
    angle = positions.to(torch.float64)[:, None] * freq                       # (S, half)
    cos, sin = angle.cos().to(x.dtype), angle.sin().to(x.dtype)
    x1, x2 = x[..., :half], x[..., half:]
    return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], dim=-1)


def _positions(positions, s, device):
    if positions is None:
        return torch.arange(s, device=device)
    return torch.as_tensor(positions, device=device).reshape(s)


def _widths(n_heads, w_q, w_uk, w_uv, w_o, d_c, d_rope):
    """``(d_nope, d_v)`` from the weights; ``ValueError`` when they do not fit."""
    if n_heads < 1 or w_uk.shape[0] % n_heads or w_uv.shape[0] % n_heads:
        raise ValueError(f"w_uk {tuple(w_uk.shape)} and w_uv {tuple(w_uv.shape)} must have "
                         f"a multiple of n_heads={n_heads} rows")
    d_nope, d_v = w_uk.shape[0] // n_heads, w_uv.shape[0] // n_heads
    if d_rope % 2:
        raise ValueError(f"RoPE needs an even d_rope, got {d_rope}")
    if w_uk.shape[1] != d_c or w_uv.shape[1] != d_c:
        raise ValueError(f"w_uk and w_uv must have d_c={d_c} columns")
    if w_q.shape[0] != n_heads * (d_nope + d_rope):
        raise ValueError(f"w_q must have h*(d_nope+d_rope) = {n_heads * (d_nope + d_rope)} "
                         f"rows, has {w_q.shape[0]}")
    if w_o.shape[1] != n_heads * d_v:
        raise ValueError(f"w_o must have h*d_v = {n_heads * d_v} columns")
    return d_nope, d_v


def _queries(x, w_q, n_heads, d_nope, d_rope, positions, rope_base):
    """``(q_nope, q_rope)``: ``(B, h, S, d_nope)`` and ``(B, h, S, d_rope)``, rotated."""
    b, s, _ = x.shape
    q = (x @ w_q.T).view(b, s, n_heads, d_nope + d_rope).transpose(1, 2)   # (B, h, S, dn+dr)
    return q[..., :d_nope], _rope(q[..., d_nope:], positions, rope_base)
# END SOLUTION


def mla_cache(x, w_dkv, w_kr, *, positions=None, rope_base=10000.0):
    """What MLA caches for the tokens ``x`` ``(B, S, d)``.

    Returns ``(c_kv, k_rope)``: the latent ``x @ w_dkv.T`` ``(B, S, d_c)``
    and the shared RoPE key ``x @ w_kr.T`` ``(B, S, d_rope)``, already
    rotated at each token's position (``positions`` ``(S,)`` integers,
    default ``0 .. S-1``).  The latent is NOT rotated.  ``ValueError`` for an
    odd ``d_rope``.
    """
    # BEGIN SOLUTION
    b, s, _ = x.shape
    if w_kr.shape[0] % 2:
        raise ValueError(f"RoPE needs an even d_rope, got {w_kr.shape[0]}")
    pos = _positions(positions, s, x.device)
    c_kv = x @ w_dkv.T                                            # (B, S, d_c)
    k_rope = _rope(x @ w_kr.T, pos, rope_base)                    # (B, S, d_rope)
    return c_kv, k_rope
    # END SOLUTION


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
    # BEGIN SOLUTION
    b, s, _ = x.shape
    d_c, d_rope = w_dkv.shape[0], w_kr.shape[0]
    d_nope, d_v = _widths(n_heads, w_q, w_uk, w_uv, w_o, d_c, d_rope)
    pos = _positions(positions, s, x.device)
    c_kv, k_rope = mla_cache(x, w_dkv, w_kr, positions=pos, rope_base=rope_base)
    k_nope = (c_kv @ w_uk.T).view(b, s, n_heads, d_nope).transpose(1, 2)   # (B, h, S, dn)
    v = (c_kv @ w_uv.T).view(b, s, n_heads, d_v).transpose(1, 2)           # (B, h, S, dv)
    k = torch.cat([k_nope, k_rope[:, None].expand(b, n_heads, s, d_rope)], dim=-1)
    q_nope, q_rope = _queries(x, w_q, n_heads, d_nope, d_rope, pos, rope_base)
    q = torch.cat([q_nope, q_rope], dim=-1)                                # (B, h, S, dn+dr)
    scores = q @ k.transpose(-2, -1) / math.sqrt(d_nope + d_rope)          # (B, h, S, S)
    if causal:
        allowed = torch.ones(s, s, dtype=torch.bool, device=x.device).tril()
        scores = scores.masked_fill(~allowed, float("-inf"))
    out = torch.softmax(scores, dim=-1) @ v                                # (B, h, S, dv)
    return out.transpose(1, 2).reshape(b, s, n_heads * d_v) @ w_o.T
    # END SOLUTION


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
    """
    # BEGIN SOLUTION
    b, s, d_c = c_kv.shape
    d_rope = k_rope.shape[-1]
    d_nope, d_v = _widths(n_heads, w_q, w_uk, w_uv, w_o, d_c, d_rope)
    pos = torch.tensor([s - 1 if position is None else int(position)], device=x_t.device)
    q_nope, q_rope = _queries(x_t, w_q, n_heads, d_nope, d_rope, pos, rope_base)
    q_nope, q_rope = q_nope[:, :, 0], q_rope[:, :, 0]                    # (B, h, dn), (B, h, dr)
    w_uk_heads = w_uk.view(n_heads, d_nope, d_c)                         # W_uk_i: (dn, d_c)
    q_lat = torch.einsum("bhn,hnc->bhc", q_nope, w_uk_heads)              # (B, h, d_c)
    scores = (q_lat @ c_kv.transpose(1, 2) + q_rope @ k_rope.transpose(1, 2)) \
        / math.sqrt(d_nope + d_rope)                                      # (B, h, S)
    o_lat = torch.softmax(scores, dim=-1) @ c_kv                         # (B, h, d_c)
    w_uv_heads = w_uv.view(n_heads, d_v, d_c)                            # W_uv_i: (dv, d_c)
    out = torch.einsum("bhc,hvc->bhv", o_lat, w_uv_heads)                # (B, h, dv)
    return out.reshape(b, 1, n_heads * d_v) @ w_o.T
    # END SOLUTION


def mla_cache_bytes(n_layers, d_c, d_rope, seq_len, batch=1, bytes_per_elem=2):
    """Bytes of the MLA cache (an int): per token and layer, one latent of
    ``d_c`` values and one shared RoPE key of ``d_rope`` values, for
    ``batch`` sequences of ``seq_len`` tokens."""
    # BEGIN SOLUTION
    return n_layers * (d_c + d_rope) * seq_len * batch * bytes_per_elem
    # END SOLUTION


def mla_cache_saving(n_kv_heads, d_nope, d_rope, d_v, d_c):
    """How many times larger the cache of the same model is with ``n_kv_heads``
    K/V heads (each K of width ``d_nope + d_rope``, each V of width ``d_v``;
    ``n_kv_heads == n_heads`` is MHA) than the MLA cache (``d_c + d_rope``
    values per token and layer).  A float."""
    # BEGIN SOLUTION
    return n_kv_heads * (d_nope + d_rope + d_v) / (d_c + d_rope)
    # END SOLUTION


# BEGIN SOLUTION
DEEPSEEK_V3_MLA_BYTES_PER_TOKEN = 61 * (512 + 64) * 2          # 70272: all layers, bf16
DEEPSEEK_V3_MHA_OVER_MLA = 128 * (128 + 64 + 128) / (512 + 64)  # 71.1
# END SOLUTION


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
    # BEGIN SOLUTION
    flops = 2 * batch * n_heads * seq_len * (2 * d_c + d_rope)
    elems = batch * (seq_len * (d_c + d_rope) + n_heads * (d_c + d_rope) + n_heads * d_c)
    return flops / (elems * bytes_per_elem)
    # END SOLUTION


def plot_mla_heads(x, w_q, w_dkv, w_uk, w_kr, n_heads, path, *, positions=None,
                   rope_base=10000.0):
    """Save one heatmap of causal attention weights per MLA head to ``path``.

    ``x``: ``(S, d)``, one sequence; weights as in ``mla_attention``.  Panel
    ``i`` (titled ``"head {i}"``) draws head ``i``'s ``(S, S)`` weights
    unchanged, x axis "key", y axis "query".  Returns nothing.  Without
    matplotlib: ``ImportError`` saying how to install it.
    """
    # BEGIN SOLUTION
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as exc:
        raise ImportError("plot_mla_heads needs matplotlib: pip install matplotlib") from exc
    x = x.to(torch.float64)[None]                                        # (1, S, d)
    s = x.shape[1]
    d_c, d_rope = w_dkv.shape[0], w_kr.shape[0]
    d_nope = w_uk.shape[0] // n_heads
    pos = _positions(positions, s, x.device)
    c_kv, k_rope = mla_cache(x, w_dkv.double(), w_kr.double(), positions=pos,
                             rope_base=rope_base)                        # (1, S, d_c), (1, S, dr)
    q_nope, q_rope = _queries(x, w_q.double(), n_heads, d_nope, d_rope, pos, rope_base)
    q_lat = q_nope @ w_uk.double().view(n_heads, d_nope, d_c)            # (1, h, S, d_c)
    scores = (q_lat @ c_kv[:, None].transpose(-2, -1)
              + q_rope @ k_rope[:, None].transpose(-2, -1)) / math.sqrt(d_nope + d_rope)
    allowed = torch.ones(s, s, dtype=torch.bool).tril()
    weights = torch.softmax(scores.masked_fill(~allowed, float("-inf")), dim=-1)[0]  # (h, S, S)
    cols = min(n_heads, 4)
    rows = -(-n_heads // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(3 * cols, 3 * rows), squeeze=False,
                             layout="constrained")
    for i, ax in enumerate(axes.flat):
        if i >= n_heads:
            ax.axis("off")                                               # a spare grid cell
            continue
        image = ax.imshow(weights[i].cpu().numpy(), vmin=0.0, vmax=1.0, cmap="viridis")
        ax.set_title(f"head {i}")
        ax.set_xlabel("key")
        ax.set_ylabel("query")
    fig.suptitle("MLA: every head reads the same cached latent")
    fig.colorbar(image, ax=axes.ravel().tolist(), label="weight")
    fig.savefig(path)
    plt.close(fig)
    # END SOLUTION
