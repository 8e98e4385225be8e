"""Probe for the heatmap exercises (A, B, C, H): run a student's ``plot_...``
function and report what its figure drew, as data.

The function saves its figure at a path the probe chooses (a fresh folder of
the worker's own, never the submission's); ``Figure.savefig`` is watched so
that every panel's heatmap (the array of an ``imshow``/``matshow`` image or
of a ``pcolormesh``), labels, title and place in the figure are read at the
moment the figure is saved.  Only a save at that path counts, and the file's
bytes come back (a uint8 array) only when they are exactly what that save
wrote (``common.watch_figures``); the grader decides what to keep
(``grader.artifacts``).
"""
from __future__ import annotations

from .common import watch_figures

MAX_PANELS = 64           # more panels than any test draws: the rest is not read
MAX_CELLS = 1 << 16       # a heatmap's values read back, at most


def _heatmaps(ax) -> list:
    """The 2-D arrays an axes draws: images first, then pcolormesh meshes."""
    import numpy as np

    arrays = [im.get_array() for im in ax.get_images()]
    arrays += [c.get_array() for c in ax.collections
               if type(c).__name__ == "QuadMesh" and c.get_array() is not None]
    out = []
    for arr in arrays:
        data = np.ma.filled(np.ma.asarray(arr, dtype=np.float64), np.nan)
        if data.ndim == 2 and data.size <= MAX_CELLS:
            out.append(data)
        elif data.ndim == 3 and data.shape[-1] in (3, 4):
            out.append(None)      # an RGB(A) picture: colours, not the weights
    return out


def _panel(ax) -> dict:
    box = ax.get_position()
    return {"title": ax.get_title() or ax.get_title("left") or ax.get_title("right"),
            "xlabel": ax.get_xlabel(), "ylabel": ax.get_ylabel(),
            "box": [float(box.x0), float(box.y0), float(box.x1), float(box.y1)],
            "heatmaps": _heatmaps(ax)}


def _figure(fig) -> dict:
    # A colorbar is an axes of its own: not a panel.
    panels = [_panel(ax) for ax in fig.get_axes() if ax.get_label() != "<colorbar>"]
    return {"panels": panels[:MAX_PANELS], "n_panels": len(panels),
            **{key: _text(getattr(fig, f"_{key}", None)) for key in
               ("suptitle", "supxlabel", "supylabel")}}


def _text(artist) -> str:
    """The text of a figure-wide title or label (``fig.supxlabel(...)``), or ""."""
    return artist.get_text() if artist is not None else ""


def draw(module, function, args, kwargs=None, name="weights.png"):
    """Call ``module.<function>(*args, path, **kwargs)``; report the figure it
    saved at ``path`` (``saved``), what the file there is (``exists``,
    ``file``) and, when it is that figure's, its bytes (``png``)."""
    return watch_figures(lambda path: getattr(module, function)(*args, path, **(kwargs or {})),
                         _figure, name, "heatmap-")
