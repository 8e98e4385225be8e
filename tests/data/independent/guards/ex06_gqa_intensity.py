"""Exercise F: the arithmetic intensity of GQA decode, in PyTorch.

In a decode step every query head reads the KV cache to do ``4 * d_head``
FLOPs per cached position.  With multi-head attention each head has its own
K and V, so a byte read serves about one FLOP: decode is memory-bound.  With
grouped-query attention, ``h / h_kv`` query heads share each K/V head: read
once, the same bytes serve ``h / h_kv`` heads, and the intensity rises by
that factor, as long as the kernel does not copy K/V once per query head.

1. ``gqa_decode_attention``: decode attention that groups the queries of a
   K/V head together instead of repeating K/V (no ``repeat_interleave``,
   no ``expand(...).reshape(...)`` copy).
2. ``decode_intensity``: the ideal intensity, from the formulas.
3. ``measure_intensity``: the intensity your ``gqa_decode_attention``
   actually has, counted from the operations it executes.
4. ``intensity_table``: measured intensity for several ``h_kv``.

Conventions: ``q`` is ``(B, h, 1, d_head)``; caches are
``(B, h_kv, S, d_head)``; query head ``i`` uses KV head ``i // (h // h_kv)``
(the grouping of ``repeat_interleave``, not of ``tile``).  Scores are
scaled by ``1/sqrt(d_head)``; one decode query sees the whole cache.

Run the public tests with ``attn-grade check ex06``.
"""
from __future__ import annotations

import math
import operator

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten
from torch.utils.flop_counter import FlopCounterMode


class ReadBytes(TorchDispatchMode):
    """Counts the bytes of the tensors that PyTorch's operations read.

    Inside ``with ReadBytes() as rb:``, every operation (``aten`` op) that
    runs adds the sizes of its tensor inputs to ``rb.bytes``, except views
    (``transpose``, ``view``, ``expand``...), which read nothing.
    ``aten._unsafe_view`` is a view too (a reshape that never copies), even
    though PyTorch does not mark it as one.  Given to you; use it with
    ``torch.utils.flop_counter.FlopCounterMode``, which counts the FLOPs of
    matrix multiplies.
    """

    def __init__(self):
        super().__init__()
        self.bytes = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if not (func.is_view or func is torch.ops.aten._unsafe_view.default):
            for t in tree_flatten((args, kwargs))[0]:
                if isinstance(t, torch.Tensor):
                    self.bytes += t.numel() * t.element_size()
        return func(*args, **kwargs)


def _as_int(value, name: str, minimum: int = 1) -> int:
    """``value`` as an int >= ``minimum`` (no bools, no floats), else ``ValueError``."""
    if isinstance(value, bool):
        raise ValueError(f"{name} must be an integer, got a bool")
    try:
        out = operator.index(value)
    except TypeError:
        raise ValueError(f"{name} must be an integer, got {type(value).__name__} ({value!r})") from None
    if out < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {out}")
    return int(out)


def _check_decode_inputs(q, k_cache, v_cache) -> None:
    for name, t in (("q", q), ("k_cache", k_cache), ("v_cache", v_cache)):
        if not isinstance(t, torch.Tensor):
            raise ValueError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
        if t.ndim != 4:
            raise ValueError(f"{name} must be 4-D, got shape {tuple(t.shape)}")
        if not t.dtype.is_floating_point:
            raise ValueError(f"{name} must be a floating tensor, got {t.dtype}")
    if q.shape[2] != 1:
        raise ValueError(f"decode takes exactly one query position, got q of shape {tuple(q.shape)}")
    if k_cache.shape != v_cache.shape:
        raise ValueError(f"k_cache {tuple(k_cache.shape)} and v_cache {tuple(v_cache.shape)} differ")
    if not (q.device == k_cache.device == v_cache.device):
        raise ValueError("q and the caches must share a device")
    if not (q.dtype == k_cache.dtype == v_cache.dtype):
        raise ValueError(f"q and the caches must share a dtype, got {q.dtype}, {k_cache.dtype}, {v_cache.dtype}")
    b, h, _, d = q.shape
    if k_cache.shape[0] != b or k_cache.shape[3] != d:
        raise ValueError(f"caches {tuple(k_cache.shape)} do not fit q {tuple(q.shape)} (batch, d_head)")
    h_kv, s = k_cache.shape[1], k_cache.shape[2]
    if h == 0 or h_kv == 0 or h % h_kv != 0:
        raise ValueError(f"query heads ({h}) must be a positive multiple of KV heads ({h_kv})")
    if s == 0 or d == 0:
        raise ValueError("the cache must hold at least one position of positive width")


def gqa_decode_attention(q, k_cache, v_cache):
    """One decode step of grouped-query attention, without repeating K/V.

    ``q``: ``(B, h, 1, d_head)``; ``k_cache``, ``v_cache``:
    ``(B, h_kv, S, d_head)``.  Reshape the queries so that the ``h // h_kv``
    query heads of a group sit together against their one K/V head, and
    multiply against the cache as it is.  Returns ``(B, h, 1, d_head)``.
    Raises ``ValueError`` unless ``q`` has exactly one query position and
    ``h % h_kv == 0``.

    The ``1/sqrt(d_head)`` scale is applied to the (small) queries, not to
    the ``(B, h, S)`` scores, so that no extra pass over the scores is
    needed.  The caches are read as they are (views only).
    """
    _check_decode_inputs(q, k_cache, v_cache)
    b, h, _, d = q.shape
    h_kv = k_cache.shape[1]
    group = h // h_kv
    # (B, h, 1, d) -> (B, h_kv, group, d): query heads j*group .. j*group+group-1 meet KV head j.
    q_grouped = q.reshape(b, h_kv, group, d) * (1.0 / math.sqrt(d))
    scores = torch.matmul(q_grouped, k_cache.transpose(-1, -2))   # (B, h_kv, group, S)
    weights = torch.softmax(scores, dim=-1)
    out = torch.matmul(weights, v_cache)                           # (B, h_kv, group, d)
    return out.reshape(b, h, 1, d)


def decode_intensity(n_heads, n_kv_heads, seq_len, d_head, batch=1, bytes_per_elem=2):
    """Ideal FLOPs per byte of one decode step, from the formulas (a float).

    FLOPs: ``4 * batch * n_heads * seq_len * d_head`` (one query per head,
    ``seq_len`` keys, ``4 * d_head`` per pair).  Bytes: read q, K and V once,
    write the output once: ``bytes_per_elem * batch * d_head * (2 * n_heads
    + 2 * n_kv_heads * seq_len)``.  About ``n_heads / n_kv_heads`` for long
    contexts at 2 bytes per element.
    """
    n_heads = _as_int(n_heads, "n_heads")
    n_kv_heads = _as_int(n_kv_heads, "n_kv_heads")
    seq_len = _as_int(seq_len, "seq_len")
    d_head = _as_int(d_head, "d_head")
    batch = _as_int(batch, "batch")
    if n_heads % n_kv_heads != 0:
        raise ValueError(f"n_heads ({n_heads}) must be a multiple of n_kv_heads ({n_kv_heads})")
    if isinstance(bytes_per_elem, bool) or not isinstance(bytes_per_elem, (int, float)) \
            or not math.isfinite(bytes_per_elem) or bytes_per_elem <= 0:
        raise ValueError(f"bytes_per_elem must be a positive number, got {bytes_per_elem!r}")
    flops = 4 * batch * n_heads * seq_len * d_head
    nbytes = bytes_per_elem * batch * d_head * (2 * n_heads + 2 * n_kv_heads * seq_len)
    return float(flops) / float(nbytes)


def measure_intensity(n_heads, n_kv_heads, seq_len, d_head, batch=1, device="cpu"):
    """Count what ``gqa_decode_attention`` really executes, in fp16.

    Make random fp16 ``q`` ``(batch, n_heads, 1, d_head)`` and caches
    ``(batch, n_kv_heads, seq_len, d_head)`` on ``device``, run
    ``gqa_decode_attention`` once inside both ``FlopCounterMode`` (FLOPs)
    and ``ReadBytes`` (bytes read by its operations; views read nothing),
    and return ``{"flops": int, "bytes": int, "intensity": flops / bytes}``.
    Do not use the formulas here: the point is what the code does.

    The inputs are made before the counters start (making them is not part
    of the step), from a fixed seed.
    """
    n_heads = _as_int(n_heads, "n_heads")
    n_kv_heads = _as_int(n_kv_heads, "n_kv_heads")
    seq_len = _as_int(seq_len, "seq_len")
    d_head = _as_int(d_head, "d_head")
    batch = _as_int(batch, "batch")
    if n_heads % n_kv_heads != 0:
        raise ValueError(f"n_heads ({n_heads}) must be a multiple of n_kv_heads ({n_kv_heads})")
    dev = torch.device(device)
    gen = torch.Generator(device="cpu").manual_seed(0)
    q = torch.randn((batch, n_heads, 1, d_head), generator=gen).to(device=dev, dtype=torch.float16)
    k_cache = torch.randn((batch, n_kv_heads, seq_len, d_head), generator=gen).to(device=dev, dtype=torch.float16)
    v_cache = torch.randn((batch, n_kv_heads, seq_len, d_head), generator=gen).to(device=dev, dtype=torch.float16)
    flop_counter = FlopCounterMode(display=False)
    reader = ReadBytes()
    with flop_counter, reader:
        gqa_decode_attention(q, k_cache, v_cache)
    flops = int(flop_counter.get_total_flops())
    nbytes = int(reader.bytes)
    if nbytes <= 0:
        raise RuntimeError("no bytes were counted: did gqa_decode_attention run any operation?")
    return {"flops": flops, "bytes": nbytes, "intensity": flops / nbytes}


def intensity_table(n_heads=32, kv_heads=(1, 8, 32), seq_len=4096, d_head=128):
    """``{h_kv: measured intensity}`` for each ``h_kv`` in ``kv_heads``
    (``measure_intensity`` at batch 1 on the CPU).  The intensity rises with
    ``n_heads / h_kv``."""
    n_heads = _as_int(n_heads, "n_heads")
    try:
        kv_list = [_as_int(h_kv, "kv_heads entry") for h_kv in kv_heads]
    except TypeError:
        raise ValueError("kv_heads must be a sequence of positive integers") from None
    if not kv_list:
        raise ValueError("kv_heads must not be empty")
    return {
        h_kv: measure_intensity(n_heads, h_kv, seq_len, d_head, batch=1, device="cpu")["intensity"]
        for h_kv in kv_list
    }


def kv_bytes_per_token(n_layers, n_kv_heads, d_head, bytes_per_elem=2):
    """Bytes of K and V that one token adds to the cache, over every layer."""
    n_layers = _as_int(n_layers, "n_layers")
    n_kv_heads = _as_int(n_kv_heads, "n_kv_heads")
    d_head = _as_int(d_head, "d_head")
    bytes_per_elem = _as_int(bytes_per_elem, "bytes_per_elem")
    return 2 * n_layers * n_kv_heads * d_head * bytes_per_elem


def kv_cache_over_weights(n_layers, n_kv_heads, d_head, seq_len, weight_bytes, batch=1,
                          bytes_per_elem=2):
    """The KV cache of ``batch`` sequences of ``seq_len`` tokens over the weights' bytes."""
    seq_len = _as_int(seq_len, "seq_len")
    batch = _as_int(batch, "batch")
    if isinstance(weight_bytes, bool) or not weight_bytes > 0:
        raise ValueError(f"weight_bytes must be positive, got {weight_bytes!r}")
    cache = batch * seq_len * kv_bytes_per_token(n_layers, n_kv_heads, d_head, bytes_per_elem)
    return cache / float(weight_bytes)


def gqa_bytes_saved(n_layers, n_heads, n_kv_heads, d_head, seq_len=1, batch=1,
                    bytes_per_elem=2):
    """Bytes of cache GQA saves over MHA for ``batch`` sequences of ``seq_len`` tokens."""
    n_heads = _as_int(n_heads, "n_heads")
    n_kv_heads = _as_int(n_kv_heads, "n_kv_heads")
    if n_kv_heads > n_heads:
        raise ValueError(f"n_kv_heads={n_kv_heads} is more than n_heads={n_heads}")
    tokens = _as_int(seq_len, "seq_len") * _as_int(batch, "batch")
    mha = kv_bytes_per_token(n_layers, n_heads, d_head, bytes_per_elem)
    gqa = kv_bytes_per_token(n_layers, n_kv_heads, d_head, bytes_per_elem)
    return tokens * (mha - gqa)


def attention_ffn_crossover(d_model, d_ff, n_heads, n_kv_heads, d_head):
    """First causal prefill length at which a layer's attention out-FLOPs its SwiGLU FFN."""
    d_model, d_ff = _as_int(d_model, "d_model"), _as_int(d_ff, "d_ff")
    n_heads, n_kv_heads = _as_int(n_heads, "n_heads"), _as_int(n_kv_heads, "n_kv_heads")
    d_head = _as_int(d_head, "d_head")

    def excess(n):            # attention FLOPs minus FFN FLOPs at length n
        proj = 2 * d_model * d_head * (2 * n_heads + 2 * n_kv_heads) * n
        core = 4 * d_head * n_heads * (n * (n + 1) // 2)
        return proj + core - 6 * d_model * d_ff * n

    lo, hi = 1, 1
    while excess(hi) <= 0:
        lo, hi = hi + 1, hi * 2
    while lo < hi:            # smallest n in [lo, hi] with excess > 0
        mid = (lo + hi) // 2
        if excess(mid) > 0:
            hi = mid
        else:
            lo = mid + 1
    return lo
