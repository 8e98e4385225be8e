"""Exercise A: attention by hand.

Work through scaled dot-product attention for three tokens with pencil and
paper (or a calculator), then fill in each constant below as a nested list
of floats, carried to three decimals.  No NumPy needed: the point is to feel
every step once.

Your own numbers.  Each student works on their own Q, K and V, derived from
their student identifier: set ``STUDENT_ID`` below to yours (as text, the
way your course writes it) and print your matrices with::

    attn-grade variant YOUR_ID

(in a notebook: ``from grader.variants import inputs_for;
print(inputs_for("YOUR_ID").text())``).  The grader recomputes every step
for that identifier; where your course grades from a roster, it must be the
identifier the roster gives you, or this exercise earns no points.  Without
a ``STUDENT_ID`` (``None``), the common exercise below is graded: the
chapter's Q and K with its own V::

    Q = [[1, 0],        K = [[1, 0],        V = [[1, 2],
         [0, 1],             [0, 1],             [3, 4],
         [1, 1]]             [1, 1]]             [5, 6]]

The chapter works the same Q and K through, step by step, with
``V = [[10, 0], [0, 10], [5, 5]]``: use it as the worked example, then do
the same steps on your own numbers.  ``d_head = 2`` in every variant.

Steps, each a constant (rows are queries, columns are keys):

1. ``SCORES``: ``Q @ K.T``, shape 3 x 3.
2. ``SCALED``: ``SCORES / sqrt(d_head)``.
3. ``WEIGHTS_FULL``: softmax of each row of ``SCALED`` (no mask).
4. ``OUT_FULL``: ``WEIGHTS_FULL @ V``, shape 3 x 2.
5. ``WEIGHTS_CAUSAL``: softmax of each row of ``SCALED`` after the causal
   mask (query ``i`` may only see keys ``0 .. i``; masked scores are
   ``-inf``, so their weights are exactly 0).
6. ``OUT_CAUSAL``: ``WEIGHTS_CAUSAL @ V``.
7. ``ROWS_UNCHANGED_BY_MASK``: a tuple of the row indices (counting from 0)
   whose output is the same with and without the mask.

Keep three decimals: two are not enough (rounding row 2's weights to 0.25,
0.25, 0.50 moves its output by about 0.01).  Each step is graded on its
own, to 0.01: a step computed correctly from your own earlier (wrong)
answer still earns its point, so an early slip costs only that step (not
from an answer that carries no work, like all zeros).
"""

# Your student identifier as text, e.g. STUDENT_ID = "s1234567"; None: the common exercise.
# (An extension of the contract, which is silent about it.)
STUDENT_ID = None

# Worked by hand for the common exercise (Q = K = [[1, 0], [0, 1], [1, 1]],
# V = [[1, 2], [3, 4], [5, 6]], d_head = 2), every entry carried to three
# decimals.  1/sqrt(2) = 0.70711; e^0.70711 = 2.02811; e^1.41421 = 4.11325.

# Step 1: Q @ K.T (row i is query i, column j is key j).
SCORES = [
    [1.000, 0.000, 1.000],
    [0.000, 1.000, 1.000],
    [1.000, 1.000, 2.000],
]

# Step 2: divide every score by sqrt(d_head) = sqrt(2) = 1.414.
SCALED = [
    [0.707, 0.000, 0.707],
    [0.000, 0.707, 0.707],
    [0.707, 0.707, 1.414],
]

# Step 3: softmax along each row (over keys).
#   rows 0 and 1: e^0.707 / (2 e^0.707 + 1) = 2.028 / 5.056 = 0.401, 1 / 5.056 = 0.198
#   row 2: e^0.707 / (2 e^0.707 + e^1.414) = 2.028 / 8.169 = 0.248, 4.113 / 8.169 = 0.503
WEIGHTS_FULL = [
    [0.401, 0.198, 0.401],
    [0.198, 0.401, 0.401],
    [0.248, 0.248, 0.503],
]

# Step 4: WEIGHTS_FULL @ V.
OUT_FULL = [
    [3.000, 4.000],
    [3.407, 4.407],
    [3.510, 4.510],
]

# Step 5: causal mask (query i sees keys 0..i), then softmax per row.
#   row 0 sees only key 0 -> [1, 0, 0]
#   row 1: 1 / (1 + e^0.707) = 0.330, e^0.707 / (1 + e^0.707) = 0.670
#   row 2 sees every key -> unchanged from step 3
WEIGHTS_CAUSAL = [
    [1.000, 0.000, 0.000],
    [0.330, 0.670, 0.000],
    [0.248, 0.248, 0.503],
]

# Step 6: WEIGHTS_CAUSAL @ V.
OUT_CAUSAL = [
    [1.000, 2.000],
    [2.340, 3.340],
    [3.510, 4.510],
]

# Step 7: only the last query already saw every key, so only its row is unchanged.
ROWS_UNCHANGED_BY_MASK = (2,)


def _as_matrix(value, name):
    rows = [list(row) for row in value]
    if not rows or any(len(row) != len(rows[0]) for row in rows):
        raise ValueError(f"{name} must be a rectangular nested list of numbers")
    return [[float(x) for x in row] for row in rows]


def plot_weights(weights_full, weights_causal, path):
    """Two heatmaps (no mask, causal), each with its own colorbar."""
    full = _as_matrix(weights_full, "weights_full")
    causal = _as_matrix(weights_causal, "weights_causal")
    if len(full) != len(causal) or len(full[0]) != len(causal[0]):
        raise ValueError("weights_full and weights_causal must have the same shape")
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as exc:
        raise ImportError("plot_weights needs matplotlib: pip install matplotlib") from exc
    fig, axes = plt.subplots(1, 2, figsize=(9, 3.5))
    for ax, matrix, title in zip(axes, (full, causal), ("weights, no mask", "weights, causal")):
        image = ax.imshow(matrix, vmin=0.0, vmax=1.0)
        fig.colorbar(image, ax=ax)
        ax.set_title(title)
        ax.set_xlabel("key j")
        ax.set_ylabel("query i")
    fig.tight_layout()
    fig.savefig(str(path))
    plt.close(fig)
