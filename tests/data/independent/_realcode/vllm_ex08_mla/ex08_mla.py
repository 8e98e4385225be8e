"""Exercise H in the style of vLLM's MLA backend (vllm/attention/backends/
mla/common.py, MLACommonImpl) and FlashMLA: W_UK_T and W_UV split out of
kv_b_proj once ("process_weights_after_loading"), decode does
``ql_nope = torch.bmm(q_nope.transpose(0, 1), W_UK_T)`` then attends
with [ql_nope ; q_pe] against the latent+rope cache [kv_c ; k_pe]
(FlashMLA's 576-wide head, as the sum of its two parts), and
``_v_up_proj`` maps the latent output back through W_UV.  Prefill
(mla_attention) takes the "compute MHA" path: up-project K/V and attend.
"""
from __future__ import annotations

import math

import torch


def _rope_neox(x, positions, base):
    """vLLM's RotaryEmbedding with is_neox_style=True is rotate-half."""
    rot = x.shape[-1]
    if rot % 2:
        raise ValueError("rotary dim must be even")
    inv_freq = 1.0 / (base ** (torch.arange(0, rot, 2, dtype=torch.float64, device=x.device) / rot))
    freqs = torch.einsum("i,j->ij", torch.as_tensor(positions, dtype=torch.float64, device=x.device).reshape(-1), inv_freq)
    cos, sin = freqs.cos(), freqs.sin()          # (S, rot/2); x is (..., S, rot)
    x1, x2 = torch.chunk(x.to(torch.float64), 2, dim=-1)
    return torch.cat((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1).to(x.dtype)


def _split_weights(n_heads, w_q, w_uk, w_uv, w_o, d):
    if n_heads < 1 or w_uk.dim() != 2 or w_uv.dim() != 2 or w_uk.shape[0] % n_heads or w_uv.shape[0] % n_heads:
        raise ValueError("kv_b_proj pieces do not split into n_heads")
    kv_lora_rank = w_uk.shape[1]
    qk_nope_head_dim = w_uk.shape[0] // n_heads
    v_head_dim = w_uv.shape[0] // n_heads
    if w_uv.shape[1] != kv_lora_rank or w_q.shape[1] != d or w_q.shape[0] % n_heads:
        raise ValueError("weights do not fit")
    qk_rope_head_dim = w_q.shape[0] // n_heads - qk_nope_head_dim
    if qk_rope_head_dim <= 0 or qk_rope_head_dim % 2:
        raise ValueError("qk_rope_head_dim must be positive and even")
    if w_o is not None and tuple(w_o.shape) != (d, n_heads * v_head_dim):
        raise ValueError("o_proj does not fit")
    W_UK = w_uk.view(n_heads, qk_nope_head_dim, kv_lora_rank)       # (N, P, L)
    W_UK_T = W_UK.permute(0, 2, 1)                                  # (N, L, P)... used as q_nope @ W_UK
    W_UV = w_uv.view(n_heads, v_head_dim, kv_lora_rank).transpose(1, 2)   # (N, L, V)
    return kv_lora_rank, qk_nope_head_dim, qk_rope_head_dim, v_head_dim, W_UK, W_UV


def mla_cache(x, w_dkv, w_kr, *, positions=None, rope_base=10000.0):
    if w_dkv.shape[1] != x.shape[-1] or w_kr.shape[1] != x.shape[-1]:
        raise ValueError("kv_a_proj does not fit hidden size")
    S = x.shape[1]
    pos = torch.arange(S) if positions is None else positions
    kv_c = x @ w_dkv.T
    k_pe = _rope_neox(x @ w_kr.T, pos, rope_base)
    return kv_c, k_pe


def mla_attention(x, w_q, w_dkv, w_uk, w_uv, w_kr, w_o, n_heads, *, causal=True,
                  positions=None, rope_base=10000.0):
    B, S, d = x.shape
    L, P, R, V, W_UK, W_UV = _split_weights(n_heads, w_q, w_uk, w_uv, w_o, d)
    if tuple(w_dkv.shape) != (L, d) or tuple(w_kr.shape) != (R, d):
        raise ValueError("kv_a_proj / rope key proj do not fit")
    pos = torch.arange(S) if positions is None else positions
    kv_c, k_pe = mla_cache(x, w_dkv, w_kr, positions=pos, rope_base=rope_base)
    q = (x @ w_q.T).view(B, S, n_heads, P + R).transpose(1, 2)      # (B, N, S, P + R)
    q_nope, q_pe = q.split([P, R], dim=-1)
    q_pe = _rope_neox(q_pe, pos, rope_base)
    k_nope = torch.einsum("bsl,npl->bnsp", kv_c, W_UK)
    v = torch.einsum("bsl,nlv->bnsv", kv_c, W_UV)
    k = torch.cat([k_nope, k_pe[:, None].expand(B, n_heads, S, R)], dim=-1)
    qq = torch.cat([q_nope, q_pe], dim=-1)
    scale = 1.0 / math.sqrt(P + R)
    attn = torch.nn.functional.scaled_dot_product_attention(qq, k, v, is_causal=causal, scale=scale)
    return attn.transpose(1, 2).reshape(B, S, n_heads * V) @ w_o.T


def mla_decode(x_t, c_kv, k_rope, w_q, w_uk, w_uv, w_o, n_heads, *, position=None,
               rope_base=10000.0):
    B, one, d = x_t.shape
    if one != 1:
        raise ValueError("decode takes one token")
    L, P, R, V, W_UK, W_UV = _split_weights(n_heads, w_q, w_uk, w_uv, w_o, d)
    if c_kv.shape[-1] != L or k_rope.shape[-1] != R:
        raise ValueError("kv cache widths do not fit")
    S = c_kv.shape[1]
    pos = S - 1 if position is None else int(position)
    q = (x_t[:, 0] @ w_q.T).view(B, n_heads, P + R)
    q_nope, q_pe = q.split([P, R], dim=-1)
    q_pe = _rope_neox(q_pe[:, None], [pos], rope_base)[:, 0]              # (B, N, R)
    # ql_nope = bmm(q_nope (N, B, P), W_UK (N, P, L)) -> (N, B, L)
    ql_nope = torch.bmm(q_nope.transpose(0, 1), W_UK).transpose(0, 1)     # (B, N, L)
    # FlashMLA reads [kv_c ; k_pe] as one 576-wide row; our two caches come separately, so
    # the 576-wide dot product is the sum of its two parts (no per-step concat copy of the cache).
    scale = 1.0 / math.sqrt(P + R)
    logits = (torch.bmm(ql_nope, c_kv.transpose(1, 2)) +
              torch.bmm(q_pe, k_rope.transpose(1, 2))) * scale            # (B, N, S)
    probs = torch.softmax(logits.to(torch.promote_types(logits.dtype, torch.float32)), dim=-1).to(x_t.dtype)
    o_lat = torch.bmm(probs, c_kv)                                        # (B, N, L)
    # _v_up_proj: bmm(o_lat (N, B, L), W_UV (N, L, V)) -> (N, B, V)
    o = torch.bmm(o_lat.transpose(0, 1), W_UV).transpose(0, 1)            # (B, N, V)
    return (o.reshape(B, 1, n_heads * V) @ w_o.T).to(x_t.dtype)


def mla_cache_bytes(n_layers, d_c, d_rope, seq_len, batch=1, bytes_per_elem=2):
    # FlashMLA / vLLM cache entry: kv_lora_rank + qk_rope_head_dim per token per layer
    return int(n_layers * batch * seq_len * (d_c + d_rope) * bytes_per_elem)


def mla_cache_saving(n_kv_heads, d_nope, d_rope, d_v, d_c):
    return (n_kv_heads * (d_nope + d_rope + d_v)) / (d_c + d_rope)


DEEPSEEK_V3_MLA_BYTES_PER_TOKEN = 61 * (512 + 64) * 2
DEEPSEEK_V3_MHA_OVER_MLA = 128 * (128 + 64 + 128) / (512 + 64)


def mla_decode_intensity(n_heads, seq_len, d_c, d_rope, batch=1, bytes_per_elem=2):
    flops = 2 * batch * n_heads * seq_len * ((d_c + d_rope) + d_c)
    mem = bytes_per_elem * batch * ((seq_len + n_heads) * (d_c + d_rope) + n_heads * d_c)
    return float(flops / mem)


def plot_mla_heads(x, w_q, w_dkv, w_uk, w_kr, n_heads, path, *, positions=None,
                   rope_base=10000.0):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as e:
        raise ImportError("plot_mla_heads: pip install matplotlib") from e
    S, d = x.shape
    L, P = w_uk.shape[1], w_uk.shape[0] // n_heads
    R = w_kr.shape[0]
    pos = torch.arange(S) if positions is None else positions
    with torch.no_grad():
        kv_c, k_pe = mla_cache(x[None], w_dkv, w_kr, positions=pos, rope_base=rope_base)
        q = (x @ w_q.T).view(S, n_heads, P + R).transpose(0, 1)        # (N, S, P + R)
        q_nope, q_pe = q.split([P, R], -1)
        q_pe = _rope_neox(q_pe, pos, rope_base)
        ql = torch.einsum("nsp,npl->nsl", q_nope, w_uk.view(n_heads, P, L))
        logits = (torch.einsum("nsl,tl->nst", ql, kv_c[0]) + torch.einsum("nsr,tr->nst", q_pe, k_pe[0])) / math.sqrt(P + R)
        logits = logits.masked_fill(torch.ones(S, S, dtype=torch.bool).triu(1), float("-inf"))
        w = torch.softmax(logits.double(), -1).numpy()
    rows = 2 if n_heads > 4 else 1
    cols = math.ceil(n_heads / rows)
    fig, axes = plt.subplots(rows, cols, figsize=(3 * cols, 3 * rows), squeeze=False)
    for i, ax in enumerate(axes.flat):
        if i < n_heads:
            ax.imshow(w[i])
            ax.set_title(f"head {i}")
            ax.set_xlabel("key")
            ax.set_ylabel("query")
        else:
            ax.axis("off")
    fig.savefig(path)
    plt.close(fig)
