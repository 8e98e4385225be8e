"""Exercise A: attention by hand (llama style submission).

Worked on paper for STUDENT_ID below; constants carried to three decimals.
"""

STUDENT_ID = 'llama.student@uni.example'

SCORES = [[0.0, -1.0, 0.0], [1.0, 0.0, -1.0], [0.0, 1.0, 0.0]]
SCALED = [[0.0, -0.707, 0.0], [0.707, 0.0, -0.707], [0.0, 0.707, 0.0]]
WEIGHTS_FULL = [[0.401, 0.198, 0.401], [0.576, 0.284, 0.14], [0.248, 0.503, 0.248]]
OUT_FULL = [[5.0, 6.599], [4.128, 5.552], [5.0, 6.752]]
WEIGHTS_CAUSAL = [[1.0, 0.0, 0.0], [0.67, 0.33, 0.0], [0.248, 0.503, 0.248]]
OUT_CAUSAL = [[3.0, 4.0], [3.66, 4.991], [5.0, 6.752]]
ROWS_UNCHANGED_BY_MASK = (2,)


def plot_weights(weights_full, weights_causal, path):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise ImportError("install matplotlib to plot: pip install matplotlib")
    fig = plt.figure(figsize=(8, 4))
    left = fig.add_subplot(1, 2, 1)
    right = fig.add_subplot(1, 2, 2)
    left.imshow(weights_full, cmap="magma")
    left.set_title("no mask")
    right.imshow(weights_causal, cmap="magma")
    right.set_title("causal")
    for ax in (left, right):
        ax.set_xlabel("key")
        ax.set_ylabel("query")
    fig.savefig(path)
    plt.close(fig)
