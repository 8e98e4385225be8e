"""Exercise E, plain version: matmul, preallocated caches, closed-form causal pairs."""

import math
import time

import torch


def prefill_attention(q, k, v):
    s = q.shape[-2]
    sc = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])
    sc = sc + torch.full((s, s), -math.inf, dtype=q.dtype, device=q.device).triu(1)
    return torch.softmax(sc, dim=-1) @ v


def decode_attention(q, k_cache, v_cache):
    sc = q @ k_cache.transpose(-1, -2) / math.sqrt(q.shape[-1])
    return torch.softmax(sc, dim=-1) @ v_cache


def attention_flops(batch, n_heads, s_q, s_k, d_head, causal=False):
    if not causal:
        pairs = s_q * s_k
    else:
        # query i sees keys 0..s_k-s_q+i (clipped to [0, s_k])
        pairs = 0
        first = s_k - s_q + 1  # keys seen by query 0
        lo = max(0, 1 - first)  # first query that sees at least one key
        hi = s_q  # exclusive
        if lo < hi:
            n = hi - lo
            a = first + lo
            pairs = n * a + n * (n - 1) // 2
    return 4 * d_head * pairs * batch * n_heads


def attention_bytes(batch, n_heads, n_kv_heads, s_q, s_k, d_head, bytes_per_elem=2):
    q = batch * n_heads * s_q * d_head
    o = q
    kv = 2 * batch * n_kv_heads * s_k * d_head
    return (q + o + kv) * bytes_per_elem


def achieved(fn, args, flops, nbytes):
    fn(*args)
    ts = []
    for _ in range(3):
        if torch.cuda.is_available():
            torch.cuda.synchronize()
        t = time.perf_counter()
        fn(*args)
        if torch.cuda.is_available():
            torch.cuda.synchronize()
        ts.append(time.perf_counter() - t)
    seconds = min(ts)
    return {"seconds": seconds, "tflops": flops / seconds / 1e12, "gbps": nbytes / seconds / 1e9}


def bound(intensity, peak_flops, peak_bytes_per_s):
    return "memory" if intensity < peak_flops / peak_bytes_per_s else "compute"


def _rope(x, pos, base):
    d = x.shape[-1]
    half = d // 2
    j = torch.arange(half, dtype=x.dtype, device=x.device)
    ang = pos * base ** (-2 * j / d)
    c, s = torch.cos(ang), torch.sin(ang)
    x1, x2 = x[..., :half], x[..., half:]
    return torch.cat([x1 * c - x2 * s, x1 * s + x2 * c], -1)


def decode_with_cache(x, w_q, w_k, w_v, w_o, n_heads, n_kv_heads, *, rope_base=10000.0):
    B, S, d = x.shape
    dh = w_q.shape[0] // n_heads
    rep = n_heads // n_kv_heads
    k_cache = torch.empty(B, n_kv_heads, S, dh, dtype=x.dtype)
    v_cache = torch.empty(B, n_kv_heads, S, dh, dtype=x.dtype)
    out = torch.empty(B, S, d, dtype=x.dtype)
    for t in range(S):
        xt = x[:, t]
        q = (xt @ w_q.T).reshape(B, n_heads, 1, dh)
        k_cache[:, :, t] = _rope((xt @ w_k.T).reshape(B, n_kv_heads, dh), t, rope_base)
        v_cache[:, :, t] = (xt @ w_v.T).reshape(B, n_kv_heads, dh)
        q = _rope(q, t, rope_base)
        kk = k_cache[:, :, : t + 1].repeat_interleave(rep, 1)
        vv = v_cache[:, :, : t + 1].repeat_interleave(rep, 1)
        o = decode_attention(q, kk, vv).reshape(B, n_heads * dh)
        out[:, t] = o @ w_o.T
    return out, k_cache, v_cache
