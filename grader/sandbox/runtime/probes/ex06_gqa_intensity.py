"""Probes for ex06_gqa_intensity: an op-level trace of the student's
``gqa_decode_attention`` (what it reads, what it allocates, its FLOPs), and
the student's own counts next to the grader's count of the same call.

The trace is a ``TorchDispatchMode``: it sees every ``aten`` operation that
runs, after PyTorch has decomposed composite functions (``matmul`` into
``expand``/``view``/``bmm``, ``repeat_interleave`` into ``expand``/``clone``,
...).  FLOPs come from ``torch.utils.flop_counter.FlopCounterMode``.  Only
plain data comes back; the grading process adds it up.
"""
from __future__ import annotations

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten
from torch.utils.flop_counter import FlopCounterMode

MAX_OPS = 20000    # a loop over heads or positions stays well under this


class _Trace(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.ops = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        if len(self.ops) < MAX_OPS:
            ins = [t for t in tree_flatten((args, kwargs))[0] if isinstance(t, torch.Tensor)]
            outs = [t for t in tree_flatten(out)[0] if isinstance(t, torch.Tensor)]
            self.ops.append(self.row(func, ins, outs))
        return out

    def row(self, func, ins, outs) -> dict:
        """What the trace keeps of one op (ex08's trace adds to it)."""
        in_ptrs = {_ptr(t) for t in ins}
        return {
            "op": str(func.overloadpacket.__name__) + "." + str(func._overloadname),
            "is_view": bool(func.is_view),
            "aliases": any(_ptr(o) in in_ptrs for o in outs),
            "read": int(sum(t.numel() * t.element_size() for t in ins)),
            "out_shapes": [list(o.shape) for o in outs][:4],
            "out_numel": [int(o.numel()) for o in outs][:4],
        }


def _ptr(t):
    try:
        return t.untyped_storage().data_ptr()
    except (RuntimeError, NotImplementedError):
        return id(t)


def _traced(fn, *args, trace=None):
    trace = _Trace() if trace is None else trace
    with FlopCounterMode(display=False) as flops, trace:
        out = fn(*args)
    return out, {"ops": trace.ops, "flops": int(flops.get_total_flops()),
                 "truncated": len(trace.ops) >= MAX_OPS}


def _inputs(batch, n_heads, n_kv_heads, seq_len, d_head, device, dtype, seed=0):
    g = torch.Generator(device="cpu").manual_seed(seed)
    q = torch.randn(batch, n_heads, 1, d_head, generator=g).to(device, dtype)
    k = torch.randn(batch, n_kv_heads, seq_len, d_head, generator=g).to(device, dtype)
    v = torch.randn(batch, n_kv_heads, seq_len, d_head, generator=g).to(device, dtype)
    return q, k, v


def trace(module, batch, n_heads, n_kv_heads, seq_len, d_head, device="cpu",
          dtype_name="float16"):
    """Trace one call of ``module.gqa_decode_attention`` on random inputs."""
    q, k, v = _inputs(batch, n_heads, n_kv_heads, seq_len, d_head, device,
                      getattr(torch, dtype_name))
    out, info = _traced(module.gqa_decode_attention, q, k, v)
    info["out_shape"] = list(out.shape) if isinstance(out, torch.Tensor) else None
    return info


def _summary(value):
    if not isinstance(value, dict):
        return {"bad_result": type(value).__name__}
    row = {}
    for key in ("flops", "bytes", "intensity"):
        try:
            row[key] = float(value[key])
        except (KeyError, TypeError, ValueError):
            row[key] = None
    return row


def intensity_run(module, n_heads, n_kv_heads, seq_len, d_head, batch=1, device="cpu"):
    """``module.measure_intensity(...)``, with the grader's trace of the very
    call of ``gqa_decode_attention`` it makes (when it calls it through the
    module), and a trace of a fresh call of the same shape."""
    seen = []
    original = module.gqa_decode_attention

    def watched(*args, **kwargs):
        # The grader's trace sits inside the student's counters, so both see
        # the same operations.
        out, info = _traced(lambda *a: original(*a, **kwargs), *args)
        shapes = [list(a.shape) for a in args if isinstance(a, torch.Tensor)]
        dtypes = [str(a.dtype).replace("torch.", "") for a in args if isinstance(a, torch.Tensor)]
        seen.append({"shapes": shapes, "dtypes": dtypes, "trace": info})
        return out

    module.gqa_decode_attention = watched
    try:
        result = module.measure_intensity(n_heads, n_kv_heads, seq_len, d_head, batch=batch,
                                          device=device)
    finally:
        module.gqa_decode_attention = original
    fresh = trace(module, batch, n_heads, n_kv_heads, seq_len, d_head, device)
    return {"student": _summary(result), "seen": seen[:3], "fresh": fresh}


def table_run(module, n_heads, kv_heads, seq_len, d_head):
    """``module.intensity_table(...)`` as pairs, with a trace per ``h_kv``."""
    table = module.intensity_table(n_heads=n_heads, kv_heads=tuple(kv_heads), seq_len=seq_len,
                                   d_head=d_head)
    if not isinstance(table, dict):
        return {"bad_result": type(table).__name__}
    pairs = []
    for key, value in table.items():
        try:
            pairs.append([int(key), float(value)])
        except (TypeError, ValueError):
            return {"bad_result": f"dict holding {type(key).__name__}: {type(value).__name__}"}
    traces = {str(h_kv): trace(module, 1, n_heads, h_kv, seq_len, d_head) for h_kv in kv_heads}
    return {"pairs": pairs, "traces": traces}
