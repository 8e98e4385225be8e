"""A free-text question's rubric as the one line a grading carries, and back.

A rubric is a list of ``(points, item)``; a grading writes it as
``item [1 pt]; item [0.5 pt]`` (``rubric_text``), which the rubric sheet and
the class's gradebook keep, and the staff's page reads back into items
(``parse_rubric``).  The mark, not the semicolon, ends an item, so an item
may hold a semicolon.  Nothing here is secret: the hidden suites format a
rubric with it, and the gradebook parses one.
"""
from __future__ import annotations

import re

RUBRIC_ITEM = re.compile(r"\s*(.+?)\s*\[(\d+(?:\.\d+)?) pts?\](?:;|$)", re.S)


def rubric_text(items) -> str:
    """``[(points, item), ...]`` as one line: ``item [1 pt]; item [0.5 pt]``."""
    return "; ".join(f"{text} [{points:g} pt]" for points, text in items)


def parse_rubric(text: str, points_possible: float) -> list[dict]:
    """A grading's rubric line as items ``{position, text, points}``: the
    items it marks with their points, or, for a line without marks (a
    rubric of an earlier version), each ``;``-separated part at an equal
    share of the question's points."""
    found = RUBRIC_ITEM.findall(text)
    if found and RUBRIC_ITEM.sub("", text).strip() == "":
        items = [(t, float(p)) for t, p in found]
    else:
        parts = [t.strip() for t in text.split(";") if t.strip()] or ["the answer"]
        items = [(t, round(points_possible / len(parts), 2)) for t in parts]
    return [{"position": i, "text": t, "points": p} for i, (t, p) in enumerate(items, 1)]
