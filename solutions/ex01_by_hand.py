"""Exercise A: attention by hand.

Usually takes about 45 minutes.  From the chapters: "Attention from First
Principles", section 4 (Tiny example) and hands-on exercise A; "Attention"
(chapter 03), "Scaled dot-product attention, step by step".

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
for that identifier.  Which identifier depends on where you are graded:

- on Gradescope: your Gradescope student ID (``sid``), where your course
  set one, or the email of your Gradescope account, exactly as Gradescope
  has it (a university number Gradescope does not know will not do): any
  other is graded as your email, and answers worked for it earn nothing;
- where your course grades from a roster: the identifier the roster lists
  for you (ask your instructor), or this exercise earns no points;
- anywhere else: the identifier your course tells you to use.

Case and spaces around it do not matter.  Without a ``STUDENT_ID``
(``None``), the common exercise below is graded (on Gradescope, your email's
variant instead): the chapter's Q and K with its own V::

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

Then look at what you computed:

8. ``plot_weights(weights_full, weights_causal, path)``: save one figure
   with two heatmaps side by side, left ``weights_full`` (title saying "no
   mask"), right ``weights_causal`` (title saying "causal"), as a PNG at
   ``path`` (matplotlib: ``pip install matplotlib``; Colab has it).  Each
   panel draws the 3 x 3 matrix as it is (``ax.imshow(matrix)``: row ``i``
   is query ``i``, column ``j`` key ``j``), its x axis labelled "key" and
   its y axis "query"; a colorbar and the numbers written in the cells are
   welcome.  The two arguments are nested lists (or arrays) like your
   constants; call it as ``plot_weights(WEIGHTS_FULL, WEIGHTS_CAUSAL,
   "weights.png")``.  The causal triangle is what the mask does: every
   weight above the diagonal is 0, and the rows it cut renormalize.

Keep three decimals: two are not enough (rounding row 2's weights to 0.25,
0.25, 0.50 moves its output by about 0.01).  Each step is graded on its
own, to 0.01: a step computed correctly from your own earlier (wrong)
answer still earns its point, so an early slip costs only that step (not
from an answer that carries no work, like all zeros).
"""

# Your identifier as text (which one: see above), e.g. STUDENT_ID = "you@uni.example" on
# Gradescope; None: the common exercise.
# (An extension of the contract, which is silent about it.)
STUDENT_ID = None

# BEGIN SOLUTION
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
# END SOLUTION


def plot_weights(weights_full, weights_causal, path):
    """Save the two weight matrices as heatmaps side by side to ``path``.

    ``weights_full`` and ``weights_causal``: ``(S_q, S_k)`` nested lists or
    arrays (3 x 3 here).  Left panel: ``weights_full``, titled with "no
    mask"; right panel: ``weights_causal``, titled with "causal".  Each panel
    draws its matrix unchanged (row ``i`` = query ``i``), x axis labelled
    "key", y axis "query".  Saved with ``savefig(path)`` (PNG); returns
    nothing.  Without matplotlib: ``ImportError`` saying how to install it.
    """
    # BEGIN SOLUTION
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as exc:
        raise ImportError("plot_weights needs matplotlib: pip install matplotlib") from exc
    fig, axes = plt.subplots(1, 2, figsize=(8, 3.6), layout="constrained")
    for ax, matrix, title in zip(axes, (weights_full, weights_causal),
                                 ("no mask", "causal mask")):
        rows = [[float(w) for w in row] for row in matrix]
        image = ax.imshow(rows, vmin=0.0, vmax=1.0, cmap="viridis")
        for i, row in enumerate(rows):                 # the weight in each cell
            for j, w in enumerate(row):
                ax.text(j, i, f"{w:.2f}", ha="center", va="center",
                        color="white" if w < 0.5 else "black")
        ax.set_xticks(range(len(rows[0])))
        ax.set_yticks(range(len(rows)))
        ax.set_title(title)
        ax.set_xlabel("key")
        ax.set_ylabel("query")
    fig.colorbar(image, ax=list(axes), label="weight")
    fig.savefig(path)
    plt.close(fig)
    # END SOLUTION
