"""The heatmap probe and its checks (exercises A, B, C, H; issue 29): what a
figure drew comes back as data, and each known slip of a picture is named."""
from __future__ import annotations

import types

import numpy as np
import pytest

pytest.importorskip("matplotlib")

from grader.feedback import Feedback                                    # noqa: E402
from grader.reference import heatmap_checks as hm                       # noqa: E402
from grader.reference.secret import attention as ref                    # noqa: E402
from grader.sandbox.runtime.probes import heatmap                       # noqa: E402


def _module(fn):
    return types.SimpleNamespace(plot=fn)


def _draw(fn, *args, **kwargs):
    return heatmap.draw(_module(fn), "plot", list(args), kwargs)


def _panels_of(weights, *, style="imshow", labels=("key", "query"), colorbar=False,
               titles=None, concat=False):
    """A plot function drawing ``weights`` ``(h, S_q, S_k)`` one way or another."""
    def plot(path):
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        shown = [np.concatenate(list(weights), axis=1)] if concat else list(weights)
        fig, axes = plt.subplots(1, len(shown), squeeze=False)
        for i, (ax, w) in enumerate(zip(axes[0], shown)):
            art = ax.pcolormesh(w) if style == "pcolormesh" else \
                ax.imshow(np.ma.masked_equal(w, 0.0)) if style == "masked" else ax.imshow(w)
            if colorbar:
                fig.colorbar(art, ax=ax)
            ax.set_title((titles or [f"head {j}" for j in range(len(shown))])[i])
            ax.set_xlabel(labels[0])
            ax.set_ylabel(labels[1])
        fig.savefig(path)
        plt.close(fig)
    return plot


@pytest.fixture
def weights():
    rng = np.random.default_rng(0)
    q, k = rng.standard_normal((3, 5, 8)), rng.standard_normal((3, 5, 8))
    return q, k, ref.head_weights(q, k)


@pytest.mark.parametrize("style", ["imshow", "pcolormesh", "masked"])
def test_every_way_of_drawing_the_weights_passes(weights, style):
    _, _, w = weights
    out = _draw(_panels_of(w, style=style, colorbar=True))
    assert out["exists"] and bytes(out["png"][:8]) == hm.PNG_MAGIC
    fig = out["saved"][-1]
    assert fig["n_panels"] == 3                       # the colorbars are not panels
    hm.check_heads(out, "plot", w)


def test_panels_are_read_by_their_titles(weights):
    _, _, w = weights
    order = [2, 0, 1]
    out = _draw(_panels_of(w[order], titles=[f"head {i}" for i in order]))
    hm.check_heads(out, "plot", w)


@pytest.mark.parametrize("kind, expect", [
    ("concat", "concatenated"),
    ("unlabelled", "axes are not labelled"),
    ("swapped_labels", "labels are swapped"),
    ("scores", "scores were drawn"),
    ("no_mask", "without the causal mask"),
    ("transposed", "transposed"),
])
def test_each_slip_is_named(weights, kind, expect):
    q, k, w = weights
    drawn = {"scores": ref.head_weights(q, k, mistake="plotted_scores"),
             "no_mask": ref.head_weights(q, k, mistake="plotted_no_mask"),
             "transposed": np.swapaxes(w, 1, 2)}.get(kind, w)
    plot = _panels_of(drawn, concat=kind == "concat",
                      labels={"unlabelled": ("", ""),
                              "swapped_labels": ("query", "key")}.get(kind, ("key", "query")))
    out = _draw(plot)
    mistakes = ref.mistakes_of(ref.head_weights, ["plotted_scores", "plotted_no_mask"], q, k)
    with pytest.raises(Feedback) as err:
        hm.check_heads(out, "plot", w, mistakes)
    assert "This looks like:" in str(err.value) and expect in str(err.value)


def test_gqa_titles_name_the_shared_kv_head():
    rng = np.random.default_rng(1)
    q, k = rng.standard_normal((4, 3, 8)), rng.standard_normal((2, 6, 8))
    w = ref.head_weights(q, k)
    good = _draw(_panels_of(w, titles=[f"q{i} / kv{i // 2}" for i in range(4)]))
    hm.check_gqa_heads(good, "plot", w, 2)
    modulo = _draw(_panels_of(w, titles=[f"q{i} / kv{i % 2}" for i in range(4)]))
    with pytest.raises(Feedback, match="This looks like: each query head was marked with K/V "
                                       "head i % h_kv"):
        hm.check_gqa_heads(modulo, "plot", w, 2)
    untitled = _draw(_panels_of(w, titles=["", "", "", ""]))
    with pytest.raises(Feedback, match="like 'q3 / kv1'"):
        hm.check_gqa_heads(untitled, "plot", w, 2)


def test_figure_wide_labels_count():
    w = np.eye(3)[None]

    def plot(path):
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        fig, ax = plt.subplots()
        ax.imshow(w[0])
        fig.supxlabel("key")
        fig.supylabel("query")
        fig.savefig(path)
        plt.close(fig)
    hm.check_heads(_draw(plot), "plot", w)


def test_no_file_and_no_figure_are_said():
    with pytest.raises(Feedback, match="did not write the file"):
        hm.figure(_draw(lambda path: None), "plot")


def test_keep_writes_into_the_output_folder_only(weights, tmp_path):
    out = _draw(_panels_of(weights[2]))
    assert hm.keep(out, None, "x.png", "plot").startswith("(picture not kept")
    note = hm.keep(out, tmp_path / "art", "ex02_heads.png", "plot")
    assert note == "your heatmap: ex02_heads.png (in the output folder)"
    assert (tmp_path / "art" / "ex02_heads.png").read_bytes().startswith(hm.PNG_MAGIC)
    assert hm.keep({"png": np.zeros(0, np.uint8)}, tmp_path, "y.png", "plot") == \
        "(no picture kept: plot did not write the file at the path it was given)"


def test_a_grading_machine_without_matplotlib_keeps_the_maximum(tmp_path, monkeypatch):
    """The heatmap tests need matplotlib on the grading machine: without it
    they need a regrade and stay in the maximum (never a silent full mark)."""
    from grader.core import Options, maximum
    from grader.report import NEEDS_REGRADE
    from grader.sandbox.client import StudentModule
    from tests.conftest import copy_solutions, grade_dir

    sub = copy_solutions(tmp_path / "sub", ["ex02_mha"])
    have = grade_dir(sub, ["ex02_mha"], keyword="plot")
    probe = StudentModule.probe

    def without_matplotlib(self, name, *args, **kwargs):
        if name == "heatmap.draw":
            return {"no_matplotlib": True}   # what the probe answers without it
        return probe(self, name, *args, **kwargs)
    monkeypatch.setattr(StudentModule, "probe", without_matplotlib)
    lacking = grade_dir(sub, ["ex02_mha"], keyword="plot")
    assert have.score == have.max_score == lacking.max_score == 3
    assert have.max_score == maximum(Options(exercises=["ex02_mha"], keyword="plot"))["ex02_mha"]
    plots = [t for t in lacking.tests if t.name.startswith("test_plot")]
    assert len(plots) == 3 and all(t.status == NEEDS_REGRADE and "needs matplotlib" in t.output
                                   for t in plots)
    assert lacking.score == 0 and lacking.ungraded


def test_keep_replaces_a_link_in_the_output_folder_never_follows_it(weights, tmp_path):
    """A link already named like the picture (left by a hostile upload, say)
    is replaced; the file it points to keeps its bytes."""
    folder, target = tmp_path / "out", tmp_path / "elsewhere.txt"
    folder.mkdir()
    target.write_text("keep me")
    (folder / "ex02_heads.png").symlink_to(target)
    out = _draw(_panels_of(weights[2]))
    assert hm.keep(out, folder, "ex02_heads.png", "plot").startswith("your heatmap")
    assert target.read_text() == "keep me"
    assert not (folder / "ex02_heads.png").is_symlink()
    assert (folder / "ex02_heads.png").read_bytes().startswith(hm.PNG_MAGIC)


@pytest.mark.slow
def test_check_writes_every_heatmap_into_the_artifacts_folder(tmp_path):
    """As a student runs it: ``attn-grade check A B C H --artifacts OUT`` on
    right answers keeps the four pictures (each a PNG) in OUT, and says so."""
    import os
    import subprocess
    import sys

    from grader.notebooks import PICTURES
    from tests.conftest import copy_solutions

    names = ["ex01_by_hand", "ex02_mha", "ex03_gqa", "ex08_mla"]
    sub = copy_solutions(tmp_path / "sub", names)
    out = tmp_path / "out"
    done = subprocess.run([sys.executable, "-m", "grader.cli", "check", "A", "B", "C", "H",
                           "--path", str(sub), "--artifacts", str(out)],
                          capture_output=True, text=True, timeout=900, env=dict(os.environ))
    assert done.returncode == 0, done.stdout + done.stderr
    for name in names:
        (picture,) = PICTURES[name]
        assert f"your heatmap: {picture} (in the output folder)" in done.stdout, done.stdout
        assert (out / picture).read_bytes().startswith(hm.PNG_MAGIC), picture
    assert not list(sub.glob("*.png"))      # never beside the student's exercises
