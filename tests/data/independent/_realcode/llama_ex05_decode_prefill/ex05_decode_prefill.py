"""Exercise E in the style of Meta's Llama model.py: a preallocated
cache_k / cache_v written at [:bsz, start_pos : start_pos + seqlen],
freqs_cis via torch.polar and view_as_complex (adapted to the course's
rotate-half pairing: real part = first half, imaginary part = second half),
repeat_kv on (bs, slen, n_kv_heads, head_dim), scores.float() softmax then
.type_as(xq).
"""
from __future__ import annotations

import math
import statistics
import time

import torch


def precompute_freqs_cis(dim, end, theta=10000.0, device=None):
    freqs = 1.0 / (theta ** (torch.arange(0, dim, 2, dtype=torch.float64)[: dim // 2] / dim))
    t = torch.arange(end, dtype=torch.float64)
    freqs = torch.outer(t, freqs)
    return torch.polar(torch.ones_like(freqs), freqs).to(device)      # complex128


def apply_rotary_emb(x, freqs_cis):
    """x: (bs, slen, n, hd); freqs_cis: (slen, hd/2)."""
    half = x.shape[-1] // 2
    x_ = torch.view_as_complex(torch.stack([x[..., :half], x[..., half:]], dim=-1).double().contiguous())
    x_out = x_ * freqs_cis[None, :, None, :]
    r = torch.view_as_real(x_out)
    return torch.cat([r[..., 0], r[..., 1]], dim=-1).type_as(x)


def repeat_kv(x, n_rep):
    bs, slen, n_kv_heads, head_dim = x.shape
    if n_rep == 1:
        return x
    return x[:, :, :, None, :].expand(bs, slen, n_kv_heads, n_rep, head_dim).reshape(bs, slen, n_kv_heads * n_rep, head_dim)


def _attn(xq, keys, values, mask):
    """(B, h, Sq, d) against (B, h_kv, Sk, d)."""
    if xq.dim() != 4 or keys.shape != values.shape or xq.shape[1] % keys.shape[1]:
        raise ValueError("shapes do not fit")
    n_rep = xq.shape[1] // keys.shape[1]
    keys = repeat_kv(keys.transpose(1, 2), n_rep).transpose(1, 2)
    values = repeat_kv(values.transpose(1, 2), n_rep).transpose(1, 2)
    scores = torch.matmul(xq, keys.transpose(2, 3)) / math.sqrt(xq.shape[-1])
    if mask is not None:
        scores = scores + mask
    work = torch.float64 if xq.dtype == torch.float64 else torch.float32
    scores = torch.softmax(scores.to(work), dim=-1).type_as(xq)
    return torch.matmul(scores, values).type_as(xq)


def prefill_attention(q, k, v):
    seqlen = q.shape[2]
    mask = torch.full((seqlen, seqlen), float("-inf"), device=q.device)
    mask = torch.triu(mask, diagonal=1).to(q.dtype)
    return _attn(q, k, v, mask)


def decode_attention(q, k_cache, v_cache):
    if q.shape[2] != 1:
        raise ValueError("decode takes exactly one query position")
    return _attn(q, k_cache, v_cache, None)            # Llama: mask is None when seqlen == 1


def attention_flops(batch, n_heads, s_q, s_k, d_head, causal=False):
    if not causal:
        pairs = s_q * s_k
    else:
        # query i sees clamp(s_k - s_q + i + 1, 0, s_k) keys
        pairs = 0
        off = s_k - s_q
        for i in range(s_q):
            pairs += min(max(off + i + 1, 0), s_k)
    return 4 * d_head * pairs * batch * n_heads


def attention_bytes(batch, n_heads, n_kv_heads, s_q, s_k, d_head, bytes_per_elem=2):
    return bytes_per_elem * batch * d_head * (2 * n_heads * s_q + 2 * n_kv_heads * s_k)


def achieved(fn, args, flops, nbytes):
    sync = torch.cuda.synchronize if torch.cuda.is_available() else (lambda: None)
    for _ in range(3):
        fn(*args)
    ts = []
    for _ in range(10):
        sync()
        t0 = time.perf_counter()
        fn(*args)
        sync()
        ts.append(time.perf_counter() - t0)
    s = statistics.median(ts)
    return {"seconds": s, "tflops": flops / s / 1e12, "gbps": nbytes / s / 1e9}


def bound(intensity, peak_flops, peak_bytes_per_s):
    ridge = peak_flops / peak_bytes_per_s
    return "memory" if intensity < ridge else "compute"


def decode_with_cache(x, w_q, w_k, w_v, w_o, n_heads, n_kv_heads, *, rope_base=10000.0):
    bsz, max_seq_len, dim = x.shape
    if n_heads % n_kv_heads:
        raise ValueError("n_heads % n_kv_heads != 0")
    head_dim = w_q.shape[0] // n_heads
    if head_dim % 2:
        raise ValueError("odd head_dim")
    cache_k = torch.zeros(bsz, max_seq_len, n_kv_heads, head_dim, dtype=x.dtype, device=x.device)
    cache_v = torch.zeros_like(cache_k)
    freqs_cis = precompute_freqs_cis(head_dim, max_seq_len, rope_base, device=x.device)
    outs = []
    for start_pos in range(max_seq_len):
        seqlen = 1
        h = x[:, start_pos:start_pos + seqlen]
        xq = (h @ w_q.T).view(bsz, seqlen, n_heads, head_dim)
        xk = (h @ w_k.T).view(bsz, seqlen, n_kv_heads, head_dim)
        xv = (h @ w_v.T).view(bsz, seqlen, n_kv_heads, head_dim)
        fc = freqs_cis[start_pos:start_pos + seqlen]
        xq, xk = apply_rotary_emb(xq, fc), apply_rotary_emb(xk, fc)
        cache_k[:bsz, start_pos:start_pos + seqlen] = xk
        cache_v[:bsz, start_pos:start_pos + seqlen] = xv
        keys = cache_k[:bsz, : start_pos + seqlen].transpose(1, 2)
        values = cache_v[:bsz, : start_pos + seqlen].transpose(1, 2)
        out = decode_attention(xq.transpose(1, 2), keys, values)
        outs.append(out.transpose(1, 2).reshape(bsz, seqlen, -1) @ w_o.T)
    return (torch.cat(outs, dim=1), cache_k.transpose(1, 2).contiguous(),
            cache_v.transpose(1, 2).contiguous())
