"""``attn-grade calibrate``: measure this GPU and write ex07's speed tiers for it.

ex07's speed grade is the ratio of the student's TFLOP/s to the reference
kernel's (``grader/sandbox/runtime/kernels/flash.py``), both measured in the same run.
What ratio a reasonable kernel reaches depends on the GPU model, so the
thresholds are measured per model, here, and kept in
``grader/data/gpu_thresholds.json``:

* the reference kernel, autotuned, is timed against the same kernel run with
  one plain configuration (64x64 tiles, 4 warps, 2 stages, no autotuning):
  about what a correct, straightforward student kernel reaches;
* tier 1, 2 and 3 ask for 35%, 60% and 85% of that plain kernel's ratio;
* the best backend of PyTorch's ``scaled_dot_product_attention`` is timed
  on the same inputs too, for the record (the reference should reach 0.9x).

Timing is that of the grader
(``grader/sandbox/runtime/probes/ex07_flash_attention.py``): fresh inputs for every call, L2 flushed, the device synchronized around each
call, medians of ``--repeats`` calls, the two kernels alternating.  Kept
with the medians: the clock's own cost (``overhead_s``: the same timing
around a call that does nothing) and each median's spread between repeats
(``spread``: median absolute deviation over the median), which at S = 2048
can be of the order of the kernel's time.  This runs trusted code only, in
this process; it needs CUDA and Triton.  ``benchmarks/gpu_check.py``
runs the same measurement and can write the same entry (``--thresholds``).
"""
from __future__ import annotations

import datetime
import json
import math
import statistics
from pathlib import Path

import click

from grader.paths import GPU_THRESHOLDS_PATH

DATA_PATH = GPU_THRESHOLDS_PATH
FRACTIONS = (0.35, 0.60, 0.85)      # of the plain kernel's ratio, for tiers 1, 2, 3
PLAIN = {"BLOCK_M": 64, "BLOCK_N": 64, "num_warps": 4, "num_stages": 2}


def _load(path: Path) -> dict:
    if path.is_file():
        try:
            data = json.loads(path.read_text())
        except json.JSONDecodeError as exc:
            raise click.FileError(str(path), hint=f"it is not valid JSON ({exc.msg})") from None
        data.setdefault("models", {})
        return data
    return {"about": "Speed tiers of ex07 per GPU model (see grader/gpu/calibrate.py).",
            "default": {"tiers": list(DEFAULT_TIERS)}, "models": {}}


def sdpa_best(q, k, v, causal: bool, time_one) -> tuple:
    """``(seconds, backend)`` of the fastest SDPA backend that runs these inputs."""
    import torch
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from torch.nn.functional import scaled_dot_product_attention as sdpa
    best = (math.inf, "none")
    for backend in (SDPBackend.CUDNN_ATTENTION, SDPBackend.FLASH_ATTENTION,
                    SDPBackend.EFFICIENT_ATTENTION):
        try:
            with sdpa_kernel([backend]):
                seconds = time_one(lambda a, b, c: sdpa(a, b, c, is_causal=causal), (q, k, v))
        except (RuntimeError, torch.cuda.OutOfMemoryError):
            continue                     # this backend does not take these inputs
        best = min(best, (seconds, backend.name))
    return best


def measure(repeats: int, seed: int = 0, cases=None, device: str = "cuda") -> dict:
    """Time the reference kernel (autotuned, plain) and SDPA on ``flash.SPEED_CASES``.

    ``device="cpu"`` (with ``TRITON_INTERPRET=1`` and tiny ``cases``) only
    tests this code."""
    import torch

    from grader.reference.secret import flash
    from grader.sandbox.runtime.kernels import flash as kernel
    from grader.sandbox.runtime.probes import ex07_flash_attention as probe

    dev = torch.device(device)
    flush = torch.empty(probe.FLUSH_BYTES // 4, dtype=torch.int32, device=dev) \
        if dev.type == "cuda" else None
    gen = torch.Generator(device=dev)
    gen.manual_seed(seed)

    def one(fn, args):
        seconds, _ = probe.time_call(fn, args, {}, flush)
        return seconds

    overhead = statistics.median(one(lambda: None, ()) for _ in range(max(repeats, 3)))
    rows = []
    for case in cases or flash.SPEED_CASES:
        dtype = getattr(torch, case["dtype"])
        shape_q = (case["batch"], case["heads"], case["s_q"], case["d_head"])
        shape_kv = (case["batch"], case["kv_heads"], case["s_k"], case["d_head"])
        causal = bool(case["causal"])
        tuned = lambda q, k, v: kernel.flash_attention(q, k, v, causal=causal)  # noqa: E731
        plain = lambda q, k, v: kernel.flash_attention(q, k, v, causal=causal,  # noqa: E731
                                                       config=PLAIN)
        times = {"tuned": [], "plain": [], "sdpa": []}
        backend = "none"


        for i in range(repeats + 2):                     # the first two: warm-up
            q, k, v = probe.fresh_inputs(shape_q, shape_kv, dtype, gen, dev)
            order = [("tuned", tuned), ("plain", plain)]
            for name, fn in (order if i % 2 else order[::-1]):
                seconds = one(fn, (q, k, v))
                if i >= 2:
                    times[name].append(seconds)
            seconds, backend = sdpa_best(q, k, v, causal, one)
            if i >= 2:
                times["sdpa"].append(seconds)
        flops = flash.attention_flops(case["batch"], case["heads"], case["s_q"], case["s_k"],
                                      case["d_head"], causal)
        med = {name: statistics.median(ts) for name, ts in times.items()}
        tflops = {name: float(f"{flops / t / 1e12:.4g}") for name, t in med.items()}
        variant = kernel.variant_in_use(q)
        rows.append({"s": case["s_q"], "causal": causal, "variant": variant,
                     "reference_tflops": tflops["tuned"], "plain_tflops": tflops["plain"],
                     "sdpa_tflops": tflops["sdpa"], "sdpa_backend": backend,
                     "median_s": {n: float(f"{t:.4g}") for n, t in med.items()},
                     "spread": {n: spread(ts) for n, ts in times.items()},
                     "overhead_share": float(f"{overhead / med['tuned']:.3g}"),
                     "times_s": {n: [float(f"{t:.4g}") for t in ts]
                                 for n, ts in times.items()}})
    return {"cases": rows, "overhead_s": float(f"{overhead:.4g}"), "repeats": repeats}


def spread(times) -> float | None:
    """Median absolute deviation over the median: the noise between repeats
    (None where there is none to measure: no finite, positive median)."""
    med = statistics.median(times)
    if not (math.isfinite(med) and med > 0):
        return None
    return float(f"{statistics.median(abs(t - med) for t in times) / med:.3g}")


def tiers_from(rows: list) -> list:
    """Tier thresholds from the plain kernel's geometric-mean ratio to the reference."""
    ratios = [r["plain_tflops"] / r["reference_tflops"] for r in rows]
    plain = math.exp(sum(math.log(x) for x in ratios) / len(ratios))
    return [round(f * min(plain, 1.0), 2) for f in FRACTIONS]


@click.command()
@click.option("--out", type=click.Path(path_type=Path, dir_okay=False), default=DATA_PATH,
              show_default=True, help="The thresholds file to update.")
@click.option("--repeats", type=click.IntRange(min=3), default=15, show_default=True,
              help="Timed calls per kernel and shape (medians are kept).")
@click.option("--dry-run", is_flag=True, help="Print the measured entry; write nothing.")
def calibrate(out, repeats, dry_run):
    """Measure this GPU and write ex07's speed tiers for its model."""
    import torch

    from grader.sandbox.runtime.kernels import flash as kernel
    if not torch.cuda.is_available():
        raise click.UsageError("calibrate measures a GPU, and this machine has no CUDA device.")
    if not kernel.HAS_TRITON:
        raise click.UsageError(f"calibrate {kernel.NEEDS_TRITON}.")
    _load(out)                            # a broken file is said before minutes of timing
    name = torch.cuda.get_device_name()
    measured = measure(repeats)
    refusal = fallback_refusal(name)
    if refusal:
        raise click.ClickException(refusal)
    entry = entry_from(measured)
    for r in measured["cases"]:
        click.echo(f"S={r['s']:5d} causal={str(r['causal']):5s}  reference "
                   f"{r['reference_tflops']:6.1f}  plain {r['plain_tflops']:6.1f}  SDPA "
                   f"({r['sdpa_backend']}) {r['sdpa_tflops']:6.1f} TFLOP/s  reference/SDPA "
                   f"{r['reference_tflops'] / max(r['sdpa_tflops'], 1e-9):.2f}")
    click.echo(f"{name}: reference kernel {entry['reference_variant']}, tiers {entry['tiers']}")
    if dry_run:
        return
    try:
        write_entry(out, name, entry)     # other GPU models in the file are kept
    except OSError as exc:
        raise click.FileError(str(out), hint=f"could not write it ({exc.strerror})") from None
    click.echo(f"wrote {out}")


def fallback_refusal(name: str) -> str:
    """Why no thresholds may be written (empty: they may).  When the
    descriptor variant failed here, the grade would time a slower reference
    than the one calibrated for: refuse rather than write thresholds for the
    wrong kernel."""
    from grader.sandbox.runtime.kernels import flash as kernel
    if not kernel.DESCRIPTOR_FAILURE:
        return ""
    return (f"the reference kernel's descriptor (TMA) variant failed on {name} and fell back "
            f"to pointers: {kernel.DESCRIPTOR_FAILURE[0]}; fix it (or the driver) and "
            "calibrate again; nothing was written")


def entry_from(measured: dict) -> dict:
    """This GPU model's entry in the thresholds file, from ``measure``'s result
    (the raw times left out: medians, spreads and the clock's overhead kept)."""
    import torch
    cases = [{k: v for k, v in r.items() if k != "times_s"} for r in measured["cases"]]
    entry = {"tiers": tiers_from(cases),
             "reference_variant": " / ".join(sorted({r["variant"] for r in cases})),
             "measured": cases,
             "plain_config": PLAIN,
             "versions": {"torch": torch.__version__,
                          "triton": __import__("triton").__version__},
             "date": datetime.date.today().isoformat()}
    if "overhead_s" in measured:
        entry["overhead_s"] = measured["overhead_s"]
    return entry


def write_entry(out: Path, name: str, entry: dict, start_from: Path | None = None) -> Path:
    """Merge ``entry`` for GPU model ``name`` into the thresholds file ``out``
    (other models kept; a missing ``out`` starts as ``start_from``, else
    empty), written whole or not at all."""
    data = _load(out if out.is_file() or start_from is None else start_from)
    data["models"][name] = entry
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(out.name + ".tmp")
    tmp.write_text(json.dumps(data, indent=1) + "\n")
    tmp.replace(out)
    return out


DEFAULT_TIERS = [0.15, 0.3, 0.45]    # for a GPU nobody calibrated, and a missing file


def tiers_for(gpu_name: str, path: Path = DATA_PATH) -> list:
    """The speed tiers of ``gpu_name`` from the thresholds file (else its default)."""
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, json.JSONDecodeError):
        return list(DEFAULT_TIERS)
    entry = data.get("models", {}).get(gpu_name) or data.get("default") or {}
    return [float(x) for x in entry.get("tiers", DEFAULT_TIERS)]
