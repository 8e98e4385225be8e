"""Exercise H (MLA), independent version: einsum throughout, dtype kept."""

import torch


def _rope(x, positions, base):
    # x (..., S, r) with S at dim -2; rotate-half
    r = x.shape[-1]
    half = r // 2
    inv = base ** (-torch.arange(half, dtype=torch.float64) * 2.0 / r)
    ang = torch.as_tensor(positions, dtype=torch.float64).reshape(-1, 1) * inv  # (S, half)
    cos, sin = ang.cos().to(x.dtype), ang.sin().to(x.dtype)
    a, b = x[..., :half], x[..., half:]
    return torch.cat((a * cos - b * sin, b * cos + a * sin), dim=-1)


def mla_cache(x, w_dkv, w_kr, *, positions=None, rope_base=10000.0):
    S = x.shape[1]
    if positions is None:
        positions = range(S)
    c_kv = torch.einsum("bsd,cd->bsc", x, w_dkv)
    k_rope = _rope(torch.einsum("bsd,rd->bsr", x, w_kr), list(positions), rope_base)
    return c_kv, k_rope


def mla_attention(x, w_q, w_dkv, w_uk, w_uv, w_kr, w_o, n_heads, *, causal=True,
                  positions=None, rope_base=10000.0):
    B, S, _ = x.shape
    h = n_heads
    d_rope = w_kr.shape[0]
    d_nope = w_uk.shape[0] // h
    d_v = w_uv.shape[0] // h
    if positions is None:
        positions = list(range(S))
    c_kv, k_rope = mla_cache(x, w_dkv, w_kr, positions=positions, rope_base=rope_base)
    q = torch.einsum("bsd,ed->bse", x, w_q).reshape(B, S, h, d_nope + d_rope)
    q_n = q[..., :d_nope]
    q_r = _rope(q[..., d_nope:].transpose(1, 2), positions, rope_base)  # (B,h,S,r)
    k_n = torch.einsum("bsc,hnc->bhsn", c_kv, w_uk.reshape(h, d_nope, -1))
    v = torch.einsum("bsc,hvc->bhsv", c_kv, w_uv.reshape(h, d_v, -1))
    sc = (torch.einsum("bqhn,bhkn->bhqk", q_n, k_n)
          + torch.einsum("bhqr,bkr->bhqk", q_r, k_rope)) / (d_nope + d_rope) ** 0.5
    if causal:
        qi = torch.arange(S)[:, None]
        ki = torch.arange(S)[None, :]
        sc = sc.masked_fill(ki > qi, float("-inf"))
    o = torch.einsum("bhqk,bhkv->bqhv", sc.softmax(-1), v).reshape(B, S, h * d_v)
    return torch.einsum("bse,de->bsd", o, w_o)


def mla_decode(x_t, c_kv, k_rope, w_q, w_uk, w_uv, w_o, n_heads, *, position=None,
               rope_base=10000.0):
    B = x_t.shape[0]
    S, d_c = c_kv.shape[1], c_kv.shape[2]
    h = n_heads
    d_rope = k_rope.shape[-1]
    d_nope = w_uk.shape[0] // h
    d_v = w_uv.shape[0] // h
    if position is None:
        position = S - 1
    q = torch.einsum("bd,ed->be", x_t[:, 0], w_q).reshape(B, h, d_nope + d_rope)
    q_n = q[..., :d_nope]
    q_r = _rope(q[..., d_nope:].unsqueeze(-2), [position], rope_base).squeeze(-2)  # (B,h,r)
    q_lat = torch.einsum("bhn,hnc->bhc", q_n, w_uk.reshape(h, d_nope, d_c))  # absorbed
    sc = (torch.einsum("bhc,bsc->bhs", q_lat, c_kv)
          + torch.einsum("bhr,bsr->bhs", q_r, k_rope)) / (d_nope + d_rope) ** 0.5
    o_lat = torch.einsum("bhs,bsc->bhc", sc.softmax(-1), c_kv)
    o = torch.einsum("bhc,hvc->bhv", o_lat, w_uv.reshape(h, d_v, d_c))
    return torch.einsum("be,de->bd", o.reshape(B, h * d_v), w_o).unsqueeze(1)


def mla_cache_bytes(n_layers, d_c, d_rope, seq_len, batch=1, bytes_per_elem=2):
    return int(n_layers * (d_c + d_rope) * seq_len * batch * bytes_per_elem)


def mla_cache_saving(n_kv_heads, d_nope, d_rope, d_v, d_c):
    return n_kv_heads * (d_nope + d_rope + d_v) / (d_c + d_rope)


DEEPSEEK_V3_MLA_BYTES_PER_TOKEN = mla_cache_bytes(61, 512, 64, 1)
DEEPSEEK_V3_MHA_OVER_MLA = mla_cache_saving(128, 128, 64, 128, 512)


def mla_decode_intensity(n_heads, seq_len, d_c, d_rope, batch=1, bytes_per_elem=2):
    flops = 2 * batch * n_heads * seq_len * ((d_c + d_rope) + d_c)
    nbytes = bytes_per_elem * batch * (seq_len * (d_c + d_rope)
                                       + n_heads * (d_c + d_rope) + n_heads * d_c)
    return flops / nbytes


def plot_mla_heads(x, w_q, w_dkv, w_uk, w_kr, n_heads, path, *, positions=None,
                   rope_base=10000.0):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    S = x.shape[0]
    h = n_heads
    d_c, d_r = w_dkv.shape[0], w_kr.shape[0]
    d_n = w_uk.shape[0] // h
    c, kr = mla_cache(x[None], w_dkv, w_kr, positions=positions, rope_base=rope_base)
    q = torch.einsum("sd,qd->sq", x, w_q).reshape(S, h, d_n + d_r)
    pos = range(S) if positions is None else positions
    qr = _rope(torch.einsum("shr->hsr", q[..., d_n:]), list(pos), rope_base)
    ql = torch.einsum("shn,hnc->hsc", q[..., :d_n], w_uk.reshape(h, d_n, d_c))
    s = (torch.einsum("hsc,tc->hst", ql, c[0]) + torch.einsum("hsr,tr->hst", qr, kr[0]))
    s = s / (d_n + d_r) ** 0.5
    s = s.masked_fill(~torch.ones(S, S, dtype=torch.bool).tril(), float("-inf"))
    w = s.softmax(-1)
    fig, axes = plt.subplots(1, h, figsize=(3 * h, 3), squeeze=False)
    for i, ax in enumerate(axes[0]):
        ax.imshow(w[i].numpy())
        ax.set_title(f"head {i}")
        ax.set_xlabel("key")
        ax.set_ylabel("query")
    fig.savefig(path)
    plt.close(fig)
