"""Exercise A, written by hand (independent check of the grader).

Scores are whole numbers, so they are written as ints (a student may well);
everything else is carried to three decimals.
"""

SCORES = [[1, 0, 1], [0, 1, 1], [1, 1, 2]]
SCALED = [[0.707, 0.0, 0.707], [0.0, 0.707, 0.707], [0.707, 0.707, 1.414]]
WEIGHTS_FULL = [[0.401, 0.198, 0.401], [0.198, 0.401, 0.401], [0.248, 0.248, 0.503]]
OUT_FULL = [[3.0, 4.0], [3.407, 4.407], [3.510, 4.510]]
WEIGHTS_CAUSAL = [[1.0, 0.0, 0.0], [0.330, 0.670, 0.0], [0.248, 0.248, 0.503]]
OUT_CAUSAL = [[1.0, 2.0], [2.340, 3.340], [3.510, 4.510]]
ROWS_UNCHANGED_BY_MASK = (2,)


def plot_weights(weights_full, weights_causal, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(7, 3))
    for ax, w, title in ((left, weights_full, "no mask"), (right, weights_causal, "causal")):
        ax.matshow(w, vmin=0, vmax=1)
        ax.set_title(title)
        ax.set_xlabel("key")
        ax.set_ylabel("query")
    fig.savefig(path)
    plt.close(fig)
