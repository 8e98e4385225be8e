"""Probes for ex05_decode_prefill: the student's kernels, timed by their own
``achieved``, at the shapes of prefill and decode (one PyTorch thread on a
CPU, as when the grader measured the machine's peaks)."""
from __future__ import annotations

import contextlib

import torch

from .. import measure


def roofline_run(module, device, prefill_shape, decode_shape, dtype_name,
                 prefill_counts, decode_counts):
    """``module.achieved`` of ``prefill_attention`` and ``decode_attention``.

    ``prefill_shape`` and ``decode_shape`` are ``(B, h, S, d_head)``;
    ``*_counts`` are ``(flops, bytes)`` computed by the grader from its own
    formulas.  Returns the two dicts as the student's code gave them."""
    dtype = getattr(torch, dtype_name)
    g = torch.Generator(device=device).manual_seed(5)

    def rand(*shape):       # made on the device: a GPU's caches are ~1 GiB
        return torch.randn(*shape, generator=g, device=device, dtype=dtype)

    b, h, s, d = prefill_shape
    q, k, v = rand(b, h, s, d), rand(b, h, s, d), rand(b, h, s, d)
    b2, h2, s2, d2 = decode_shape
    q1, kc, vc = rand(b2, h2, 1, d2), rand(b2, h2, s2, d2), rand(b2, h2, s2, d2)
    pin = measure.one_thread() if torch.device(device).type == "cpu" \
        else contextlib.nullcontext()
    out = {}
    with pin:
        for name, fn, args, (flops, nbytes) in (
                ("prefill", module.prefill_attention, (q, k, v), prefill_counts),
                ("decode", module.decode_attention, (q1, kc, vc), decode_counts)):
            got = module.achieved(fn, args, flops, nbytes)
            if not isinstance(got, dict):
                return {"bad_result": type(got).__name__}
            row = {}
            for key in ("seconds", "tflops", "gbps"):
                try:
                    row[key] = float(got[key])
                except (KeyError, TypeError, ValueError):
                    row[key] = None
            out[name] = row
    return out
