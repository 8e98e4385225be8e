"""Exercise A: attention by hand (mingpt style submission).

Worked on paper for STUDENT_ID below; constants carried to three decimals.
"""

STUDENT_ID = 'outside.realcode@uni.example'

SCORES = [[1.0, -1.0, 0.0], [1.0, -1.0, 2.0], [1.0, -1.0, 1.0]]
SCALED = [[0.707, -0.707, 0.0], [0.707, -0.707, 1.414], [0.707, -0.707, 0.707]]
WEIGHTS_FULL = [[0.576, 0.14, 0.284], [0.306, 0.074, 0.62], [0.446, 0.108, 0.446]]
OUT_FULL = [[2.552, 3.408], [5.109, 5.563], [3.783, 4.446]]
WEIGHTS_CAUSAL = [[1.0, 0.0, 0.0], [0.804, 0.196, 0.0], [0.446, 0.108, 0.446]]
OUT_CAUSAL = [[0.0, 1.0], [0.391, 1.587], [3.783, 4.446]]
ROWS_UNCHANGED_BY_MASK = (2,)


def plot_weights(weights_full, weights_causal, path):
    """Heatmaps of the attention matrix, as in minGPT's demo notebooks."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as exc:
        raise ImportError("matplotlib missing: pip install matplotlib") from exc
    fig, (a0, a1) = plt.subplots(ncols=2, figsize=(9, 4), constrained_layout=True)
    im0 = a0.imshow(weights_full, interpolation="nearest")
    a0.set_title("att (no mask)")
    im1 = a1.imshow(weights_causal, interpolation="nearest")
    a1.set_title("att.masked_fill(causal)")
    for a, im in ((a0, im0), (a1, im1)):
        a.set_xlabel("key")
        a.set_ylabel("query")
        plt.colorbar(im, ax=a)
    plt.savefig(path)
    plt.close(fig)
