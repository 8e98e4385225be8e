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

# ---------------------------------------------------------------------------
# My working, by hand (d_head = 2, so sqrt(d_head) = 1.41421).
#
# Step 1, SCORES[i][j] = q_i . k_j:
#   q0 = (1, 0): k0 -> 1*1 + 0*0 = 1, k1 -> 1*0 + 0*1 = 0, k2 -> 1*1 + 0*1 = 1
#   q1 = (0, 1): k0 -> 0,            k1 -> 1,            k2 -> 1
#   q2 = (1, 1): k0 -> 1,            k1 -> 1,            k2 -> 2
#
# Step 2, divide by sqrt(2) = 1.41421:  1 / 1.41421 = 0.70711,
#   2 / 1.41421 = 1.41421, 0 stays 0.
#
# Step 3, softmax of each row (over the keys, i.e. along the row):
#   exp(0) = 1, exp(0.70711) = 2.02811, exp(1.41421) = 4.11325
#   row 0: (2.02811, 1, 2.02811), sum 5.05622
#          -> 2.02811 / 5.05622 = 0.40111, 1 / 5.05622 = 0.19778
#   row 1: (1, 2.02811, 2.02811), sum 5.05622 -> 0.19778, 0.40111, 0.40111
#   row 2: (2.02811, 2.02811, 4.11325), sum 8.16947
#          -> 2.02811 / 8.16947 = 0.24826, 4.11325 / 8.16947 = 0.50349
#
# Step 4, OUT_FULL = WEIGHTS_FULL @ V with V = [[1, 2], [3, 4], [5, 6]]:
#   row 0: 0.40111*1 + 0.19778*3 + 0.40111*5 = 0.40111 + 0.59334 + 2.00555 = 3.000
#          0.40111*2 + 0.19778*4 + 0.40111*6 = 0.80222 + 0.79112 + 2.40666 = 4.000
#   row 1: 0.19778*1 + 0.40111*3 + 0.40111*5 = 0.19778 + 1.20333 + 2.00555 = 3.407
#          0.19778*2 + 0.40111*4 + 0.40111*6 = 0.39556 + 1.60444 + 2.40666 = 4.407
#   row 2: 0.24826*1 + 0.24826*3 + 0.50349*5 = 0.24826 + 0.74478 + 2.51745 = 3.510
#          0.24826*2 + 0.24826*4 + 0.50349*6 = 0.49652 + 0.99304 + 3.02094 = 4.510
#
# Step 5, causal: query i sees keys 0 .. i (the rest is -inf, weight 0):
#   row 0: only (0.70711)                 -> 1
#   row 1: (0, 0.70711): exp -> (1, 2.02811), sum 3.02811
#          -> 1 / 3.02811 = 0.33024, 2.02811 / 3.02811 = 0.66976
#   row 2: sees every key: same weights as without the mask.
#
# Step 6, OUT_CAUSAL = WEIGHTS_CAUSAL @ V:
#   row 0: V[0] = (1, 2)
#   row 1: 0.33024*1 + 0.66976*3 = 0.33024 + 2.00928 = 2.340
#          0.33024*2 + 0.66976*4 = 0.66048 + 2.67904 = 3.340
#   row 2: unchanged: (3.510, 4.510)
#
# Step 7: only row 2 (the last query, which sees every key anyway) has the
# same output with and without the mask.
# ---------------------------------------------------------------------------

SCORES = [
    [1.0, 0.0, 1.0],
    [0.0, 1.0, 1.0],
    [1.0, 1.0, 2.0],
]

SCALED = [
    [0.707, 0.0, 0.707],
    [0.0, 0.707, 0.707],
    [0.707, 0.707, 1.414],
]

WEIGHTS_FULL = [
    [0.401, 0.198, 0.401],
    [0.198, 0.401, 0.401],
    [0.248, 0.248, 0.503],
]

OUT_FULL = [
    [3.000, 4.000],
    [3.407, 4.407],
    [3.510, 4.510],
]

WEIGHTS_CAUSAL = [
    [1.0, 0.0, 0.0],
    [0.330, 0.670, 0.0],
    [0.248, 0.248, 0.503],
]

OUT_CAUSAL = [
    [1.000, 2.000],
    [2.340, 3.340],
    [3.510, 4.510],
]

ROWS_UNCHANGED_BY_MASK = (2,)


def plot_weights(weights_full, weights_causal, path):
    """Copied cell by cell into plain lists, then drawn with fig.add_subplot."""
    import matplotlib
    matplotlib.use("Agg")
    from matplotlib.figure import Figure

    fig = Figure(figsize=(8, 3.5))
    panels = [("no mask", weights_full), ("causal", weights_causal)]
    for n, (title, matrix) in enumerate(panels):
        rows = []
        for row in matrix:
            cells = []
            for x in row:
                cells.append(float(x))
            rows.append(cells)
        ax = fig.add_subplot(1, 2, n + 1)
        ax.imshow(rows, interpolation="nearest")
        ax.set_title(title)
        ax.set_xlabel("key")
        ax.set_ylabel("query")
    fig.savefig(path)
