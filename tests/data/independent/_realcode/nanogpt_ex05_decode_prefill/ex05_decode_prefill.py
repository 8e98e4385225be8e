"""Exercise E, nanoGPT/minGPT style: att = (q @ k^T) * (1/sqrt(d)),
masked_fill(bias == 0, -inf), softmax, att @ v; GQA by
k.repeat_interleave(n_rep, dim=1) (as in many nanoGPT-derived GQA forks);
the KV cache grows with torch.cat like the kv-cache nanoGPT forks.
"""
from __future__ import annotations

import math
import statistics
import time

import torch
import torch.nn.functional as F


def _rope(x, pos, base):
    d = x.size(-1)
    inv = base ** (-torch.arange(0, d, 2, dtype=torch.float64, device=x.device) / d)
    ang = torch.as_tensor(pos, dtype=torch.float64, device=x.device).reshape(-1, 1) * inv
    cos, sin = ang.cos().to(x.dtype), ang.sin().to(x.dtype)
    x1, x2 = x[..., : d // 2], x[..., d // 2:]
    return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], dim=-1)


def _attention(q, k, v, causal):
    B, nh, T, hs = q.size()
    if k.size(1) == 0 or nh % k.size(1) or k.shape != v.shape:
        raise ValueError("n_head must be a multiple of n_kv_head")
    rep = nh // k.size(1)
    k = k.repeat_interleave(rep, dim=1)
    v = v.repeat_interleave(rep, dim=1)
    att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(hs))
    if causal:
        S = k.size(-2)
        bias = torch.tril(torch.ones(T, S, dtype=torch.bool, device=q.device), diagonal=S - T)
        att = att.masked_fill(~bias, float("-inf"))
    att = F.softmax(att.float() if att.dtype in (torch.float16, torch.bfloat16) else att, dim=-1)
    y = att.to(v.dtype) @ v
    return y.to(q.dtype)


def prefill_attention(q, k, v):
    return _attention(q, k, v, causal=True)


def decode_attention(q, k_cache, v_cache):
    return _attention(q, k_cache, v_cache, causal=False)


def attention_flops(batch, n_heads, s_q, s_k, d_head, causal=False):
    if causal:
        pairs = 0
        for i in range(s_q):
            pairs += max(0, min(s_k, s_k - s_q + i + 1))
    else:
        pairs = s_q * s_k
    return 4 * d_head * pairs * batch * n_heads


def attention_bytes(batch, n_heads, n_kv_heads, s_q, s_k, d_head, bytes_per_elem=2):
    q = batch * n_heads * s_q * d_head
    o = q
    k = v = batch * n_kv_heads * s_k * d_head
    return (q + k + v + o) * bytes_per_elem


def achieved(fn, args, flops, nbytes):
    for _ in range(2):
        fn(*args)
    dt = []
    for _ in range(5):
        if torch.cuda.is_available():
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        fn(*args)
        if torch.cuda.is_available():
            torch.cuda.synchronize()
        dt.append(time.perf_counter() - t0)
    sec = statistics.median(dt)
    return {"seconds": sec, "tflops": flops / sec / 1e12, "gbps": nbytes / sec / 1e9}


def bound(intensity, peak_flops, peak_bytes_per_s):
    return "compute" if intensity >= peak_flops / peak_bytes_per_s else "memory"


def decode_with_cache(x, w_q, w_k, w_v, w_o, n_heads, n_kv_heads, *, rope_base=10000.0):
    B, T, C = x.size()
    hs = w_q.size(0) // n_heads
    if n_heads % n_kv_heads or hs % 2:
        raise ValueError("bad head configuration")
    k_cache = v_cache = None
    ys = []
    for t in range(T):
        xt = x[:, t]                                                   # (B, C)
        q = (xt @ w_q.T).view(B, n_heads, 1, hs)
        k = (xt @ w_k.T).view(B, n_kv_heads, 1, hs)
        v = (xt @ w_v.T).view(B, n_kv_heads, 1, hs)
        q, k = _rope(q, [t], rope_base), _rope(k, [t], rope_base)
        k_cache = k if k_cache is None else torch.cat((k_cache, k), dim=2)
        v_cache = v if v_cache is None else torch.cat((v_cache, v), dim=2)
        y = decode_attention(q, k_cache, v_cache)                      # (B, nh, 1, hs)
        ys.append(y.reshape(B, n_heads * hs) @ w_o.T)
    return torch.stack(ys, dim=1), k_cache, v_cache
