"""Exercise A: attention by hand (nanogpt style submission).

Worked on paper for STUDENT_ID below; constants carried to three decimals.
"""

STUDENT_ID = None

SCORES = [[1.0, 0.0, 1.0], [0.0, 1.0, 1.0], [1.0, 1.0, 2.0]]
SCALED = [[0.707, 0.0, 0.707], [0.0, 0.707, 0.707], [0.707, 0.707, 1.414]]
WEIGHTS_FULL = [[0.401, 0.198, 0.401], [0.198, 0.401, 0.401], [0.248, 0.248, 0.503]]
OUT_FULL = [[3.0, 4.0], [3.407, 4.407], [3.51, 4.51]]
WEIGHTS_CAUSAL = [[1.0, 0.0, 0.0], [0.33, 0.67, 0.0], [0.248, 0.248, 0.503]]
OUT_CAUSAL = [[1.0, 2.0], [2.34, 3.34], [3.51, 4.51]]
ROWS_UNCHANGED_BY_MASK = (2,)


def plot_weights(weights_full, weights_causal, path):
    """Two heatmaps side by side: no mask (left), causal (right)."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as e:  # pragma: no cover
        raise ImportError("plot_weights needs matplotlib: pip install matplotlib") from e
    fig, axes = plt.subplots(1, 2, figsize=(8, 3.6))
    for ax, w, title in zip(axes, (weights_full, weights_causal),
                            ("weights, no mask", "weights, causal")):
        im = ax.imshow(w, vmin=0.0, vmax=1.0, cmap="viridis")
        ax.set_title(title)
        ax.set_xlabel("key")
        ax.set_ylabel("query")
        for i, row in enumerate(w):
            for j, val in enumerate(row):
                ax.text(j, i, f"{float(val):.3f}", ha="center", va="center", color="w", fontsize=8)
        fig.colorbar(im, ax=ax, fraction=0.046)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
