"""The reference Triton kernel against PyTorch's attention backends.

Prints forward TFLOP/s of ``grader/sandbox/runtime/kernels/flash.py``'s kernel (autotuned)
and of every backend of ``torch.nn.functional.scaled_dot_product_attention``
that runs the inputs (cuDNN, FlashAttention-2, memory-efficient), on the
same inputs in the same run, and the ratio of the reference to the best
backend.  Target on an H200: at least 0.9 everywhere.

    python benchmarks/bench_flash.py                   # B=4, h=32, d_head=128, bf16
    python benchmarks/bench_flash.py --seq 1024 4096 8192 --repeats 30 --variants

The reference picks its tensor-descriptor kernel (TMA) on Hopper and its
pointer kernel elsewhere; ``--variants`` times both apart.

FLOPs: two matmuls of 2 * S_q * S_k * d_head each per (batch, head), so
4 * B * h * S_q * S_k * d_head; causal masks skip about half of the (query,
key) pairs and count half (``grader.reference.secret.flash.attention_flops``).
Timing: fresh random inputs for every call, L2 flushed before it, the whole
device synchronized around it, the median of ``--repeats`` calls, the
contenders alternating (``grader/sandbox/runtime/probes/ex07_flash_attention.py``'s
``time_call``).
A benchmark, not a test: it needs CUDA and prints a table.
"""
from __future__ import annotations

import argparse
import statistics
import sys


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--heads", type=int, default=32)
    parser.add_argument("--d-head", type=int, default=128)
    parser.add_argument("--seq", type=int, nargs="+", default=[1024, 4096, 8192])
    parser.add_argument("--dtype", choices=["bfloat16", "float16", "float32"],
                        default="bfloat16")
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--variants", action="store_true",
                        help="Also time the reference's pointer and descriptor kernels apart.")
    parser.add_argument("--smoke", action="store_true",
                        help="Check this script on the CPU (Triton's interpreter, tiny "
                             "float32 shapes); the numbers mean nothing.")
    args = parser.parse_args(argv)
    if args.smoke:                       # before the kernels' module is imported
        import os
        os.environ["TRITON_INTERPRET"] = "1"
        args.batch, args.heads, args.d_head, args.seq = 1, 2, 16, [32]
        args.dtype, args.repeats, args.warmup = "float32", 2, 1

    import torch
    if not torch.cuda.is_available() and not args.smoke:
        print("bench_flash.py measures a GPU, and this machine has no CUDA device.",
              file=sys.stderr)
        return 2
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from torch.nn.functional import scaled_dot_product_attention as sdpa

    from grader.reference.secret import flash
    from grader.sandbox.runtime.kernels import flash as kernel
    from grader.sandbox.runtime.probes import ex07_flash_attention as probe
    if not flash.HAS_TRITON:
        print(f"bench_flash.py {flash.NEEDS_TRITON}", file=sys.stderr)
        return 2

    dev = torch.device("cpu" if args.smoke else "cuda")
    dtype = getattr(torch, args.dtype)
    flush = None if args.smoke else torch.empty(probe.FLUSH_BYTES // 4, dtype=torch.int32,
                                                device=dev)
    gen = torch.Generator(device=dev)
    gen.manual_seed(0)
    backends = [SDPBackend.CUDNN_ATTENTION, SDPBackend.FLASH_ATTENTION,
                SDPBackend.EFFICIENT_ATTENTION]

    def with_backend(backend, causal):
        def run(q, k, v):
            with sdpa_kernel([backend]):
                return sdpa(q, k, v, is_causal=causal)
        return run

    where = "CPU (interpreter smoke test)" if args.smoke else torch.cuda.get_device_name()
    print(f"{where}, B={args.batch}, h={args.heads}, "
          f"d_head={args.d_head}, {args.dtype}; forward TFLOP/s, median of {args.repeats}")
    header = f"{'S':>6} {'causal':>6} {'reference':>10} " + \
        " ".join(f"{b.name.replace('_ATTENTION', '').lower():>10}" for b in backends) + \
        f" {'ref/best':>9}"
    print(header)
    worst = float("inf")
    for s in args.seq:
        for causal in (False, True):
            shape = (args.batch, args.heads, s, args.d_head)
            contenders = {"reference": lambda q, k, v, c=causal: kernel.flash_attention(
                q, k, v, causal=c)}
            if args.variants:
                for variant in ("pointers", "descriptors"):
                    contenders[variant] = lambda q, k, v, c=causal, w=variant: \
                        kernel.flash_attention(q, k, v, causal=c, variant=w)
            for b in backends:
                contenders[b.name] = with_backend(b, causal)
            times = {name: [] for name in contenders}
            for i in range(args.warmup + args.repeats):
                q, k, v = probe.fresh_inputs(shape, shape, dtype, gen, dev)
                names = list(contenders)
                names = names[i % len(names):] + names[:i % len(names)]   # rotate the order
                for name in names:
                    if times[name] is None:
                        continue
                    try:
                        seconds, _ = probe.time_call(contenders[name], (q, k, v), {}, flush)
                    except RuntimeError:        # the backend does not take these inputs
                        times[name] = None
                        continue
                    if i >= args.warmup:
                        times[name].append(seconds)
            flops = flash.attention_flops(args.batch, args.heads, s, s, args.d_head, causal)
            tflops = {name: (flops / statistics.median(ts) / 1e12 if ts else None)
                      for name, ts in times.items()}
            best = max((tflops[b.name] for b in backends if tflops[b.name]), default=None)
            ratio = tflops["reference"] / best if best else float("nan")
            worst = min(worst, ratio) if best else worst
            cells = " ".join(f"{tflops[b.name]:10.1f}" if tflops[b.name] else f"{'-':>10}"
                             for b in backends)
            extra = "".join(f"  {n}: {tflops[n]:.1f}" for n in ("pointers", "descriptors")
                            if tflops.get(n))
            print(f"{s:6d} {str(causal):>6} {tflops['reference']:10.1f} {cells} {ratio:9.2f}"
                  f"{extra}")
    print(f"lowest reference/best ratio: {worst:.2f} (target: at least 0.90)")
    if kernel.DESCRIPTOR_FAILURE:
        print(f"the descriptor kernel failed here, pointers served: "
              f"{kernel.DESCRIPTOR_FAILURE[0]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
