"""Exercise E's roofline picture: this machine's measured roofs with the
student's prefill and decode points on them.

Drawn in the grading process from numbers only (the peaks the grader
measured, the intensities and FLOP/s of the student's own ``achieved``
calls), never by student code, and kept like ex04's plot in the grader-owned
output folder (``grader.artifacts``).
"""
from __future__ import annotations

import io

FILE_NAME = "ex05_roofline.png"


def roofline_png(peak_flops: float, peak_bytes_per_s: float,
                 points: dict[str, tuple[float, float]]) -> bytes:
    """A log-log roofline as PNG bytes: attainable FLOP/s = min(peak_flops,
    intensity * peak_bytes_per_s), the ridge point marked, and each point
    ``{name: (intensity in FLOP/byte, achieved FLOP/s)}`` on it."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ridge = peak_flops / peak_bytes_per_s
    xs = [i for i, _ in points.values()] + [ridge]
    lo, hi = min(xs) / 4, max(xs) * 4                       # room around every point
    grid = [lo * (hi / lo) ** (k / 200) for k in range(201)]
    fig, ax = plt.subplots(figsize=(6.4, 4.4))
    try:
        ax.plot(grid, [min(peak_flops, x * peak_bytes_per_s) / 1e12 for x in grid],
                color="black", label="roof: min(matmul peak, intensity x copy peak)")
        ax.axvline(ridge, color="gray", linestyle=":", label=f"ridge point {ridge:.3g} FLOP/B")
        for (name, (intensity, achieved)), colour in zip(points.items(), ("C0", "C3")):
            ax.scatter([intensity], [achieved / 1e12], color=colour, zorder=3,
                       label=f"your {name}: {intensity:.3g} FLOP/B, {achieved / 1e12:.3g} TFLOP/s")
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("arithmetic intensity (FLOP/byte)")
        ax.set_ylabel("TFLOP/s")
        ax.set_title("Roofline of this machine (measured peaks)")
        ax.legend(fontsize="small", loc="lower right")
        buffer = io.BytesIO()
        fig.savefig(buffer, format="png", dpi=100)
    finally:
        plt.close(fig)
    return buffer.getvalue()


def keep_roofline(artifacts_dir, peaks, run: dict, intensities: tuple[float, float]) -> str:
    """Draw the roofline of ``peaks`` with the student's ``run`` (what their
    ``achieved`` reported for prefill and decode) into ``artifacts_dir``; the
    line that says where it went, or why it was not kept."""
    from grader import artifacts
    if artifacts_dir is None:
        return "(roofline not kept: give --artifacts DIR to keep it)"
    points = {name: (intensity, float(run[name]["tflops"]) * 1e12)
              for name, intensity in zip(("prefill", "decode"), intensities)
              if float(run[name]["tflops"]) > 0}          # a log axis has no 0
    try:
        data = roofline_png(peaks.flops, peaks.bytes_per_s, points)
    except ImportError:
        return "(no roofline drawn: matplotlib is not installed; pip install matplotlib)"
    try:
        name = artifacts.save(artifacts_dir, FILE_NAME, data)
    except (OSError, ValueError) as exc:
        return f"(no roofline saved: {exc})"
    return f"your roofline: {name} (in the output folder)"
