"""Exercise E, independent version."""

import time

import torch


def _attend(q, k, v, causal):
    s_q, s_k = q.shape[-2], k.shape[-2]
    sc = torch.einsum("bhqd,bhkd->bhqk", q, k) / q.shape[-1] ** 0.5
    if causal:
        allowed = (torch.arange(s_k)[None, :] <= torch.arange(s_q)[:, None] + (s_k - s_q))
        sc = sc.masked_fill(~allowed.to(q.device), float("-inf"))
    return torch.einsum("bhqk,bhkd->bhqd", sc.softmax(-1), v)


def prefill_attention(q, k, v):
    return _attend(q, k, v, True)


def decode_attention(q, k_cache, v_cache):
    return _attend(q, k_cache, v_cache, False)


def attention_flops(batch, n_heads, s_q, s_k, d_head, causal=False):
    if causal:
        pairs = sum(min(s_k, max(0, s_k - s_q + i + 1)) for i in range(s_q))
    else:
        pairs = s_q * s_k
    return 4 * d_head * pairs * batch * n_heads


def attention_bytes(batch, n_heads, n_kv_heads, s_q, s_k, d_head, bytes_per_elem=2):
    return bytes_per_elem * d_head * batch * (2 * n_heads * s_q + 2 * n_kv_heads * s_k)


def achieved(fn, args, flops, nbytes):
    for _ in range(2):
        fn(*args)
    if torch.cuda.is_available():
        torch.cuda.synchronize()
    ts = []
    for _ in range(5):
        t0 = time.perf_counter()
        fn(*args)
        if torch.cuda.is_available():
            torch.cuda.synchronize()
        ts.append(time.perf_counter() - t0)
    sec = sorted(ts)[len(ts) // 2]
    return {"seconds": sec, "tflops": flops / sec / 1e12, "gbps": nbytes / sec / 1e9}


def bound(intensity, peak_flops, peak_bytes_per_s):
    return "compute" if intensity >= peak_flops / peak_bytes_per_s else "memory"


def _rope(x, pos, base):
    # x (B, h, S, d); pos (S,) absolute positions
    d = x.shape[-1]
    half = d // 2
    inv = base ** (-torch.arange(half, dtype=torch.float64) * 2 / d)
    ang = torch.as_tensor(pos, dtype=torch.float64)[:, None] * inv  # (S, half)
    cos, sin = ang.cos().to(x.dtype), ang.sin().to(x.dtype)
    a, b = x[..., :half], x[..., half:]
    return torch.cat([a * cos - b * sin, b * cos + a * sin], dim=-1)


def decode_with_cache(x, w_q, w_k, w_v, w_o, n_heads, n_kv_heads, *, rope_base=10000.0):
    B, S, d = x.shape
    dh = w_q.shape[0] // n_heads
    g = n_heads // n_kv_heads
    k_cache = x.new_zeros(B, n_kv_heads, 0, dh)
    v_cache = x.new_zeros(B, n_kv_heads, 0, dh)
    outs = []
    for t in range(S):
        xt = x[:, t:t + 1]  # (B,1,d)
        q = (xt @ w_q.T).view(B, 1, n_heads, dh).transpose(1, 2)
        k = (xt @ w_k.T).view(B, 1, n_kv_heads, dh).transpose(1, 2)
        v = (xt @ w_v.T).view(B, 1, n_kv_heads, dh).transpose(1, 2)
        q = _rope(q, [t], rope_base)
        k = _rope(k, [t], rope_base)  # rotated before it is cached
        k_cache = torch.cat([k_cache, k], dim=2)
        v_cache = torch.cat([v_cache, v], dim=2)
        kk = k_cache.repeat_interleave(g, dim=1)
        vv = v_cache.repeat_interleave(g, dim=1)
        o = decode_attention(q, kk, vv)  # (B,h,1,dh)
        outs.append(o.transpose(1, 2).reshape(B, 1, n_heads * dh) @ w_o.T)
    return torch.cat(outs, dim=1), k_cache, v_cache
