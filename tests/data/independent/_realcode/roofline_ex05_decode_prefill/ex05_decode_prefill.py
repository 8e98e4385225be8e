"""Exercise E, roofline-paper style (Williams, Waterman & Patterson 2009;
the "LLM inference unveiled" roofline analyses): closed-form FLOP and byte
counts, attainable = min(peak, intensity * bandwidth), a ridge point; the
attention itself grouped with einsum so K/V are never copied per query head
(as in FlashInfer/vLLM-style GQA decode reference code).
"""
from __future__ import annotations

import math
import statistics
import time

import torch


def _grouped_sdpa(q, k, v, causal):
    B, h, sq, d = q.shape
    hkv, sk = k.shape[1], k.shape[2]
    if hkv == 0 or h % hkv or k.shape != v.shape or k.shape[0] != B or k.shape[3] != d:
        raise ValueError(f"incompatible q {tuple(q.shape)} / kv {tuple(k.shape)}")
    g = h // hkv
    qg = q.reshape(B, hkv, g, sq, d)
    s = torch.einsum("bkgqd,bksd->bkgqs", qg, k) * (1.0 / math.sqrt(d))
    if causal:
        keep = torch.ones(sq, sk, dtype=torch.bool, device=q.device).tril(sk - sq)
        s = s.masked_fill(~keep, float("-inf"))
    p = torch.softmax(s.to(torch.promote_types(s.dtype, torch.float32)), dim=-1).to(v.dtype)
    o = torch.einsum("bkgqs,bksd->bkgqd", p, v)
    return o.reshape(B, h, sq, d).to(q.dtype)


def prefill_attention(q, k, v):
    return _grouped_sdpa(q, k, v, causal=True)


def decode_attention(q, k_cache, v_cache):
    return _grouped_sdpa(q, k_cache, v_cache, causal=False)


def _causal_pairs(s_q, s_k):
    """sum_{i<s_q} clamp(s_k - s_q + i + 1, 0, s_k), in closed form."""
    off = s_k - s_q
    # rows with a partial view: n_i = off + i + 1 in (0, s_k)  <=>  i in [max(0,-off), s_q - 1]
    lo = max(0, -off)
    if lo >= s_q:
        return 0
    a, b = off + lo + 1, off + s_q        # first and last visible counts (b <= s_k since off+s_q = s_k)
    n = s_q - lo
    return (a + b) * n // 2


def attention_flops(batch, n_heads, s_q, s_k, d_head, causal=False):
    pairs = _causal_pairs(s_q, s_k) if causal else s_q * s_k
    return int(4 * d_head * pairs * batch * n_heads)


def attention_bytes(batch, n_heads, n_kv_heads, s_q, s_k, d_head, bytes_per_elem=2):
    return int(bytes_per_elem * batch * d_head * 2 * (n_heads * s_q + n_kv_heads * s_k))


def achieved(fn, args, flops, nbytes):
    on_gpu = torch.cuda.is_available()
    for _ in range(3):
        fn(*args)
    samples = []
    for _ in range(7):
        if on_gpu:
            torch.cuda.synchronize()
            e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            e0.record()
            fn(*args)
            e1.record()
            torch.cuda.synchronize()
            samples.append(e0.elapsed_time(e1) / 1e3)
        else:
            t0 = time.perf_counter()
            fn(*args)
            samples.append(time.perf_counter() - t0)
    seconds = float(statistics.median(samples))
    return {"seconds": seconds, "tflops": flops / seconds / 1e12, "gbps": nbytes / seconds / 1e9}


def attainable(intensity, peak_flops, peak_bytes_per_s):
    return min(peak_flops, intensity * peak_bytes_per_s)


def bound(intensity, peak_flops, peak_bytes_per_s):
    ridge = peak_flops / peak_bytes_per_s
    return "compute" if intensity >= ridge else "memory"


def _rope(x, position, base):
    d = x.shape[-1]
    j = torch.arange(d // 2, dtype=torch.float64, device=x.device)
    ang = position * base ** (-2.0 * j / d)
    c, s = torch.cos(ang).to(x.dtype), torch.sin(ang).to(x.dtype)
    a, b = x[..., : d // 2], x[..., d // 2:]
    return torch.cat([a * c - b * s, b * c + a * s], -1)


def decode_with_cache(x, w_q, w_k, w_v, w_o, n_heads, n_kv_heads, *, rope_base=10000.0):
    B, S, d = x.shape
    if n_kv_heads <= 0 or n_heads % n_kv_heads or w_q.shape[0] % n_heads:
        raise ValueError("bad heads")
    dh = w_q.shape[0] // n_heads
    if dh % 2:
        raise ValueError("odd d_head")
    k_cache = x.new_empty(B, n_kv_heads, S, dh)
    v_cache = x.new_empty(B, n_kv_heads, S, dh)
    out = x.new_empty(B, S, w_o.shape[0])
    for t in range(S):
        xt = x[:, t]
        q = _rope((xt @ w_q.T).view(B, n_heads, 1, dh), t, rope_base)
        k_cache[:, :, t] = _rope((xt @ w_k.T).view(B, n_kv_heads, dh), t, rope_base)
        v_cache[:, :, t] = (xt @ w_v.T).view(B, n_kv_heads, dh)
        o = decode_attention(q, k_cache[:, :, : t + 1], v_cache[:, :, : t + 1])
        out[:, t] = o.reshape(B, n_heads * dh) @ w_o.T
    return out, k_cache, v_cache
