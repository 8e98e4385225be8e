"""Checks that exercise E's public and hidden suites share (shipped with the
public suite): seeded inputs, decode with a KV cache against the
reference, every known mistake named, and the words of achieved()'s units
slips."""
import math

import torch

from grader.feedback import SEEN_WITH, TOLERANCES, Feedback, check_close
from grader.reference.secret import roofline as rl

# The units slips of achieved() (the public suite's check_achieved).
MISTAKES = {
    "gflops": "GFLOP/s instead of TFLOP/s (1 TFLOP/s = 1e12 FLOP/s)",
    "tflops_binary": "binary units (2**40) instead of decimal (1e12)",
    "flops_per_s": "FLOP/s instead of TFLOP/s",
    "mbps": "MB/s instead of GB/s (1 GB/s = 1e9 bytes/s)",
    "gbps_binary": "binary units (2**30) instead of decimal (1e9)",
    "bytes_per_s": "bytes/s instead of GB/s",
}


def randn(seed, *shape, dtype=torch.float32):
    """A seeded standard-normal tensor."""
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g, dtype=dtype)


DWC_MISTAKES = ["rope_after_caching", "rope_positions_unused", "rope_on_values",
                "cache_not_grown", "decode_top_left", "decode_positions_off_by_one",
                "decode_query_at_cache_length", "kv_tile", "cache_sequence_first"]
# A cache preallocated to more slots than tokens, unmasked: the lengths tried
# (the sequence's own, and rounded up as gpt-fast's find_multiple does).
SLOT_MULTIPLES = (1, 8, 16, 32, 64, 128, 256)


def check_decode_with_cache(student, *, seed, b, s, d, h, h_kv, d_head, rope_base=10000.0,
                            dtype=torch.float64):
    """``student.decode_with_cache`` on seeded inputs of these sizes: its output
    and both caches against the reference's (the caches hold rotated keys)."""
    x = randn(seed, b, s, d, dtype=dtype)
    w_q = randn(seed + 1, h * d_head, d, dtype=dtype) / math.sqrt(d)
    w_k = randn(seed + 2, h_kv * d_head, d, dtype=dtype) / math.sqrt(d)
    w_v = randn(seed + 3, h_kv * d_head, d, dtype=dtype) / math.sqrt(d)
    w_o = randn(seed + 4, d, h * d_head, dtype=dtype) / math.sqrt(h * d_head)
    args = (x, w_q, w_k, w_v, w_o, h, h_kv)
    got = student.decode_with_cache(*args, rope_base=rope_base)
    what = f"decode_with_cache(x {tuple(x.shape)}, ..., n_heads={h}, n_kv_heads={h_kv})"
    if not isinstance(got, (tuple, list)) or len(got) != 3:
        raise Feedback(f"{what} must return (out, k_cache, v_cache); got "
                       f"{type(got).__name__}")
    want = rl.decode_with_cache(*args, rope_base=rope_base)
    wrong = {rl.MISTAKES[name]: rl.decode_with_cache(*args, rope_base=rope_base, mistake=name)
             for name in DWC_MISTAKES}
    for slots in sorted({-(-s // m) * m for m in SLOT_MULTIPLES}):
        wrong[f"{rl.MISTAKES['cache_slots_unmasked']}{SEEN_WITH}a cache of {slots} slots)"] = \
            rl.decode_with_cache(*args, rope_base=rope_base,
                                 mistake=("cache_slots_unmasked", slots))
    atol, rtol = TOLERANCES["float32"]
    for i, part in ((0, "out"), (1, "k_cache"), (2, "v_cache")):
        check_close(got[i], want[i], what=f"{what}: {part}", atol=atol, rtol=rtol,
                    mistakes={n: w[i] for n, w in wrong.items()})
