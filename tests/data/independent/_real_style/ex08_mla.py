"""ex08_mla in DeepSeek-V3's numerics (a real-style submission for the grader's
own tests): RoPE as a complex rotation with the angles in float32
(``precompute_freqs_cis``/``apply_rotary_emb``'s idiom, adapted to rotate-half
pairs) and every softmax taken in float32, then cast back to the input's
dtype (``softmax(dim=-1, dtype=torch.float32).type_as(scores)``).  Correct
under the course's precision rule for float32 and float64 inputs."""
from __future__ import annotations

import math

import torch



def _rope(x, positions, base):
    """Rotate-half RoPE of ``x`` ``(..., S, d_rope)``: pairs (j, j + d/2) as
    complex numbers times ``exp(i * angle)``, the angles in float32."""
    d_rope = x.shape[-1]
    half = d_rope // 2
    freqs = 1.0 / (base ** (torch.arange(0, d_rope, 2, dtype=torch.float32) / d_rope))
    t = positions.to(torch.float32)
    freqs_cis = torch.polar(torch.ones(len(t), half), torch.outer(t, freqs))   # (S, half)
    xc = torch.complex(x[..., :half].float(), x[..., half:].float())
    rotated = xc * freqs_cis
    return torch.cat([rotated.real, rotated.imag], dim=-1).type_as(x)


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


def mla_cache(x, w_dkv, w_kr, *, positions=None, rope_base=10000.0):
    """What MLA caches for the tokens ``x`` ``(B, S, d)``.

    Returns ``(c_kv, k_rope)``: the latent ``x @ w_dkv.T`` ``(B, S, d_c)``
    and the shared RoPE key ``x @ w_kr.T`` ``(B, S, d_rope)``, already
    rotated at each token's position (``positions`` ``(S,)`` integers,
    default ``0 .. S-1``).  The latent is NOT rotated.  ``ValueError`` for an
    odd ``d_rope``.
    """
    b, s, _ = x.shape
    if w_kr.shape[0] % 2:
        raise ValueError(f"RoPE needs an even d_rope, got {w_kr.shape[0]}")
    pos = _positions(positions, s, x.device)
    c_kv = x @ w_dkv.T                                            # (B, S, d_c)
    k_rope = _rope(x @ w_kr.T, pos, rope_base)                    # (B, S, d_rope)
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
    out = scores.softmax(dim=-1, dtype=torch.float32).type_as(scores) @ v                                # (B, h, S, dv)
    return out.transpose(1, 2).reshape(b, s, n_heads * d_v) @ w_o.T


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
    o_lat = scores.softmax(dim=-1, dtype=torch.float32).type_as(scores) @ c_kv                         # (B, h, d_c)
    w_uv_heads = w_uv.view(n_heads, d_v, d_c)                            # W_uv_i: (dv, d_c)
    out = torch.einsum("bhc,hvc->bhv", o_lat, w_uv_heads)                # (B, h, dv)
    return out.reshape(b, 1, n_heads * d_v) @ w_o.T


def mla_cache_bytes(n_layers, d_c, d_rope, seq_len, batch=1, bytes_per_elem=2):
    """Bytes of the MLA cache (an int): per token and layer, one latent of
    ``d_c`` values and one shared RoPE key of ``d_rope`` values, for
    ``batch`` sequences of ``seq_len`` tokens."""
    return n_layers * (d_c + d_rope) * seq_len * batch * bytes_per_elem


def mla_cache_saving(n_kv_heads, d_nope, d_rope, d_v, d_c):
    """How many times larger the cache of the same model is with ``n_kv_heads``
    K/V heads (each K of width ``d_nope + d_rope``, each V of width ``d_v``;
    ``n_kv_heads == n_heads`` is MHA) than the MLA cache (``d_c + d_rope``
    values per token and layer).  A float."""
    return n_kv_heads * (d_nope + d_rope + d_v) / (d_c + d_rope)


DEEPSEEK_V3_MLA_BYTES_PER_TOKEN = 61 * (512 + 64) * 2          # 70272: all layers, bf16
DEEPSEEK_V3_MHA_OVER_MLA = 128 * (128 + 64 + 128) / (512 + 64)  # 71.1


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
    flops = 2 * batch * n_heads * seq_len * (2 * d_c + d_rope)
    elems = batch * (seq_len * (d_c + d_rope) + n_heads * (d_c + d_rope) + n_heads * d_c)
    return flops / (elems * bytes_per_elem)


def plot_mla_heads(x, w_q, w_dkv, w_uk, w_kr, n_heads, path, *, positions=None,
                   rope_base=10000.0):
    """Save one heatmap of causal attention weights per MLA head to ``path``.

    ``x``: ``(S, d)``, one sequence; weights as in ``mla_attention``.  Panel
    ``i`` (titled ``"head {i}"``) draws head ``i``'s ``(S, S)`` weights
    unchanged, x axis "key", y axis "query".  Returns nothing.  Without
    matplotlib: ``ImportError`` saying how to install it.
    """
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
