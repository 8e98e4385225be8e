"""The graded picture is the one written to ``path`` (red-team finding R2).

A plot function could draw the right figure, save it to an ``io.BytesIO``
(or another file), and write a different picture at ``path``: the probe
described every savefig wherever it wrote, so the grade was of one figure
and the file kept for staff of another.  Now only a save whose target is
``path`` counts, and the file there must be exactly the bytes that save
wrote; every ordinary way of saving still gets full marks."""
from __future__ import annotations

import io
import os
import subprocess
import sys
import types
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("matplotlib")

from grader.feedback import Feedback                                    # noqa: E402
from grader.reference import ex04_checks                                # noqa: E402
from grader.reference import heatmap_checks as hm                       # noqa: E402
from grader.sandbox.runtime.probes import common, ex04_quadratic, heatmap  # noqa: E402

FULL = np.array([[0.5, 0.3, 0.2], [0.1, 0.6, 0.3], [0.2, 0.2, 0.6]])
CAUSAL = np.array([[1.0, 0.0, 0.0], [0.4, 0.6, 0.0], [0.3, 0.3, 0.4]])
NOT_THE_FIGURE = "the file at path is not the figure you saved there"   # the sentence said


def _figure():
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, axes = plt.subplots(1, 2)
    for ax, m, title in zip(axes, (FULL, CAUSAL), ("no mask", "causal")):
        ax.imshow(m)
        ax.set_title(title)
        ax.set_xlabel("key")
        ax.set_ylabel("query")
    return fig, plt


def _red_png() -> bytes:
    """Another picture: a solid red square, as PNG bytes."""
    import matplotlib.pyplot as plt
    buffer = io.BytesIO()
    plt.imsave(buffer, np.tile([1.0, 0.0, 0.0], (16, 16, 1)), format="png")
    return buffer.getvalue()


def _save(style):
    """A plot_weights saving its (right) figure one way a student may write."""
    def plot_weights(full, causal, path):
        fig, plt = _figure()
        if style == "fig":
            fig.savefig(path)
        elif style == "plt":
            plt.savefig(path)
        elif style == "str_dpi":
            fig.savefig(str(path), dpi=72)
        elif style == "pathlib":
            fig.savefig(Path(path))
        elif style == "format":
            fig.savefig(path, format="png")
        elif style == "keyword":
            fig.savefig(fname=path, bbox_inches="tight")
        elif style == "open":
            with open(path, "wb") as f:
                fig.savefig(f)
        elif style == "open_format":
            with open(path, "wb") as f:
                fig.savefig(f, format="png")
        elif style == "draft_first":      # a copy kept in memory too, then the file
            fig.savefig(io.BytesIO(), format="png")
            fig.savefig(path)
        plt.close(fig)
    return plot_weights


def _forged(kind):
    """A plot_weights whose file at ``path`` is not the figure graded."""
    def plot_weights(full, causal, path):
        fig, plt = _figure()
        if kind == "buffer_then_red":       # the red-team's reproducer, in short
            fig.savefig(io.BytesIO(), format="png")
            Path(path).write_bytes(_red_png() + b"J" * (1 << 20))
        elif kind == "other_file_then_red":
            fig.savefig(os.path.join(os.path.dirname(path), "elsewhere.png"))
            Path(path).write_bytes(_red_png())
        elif kind == "overwritten":
            fig.savefig(path)
            Path(path).write_bytes(_red_png())
        elif kind == "padded":             # past the size read back
            fig.savefig(path)
            with open(path, "ab") as f:
                f.write(b"J" * (common.MAX_PNG_BYTES + 1))
        elif kind == "red_prefix":         # a decoder shows the first PNG in the file
            with open(path, "wb") as f:
                f.write(_red_png())
                fig.savefig(f)
        elif kind == "junk_after":
            with open(path, "wb") as f:
                fig.savefig(f)
                f.write(b"J" * 100)
        plt.close(fig)
    return plot_weights


def _draw(fn):
    module = types.SimpleNamespace(plot_weights=fn)
    return heatmap.draw(module, "plot_weights", [FULL.tolist(), CAUSAL.tolist()])


@pytest.mark.parametrize("style", ["fig", "plt", "str_dpi", "pathlib", "format", "keyword",
                                   "open", "open_format", "draft_first"])
def test_every_ordinary_way_of_saving_passes_and_is_kept(style, tmp_path):
    out = _draw(_save(style))
    hm.check_two_panels(out, FULL, CAUSAL)
    assert hm.keep(out, tmp_path, "w.png", "plot_weights").startswith("your heatmap")
    assert (tmp_path / "w.png").read_bytes() == hm.png_bytes(out)


@pytest.mark.parametrize("kind, why", [
    ("buffer_then_red", "your savefig wrote somewhere else"),
    ("other_file_then_red", "your savefig wrote somewhere else"),
    ("overwritten", "other bytes than the ones savefig wrote"),
    ("padded", "more than the 8 MiB"),
    ("red_prefix", "other bytes than the ones savefig wrote"),
    ("junk_after", "other bytes than the ones savefig wrote"),
])
def test_a_file_that_is_not_the_saved_figure_fails_and_is_not_kept(kind, why, tmp_path):
    out = _draw(_forged(kind))
    with pytest.raises(Feedback) as err:
        hm.check_two_panels(out, FULL, CAUSAL)
    assert str(err.value).startswith(f"plot_weights: {NOT_THE_FIGURE}: ")
    assert why in str(err.value)
    assert hm.keep(out, tmp_path, "w.png", "plot_weights") == \
        f"(no picture kept: {err.value})"
    assert not list(tmp_path.iterdir()) and len(hm.png_bytes(out)) == 0


def test_the_graded_figure_is_the_one_saved_at_the_path():
    """A wrong figure saved at the path, then the right one elsewhere: the
    wrong one is graded (it is the picture the file shows)."""
    def plot_weights(full, causal, path):
        fig, plt = _figure()
        (image,) = fig.axes[1].get_images()
        image.set_data(FULL)                # weights_full twice
        fig.savefig(path)
        image.set_data(CAUSAL)
        fig.savefig(io.BytesIO(), format="png")
        plt.close(fig)
    with pytest.raises(Feedback, match="the right panel draws the weights without the mask"):
        hm.check_two_panels(_draw(plot_weights), FULL, CAUSAL)


PAIRS = [[256, 0.0012], [512, 0.0051], [1024, 0.021]]


def _plot_scaling(forge):
    def plot_scaling(results, path):
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        fig, ax = plt.subplots()
        xs = sorted(results)
        ax.loglog(xs, [results[x] for x in xs])
        if forge:
            fig.savefig(io.BytesIO(), format="png")
            Path(path).write_bytes(_red_png())
        else:
            with open(path, "wb") as f:
                fig.savefig(f)
        plt.close(fig)
    return types.SimpleNamespace(plot_scaling=plot_scaling)


def test_ex04_plot_is_held_to_the_same_file():
    ex04_checks.check_loglog(ex04_quadratic.plot(_plot_scaling(False), PAIRS), PAIRS)
    with pytest.raises(Feedback, match=f"plot_scaling: {NOT_THE_FIGURE}: "):
        ex04_checks.check_loglog(ex04_quadratic.plot(_plot_scaling(True), PAIRS), PAIRS)


FORGER = '''

def plot_weights(weights_full, weights_causal, path):  # the figure to a buffer, red at path
    import io
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np
    fig, axes = plt.subplots(1, 2)
    for ax, m, t in zip(axes, (weights_full, weights_causal), ("no mask", "causal")):
        ax.imshow(m); ax.set_title(t); ax.set_xlabel("key"); ax.set_ylabel("query")
    fig.savefig(io.BytesIO(), format="png")
    plt.close(fig)
    plt.imsave(path, np.tile([1.0, 0.0, 0.0], (64, 64, 1)), format="png")
    with open(path, "ab") as f:
        f.write(b"J" * (9 << 20))
'''

BY_FILE = '''

def plot_weights(weights_full, weights_causal, path):  # through a file object
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, axes = plt.subplots(1, 2)
    for ax, m, t in zip(axes, (weights_full, weights_causal), ("no mask", "causal")):
        ax.imshow(m); ax.set_title(t); ax.set_xlabel("key"); ax.set_ylabel("query")
    with open(path, "wb") as f:
        fig.savefig(f)
    plt.close(fig)
'''


@pytest.mark.parametrize("tail, graded", [(FORGER, False), (BY_FILE, True)])
def test_grade_with_artifacts_keeps_only_the_graded_picture(tail, graded, tmp_path):
    """As a user runs it: ``attn-grade grade DIR -e ex01_by_hand --artifacts
    OUT`` on right constants with a plot_weights redefined at the end."""
    from tests.conftest import copy_solutions

    sub = copy_solutions(tmp_path / "sub", ["ex01_by_hand"])
    module = sub / "ex01_by_hand.py"
    module.write_text(module.read_text() + tail)
    out = tmp_path / "out"
    done = subprocess.run([sys.executable, "-m", "grader.cli", "grade", str(sub), "-e",
                           "ex01_by_hand", "--artifacts", str(out)],
                          capture_output=True, text=True, timeout=600, env=dict(os.environ))
    text = done.stdout + done.stderr
    hidden = next(line for line in text.splitlines()
                  if "plot_weights draws the given weights" in line)
    if graded:
        assert hidden.rstrip().endswith("1/1") and "FAIL" not in text, text
        kept = (out / "ex01_weights.png").read_bytes()
        assert kept.startswith(hm.PNG_MAGIC) and len(kept) < common.MAX_PNG_BYTES
    else:
        assert hidden.rstrip().endswith("0/1"), text
        assert f"plot_weights: {NOT_THE_FIGURE}: your savefig wrote somewhere" in text
        assert not (out / "ex01_weights.png").exists()
