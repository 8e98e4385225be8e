"""Exercise E in the style of Hugging Face transformers: repeat_kv +
eager_attention_forward for both shapes, a DynamicCache-like per-layer list
that grows by torch.cat along the sequence axis, rotate_half RoPE applied
through cos/sin gathered at position_ids.
"""
from __future__ import annotations

import math
import statistics
import time

import torch


def repeat_kv(hidden_states: torch.Tensor, n_rep: int) -> torch.Tensor:
    batch, num_key_value_heads, slen, head_dim = hidden_states.shape
    if n_rep == 1:
        return hidden_states
    hidden_states = hidden_states[:, :, None, :, :].expand(batch, num_key_value_heads, n_rep, slen, head_dim)
    return hidden_states.reshape(batch, num_key_value_heads * n_rep, slen, head_dim)


def rotate_half(x):
    x1 = x[..., : x.shape[-1] // 2]
    x2 = x[..., x.shape[-1] // 2:]
    return torch.cat((-x2, x1), dim=-1)


def _cos_sin(head_dim, position_ids, base, dtype, device):
    inv_freq = 1.0 / (base ** (torch.arange(0, head_dim, 2, dtype=torch.int64).to(torch.float64) / head_dim))
    freqs = torch.as_tensor(position_ids, dtype=torch.float64)[:, None] * inv_freq[None, :]
    emb = torch.cat((freqs, freqs), dim=-1)
    return emb.cos().to(dtype=dtype, device=device), emb.sin().to(dtype=dtype, device=device)


def apply_rotary_pos_emb(q, k, cos, sin):
    return (q * cos) + (rotate_half(q) * sin), (k * cos) + (rotate_half(k) * sin)


def eager_attention_forward(query, key, value, causal):
    n_rep = query.shape[1] // key.shape[1]
    key_states = repeat_kv(key, n_rep)
    value_states = repeat_kv(value, n_rep)
    attn_weights = torch.matmul(query, key_states.transpose(2, 3)) * query.shape[-1] ** -0.5
    if causal:
        q_len, kv_len = query.shape[-2], key.shape[-2]
        cache_position = torch.arange(q_len, device=query.device) + (kv_len - q_len)
        causal_mask = torch.arange(kv_len, device=query.device)[None, :] > cache_position[:, None]
        attn_weights = attn_weights.masked_fill(causal_mask, float("-inf"))
    up = torch.promote_types(query.dtype, torch.float32)
    attn_weights = torch.nn.functional.softmax(attn_weights, dim=-1, dtype=up).to(query.dtype)
    return torch.matmul(attn_weights, value_states)


def _check_gqa(q, k, v):
    if q.dim() != 4 or k.dim() != 4 or k.shape != v.shape or q.shape[1] % k.shape[1]:
        raise ValueError(f"bad shapes q={tuple(q.shape)} k={tuple(k.shape)} v={tuple(v.shape)}")


def prefill_attention(q, k, v):
    _check_gqa(q, k, v)
    return eager_attention_forward(q, k, v, causal=True).to(q.dtype)


def decode_attention(q, k_cache, v_cache):
    _check_gqa(q, k_cache, v_cache)
    return eager_attention_forward(q, k_cache, v_cache, causal=False).to(q.dtype)


def attention_flops(batch, n_heads, s_q, s_k, d_head, causal=False):
    if causal:
        offset = s_k - s_q
        pairs = sum(min(max(offset + i + 1, 0), s_k) for i in range(s_q))
    else:
        pairs = s_q * s_k
    return int(4 * d_head * pairs * batch * n_heads)


def attention_bytes(batch, n_heads, n_kv_heads, s_q, s_k, d_head, bytes_per_elem=2):
    q_and_o = 2 * batch * n_heads * s_q * d_head
    k_and_v = 2 * batch * n_kv_heads * s_k * d_head
    return int((q_and_o + k_and_v) * bytes_per_elem)


def achieved(fn, args, flops, nbytes, warmup=2, repeats=5):
    for _ in range(warmup):
        fn(*args)
    times = []
    for _ in range(repeats):
        if torch.cuda.is_available():
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        fn(*args)
        if torch.cuda.is_available():
            torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
    s = statistics.median(times)
    return {"seconds": s, "tflops": flops / s / 1e12, "gbps": nbytes / s / 1e9}


def bound(intensity, peak_flops, peak_bytes_per_s):
    return "compute" if intensity >= peak_flops / peak_bytes_per_s else "memory"


class _DynamicCache:
    def __init__(self):
        self.key_cache = None
        self.value_cache = None

    def update(self, key_states, value_states):
        if self.key_cache is None:
            self.key_cache, self.value_cache = key_states, value_states
        else:
            self.key_cache = torch.cat([self.key_cache, key_states], dim=-2)
            self.value_cache = torch.cat([self.value_cache, value_states], dim=-2)
        return self.key_cache, self.value_cache


def decode_with_cache(x, w_q, w_k, w_v, w_o, n_heads, n_kv_heads, *, rope_base=10000.0):
    bsz, seq_len, _ = x.shape
    if n_heads % n_kv_heads:
        raise ValueError("n_heads must be a multiple of n_kv_heads")
    head_dim = w_q.shape[0] // n_heads
    if head_dim % 2:
        raise ValueError("head_dim must be even")
    cache = _DynamicCache()
    outputs = []
    for t in range(seq_len):
        hidden = x[:, t:t + 1]                                   # (B, 1, d)
        q = (hidden @ w_q.T).view(bsz, 1, n_heads, head_dim).transpose(1, 2)
        k = (hidden @ w_k.T).view(bsz, 1, n_kv_heads, head_dim).transpose(1, 2)
        v = (hidden @ w_v.T).view(bsz, 1, n_kv_heads, head_dim).transpose(1, 2)
        cos, sin = _cos_sin(head_dim, [t], rope_base, x.dtype, x.device)
        q, k = apply_rotary_pos_emb(q, k, cos, sin)
        k_all, v_all = cache.update(k, v)
        attn = decode_attention(q, k_all, v_all)                 # (B, h, 1, d_head)
        outputs.append(attn.transpose(1, 2).reshape(bsz, 1, n_heads * head_dim) @ w_o.T)
    return torch.cat(outputs, dim=1), cache.key_cache, cache.value_cache
