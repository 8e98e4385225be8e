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
