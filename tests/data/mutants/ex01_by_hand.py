"""Slips in the hand-worked example (exercise A)."""
from tests.data.mutants import Mutant

MUTANTS = [
    Mutant("no_scale", "SCALED = [[0.707, 0.0, 0.707],\n          [0.0, 0.707, 0.707],\n"
           "          [0.707, 0.707, 1.414]]",
           "SCALED = [[1.0, 0.0, 1.0],\n          [0.0, 1.0, 1.0],\n          [1.0, 1.0, 2.0]]",
           "1/sqrt(d_head) scale was forgotten"),
    Mutant("softmax_over_columns",
           "WEIGHTS_FULL = [[0.401, 0.198, 0.401],\n                [0.198, 0.401, 0.401],\n"
           "                [0.248, 0.248, 0.503]]",
           "WEIGHTS_FULL = [[0.401, 0.198, 0.248],\n                [0.198, 0.401, 0.248],\n"
           "                [0.401, 0.401, 0.503]]",
           "softmax ran down each column (over the queries)"),
    Mutant("mask_wrong_triangle",
           "WEIGHTS_CAUSAL = [[1.0, 0.0, 0.0],\n                  [0.33, 0.67, 0.0],\n"
           "                  [0.248, 0.248, 0.503]]",
           "WEIGHTS_CAUSAL = [[0.401, 0.198, 0.401],\n                  [0.0, 0.5, 0.5],\n"
           "                  [0.0, 0.0, 1.0]]",
           "wrong triangle"),
    Mutant("mask_after_softmax",
           "WEIGHTS_CAUSAL = [[1.0, 0.0, 0.0],\n                  [0.33, 0.67, 0.0],\n"
           "                  [0.248, 0.248, 0.503]]",
           "WEIGHTS_CAUSAL = [[0.401, 0.0, 0.0],\n                  [0.198, 0.401, 0.0],\n"
           "                  [0.248, 0.248, 0.503]]",
           "without renormalizing"),
    Mutant("rows_from_one", "ROWS_UNCHANGED_BY_MASK = (2,)", "ROWS_UNCHANGED_BY_MASK = (3,)",
           "counted from 1"),
    Mutant("two_decimals",
           "[0.248, 0.248, 0.503]]\nOUT_FULL = [[3.0, 4.0],\n            [3.407, 4.407],\n"
           "            [3.51, 4.51]]",
           "[0.25, 0.25, 0.50]]\nOUT_FULL = [[3.0, 4.0],\n            [3.407, 4.407],\n"
           "            [3.5, 4.5]]",
           "rounded to two decimals"),
    Mutant("scores_scaled_already",
           "SCORES = [[1.0, 0.0, 1.0],\n          [0.0, 1.0, 1.0],\n          [1.0, 1.0, 2.0]]",
           "SCORES = [[0.707, 0.0, 0.707],\n          [0.0, 0.707, 0.707],\n"
           "          [0.707, 0.707, 1.414]]",
           "scores were scaled already"),
    Mutant("out_causal_chapter_v",
           "OUT_CAUSAL = [[1.0, 2.0],\n              [2.34, 3.34],\n              [3.51, 4.51]]",
           "OUT_CAUSAL = [[10.0, 0.0],\n              [3.302, 6.698],\n              [5.0, 5.0]]",
           "chapter's V"),
]

# -- slips in the picture (issue 29): plot_weights
MUTANTS += [
    Mutant("plot_unlabelled", '        ax.set_xlabel("key")\n        ax.set_ylabel("query")\n',
           "", "axes are not labelled"),
    Mutant("plot_no_mask_panel", "zip(axes, (weights_full, weights_causal),",
           "zip(axes, (weights_full, weights_full),", "without the mask"),
    Mutant("plot_transposed", "rows = [[float(w) for w in row] for row in matrix]",
           "rows = [[float(row[j]) for row in matrix] for j in range(len(matrix[0]))]",
           "transposed"),
]
ONLY = {name: "plot" for name in ("plot_unlabelled", "plot_no_mask_panel", "plot_transposed")}
