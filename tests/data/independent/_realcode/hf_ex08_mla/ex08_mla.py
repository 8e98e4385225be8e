"""Exercise H in the style of Hugging Face transformers' DeepseekV3Attention
(modeling_deepseek_v3.py): q split into q_pass / q_rot with torch.split,
kv_b_proj output viewed (bsz, seq, heads, qk_nope_head_dim + v_head_dim)
and split into k_pass / value_states, k_rot expanded over the heads,
rotate_half + apply_rotary_pos_emb, eager attention with an additive causal
mask and softmax(dtype=float32) cast back (float64 kept).  HF has no
absorbed decode, so mla_decode follows the same naming with the weights
absorbed as the docstring asks.
"""
from __future__ import annotations

import math

import torch
from torch import nn


def rotate_half(x):
    x1 = x[..., : x.shape[-1] // 2]
    x2 = x[..., x.shape[-1] // 2:]
    return torch.cat((-x2, x1), dim=-1)


class DeepseekV3RotaryEmbedding:
    def __init__(self, dim, base, device=None):
        if dim % 2:
            raise ValueError(f"qk_rope_head_dim must be even, got {dim}")
        self.inv_freq = 1.0 / (base ** (torch.arange(0, dim, 2, dtype=torch.int64).to(device=device, dtype=torch.float64) / dim))

    def __call__(self, x, position_ids):
        freqs = torch.as_tensor(position_ids, dtype=torch.float64, device=x.device).reshape(-1, 1) * self.inv_freq[None, :]
        emb = torch.cat((freqs, freqs), dim=-1)
        return emb.cos().to(x.dtype), emb.sin().to(x.dtype)


def apply_rotary_pos_emb(x, cos, sin, unsqueeze_dim=None):
    if unsqueeze_dim is not None:
        cos, sin = cos.unsqueeze(unsqueeze_dim), sin.unsqueeze(unsqueeze_dim)
    return (x * cos) + (rotate_half(x) * sin)


class _Config:
    def __init__(self, n_heads, w_q, w_uk, w_uv, w_o=None, w_dkv=None, w_kr=None, hidden=None):
        self.num_heads = n_heads
        if n_heads < 1 or w_uk.shape[0] % n_heads or w_uv.shape[0] % n_heads or w_q.shape[0] % n_heads:
            raise ValueError("projection rows must be multiples of num_heads")
        self.kv_lora_rank = w_uk.shape[1]
        self.qk_nope_head_dim = w_uk.shape[0] // n_heads
        self.v_head_dim = w_uv.shape[0] // n_heads
        self.qk_head_dim = w_q.shape[0] // n_heads
        self.qk_rope_head_dim = self.qk_head_dim - self.qk_nope_head_dim
        self.hidden_size = w_q.shape[1] if hidden is None else hidden
        if w_uv.shape[1] != self.kv_lora_rank or w_q.shape[1] != self.hidden_size:
            raise ValueError("kv_b_proj / q_proj shapes do not fit")
        if self.qk_rope_head_dim <= 0 or self.qk_rope_head_dim % 2:
            raise ValueError("qk_rope_head_dim must be positive and even")
        if w_o is not None and tuple(w_o.shape) != (self.hidden_size, n_heads * self.v_head_dim):
            raise ValueError("o_proj shape does not fit")
        if w_dkv is not None and tuple(w_dkv.shape) != (self.kv_lora_rank, self.hidden_size):
            raise ValueError("kv_a_proj shape does not fit")
        if w_kr is not None and tuple(w_kr.shape) != (self.qk_rope_head_dim, self.hidden_size):
            raise ValueError("k_rope proj shape does not fit")
        self.scaling = self.qk_head_dim ** (-0.5)


def mla_cache(x, w_dkv, w_kr, *, positions=None, rope_base=10000.0):
    if w_kr.shape[0] % 2:
        raise ValueError("d_rope must be even")
    if w_dkv.shape[1] != x.shape[-1] or w_kr.shape[1] != x.shape[-1]:
        raise ValueError("w_dkv / w_kr do not fit x")
    bsz, seq_length, _ = x.shape
    position_ids = torch.arange(seq_length) if positions is None else positions
    compressed_kv = nn.functional.linear(x, w_dkv)
    k_rot = nn.functional.linear(x, w_kr)
    cos, sin = DeepseekV3RotaryEmbedding(w_kr.shape[0], rope_base, x.device)(x, position_ids)
    return compressed_kv, apply_rotary_pos_emb(k_rot, cos, sin)


def _eager(query, key, value, mask, scaling, dtype):
    attn_weights = torch.matmul(query, key.transpose(2, 3)) * scaling
    if mask is not None:
        attn_weights = attn_weights + mask
    attn_weights = nn.functional.softmax(attn_weights, dim=-1, dtype=torch.promote_types(dtype, torch.float32)).to(dtype)
    return torch.matmul(attn_weights, value), attn_weights


def _q_states(x, w_q, cfg, position_ids, rope_base):
    bsz, seq_length, _ = x.shape
    q_states = nn.functional.linear(x, w_q).view(bsz, seq_length, -1, cfg.qk_head_dim).transpose(1, 2)
    q_pass, q_rot = torch.split(q_states, [cfg.qk_nope_head_dim, cfg.qk_rope_head_dim], dim=-1)
    cos, sin = DeepseekV3RotaryEmbedding(cfg.qk_rope_head_dim, rope_base, x.device)(x, position_ids)
    return q_pass, apply_rotary_pos_emb(q_rot, cos, sin)


def mla_attention(x, w_q, w_dkv, w_uk, w_uv, w_kr, w_o, n_heads, *, causal=True,
                  positions=None, rope_base=10000.0):
    cfg = _Config(n_heads, w_q, w_uk, w_uv, w_o, w_dkv, w_kr, hidden=x.shape[-1])
    bsz, seq_length, _ = x.shape
    position_ids = torch.arange(seq_length) if positions is None else positions
    q_pass, q_rot = _q_states(x, w_q, cfg, position_ids, rope_base)
    compressed_kv, k_rot = mla_cache(x, w_dkv, w_kr, positions=position_ids, rope_base=rope_base)
    kv_b_proj = torch.cat([w_uk.view(n_heads, cfg.qk_nope_head_dim, -1),
                           w_uv.view(n_heads, cfg.v_head_dim, -1)], dim=1).reshape(-1, cfg.kv_lora_rank)
    k_pass = nn.functional.linear(compressed_kv, kv_b_proj).view(
        bsz, seq_length, -1, cfg.qk_nope_head_dim + cfg.v_head_dim).transpose(1, 2)
    k_pass, value_states = torch.split(k_pass, [cfg.qk_nope_head_dim, cfg.v_head_dim], dim=-1)
    k_rot = k_rot.view(bsz, 1, seq_length, cfg.qk_rope_head_dim).expand(*k_pass.shape[:-1], -1)
    query_states = torch.cat((q_pass, q_rot), dim=-1)
    key_states = torch.cat((k_pass, k_rot), dim=-1)
    mask = None
    if causal:
        mask = torch.zeros(seq_length, seq_length, dtype=x.dtype, device=x.device)
        mask = mask.masked_fill(torch.ones_like(mask, dtype=torch.bool).triu(1), float("-inf"))
    attn_output, _ = _eager(query_states, key_states, value_states, mask, cfg.scaling, x.dtype)
    attn_output = attn_output.transpose(1, 2).reshape(bsz, seq_length, -1).contiguous()
    return nn.functional.linear(attn_output, w_o)


def mla_decode(x_t, c_kv, k_rope, w_q, w_uk, w_uv, w_o, n_heads, *, position=None,
               rope_base=10000.0):
    cfg = _Config(n_heads, w_q, w_uk, w_uv, w_o, hidden=x_t.shape[-1])
    if c_kv.shape[-1] != cfg.kv_lora_rank or k_rope.shape[-1] != cfg.qk_rope_head_dim or x_t.shape[1] != 1:
        raise ValueError("cache widths do not fit the weights")
    bsz, kv_len = c_kv.shape[0], c_kv.shape[1]
    position_ids = [kv_len - 1 if position is None else int(position)]
    q_pass, q_rot = _q_states(x_t, w_q, cfg, position_ids, rope_base)          # (B, H, 1, .)
    w_uk_h = w_uk.view(n_heads, cfg.qk_nope_head_dim, cfg.kv_lora_rank)
    w_uv_h = w_uv.view(n_heads, cfg.v_head_dim, cfg.kv_lora_rank)
    q_lat = torch.matmul(q_pass, w_uk_h.unsqueeze(0))                           # (B, H, 1, d_c)
    scores = (torch.matmul(q_lat, c_kv.unsqueeze(1).transpose(2, 3)) +
              torch.matmul(q_rot, k_rope.unsqueeze(1).transpose(2, 3))) * cfg.scaling   # (B, H, 1, S)
    probs = nn.functional.softmax(scores, dim=-1, dtype=torch.promote_types(x_t.dtype, torch.float32)).to(x_t.dtype)
    o_lat = torch.matmul(probs, c_kv.unsqueeze(1))                              # (B, H, 1, d_c)
    o = torch.matmul(o_lat, w_uv_h.transpose(1, 2).unsqueeze(0))                # (B, H, 1, d_v)
    return nn.functional.linear(o.transpose(1, 2).reshape(bsz, 1, -1), w_o)


def mla_cache_bytes(n_layers, d_c, d_rope, seq_len, batch=1, bytes_per_elem=2):
    return n_layers * seq_len * batch * (d_c + d_rope) * bytes_per_elem


def mla_cache_saving(n_kv_heads, d_nope, d_rope, d_v, d_c):
    return n_kv_heads * ((d_nope + d_rope) + d_v) / (d_c + d_rope)


DEEPSEEK_V3_MLA_BYTES_PER_TOKEN = 70272
DEEPSEEK_V3_MHA_OVER_MLA = 40960 / 576


def mla_decode_intensity(n_heads, seq_len, d_c, d_rope, batch=1, bytes_per_elem=2):
    flops = batch * n_heads * seq_len * (2 * (d_c + d_rope) + 2 * d_c)
    moved = batch * bytes_per_elem * (seq_len * (d_c + d_rope) + n_heads * (2 * d_c + d_rope))
    return flops / moved


def plot_mla_heads(x, w_q, w_dkv, w_uk, w_kr, n_heads, path, *, positions=None,
                   rope_base=10000.0):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as err:
        raise ImportError("matplotlib is required for plot_mla_heads: pip install matplotlib") from err
    fake_uv = w_uk                                   # only the score path is needed
    cfg = _Config(n_heads, w_q, w_uk, fake_uv, w_dkv=w_dkv, w_kr=w_kr, hidden=x.shape[-1])
    xs = x.unsqueeze(0)
    S = x.shape[0]
    position_ids = torch.arange(S) if positions is None else positions
    with torch.no_grad():
        q_pass, q_rot = _q_states(xs, w_q, cfg, position_ids, rope_base)
        c_kv, k_rot = mla_cache(xs, w_dkv, w_kr, positions=position_ids, rope_base=rope_base)
        k_pass = nn.functional.linear(c_kv, w_uk).view(1, S, n_heads, -1).transpose(1, 2)
        key = torch.cat((k_pass, k_rot.unsqueeze(1).expand(-1, n_heads, -1, -1)), -1)
        mask = torch.zeros(S, S, dtype=x.dtype).masked_fill(torch.ones(S, S, dtype=torch.bool).triu(1), float("-inf"))
        _, w = _eager(torch.cat((q_pass, q_rot), -1), key, key, mask, cfg.scaling, x.dtype)
    w = w[0].double().numpy()
    fig, axes = plt.subplots(1, n_heads, figsize=(3 * n_heads, 3), squeeze=False)
    for i in range(n_heads):
        axes[0, i].imshow(w[i])
        axes[0, i].set_title(f"head {i}")
        axes[0, i].set_xlabel("key")
        axes[0, i].set_ylabel("query")
    fig.savefig(path)
    plt.close(fig)
