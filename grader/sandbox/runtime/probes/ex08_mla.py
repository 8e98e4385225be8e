"""Probes for ex08_mla: an op-level trace of the student's ``mla_decode`` (what
it reads, what it allocates, its matmul FLOPs, and which of its inputs each
result comes from), and a decode loop over a growing cache built by the
student's own ``mla_cache``.

The trace is ex06's (``probes/ex06_gqa_intensity.py``): a ``TorchDispatchMode`` that sees
every ``aten`` operation after PyTorch has decomposed composite functions,
with FLOPs from ``torch.utils.flop_counter.FlopCounterMode``.  Only plain
data comes back; the grading process judges it.
"""
from __future__ import annotations

import weakref

import torch
from torch.overrides import TorchFunctionMode

from .ex06_gqa_intensity import _Trace, _traced

# Torch-level products that may broadcast an operand over batch axes; to run
# one as a single bmm, PyTorch copies a broadcast (stride-0) operand itself.
PRODUCTS = {"matmul", "__matmul__", "__rmatmul__", "einsum", "bmm", "baddbmm"}


class _ProductCalls(TorchFunctionMode):
    """Names the torch-level product running now ("" outside one).  A mode's
    own handler runs with the mode switched off, so what a product calls
    inside is seen by the dispatch trace only, marked with the product."""

    def __init__(self):
        super().__init__()
        self.inside = ""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        name = getattr(func, "__name__", "")
        if self.inside or name not in PRODUCTS:
            return func(*args, **(kwargs or {}))
        self.inside = name
        try:
            return func(*args, **(kwargs or {}))
        finally:
            self.inside = ""


def _broadcast(t) -> bool:
    """A stride-0 axis of length > 1: one value seen at many indices (an expand)."""
    return any(st == 0 and n > 1 for n, st in zip(t.shape, t.stride()))


def _distinct(t) -> int:
    """Elements of ``t`` at distinct addresses: a stride-0 axis counts once."""
    n = 1
    for size, stride in zip(t.shape, t.stride()):
        n *= size if stride else 1
    return n


class _ProvenanceTrace(_Trace):
    """ex06's trace, plus for each op:

    * ``src``: the named inputs its output derives from (a storage's names are
      the union over every op that wrote it, views and in-place writes included);
    * ``inside``: the torch-level product (``PRODUCTS``) it ran inside, or "";
    * ``library_copy``: a copy PyTorch made inside such a product of an
      operand with a stride-0 axis (or a view of that copy): the student's
      code expressed one tensor shared along that axis, the library copies it
      to run a broadcast batched matmul as one ``bmm``;
    * ``reads``: ``[src, bytes]`` per tensor read, what is shared counted
      once: a stride-0 axis (a broadcast operand, which a bmm reads once for
      the whole axis), and a library copy at the size of what it copies.
    """

    def __init__(self, named):
        super().__init__()
        self.calls = _ProductCalls()
        # Keyed by storage (one Python object per storage, dropped with it), so a
        # freed storage's names never pass to a new tensor at the same address.
        self.src = weakref.WeakKeyDictionary()
        self.shared = weakref.WeakKeyDictionary()     # library copy -> distinct/all
        for name, t in named.items():
            self.src[t.untyped_storage()] = frozenset([name])

    def __enter__(self):
        self.calls.__enter__()
        return super().__enter__()

    def __exit__(self, *exc):
        try:
            return super().__exit__(*exc)
        finally:
            self.calls.__exit__(*exc)

    def row(self, func, ins, outs) -> dict:
        row = super().row(func, ins, outs)
        reads = [[sorted(self.src.get(t.untyped_storage(), ())),
                  int(_distinct(t) * t.element_size() * self.shared.get(t.untyped_storage(), 1))]
                 for t in ins]
        src = frozenset().union(*(self.src.get(t.untyped_storage(), ()) for t in ins))
        inside = bool(self.calls.inside)
        copy = (inside and not row["aliases"] and len(ins) == 1 and len(outs) == 1
                and outs[0].numel() == ins[0].numel() and _broadcast(ins[0]))
        of_copy = (inside and row["aliases"] and bool(ins)
                   and all(t.untyped_storage() in self.shared for t in ins))
        for o in outs:
            st = o.untyped_storage()
            # A view or an in-place write adds to the storage's names; a new tensor has its own.
            self.src[st] = (self.src.get(st, frozenset()) | src) if row["aliases"] else src
            if copy:
                self.shared[st] = _distinct(ins[0]) / max(1, o.numel())
        row.update(src=sorted(src), inside=self.calls.inside, library_copy=copy or of_copy,
                   reads=reads)
        return row


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
    Returns ``{str(S): trace}``; a trace holds ``ops`` (each with its
    provenance, ``_ProvenanceTrace``), ``flops``, ``out_shape``."""
    dtype = getattr(torch, dtype_name)
    g = torch.Generator().manual_seed(seed)
    longest = max(seq_lens)
    x_t, c_kv, k_rope, w_q, w_uk, w_uv, w_o = _weights(g, batch, n_heads, longest, d, d_c,
                                                       d_rope, d_nope, d_v, dtype)
    out = {}
    for s in seq_lens:
        # Contiguous copies made before tracing: slicing is not the student's work.
        c, kr = c_kv[:, :s].contiguous(), k_rope[:, :s].contiguous()
        named = dict(x_t=x_t, c_kv=c, k_rope=kr, w_q=w_q, w_uk=w_uk, w_uv=w_uv, w_o=w_o)
        result, info = _traced(lambda *a: module.mla_decode(*a), x_t, c, kr, w_q, w_uk, w_uv,
                               w_o, n_heads, trace=_ProvenanceTrace(named))
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
