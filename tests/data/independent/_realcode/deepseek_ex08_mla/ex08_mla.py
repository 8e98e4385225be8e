"""Exercise H in the style of DeepSeek-V3's inference/model.py (class MLA):
wkv_b viewed as (n_heads, qk_nope_head_dim + v_head_dim, kv_lora_rank) —
here w_uk and w_uv come separately, viewed per head the same way —; the
"naive" attn_impl rebuilds k_nope / v per head, the "absorb" attn_impl
contracts q_nope with wkv_b[:, :qk_nope_head_dim] and attends over the
kv_cache / pe_cache directly with einsum ("bshd,hdc->bshc",
"bshc,btc->bsht", "bsht,btc->bshc", "bshc,hdc->bshd"); softmax in float32
(float64 kept as float64) then cast back; complex RoPE via torch.polar /
view_as_complex, adapted to the course's rotate-half pairing.
"""
from __future__ import annotations

import math

import torch


def _widths(n_heads, w_q=None, w_dkv=None, w_uk=None, w_uv=None, w_kr=None, w_o=None, d=None):
    """Read (d, d_c, d_rope, d_nope, d_v) from the weights; ValueError when they do not fit."""
    if n_heads <= 0:
        raise ValueError("n_heads must be positive")
    dims = {}
    if w_dkv is not None:
        dims["d_c"], dims["d"] = w_dkv.shape
    if w_kr is not None:
        dims["d_rope"] = w_kr.shape[0]
        if "d" in dims and w_kr.shape[1] != dims["d"]:
            raise ValueError(f"w_kr {tuple(w_kr.shape)} does not fit d={dims['d']}")
    if d is not None and dims.setdefault("d", d) != d:
        raise ValueError("weights do not fit x")
    if w_uk is not None:
        if w_uk.shape[0] % n_heads or ("d_c" in dims and w_uk.shape[1] != dims["d_c"]):
            raise ValueError(f"w_uk {tuple(w_uk.shape)} does not fit n_heads={n_heads}")
        dims["d_c"] = w_uk.shape[1]
        dims["d_nope"] = w_uk.shape[0] // n_heads
    if w_uv is not None:
        if w_uv.shape[0] % n_heads or ("d_c" in dims and w_uv.shape[1] != dims["d_c"]):
            raise ValueError(f"w_uv {tuple(w_uv.shape)} does not fit n_heads={n_heads}")
        dims["d_v"] = w_uv.shape[0] // n_heads
    if w_q is not None:
        if w_q.shape[0] % n_heads or ("d" in dims and w_q.shape[1] != dims["d"]):
            raise ValueError(f"w_q {tuple(w_q.shape)} does not fit")
        dims.setdefault("d", w_q.shape[1])
        qk = w_q.shape[0] // n_heads
        if "d_nope" in dims and "d_rope" in dims and qk != dims["d_nope"] + dims["d_rope"]:
            raise ValueError("w_q rows must be n_heads * (d_nope + d_rope)")
        if "d_nope" in dims and "d_rope" not in dims:
            dims["d_rope"] = qk - dims["d_nope"]
        if "d_rope" in dims and "d_nope" not in dims:
            dims["d_nope"] = qk - dims["d_rope"]
    if w_o is not None:
        if "d_v" in dims and tuple(w_o.shape) != (dims.get("d", w_o.shape[0]), n_heads * dims["d_v"]):
            raise ValueError(f"w_o {tuple(w_o.shape)} does not fit")
    if dims.get("d_rope", 0) % 2 or dims.get("d_rope", 2) <= 0 or dims.get("d_nope", 0) < 0:
        raise ValueError("d_rope must be even and positive")
    return dims


def precompute_freqs_cis(dim, positions, base, device):
    freqs = 1.0 / (base ** (torch.arange(0, dim, 2, dtype=torch.float64, device=device) / dim))
    t = torch.as_tensor(positions, dtype=torch.float64, device=device).reshape(-1)
    freqs = torch.outer(t, freqs)
    return torch.polar(torch.ones_like(freqs), freqs)          # (S, dim/2) complex128


def apply_rotary_emb(x, freqs_cis):
    """x: (B, S, [H,] dim); pairs (j, j + dim/2) form the complex number."""
    dtype = x.dtype
    half = x.size(-1) // 2
    xc = torch.view_as_complex(torch.stack([x[..., :half], x[..., half:]], -1).double().contiguous())
    fc = freqs_cis.view(1, xc.size(1), *([1] * (xc.dim() - 3)), xc.size(-1))
    y = torch.view_as_real(xc * fc)
    return torch.cat([y[..., 0], y[..., 1]], -1).to(dtype)


def _cdt(x):
    return torch.promote_types(x.dtype, torch.float32)


def mla_cache(x, w_dkv, w_kr, *, positions=None, rope_base=10000.0):
    dims = _widths(1, w_dkv=w_dkv, w_kr=w_kr, d=x.size(-1))
    bsz, seqlen, _ = x.shape
    if positions is None:
        positions = torch.arange(seqlen)
    kv = torch.nn.functional.linear(x, w_dkv)                    # (B, S, kv_lora_rank)
    k_pe = torch.nn.functional.linear(x, w_kr)                   # (B, S, qk_rope_head_dim)
    k_pe = apply_rotary_emb(k_pe, precompute_freqs_cis(dims["d_rope"], positions, rope_base, x.device))
    return kv, k_pe


def _queries(x, w_q, n_heads, d_nope, d_rope, positions, rope_base):
    bsz, seqlen, _ = x.shape
    q = torch.nn.functional.linear(x, w_q).view(bsz, seqlen, n_heads, d_nope + d_rope)
    q_nope, q_pe = torch.split(q, [d_nope, d_rope], dim=-1)
    q_pe = apply_rotary_emb(q_pe, precompute_freqs_cis(d_rope, positions, rope_base, x.device))
    return q_nope, q_pe


def mla_attention(x, w_q, w_dkv, w_uk, w_uv, w_kr, w_o, n_heads, *, causal=True,
                  positions=None, rope_base=10000.0):
    """attn_impl == "naive": rebuild k = [k_nope ; k_pe] and v for every head."""
    dims = _widths(n_heads, w_q, w_dkv, w_uk, w_uv, w_kr, w_o, d=x.size(-1))
    d_nope, d_rope, d_v, d_c = dims["d_nope"], dims["d_rope"], dims["d_v"], dims["d_c"]
    bsz, seqlen, _ = x.shape
    positions = torch.arange(seqlen) if positions is None else positions
    softmax_scale = (d_nope + d_rope) ** -0.5
    kv, k_pe = mla_cache(x, w_dkv, w_kr, positions=positions, rope_base=rope_base)
    q_nope, q_pe = _queries(x, w_q, n_heads, d_nope, d_rope, positions, rope_base)
    q = torch.cat([q_nope, q_pe], dim=-1)                                           # (B, S, H, dq)
    wkv_b = torch.cat([w_uk.view(n_heads, d_nope, d_c), w_uv.view(n_heads, d_v, d_c)], dim=1)
    kv = torch.nn.functional.linear(kv, wkv_b.reshape(-1, d_c)).view(bsz, seqlen, n_heads, d_nope + d_v)
    k_nope, v = torch.split(kv, [d_nope, d_v], dim=-1)
    k = torch.cat([k_nope, k_pe.unsqueeze(2).expand(-1, -1, n_heads, -1)], dim=-1)
    scores = torch.einsum("bshd,bthd->bsht", q, k) * softmax_scale
    if causal:
        mask = torch.full((seqlen, seqlen), float("-inf"), device=x.device).triu_(1)
        scores = scores + mask.unsqueeze(1).to(scores.dtype)
    scores = scores.softmax(dim=-1, dtype=_cdt(x)).type_as(x)
    out = torch.einsum("bsht,bthd->bshd", scores, v)
    return torch.nn.functional.linear(out.flatten(2), w_o).to(x.dtype)


def mla_decode(x_t, c_kv, k_rope, w_q, w_uk, w_uv, w_o, n_heads, *, position=None,
               rope_base=10000.0):
    """attn_impl == "absorb" for one new token: q_nope absorbed into the latent space."""
    dims = _widths(n_heads, w_q=w_q, w_uk=w_uk, w_uv=w_uv, w_o=w_o, d=x_t.size(-1))
    d_nope, d_v, d_c = dims["d_nope"], dims["d_v"], dims["d_c"]
    d_rope = k_rope.size(-1)
    if dims["d_rope"] != d_rope or c_kv.size(-1) != d_c or x_t.size(1) != 1:
        raise ValueError("caches / x_t do not fit the weights")
    end_pos = c_kv.size(1)
    pos = end_pos - 1 if position is None else int(position)
    softmax_scale = (d_nope + d_rope) ** -0.5
    q_nope, q_pe = _queries(x_t, w_q, n_heads, d_nope, d_rope, [pos], rope_base)   # (B, 1, H, .)
    wkv_b_uk = w_uk.view(n_heads, d_nope, d_c)
    wkv_b_uv = w_uv.view(n_heads, d_v, d_c)
    q_nope = torch.einsum("bshd,hdc->bshc", q_nope, wkv_b_uk)                         # (B, 1, H, d_c)
    scores = (torch.einsum("bshc,btc->bsht", q_nope, c_kv) +
              torch.einsum("bshr,btr->bsht", q_pe, k_rope)) * softmax_scale
    scores = scores.softmax(dim=-1, dtype=_cdt(x_t)).type_as(x_t)
    x = torch.einsum("bsht,btc->bshc", scores, c_kv)                                  # (B, 1, H, d_c)
    x = torch.einsum("bshc,hdc->bshd", x, wkv_b_uv)                                   # (B, 1, H, d_v)
    return torch.nn.functional.linear(x.flatten(2), w_o).to(x_t.dtype)


def mla_cache_bytes(n_layers, d_c, d_rope, seq_len, batch=1, bytes_per_elem=2):
    return int(n_layers * (d_c + d_rope) * seq_len * batch * bytes_per_elem)


def mla_cache_saving(n_kv_heads, d_nope, d_rope, d_v, d_c):
    return float(n_kv_heads * (d_nope + d_rope + d_v)) / float(d_c + d_rope)


DEEPSEEK_V3_MLA_BYTES_PER_TOKEN = mla_cache_bytes(61, 512, 64, 1)            # 70272
DEEPSEEK_V3_MHA_OVER_MLA = mla_cache_saving(128, 128, 64, 128, 512)         # 71.11


def mla_decode_intensity(n_heads, seq_len, d_c, d_rope, batch=1, bytes_per_elem=2):
    flops = batch * n_heads * seq_len * (2 * (d_c + d_rope) + 2 * d_c)
    nbytes = bytes_per_elem * batch * (seq_len * (d_c + d_rope) + n_heads * (d_c + d_rope) + n_heads * d_c)
    return float(flops) / float(nbytes)


def plot_mla_heads(x, w_q, w_dkv, w_uk, w_kr, n_heads, path, *, positions=None,
                   rope_base=10000.0):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as e:
        raise ImportError("plot_mla_heads needs matplotlib: pip install matplotlib") from e
    dims = _widths(n_heads, w_q=w_q, w_dkv=w_dkv, w_uk=w_uk, w_kr=w_kr, d=x.size(-1))
    d_nope, d_rope, d_c = dims["d_nope"], dims["d_rope"], dims["d_c"]
    seqlen = x.size(0)
    xb = x.unsqueeze(0)
    positions = torch.arange(seqlen) if positions is None else positions
    with torch.no_grad():
        kv, k_pe = mla_cache(xb, w_dkv, w_kr, positions=positions, rope_base=rope_base)
        q_nope, q_pe = _queries(xb, w_q, n_heads, d_nope, d_rope, positions, rope_base)
        q_lat = torch.einsum("bshd,hdc->bshc", q_nope, w_uk.view(n_heads, d_nope, d_c))
        scores = (torch.einsum("bshc,btc->bsht", q_lat, kv) +
                  torch.einsum("bshr,btr->bsht", q_pe, k_pe)) * (d_nope + d_rope) ** -0.5
        mask = torch.full((seqlen, seqlen), float("-inf")).triu_(1).to(scores.dtype)
        w = (scores + mask.unsqueeze(1)).softmax(-1)[0].permute(1, 0, 2).double().cpu().numpy()
    cols = min(n_heads, 4)
    rows = math.ceil(n_heads / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(3 * cols, 3 * rows), squeeze=False)
    for i, ax in enumerate(axes.flat):
        if i >= n_heads:
            ax.set_visible(False)
            continue
        ax.imshow(w[i])
        ax.set_title(f"head {i}")
        ax.set_xlabel("key")
        ax.set_ylabel("query")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
