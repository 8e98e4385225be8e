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

# Worked by hand (d_head = 2, so the scale is 1/sqrt(2) = 0.7071):
#   exp(0.707) = 2.028, exp(1.414) = 4.113.
#   Row 0 scaled [0.707, 0, 0.707] -> [2.028, 1, 2.028] / 5.056
#   Row 1 scaled [0, 0.707, 0.707] -> [1, 2.028, 2.028] / 5.056
#   Row 2 scaled [0.707, 0.707, 1.414] -> [2.028, 2.028, 4.113] / 8.169
#   Causal: row 0 sees key 0 only (weight 1); row 1 sees keys 0, 1:
#   [1, 2.028] / 3.028 = [0.330, 0.670]; row 2 sees every key (unchanged).
SCORES = [[1.0, 0.0, 1.0],
          [0.0, 1.0, 1.0],
          [1.0, 1.0, 2.0]]
SCALED = [[0.707, 0.0, 0.707],
          [0.0, 0.707, 0.707],
          [0.707, 0.707, 1.414]]
WEIGHTS_FULL = [[0.401, 0.198, 0.401],
                [0.198, 0.401, 0.401],
                [0.248, 0.248, 0.503]]
OUT_FULL = [[3.0, 4.0],
            [3.407, 4.407],
            [3.51, 4.51]]
WEIGHTS_CAUSAL = [[1.0, 0.0, 0.0],
                  [0.33, 0.67, 0.0],
                  [0.248, 0.248, 0.503]]
OUT_CAUSAL = [[1.0, 2.0],
              [2.34, 3.34],
              [3.51, 4.51]]
ROWS_UNCHANGED_BY_MASK = (2,)


def plot_weights(weights_full, weights_causal, path):
    """The masked cells left blank (a masked array), the numbers in the cells."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    full = np.asarray(weights_full, dtype=float)
    causal = np.asarray(weights_causal, dtype=float)
    hidden = np.triu(np.ones(causal.shape, dtype=bool), k=1 + causal.shape[1] - causal.shape[0])
    fig, axes = plt.subplots(1, 2, figsize=(8, 3.5), layout="constrained")
    for ax, w, title in zip(axes, (full, np.ma.masked_array(causal, hidden)),
                            ("no mask", "causal mask")):
        ax.imshow(w, cmap="Blues", vmin=0, vmax=1)
        ii, jj = np.indices(w.shape)
        for i, j, x in zip(ii.ravel(), jj.ravel(), np.ma.filled(w, np.nan).ravel()):
            if np.isfinite(x):
                ax.text(j, i, f"{x:.3f}", ha="center", va="center")
        ax.set(title=title, xlabel="key", ylabel="query")
    fig.savefig(path)
    plt.close(fig)
