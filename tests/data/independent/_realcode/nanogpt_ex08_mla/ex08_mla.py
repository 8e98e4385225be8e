"""Exercise H, nanoGPT style: a small, explicit PyTorch module-free version,
C / nh / hs naming, (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(hs)),
masked_fill(-inf), F.softmax, att @ v, y.transpose(1, 2).contiguous().view(B, T, C).
MLA pieces added the way nanoGPT forks that add MLA do (latent c_kv from a
down-projection, a shared rope key, absorbed matrices for decode).
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F


def _rope(x, pos, base):
    hs = x.size(-1)
    if hs % 2:
        raise ValueError("rope dim must be even")
    theta = base ** (-torch.arange(0, hs, 2, device=x.device, dtype=torch.float64) / hs)
    ang = torch.as_tensor(pos, device=x.device, dtype=torch.float64).view(-1, 1) * theta   # (T, hs/2)
    cos, sin = ang.cos().to(x.dtype), ang.sin().to(x.dtype)
    x1, x2 = x[..., : hs // 2], x[..., hs // 2:]
    return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], dim=-1)


def _sizes(n_head, C, w_q=None, w_dkv=None, w_uk=None, w_uv=None, w_kr=None, w_o=None):
    s = {}
    if w_uk is not None:
        if w_uk.size(0) % n_head:
            raise ValueError("w_uk rows must be n_head * d_nope")
        s["nope"], s["c"] = w_uk.size(0) // n_head, w_uk.size(1)
    if w_uv is not None:
        if w_uv.size(0) % n_head or ("c" in s and w_uv.size(1) != s["c"]):
            raise ValueError("w_uv must be (n_head * d_v, d_c)")
        s["v"] = w_uv.size(0) // n_head
    if w_dkv is not None:
        if w_dkv.size(1) != C or ("c" in s and w_dkv.size(0) != s["c"]):
            raise ValueError("w_dkv must be (d_c, d)")
        s["c"] = w_dkv.size(0)
    if w_kr is not None:
        if w_kr.size(1) != C or w_kr.size(0) % 2:
            raise ValueError("w_kr must be (d_rope, d) with d_rope even")
        s["rope"] = w_kr.size(0)
    if w_q is not None:
        if w_q.size(1) != C or w_q.size(0) % n_head:
            raise ValueError("w_q must be (n_head * (d_nope + d_rope), d)")
        qk = w_q.size(0) // n_head
        if "rope" in s and "nope" in s and qk != s["nope"] + s["rope"]:
            raise ValueError("w_q does not fit d_nope + d_rope")
        s.setdefault("rope", qk - s.get("nope", 0))
        if s["rope"] <= 0 or s["rope"] % 2:
            raise ValueError("d_rope must be even and positive")
    if w_o is not None and (w_o.size(0) != C or w_o.size(1) != n_head * s.get("v", w_o.size(1) // n_head)):
        raise ValueError("w_o must be (d, n_head * d_v)")
    return s


def mla_cache(x, w_dkv, w_kr, *, positions=None, rope_base=10000.0):
    B, T, C = x.size()
    _sizes(1, C, w_dkv=w_dkv, w_kr=w_kr)
    pos = torch.arange(T) if positions is None else positions
    c_kv = x @ w_dkv.t()
    k_rope = _rope(x @ w_kr.t(), pos, rope_base)
    return c_kv, k_rope


def mla_attention(x, w_q, w_dkv, w_uk, w_uv, w_kr, w_o, n_heads, *, causal=True,
                  positions=None, rope_base=10000.0):
    B, T, C = x.size()
    nh = n_heads
    s = _sizes(nh, C, w_q, w_dkv, w_uk, w_uv, w_kr, w_o)
    nope, rope_d, hv = s["nope"], s["rope"], s["v"]
    pos = torch.arange(T) if positions is None else positions
    c_kv, k_rope = mla_cache(x, w_dkv, w_kr, positions=pos, rope_base=rope_base)
    q = (x @ w_q.t()).view(B, T, nh, nope + rope_d).transpose(1, 2)           # (B, nh, T, hs)
    q = torch.cat([q[..., :nope], _rope(q[..., nope:], pos, rope_base)], dim=-1)
    k_nope = (c_kv @ w_uk.t()).view(B, T, nh, nope).transpose(1, 2)          # (B, nh, T, nope)
    v = (c_kv @ w_uv.t()).view(B, T, nh, hv).transpose(1, 2)                 # (B, nh, T, hv)
    k = torch.cat([k_nope, k_rope.unsqueeze(1).expand(B, nh, T, rope_d)], dim=-1)
    att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(nope + rope_d))
    if causal:
        bias = torch.tril(torch.ones(T, T, dtype=torch.bool, device=x.device))
        att = att.masked_fill(~bias, float("-inf"))
    att = F.softmax(att, dim=-1)
    y = att @ v                                                                 # (B, nh, T, hv)
    y = y.transpose(1, 2).contiguous().view(B, T, nh * hv)
    return y @ w_o.t()


def mla_decode(x_t, c_kv, k_rope, w_q, w_uk, w_uv, w_o, n_heads, *, position=None,
               rope_base=10000.0):
    B, one, C = x_t.size()
    nh = n_heads
    s = _sizes(nh, C, w_q=w_q, w_uk=w_uk, w_uv=w_uv, w_o=w_o)
    nope, rope_d, hv, dc = s["nope"], s["rope"], s["v"], s["c"]
    if one != 1 or c_kv.size(-1) != dc or k_rope.size(-1) != rope_d:
        raise ValueError("x_t must be (B, 1, d) and the caches must fit the weights")
    T = c_kv.size(1)
    pos = T - 1 if position is None else position
    q = (x_t @ w_q.t()).view(B, nh, nope + rope_d)
    q_nope = q[..., :nope]
    q_rope = _rope(q[..., nope:].unsqueeze(2), [pos], rope_base).squeeze(2)      # (B, nh, rope)
    q_lat = torch.einsum("bhn,hnc->bhc", q_nope, w_uk.view(nh, nope, dc))        # absorb W_uk
    att = (q_lat @ c_kv.transpose(1, 2) + q_rope @ k_rope.transpose(1, 2)) * (1.0 / math.sqrt(nope + rope_d))
    att = F.softmax(att, dim=-1)                                                  # (B, nh, T)
    o_lat = att @ c_kv                                                            # (B, nh, dc)
    y = torch.einsum("bhc,hvc->bhv", o_lat, w_uv.view(nh, hv, dc))               # absorb W_uv
    return y.reshape(B, 1, nh * hv) @ w_o.t()


def mla_cache_bytes(n_layers, d_c, d_rope, seq_len, batch=1, bytes_per_elem=2):
    return n_layers * batch * seq_len * (d_c + d_rope) * bytes_per_elem


def mla_cache_saving(n_kv_heads, d_nope, d_rope, d_v, d_c):
    per_token_kv = n_kv_heads * (d_nope + d_rope + d_v)
    per_token_mla = d_c + d_rope
    return per_token_kv / per_token_mla


DEEPSEEK_V3_MLA_BYTES_PER_TOKEN = 70272
DEEPSEEK_V3_MHA_OVER_MLA = 71.11111111111111


def mla_decode_intensity(n_heads, seq_len, d_c, d_rope, batch=1, bytes_per_elem=2):
    per_pair = 2 * (d_c + d_rope) + 2 * d_c
    flops = batch * n_heads * seq_len * per_pair
    nbytes = bytes_per_elem * batch * (seq_len * (d_c + d_rope) + n_heads * (d_c + d_rope) + n_heads * d_c)
    return flops / nbytes


def plot_mla_heads(x, w_q, w_dkv, w_uk, w_kr, n_heads, path, *, positions=None,
                   rope_base=10000.0):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as e:
        raise ImportError("plot_mla_heads needs matplotlib: pip install matplotlib") from e
    T, C = x.size()
    nh = n_heads
    s = _sizes(nh, C, w_q=w_q, w_dkv=w_dkv, w_uk=w_uk, w_kr=w_kr)
    nope, rope_d = s["nope"], s["rope"]
    pos = torch.arange(T) if positions is None else positions
    with torch.no_grad():
        c_kv, k_rope = mla_cache(x[None], w_dkv, w_kr, positions=pos, rope_base=rope_base)
        q = (x @ w_q.t()).view(T, nh, nope + rope_d).transpose(0, 1)
        q = torch.cat([q[..., :nope], _rope(q[..., nope:], pos, rope_base)], -1)
        k_nope = (c_kv[0] @ w_uk.t()).view(T, nh, nope).transpose(0, 1)
        k = torch.cat([k_nope, k_rope[0].expand(nh, T, rope_d)], -1)
        att = (q @ k.transpose(-2, -1)) / math.sqrt(nope + rope_d)
        att = att.masked_fill(~torch.tril(torch.ones(T, T, dtype=torch.bool)), float("-inf"))
        att = F.softmax(att.double(), dim=-1).numpy()
    fig, axs = plt.subplots(1, nh, figsize=(2.8 * nh, 2.8), squeeze=False)
    for i in range(nh):
        axs[0, i].imshow(att[i])
        axs[0, i].set_title(f"head {i}")
        axs[0, i].set_xlabel("key")
        axs[0, i].set_ylabel("query")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
