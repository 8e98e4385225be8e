"""Exercise F, independent version."""

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils.flop_counter import FlopCounterMode


def gqa_decode_attention(q, k_cache, v_cache):
    B, h, s_q, d = q.shape
    h_kv = k_cache.shape[1]
    if s_q != 1 or h % h_kv:
        raise ValueError("need one query position and h % h_kv == 0")
    g = h // h_kv
    qg = q.reshape(B, h_kv, g, d)  # group the queries, never copy K/V
    sc = torch.einsum("bkgd,bksd->bkgs", qg, k_cache) * d ** -0.5
    o = torch.einsum("bkgs,bksd->bkgd", sc.softmax(-1), v_cache)
    return o.reshape(B, h, 1, d)


def decode_intensity(n_heads, n_kv_heads, seq_len, d_head, batch=1, bytes_per_elem=2):
    flops = 4 * batch * n_heads * seq_len * d_head
    nbytes = bytes_per_elem * batch * d_head * (2 * n_heads + 2 * n_kv_heads * seq_len)
    return flops / nbytes


class _ReadBytes(TorchDispatchMode):
    """Sum the bytes of tensor inputs of every non-view op."""

    def __init__(self):
        super().__init__()
        self.nbytes = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if not func.is_view:
            for a in torch.utils._pytree.tree_leaves((args, kwargs)):
                if isinstance(a, torch.Tensor):
                    self.nbytes += a.numel() * a.element_size()
        return func(*args, **kwargs)


def measure_intensity(n_heads, n_kv_heads, seq_len, d_head, batch=1, device="cpu"):
    dt = torch.float16
    q = torch.randn(batch, n_heads, 1, d_head, device=device, dtype=dt)
    k = torch.randn(batch, n_kv_heads, seq_len, d_head, device=device, dtype=dt)
    v = torch.randn(batch, n_kv_heads, seq_len, d_head, device=device, dtype=dt)
    fc = FlopCounterMode(display=False)
    rb = _ReadBytes()
    with fc, rb:
        gqa_decode_attention(q, k, v)
    flops = fc.get_total_flops()
    return {"flops": flops, "bytes": rb.nbytes, "intensity": flops / rb.nbytes}


def intensity_table(n_heads=32, kv_heads=(1, 8, 32), seq_len=4096, d_head=128):
    return {hk: measure_intensity(n_heads, hk, seq_len, d_head)["intensity"] for hk in kv_heads}


def kv_bytes_per_token(n_layers, n_kv_heads, d_head, bytes_per_elem=2):
    return 2 * n_layers * n_kv_heads * d_head * bytes_per_elem


def kv_cache_over_weights(n_layers, n_kv_heads, d_head, seq_len, weight_bytes, batch=1,
                          bytes_per_elem=2):
    return batch * seq_len * kv_bytes_per_token(n_layers, n_kv_heads, d_head,
                                                bytes_per_elem) / weight_bytes


def gqa_bytes_saved(n_layers, n_heads, n_kv_heads, d_head, seq_len=1, batch=1,
                    bytes_per_elem=2):
    per = 2 * n_layers * d_head * bytes_per_elem * (n_heads - n_kv_heads)
    return per * seq_len * batch


def attention_ffn_crossover(d_model, d_ff, n_heads, n_kv_heads, d_head):
    # attention(n) - ffn(n) = n * (2*d_head*h*(n+1) - (ffn - proj)) > 0
    gap = 6 * d_model * d_ff - 4 * d_model * d_head * (n_heads + n_kv_heads)
    per = 2 * d_head * n_heads
    n = gap // per          # first n with per * (n + 1) > gap
    return n if n >= 1 else 1
