"""Exercise F, plain version: matmul, q pre-scaled; bytes of reads from a dispatch mode."""

import math

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils.flop_counter import FlopCounterMode


def gqa_decode_attention(q, k_cache, v_cache):
    b, h, one, d = q.shape
    h_kv = k_cache.shape[1]
    if one != 1:
        raise ValueError("gqa_decode_attention takes exactly one query position")
    if h % h_kv != 0:
        raise ValueError("h must be a multiple of h_kv")
    qg = q.view(b, h_kv, h // h_kv, d) * (1.0 / math.sqrt(d))
    p = torch.softmax(qg @ k_cache.transpose(-1, -2), dim=-1)  # (b, h_kv, g, S)
    return (p @ v_cache).view(b, h, 1, d)


def decode_intensity(n_heads, n_kv_heads, seq_len, d_head, batch=1, bytes_per_elem=2):
    flops = 2 * 2 * seq_len * d_head * n_heads * batch
    q_o = 2 * batch * n_heads * d_head
    kv = 2 * batch * n_kv_heads * seq_len * d_head
    return flops / ((q_o + kv) * bytes_per_elem)


class _Bytes(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.total = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if func._schema.name.startswith("aten::") and not func.is_view:
            for a in list(args) + list((kwargs or {}).values()):
                if isinstance(a, torch.Tensor):
                    self.total += a.nbytes
        return out


def measure_intensity(n_heads, n_kv_heads, seq_len, d_head, batch=1, device="cpu"):
    g = torch.Generator().manual_seed(0)
    q = torch.randn(batch, n_heads, 1, d_head, generator=g).half().to(device)
    k = torch.randn(batch, n_kv_heads, seq_len, d_head, generator=g).half().to(device)
    v = torch.randn(batch, n_kv_heads, seq_len, d_head, generator=g).half().to(device)
    counter = FlopCounterMode(display=False)
    nb = _Bytes()
    with counter:
        with nb:
            gqa_decode_attention(q, k, v)
    f = counter.get_total_flops()
    return {"flops": f, "bytes": nb.total, "intensity": f / nb.total}


def intensity_table(n_heads=32, kv_heads=(1, 8, 32), seq_len=4096, d_head=128):
    table = {}
    for hk in kv_heads:
        table[hk] = measure_intensity(n_heads, hk, seq_len, d_head)["intensity"]
    return table


def kv_bytes_per_token(n_layers, n_kv_heads, d_head, bytes_per_elem=2):
    k_bytes = n_layers * n_kv_heads * d_head * bytes_per_elem
    v_bytes = n_layers * n_kv_heads * d_head * bytes_per_elem
    return int(k_bytes + v_bytes)


def kv_cache_over_weights(n_layers, n_kv_heads, d_head, seq_len, weight_bytes, batch=1,
                          bytes_per_elem=2):
    total = kv_bytes_per_token(n_layers, n_kv_heads, d_head, bytes_per_elem) * seq_len * batch
    return float(total) / float(weight_bytes)


def gqa_bytes_saved(n_layers, n_heads, n_kv_heads, d_head, seq_len=1, batch=1,
                    bytes_per_elem=2):
    mha = kv_bytes_per_token(n_layers, n_heads, d_head, bytes_per_elem) * seq_len * batch
    gqa = kv_bytes_per_token(n_layers, n_kv_heads, d_head, bytes_per_elem) * seq_len * batch
    return int(mha - gqa)


def attention_ffn_crossover(d_model, d_ff, n_heads, n_kv_heads, d_head):
    # Per-token linear costs, then the first n where the quadratic core tips it.
    ffn_per_token = 2 * 3 * d_model * d_ff
    proj_per_token = 2 * (2 * d_model * n_heads * d_head + 2 * d_model * n_kv_heads * d_head)
    n = 1
    while True:
        attn = proj_per_token * n + 4 * d_head * n_heads * (n * (n + 1) // 2)
        if attn > ffn_per_token * n:
            return n
        n += 1
