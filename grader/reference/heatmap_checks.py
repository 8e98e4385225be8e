"""How a heatmap of attention weights is judged (exercises A, B, C and H).

The probe ``heatmap.draw`` runs the student's ``plot_...`` function in the
worker and sends back, as data, what each saved figure drew: per panel its
heatmap arrays, labels, title and place.  Here that is held to the
conventions the module docstrings state:

* one panel per matrix (a colorbar is not a panel; a panel with no heatmap,
  like a spare grid cell switched off, is ignored);
* a panel's heatmap is the matrix itself: row ``i`` is query ``i``, column
  ``j`` key ``j`` (``imshow``, ``matshow`` and ``pcolormesh`` all keep that);
  masked cells may be drawn as 0 or left blank (NaN, a masked array);
* the x axis says "key", the y axis says "query" (each panel's own labels,
  a y label only on the leftmost panel of a row, or the figure's
  ``supxlabel`` / ``supylabel``);
* a panel is named by the integers in its title where the task asks for
  them (``"head 3"``; ``"q3 / kv1"``), else panels are read left to right,
  top to bottom.
"""
from __future__ import annotations

import re

import numpy as np
import pytest

from grader.feedback import Feedback, check_close

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
ATOL, RTOL = 1e-5, 1e-4     # the weights go through float32 in matplotlib
CONCATENATED = ("the heads were drawn as one image side by side (concatenated) instead of one "
                "panel each")


def figure(out, function: str) -> dict:
    """The last figure ``function`` saved, once its file is a PNG; skips the
    test where the grading machine has no matplotlib."""
    if out.get("no_matplotlib"):
        pytest.skip("needs matplotlib on the grading machine (pip install matplotlib)")
    if not out["exists"]:
        raise Feedback(f"{function} did not write the file at the path it was given")
    if not bytes(np.asarray(out["png"], dtype=np.uint8)[:8]).startswith(PNG_MAGIC):
        raise Feedback(f"{function} wrote a file that is not a PNG image (the path ends in "
                       ".png: let matplotlib's savefig pick the format from it)")
    if not out["saved"]:
        raise Feedback(f"{function} saved no matplotlib figure (use fig.savefig(path) or "
                       "plt.savefig(path))")
    return out["saved"][-1]


def png_bytes(out) -> bytes:
    return bytes(np.asarray(out.get("png", []), dtype=np.uint8))


def panels(fig: dict, function: str) -> list[dict]:
    """The panels that draw a heatmap, in reading order (rows top to bottom,
    then left to right); Feedback when one draws more than one."""
    found = [p for p in fig["panels"] if p["heatmaps"]]
    for p in found:
        if len(p["heatmaps"]) > 1:
            raise Feedback(f"{function}: a panel ({p['title'] or 'untitled'}) draws "
                           f"{len(p['heatmaps'])} heatmaps on top of each other; draw one "
                           "matrix per panel")
        if p["heatmaps"][0] is None:
            raise Feedback(f"{function}: a panel shows an RGB picture, not the weights "
                           "themselves: give imshow (or pcolormesh) the matrix and a colormap")
    if not found:
        raise Feedback(f"{function}'s figure has no heatmap: draw each matrix with "
                       "ax.imshow(...) (or matshow, pcolormesh)")
    rows = sorted(found, key=lambda p: -p["box"][3])
    ordered, line = [], []
    for p in rows:
        if line and abs(p["box"][3] - line[0]["box"][3]) > 0.02:
            ordered += sorted(line, key=lambda q: q["box"][0])
            line = []
        line.append(p)
    return ordered + sorted(line, key=lambda q: q["box"][0])


def check_labels(fig: dict, found: list[dict], function: str) -> None:
    """The x axis says "key" and the y axis "query", on each panel (a y label
    may stand once per row, on its leftmost panel) or for the whole figure."""
    def says(text, word):
        return word in (text or "").lower()

    for p in found:
        if not (says(p["xlabel"], "key") or says(fig.get("supxlabel"), "key")):
            swapped = says(p["xlabel"], "quer")
            raise Feedback(f"{function}: the x axis of panel {p['title'] or 'untitled'!r} is "
                           f"labelled {p['xlabel']!r}; columns are keys: label it "
                           "(ax.set_xlabel('key'))" +
                           ("\nThis looks like: the axes' labels are swapped (rows are "
                            "queries, columns are keys)." if swapped else ""))
        row = [q for q in found if abs(q["box"][3] - p["box"][3]) <= 0.02]
        leftmost = min(row, key=lambda q: q["box"][0])
        if not (says(p["ylabel"], "quer") or says(leftmost["ylabel"], "quer")
                or says(fig.get("supylabel"), "quer")):
            raise Feedback(f"{function}: the y axis of panel {p['title'] or 'untitled'!r} is "
                           f"labelled {p['ylabel']!r}; rows are queries: label it "
                           "(ax.set_ylabel('query'))")


def title_numbers(p: dict, prefix: str = "") -> list[int]:
    """The integers in a panel's title (after ``prefix`` when one is given:
    ``"kv"`` reads 1 from ``"q3 / kv1"``)."""
    pattern = rf"{prefix}\s*(?:head\s*)?#?\s*(\d+)" if prefix else r"(\d+)"
    return [int(n) for n in re.findall(pattern, p["title"] or "", flags=re.IGNORECASE)]


def by_head(found: list[dict], n: int, function: str) -> list[dict]:
    """Panels in head order: by the first integer of each title when the
    titles name heads 0..n-1 (or 1..n), else in reading order."""
    if len(found) != n:
        return found
    firsts = [(title_numbers(p) or [None])[0] for p in found]
    if sorted(firsts, key=str) == sorted(range(n), key=str):
        return [found[firsts.index(i)] for i in range(n)]
    if sorted(firsts, key=str) == sorted(range(1, n + 1), key=str):
        return [found[firsts.index(i + 1)] for i in range(n)]
    return found


def check_count(found: list[dict], want: list[np.ndarray], function: str) -> None:
    if len(found) == len(want):
        return
    shape = np.shape(found[0]["heatmaps"][0]) if len(found) == 1 else None
    s_q, s_k = want[0].shape
    n = len(want)
    concatenated = shape in ((s_q, n * s_k), (n * s_q, s_k)) and n > 1
    raise Feedback((f"This looks like: {CONCATENATED}.\n" if concatenated else "") +
                   f"{function} drew {len(found)} heatmap panel(s); expected {n}, one "
                   f"({s_q} x {s_k}) panel per matrix")


def check_panel(p: dict, want: np.ndarray, what: str, mistakes: dict | None = None) -> None:
    """The panel's heatmap is ``want`` (masked cells drawn blank count as 0)."""
    got = np.asarray(p["heatmaps"][0], dtype=np.float64)
    if got.shape == want.T.shape and got.shape != want.shape:
        raise Feedback(f"This looks like: the matrix was drawn transposed (keys as rows).\n"
                       f"{what} has shape {got.shape}; expected {want.shape} (rows are "
                       "queries, columns are keys)")
    got = np.where(np.isnan(got), 0.0, got)
    extra = dict(mistakes or {})
    if want.shape[0] == want.shape[1]:
        extra.setdefault("the matrix was drawn transposed (keys as rows)", want.T)
    check_close(got, want, what=what, atol=ATOL, rtol=RTOL, mistakes=extra)


def check_all(found: list[dict], want: list[np.ndarray], function: str, names: list[str],
              mistakes: list[dict] | None = None) -> None:
    check_count(found, want, function)
    for i, (p, w) in enumerate(zip(found, want)):
        check_panel(p, w, f"{function}: the heatmap of {names[i]}",
                    (mistakes or [None] * len(want))[i])
