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

from grader import artifacts
from grader.feedback import Feedback, check_close
from grader.reference.mistakes import looks_like
from grader.sandbox.runtime.probes.common import MAX_PNG_BYTES

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
ATOL, RTOL = 1e-5, 1e-4     # the weights go through float32 in matplotlib
# The drawing slips named here, keyed for the class's table (grader.insight).
MISTAKES = {
    "axes_unlabelled": "the axes are not labelled (say which axis is which: "
                       "ax.set_xlabel('key'), ax.set_ylabel('query'))",
    "axes_swapped": "the axes' labels are swapped (rows are queries, columns are keys)",
    "heads_concatenated": "the heads were drawn as one image side by side (concatenated) "
                          "instead of one panel each",
    "transposed": "the matrix was drawn transposed (keys as rows)",
    "kv_head_modulo": "each query head was marked with K/V head i % h_kv where i // (h / h_kv) "
                      "is meant (consecutive query heads share a K/V head)",
    "panels_swapped": "the panels are swapped (the causal weights are on the left)",
    "causal_panel_unmasked": "the right panel draws the weights without the mask (weights_full "
                             "twice: the causal panel must show weights_causal)",
}


# Why the file at the path is not the figure the probe read (its ``file``
# verdict, grader.sandbox.runtime.probes.common.watch_figures): the grade is
# of that figure, so a file other than its bytes is neither graded nor kept.
NOT_THE_FIGURE = "the file at path is not the figure you saved there"
NOT_THE_FIGURE_WHY = {
    "unsaved": "your savefig wrote somewhere else (an io.BytesIO, another file) and this "
               "file was written some other way; save the figure at the path itself: "
               "fig.savefig(path)",
    "too_large": f"it holds more than the {MAX_PNG_BYTES >> 20} MiB a picture may (a "
                 "figure's PNG is far smaller: write nothing there but fig.savefig(path), "
                 "at the default dpi)",
    "changed": "it holds other bytes than the ones savefig wrote there (it changed after, "
               "or was written to before: put nothing in the file but fig.savefig(path))",
}


def file_problem(out, function: str) -> str | None:
    """Why the file at the path is not a PNG of the figure ``function``
    saved there (None: it is, and ``png_bytes(out)`` are its bytes)."""
    verdict = out.get("file")
    if not out.get("exists"):
        return f"{function} did not write the file at the path it was given"
    if verdict == "unsaved" and not out.get("elsewhere"):
        return (f"{function} saved no matplotlib figure (use fig.savefig(path) or "
                "plt.savefig(path))")
    if verdict in NOT_THE_FIGURE_WHY:
        return f"{function}: {NOT_THE_FIGURE}: {NOT_THE_FIGURE_WHY[verdict]}"
    if verdict != "figure" or not png_bytes(out).startswith(PNG_MAGIC):
        return (f"{function} wrote a file that is not a PNG image (the path ends in "
                ".png: let matplotlib's savefig pick the format from it)")
    return None


def figure(out, function: str) -> dict:
    """The figure ``function`` saved at the path, once the file there is that
    figure's PNG; skips the test where the grading machine has no matplotlib."""
    if out.get("no_matplotlib"):
        pytest.skip("needs matplotlib on the grading machine (pip install matplotlib)")
    problem = file_problem(out, function)
    if problem:
        raise Feedback(problem)
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
        if not (p["xlabel"] or p["ylabel"] or fig.get("supxlabel") or fig.get("supylabel")):
            raise Feedback(looks_like(MISTAKES["axes_unlabelled"]) + "\n"
                           f"{function}: panel {p['title'] or 'untitled'!r} has no axis labels")
        if not (says(p["xlabel"], "key") or says(fig.get("supxlabel"), "key")):
            swapped = says(p["xlabel"], "quer")
            raise Feedback(f"{function}: the x axis of panel {p['title'] or 'untitled'!r} is "
                           f"labelled {p['xlabel']!r}; columns are keys: label it "
                           "(ax.set_xlabel('key'))" +
                           ("\n" + looks_like(MISTAKES["axes_swapped"]) if swapped else ""))
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
    for start in (0, 1):   # "head 0" .. or "head 1" ..
        if set(firsts) == set(range(start, start + n)):
            return [found[firsts.index(i + start)] for i in range(n)]
    return found


def check_count(found: list[dict], want: list[np.ndarray], function: str) -> None:
    if len(found) == len(want):
        return
    shape = np.shape(found[0]["heatmaps"][0]) if len(found) == 1 else None
    s_q, s_k = want[0].shape
    n = len(want)
    concatenated = shape in ((s_q, n * s_k), (n * s_q, s_k)) and n > 1
    raise Feedback((looks_like(MISTAKES["heads_concatenated"]) + "\n" if concatenated else "") +
                   f"{function} drew {len(found)} heatmap panel(s); expected {n}, one "
                   f"({s_q} x {s_k}) panel per matrix")


def check_panel(p: dict, want: np.ndarray, what: str, mistakes: dict | None = None) -> None:
    """The panel's heatmap is ``want`` (masked cells drawn blank count as 0)."""
    got = np.asarray(p["heatmaps"][0], dtype=np.float64)
    if got.shape == want.T.shape and got.shape != want.shape:
        raise Feedback(looks_like(MISTAKES["transposed"]) + "\n"
                       f"{what} has shape {got.shape}; expected {want.shape} (rows are "
                       "queries, columns are keys)")
    blank = np.isnan(got)
    got = np.where(blank, 0.0, got)
    extra = dict(mistakes or {})
    if want.shape[0] == want.shape[1]:
        extra.setdefault(MISTAKES["transposed"], want.T)
    # matplotlib masks what it cannot colour (-inf scores): such a cell came back
    # blank, so a mistake that puts -inf there is compared on the other cells.
    extra = {d: np.where(blank & ~np.isfinite(m), 0.0, m) if np.shape(m) == got.shape else m
             for d, m in extra.items()}
    check_close(got, want, what=what, atol=ATOL, rtol=RTOL, mistakes=extra)


def check_heads(out, function: str, want: np.ndarray, mistakes: dict | None = None,
                what: str = "head") -> dict:
    """The figure ``function`` saved draws ``want[i]`` ``(S_q, S_k)`` in
    panel ``i`` (titled ``"head {i}"``, or read in order), labelled; each
    panel's known mistakes are ``{description: (h, S_q, S_k) array}``.
    Returns the figure."""
    fig = figure(out, function)
    found = panels(fig, function)
    check_count(found, list(want), function)
    found = by_head(found, len(want), function)
    check_labels(fig, found, function)
    for i, p in enumerate(found):
        check_panel(p, want[i], f"{function}: the heatmap of {what} {i}",
                    {d: m[i] for d, m in (mistakes or {}).items()})
    return fig


def check_gqa_heads(out, function: str, want: np.ndarray, n_kv_heads: int,
                    mistakes: dict | None = None) -> dict:
    """As ``check_heads``, each panel named ``"q{i} / kv{g}"`` by its title:
    query head ``i`` and the K/V head ``g = i // (h / h_kv)`` it reads."""
    fig = figure(out, function)
    found = panels(fig, function)
    check_count(found, list(want), function)
    check_labels(fig, found, function)
    h = len(want)
    n_rep = h // n_kv_heads
    named = {}
    for p in found:
        qs, kvs = title_numbers(p, r"\b(?:q|query)"), title_numbers(p, r"\b(?:kv|k/v)")
        if not qs or not kvs:
            raise Feedback(f"{function}: a panel is titled {p['title']!r}; title each panel "
                           "with its query head and the K/V head it reads, like 'q3 / kv1'")
        named[qs[0]] = (p, kvs[0])
    if sorted(named) != list(range(h)):
        raise Feedback(f"{function}: the panels' titles name query heads {sorted(named)}; "
                       f"expected each of 0 .. {h - 1} once")
    for i in range(h):
        p, g = named[i]
        if g != i // n_rep:
            modulo = g == i % n_kv_heads
            raise Feedback((looks_like(MISTAKES["kv_head_modulo"]) + "\n" if modulo else "") +
                           f"{function}: panel {p['title']!r} says query head {i} reads K/V "
                           f"head {g}; with h={h} and h_kv={n_kv_heads} it reads "
                           f"{i // n_rep}")
        check_panel(p, want[i], f"{function}: the heatmap of query head {i}",
                    {d: m[i] for d, m in (mistakes or {}).items()})
    return fig


def check_two_panels(out, full, causal):
    """Left panel ``full``, right panel ``causal``, each labelled; the slips
    of drawing one matrix twice or the two swapped are named."""
    fig = figure(out, "plot_weights")
    found = panels(fig, "plot_weights")
    if len(found) != 2:
        raise Feedback(f"plot_weights drew {len(found)} heatmap panel(s); expected 2, "
                       "weights_full on the left and weights_causal on the right")
    check_labels(fig, found, "plot_weights")
    check_panel(found[0], full, "plot_weights: the left heatmap (no mask)",
                {MISTAKES["panels_swapped"]: causal})
    check_panel(found[1], causal, "plot_weights: the right heatmap (causal)",
                {MISTAKES["causal_panel_unmasked"]: full})


def keep(out, artifacts_dir, name: str, function: str) -> str:
    """Keep the figure's PNG as ``name`` in the grader's output folder; the
    line that says where it went (or why not)."""
    problem = file_problem(out, function)   # the picture kept is the figure graded
    if problem:
        return f"(no picture kept: {problem})"
    data = png_bytes(out)
    if artifacts_dir is None:
        return "(picture not kept: give --artifacts DIR to keep it)"
    try:
        kept = artifacts.save(artifacts_dir, name, data)
    except (OSError, ValueError) as exc:
        return f"(no picture kept: {exc})"
    return f"your heatmap: {kept} (in the output folder)"
