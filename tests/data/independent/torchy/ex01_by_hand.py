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

# Worked by hand (d_head = 2, so the scale is 1/sqrt(2) = 0.70711).
#
# 1. Q @ K.T: row i is (q_i . k_0, q_i . k_1, q_i . k_2).
SCORES = [
    [1.0, 0.0, 1.0],
    [0.0, 1.0, 1.0],
    [1.0, 1.0, 2.0],
]
# 2. Divide every score by sqrt(2): 1 -> 0.707, 2 -> 1.414.
SCALED = [
    [0.707, 0.0, 0.707],
    [0.0, 0.707, 0.707],
    [0.707, 0.707, 1.414],
]
# 3. Row softmax.  Row 0: e^0.707 = 2.028, e^0 = 1 -> 2.028 / 5.056 = 0.401,
#    1 / 5.056 = 0.198.  Row 2: e^1.414 = 4.113 -> 2.028 / 8.170 = 0.248,
#    4.113 / 8.170 = 0.503.
WEIGHTS_FULL = [
    [0.401, 0.198, 0.401],
    [0.198, 0.401, 0.401],
    [0.248, 0.248, 0.503],
]
# 4. WEIGHTS_FULL @ V with V = [[1, 2], [3, 4], [5, 6]].
OUT_FULL = [
    [3.0, 4.0],
    [3.407, 4.407],
    [3.51, 4.51],
]
# 5. Causal mask: row 0 sees key 0 only, row 1 keys 0..1
#    (1 / (1 + 2.028) = 0.330, 2.028 / 3.028 = 0.670), row 2 everything.
WEIGHTS_CAUSAL = [
    [1.0, 0.0, 0.0],
    [0.33, 0.67, 0.0],
    [0.248, 0.248, 0.503],
]
# 6. WEIGHTS_CAUSAL @ V.
OUT_CAUSAL = [
    [1.0, 2.0],
    [2.34, 3.34],
    [3.51, 4.51],
]
# 7. Only the last query already saw every key without the mask.
ROWS_UNCHANGED_BY_MASK = (2,)


def plot_weights(weights_full, weights_causal, path):
    """pyplot's state machine: plt.subplot, plt.imshow, plt.savefig."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import torch

    plt.figure(figsize=(8, 3.5))
    for n, (w, title) in enumerate([(weights_full, "no mask"), (weights_causal, "causal")]):
        plt.subplot(1, 2, n + 1)
        plt.imshow(torch.tensor(w, dtype=torch.float64).numpy(), vmin=0.0, vmax=1.0)
        plt.title(title)
        plt.xlabel("key")
        plt.ylabel("query")
        plt.colorbar()
    plt.savefig(path)
    plt.close()
