"""Exercise A: attention by hand (hf style submission).

Worked on paper for STUDENT_ID below; constants carried to three decimals.
"""

STUDENT_ID = 'hf.student@uni.example'

SCORES = [[1.0, -1.0, 1.0], [2.0, -2.0, 1.0], [1.0, -1.0, 1.0]]
SCALED = [[0.707, -0.707, 0.707], [1.414, -1.414, 0.707], [0.707, -0.707, 0.707]]
WEIGHTS_FULL = [[0.446, 0.108, 0.446], [0.644, 0.038, 0.318], [0.446, 0.108, 0.446]]
OUT_FULL = [[4.0, 4.663], [2.694, 3.414], [4.0, 4.663]]
WEIGHTS_CAUSAL = [[1.0, 0.0, 0.0], [0.944, 0.056, 0.0], [0.446, 0.108, 0.446]]
OUT_CAUSAL = [[0.0, 1.0], [0.223, 1.279], [4.0, 4.663]]
ROWS_UNCHANGED_BY_MASK = (2,)


def plot_weights(weights_full, weights_causal, path):
    """Save both attention-probability maps (like output_attentions=True viz)."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        from matplotlib.figure import Figure
    except ImportError as err:
        raise ImportError("matplotlib is required for plot_weights (pip install matplotlib)") from err
    import numpy as np
    fig = Figure(figsize=(7, 3))
    axs = fig.subplots(1, 2)
    panels = {"attention probs (no mask)": np.asarray(weights_full, dtype=float),
              "attention probs (causal)": np.asarray(weights_causal, dtype=float)}
    for ax, (title, probs) in zip(axs, panels.items()):
        mappable = ax.imshow(probs)
        ax.set(title=title, xlabel="key", ylabel="query")
        fig.colorbar(mappable, ax=ax)
    fig.savefig(path, format="png")
