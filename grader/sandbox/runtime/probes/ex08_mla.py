"""Probes for ex08_mla: an op-level trace of the student's ``mla_decode`` (what
it reads, what it allocates, its matmul FLOPs), and a decode loop over a
growing cache built by the student's own ``mla_cache``.

The trace is ex06's (``probes/ex06_gqa_intensity.py``): a ``TorchDispatchMode`` that sees
every ``aten`` operation after PyTorch has decomposed composite functions,
with FLOPs from ``torch.utils.flop_counter.FlopCounterMode``.  Only plain
data comes back; the grading process judges it.
"""
from __future__ import annotations

import torch

from .ex06_gqa_intensity import _traced


def _weights(g, batch, n_heads, seq_len, d, d_c, d_rope, d_nope, d_v, dtype):
    def w(rows, cols):
        return (torch.randn(rows, cols, generator=g, dtype=torch.float64) / cols ** 0.5).to(dtype)
    x_t = torch.randn(batch, 1, d, generator=g, dtype=torch.float64).to(dtype)
    c_kv = torch.randn(batch, seq_len, d_c, generator=g, dtype=torch.float64).to(dtype)
    k_rope = torch.randn(batch, seq_len, d_rope, generator=g, dtype=torch.float64).to(dtype)
    return (x_t, c_kv, k_rope, w(n_heads * (d_nope + d_rope), d), w(n_heads * d_nope, d_c),
            w(n_heads * d_v, d_c), w(d, n_heads * d_v))


def trace_decode(module, batch, n_heads, seq_lens, d, d_c, d_rope, d_nope, d_v,
                 dtype_name="float32", seed=0):
    """Trace one call of ``module.mla_decode`` per cache length in ``seq_lens``
    (same weights and new token; the longer cache extends the shorter one).
    Returns ``{str(S): trace}``; a trace holds ``ops``, ``flops``, ``out_shape``."""
    dtype = getattr(torch, dtype_name)
    g = torch.Generator().manual_seed(seed)
    longest = max(seq_lens)
    x_t, c_kv, k_rope, w_q, w_uk, w_uv, w_o = _weights(g, batch, n_heads, longest, d, d_c,
                                                       d_rope, d_nope, d_v, dtype)
    out = {}
    for s in seq_lens:
        # Contiguous copies made before tracing: slicing is not the student's work.
        c, kr = c_kv[:, :s].contiguous(), k_rope[:, :s].contiguous()
        result, info = _traced(lambda *a: module.mla_decode(*a), x_t, c, kr, w_q, w_uk, w_uv,
                               w_o, n_heads)
        info["out_shape"] = list(result.shape) if isinstance(result, torch.Tensor) else None
        out[str(s)] = info
    return out


def decode_loop(module, x, w_q, w_dkv, w_uk, w_uv, w_kr, w_o, n_heads, positions=None,
                rope_base=10000.0):
    """Generate with a growing cache: for each token t, ``mla_cache`` of that
    token alone (at its position) is appended to the cache, then
    ``mla_decode`` of the token against the whole cache so far.  Returns the
    outputs stacked ``(B, S, d)``, or ``{"bad_result": ...}``."""
    s = x.shape[1]
    pos = torch.arange(s) if positions is None else torch.as_tensor(positions)
    caches, kroped, outs = [], [], []
    for t in range(s):
        p = pos[t:t + 1]
        c, kr = module.mla_cache(x[:, t:t + 1], w_dkv, w_kr, positions=p, rope_base=rope_base)
        if not (isinstance(c, torch.Tensor) and isinstance(kr, torch.Tensor)):
            return {"bad_result": f"mla_cache returned {type(c).__name__}, "
                                  f"{type(kr).__name__}"}
        caches.append(c)
        kroped.append(kr)
        o = module.mla_decode(x[:, t:t + 1], torch.cat(caches, 1), torch.cat(kroped, 1), w_q,
                              w_uk, w_uv, w_o, n_heads, position=int(p[0]),
                              rope_base=rope_base)
        if not isinstance(o, torch.Tensor) or o.dim() != 3 or o.shape[1] != 1:
            got = list(o.shape) if isinstance(o, torch.Tensor) else type(o).__name__
            return {"bad_result": f"mla_decode returned {got} at step {t} "
                                  f"(expected a tensor (B, 1, d))"}
        outs.append(o)
    return torch.cat(outs, 1)
