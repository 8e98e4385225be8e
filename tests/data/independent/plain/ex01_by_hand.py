"""Exercise A with unrounded floats (a student who used a calculator's full output)."""

import math

_r = 1 / math.sqrt(2)
_e = math.exp(_r)
SCORES = [[1.0, 0.0, 1.0], [0.0, 1.0, 1.0], [1.0, 1.0, 2.0]]
SCALED = [[_r, 0.0, _r], [0.0, _r, _r], [_r, _r, 2 * _r]]
_w0 = [_e / (2 * _e + 1), 1 / (2 * _e + 1), _e / (2 * _e + 1)]
_w2d = 2 * _e + _e * _e
_w2 = [_e / _w2d, _e / _w2d, _e * _e / _w2d]
WEIGHTS_FULL = [_w0, [_w0[1], _w0[0], _w0[2]], _w2]
_V = [[1, 2], [3, 4], [5, 6]]
OUT_FULL = [[sum(w * v[j] for w, v in zip(row, _V)) for j in range(2)] for row in WEIGHTS_FULL]
WEIGHTS_CAUSAL = [[1.0, 0.0, 0.0], [1 / (1 + _e), _e / (1 + _e), 0.0], list(_w2)]
OUT_CAUSAL = [[sum(w * v[j] for w, v in zip(row, _V)) for j in range(2)] for row in WEIGHTS_CAUSAL]
ROWS_UNCHANGED_BY_MASK = (2,)


def plot_weights(weights_full, weights_causal, path):
    """pcolormesh, the first row at the top, one y label for the row of panels."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    fig, axes = plt.subplots(1, 2, sharey=True, figsize=(7, 3.2))
    for ax, w, title in zip(axes, [weights_full, weights_causal], ["no mask", "causal"]):
        mesh = ax.pcolormesh(np.array(w, dtype=np.float64), cmap="magma", vmin=0.0, vmax=1.0)
        ax.invert_yaxis()
        ax.set_title(title)
        ax.set_xlabel("key")
    axes[0].set_ylabel("query")
    fig.colorbar(mesh, ax=axes)
    fig.savefig(path)
    plt.close(fig)
