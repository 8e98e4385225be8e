"""Exercise H, plain version: matmul/bmm, shapes validated, positions as tensors."""

import math

import torch


def _rot(x, pos, base):
    # x (..., S, r); pos tensor (S,)
    r = x.shape[-1]
    if r % 2:
        raise ValueError("d_rope must be even")
    half = r // 2
    freq = 1.0 / (base ** (torch.arange(0, r, 2, dtype=torch.float64) / r))
    ang = torch.outer(pos.to(torch.float64), freq)
    c, s = ang.cos().to(x.dtype), ang.sin().to(x.dtype)
    x1, x2 = x[..., :half], x[..., half:]
    return torch.cat([x1 * c - x2 * s, x1 * s + x2 * c], dim=-1)


def _positions(positions, s):
    if positions is None:
        return torch.arange(s)
    return torch.as_tensor(positions).reshape(-1)


def mla_cache(x, w_dkv, w_kr, *, positions=None, rope_base=10000.0):
    c_kv = x @ w_dkv.T
    k_rope = _rot(x @ w_kr.T, _positions(positions, x.shape[1]), rope_base)
    return c_kv, k_rope


def _widths(w_q, w_uk, w_uv, w_o, n_heads, d, d_c, d_rope):
    if w_uk.shape[0] % n_heads or w_uv.shape[0] % n_heads:
        raise ValueError("w_uk / w_uv rows must be a multiple of n_heads")
    d_nope, d_v = w_uk.shape[0] // n_heads, w_uv.shape[0] // n_heads
    if tuple(w_q.shape) != (n_heads * (d_nope + d_rope), d):
        raise ValueError(f"w_q has shape {tuple(w_q.shape)}")
    if w_uk.shape[1] != d_c or w_uv.shape[1] != d_c:
        raise ValueError("w_uk / w_uv must have d_c columns")
    if tuple(w_o.shape) != (d, n_heads * d_v):
        raise ValueError(f"w_o has shape {tuple(w_o.shape)}")
    if d_rope % 2:
        raise ValueError("d_rope must be even")
    return d_nope, d_v


def mla_attention(x, w_q, w_dkv, w_uk, w_uv, w_kr, w_o, n_heads, *, causal=True,
                  positions=None, rope_base=10000.0):
    B, S, d = x.shape
    d_c, d_rope = w_dkv.shape[0], w_kr.shape[0]
    if w_dkv.shape[1] != d or w_kr.shape[1] != d:
        raise ValueError("w_dkv / w_kr must have d columns")
    d_nope, d_v = _widths(w_q, w_uk, w_uv, w_o, n_heads, d, d_c, d_rope)
    pos = _positions(positions, S)
    c_kv, k_rope = mla_cache(x, w_dkv, w_kr, positions=pos, rope_base=rope_base)
    q = (x @ w_q.T).view(B, S, n_heads, d_nope + d_rope).transpose(1, 2)  # (B,h,S,dn+dr)
    q = torch.cat([q[..., :d_nope], _rot(q[..., d_nope:], pos, rope_base)], dim=-1)
    k_n = (c_kv @ w_uk.T).view(B, S, n_heads, d_nope).transpose(1, 2)
    k = torch.cat([k_n, k_rope.unsqueeze(1).expand(B, n_heads, S, d_rope)], dim=-1)
    v = (c_kv @ w_uv.T).view(B, S, n_heads, d_v).transpose(1, 2)
    sc = q @ k.transpose(-1, -2) / math.sqrt(d_nope + d_rope)
    if causal:
        sc = sc.masked_fill(torch.ones(S, S, dtype=torch.bool).triu(1), -math.inf)
    o = torch.softmax(sc, -1) @ v  # (B,h,S,d_v)
    return o.transpose(1, 2).reshape(B, S, n_heads * d_v) @ w_o.T


def mla_decode(x_t, c_kv, k_rope, w_q, w_uk, w_uv, w_o, n_heads, *, position=None,
               rope_base=10000.0):
    B, S, d_c = c_kv.shape
    d_rope = k_rope.shape[-1]
    d = x_t.shape[-1]
    d_nope, d_v = _widths(w_q, w_uk, w_uv, w_o, n_heads, d, d_c, d_rope)
    pos = torch.tensor([S - 1 if position is None else int(position)])
    q = (x_t @ w_q.T).view(B, n_heads, d_nope + d_rope)
    q_n = q[..., :d_nope]  # (B,h,dn)
    q_r = _rot(q[..., d_nope:].unsqueeze(2), pos, rope_base).squeeze(2)  # (B,h,dr)
    w_uk_h = w_uk.view(n_heads, d_nope, d_c)
    q_c = torch.bmm(q_n.transpose(0, 1), w_uk_h).transpose(0, 1)  # (B,h,d_c)
    sc = (q_c @ c_kv.transpose(1, 2) + q_r @ k_rope.transpose(1, 2)) / math.sqrt(d_nope + d_rope)
    p = torch.softmax(sc, dim=-1)  # (B,h,S)
    lat = p @ c_kv  # (B,h,d_c)
    w_uv_h = w_uv.view(n_heads, d_v, d_c)
    o = torch.bmm(lat.transpose(0, 1), w_uv_h.transpose(1, 2)).transpose(0, 1)  # (B,h,d_v)
    return (o.reshape(B, n_heads * d_v) @ w_o.T).view(B, 1, d)


def mla_cache_bytes(n_layers, d_c, d_rope, seq_len, batch=1, bytes_per_elem=2):
    return n_layers * seq_len * batch * (d_c + d_rope) * bytes_per_elem


def mla_cache_saving(n_kv_heads, d_nope, d_rope, d_v, d_c):
    gqa = n_kv_heads * ((d_nope + d_rope) + d_v)
    return gqa / (d_c + d_rope)


DEEPSEEK_V3_MLA_BYTES_PER_TOKEN = 61 * (512 + 64) * 2
DEEPSEEK_V3_MHA_OVER_MLA = 128 * (128 + 64 + 128) / 576


def mla_decode_intensity(n_heads, seq_len, d_c, d_rope, batch=1, bytes_per_elem=2):
    per_head_flops = 2 * seq_len * (d_c + d_rope) + 2 * seq_len * d_c
    flops = batch * n_heads * per_head_flops
    read = batch * seq_len * (d_c + d_rope) + batch * n_heads * (d_c + d_rope)
    written = batch * n_heads * d_c
    return flops / ((read + written) * bytes_per_elem)


def plot_mla_heads(x, w_q, w_dkv, w_uk, w_kr, n_heads, path, *, positions=None,
                   rope_base=10000.0):
    """The explicit form, head by head (K rebuilt from the latent), float64;
    pcolormesh with the first query at the top."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    x = x.double()
    s = x.shape[0]
    d_c, d_rope = w_dkv.shape[0], w_kr.shape[0]
    d_nope = w_uk.shape[0] // n_heads
    pos = _positions(positions, s)
    c_kv = x @ w_dkv.double().T                                   # (S, d_c)
    k_rope = _rot(x @ w_kr.double().T, pos, rope_base)            # (S, d_rope)
    q = x @ w_q.double().T                                        # (S, h*(dn+dr))
    allowed = torch.tril(torch.ones(s, s)).bool()
    fig, axes = plt.subplots(1, n_heads, figsize=(3 * n_heads, 3), squeeze=False)
    for i in range(n_heads):
        qi = q[:, i * (d_nope + d_rope):(i + 1) * (d_nope + d_rope)]
        qi = torch.cat([qi[:, :d_nope], _rot(qi[:, d_nope:], pos, rope_base)], dim=1)
        w_uk_i = w_uk.double()[i * d_nope:(i + 1) * d_nope]      # (d_nope, d_c)
        ki = torch.cat([c_kv @ w_uk_i.T, k_rope], dim=1)          # (S, dn+dr)
        scores = (qi @ ki.T) / math.sqrt(d_nope + d_rope)
        scores = torch.where(allowed, scores, torch.tensor(-math.inf, dtype=scores.dtype))
        ax = axes[0][i]
        ax.pcolormesh(torch.softmax(scores, dim=1).numpy(), vmin=0.0, vmax=1.0)
        ax.invert_yaxis()
        ax.set_title("head %d" % i)
        ax.set_xlabel("key")
        if i == 0:
            ax.set_ylabel("query")
    fig.savefig(path)
    plt.close(fig)
