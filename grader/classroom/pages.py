"""The class's HTML report, from the gradebook: what a TA opens first.

``report/index.html`` puts the work first: the students' final grades (the
grader's points, the staff's, the late penalty, the final grade, or "needs
regrade"), then what needs a regrade (tests not judged, gradings the grader
could not finish; a missing module is not one), the mistakes by id, the
histogram of final grades and the per-exercise means, and the most similar
pairs (``TOP_PAIRS``) with a link to ``similar.html``, which lists the
``LISTED_PAIRS`` most similar.  Side-by-side pages are made for the
``PAIR_PAGES`` most similar pairs only, and a student's page links the
pictures its grading left beside its result rather than carrying them, so
that a class of hundreds (tens of thousands of pairs) keeps its report
small; ``similarity.csv`` has every pair.

The class's own pages (``index.html``, ``similar.html``, ``pair-<n>.html``)
and the students' pages never share a folder: a student named ``index`` or
``pair-0`` has a page of their own in ``students/`` and overwrites nothing.
"""
from __future__ import annotations

import html
import os
from pathlib import Path

from grader.classroom.gradebook import Gradebook, Row
from grader.classroom.batch import artifacts_of
from grader.pages import esc, num, page, png_files, student_page
from grader.artifacts import write_private
from grader.safetext import clean

TOP_PAIRS = 20       # on the class page
PAIR_PAGES = 50      # side-by-side pages made
LISTED_PAIRS = 1000  # on similar.html (similarity.csv has every pair)
STUDENTS = "students"   # the students' pages' folder, beside the class's own pages


def histogram_svg(totals: list[float], bins: int = 10) -> str:
    """Submissions per band of totals, as an inline SVG (no library, no request)."""
    if not totals:
        return "<p>No submissions.</p>"
    lo, hi = min(totals), max(totals)
    width = (hi - lo) / bins or 1.0
    counts = [0] * bins
    for t in totals:
        counts[min(int((t - lo) / width), bins - 1)] += 1
    top = max(counts)
    bars = []
    for i, n in enumerate(counts):
        h = 160 * n / top
        bars.append(f'<rect x="{40 + i * 40}" y="{180 - h:.1f}" width="36" height="{h:.1f}" '
                    f'fill="#4477aa"><title>{lo + i * width:g}-{lo + (i + 1) * width:g}: '
                    f'{n}</title></rect><text x="{58 + i * 40}" y="{175 - h:.1f}" '
                    f'font-size="11" text-anchor="middle">{n}</text>')
    return (f'<svg id="histogram" width="{60 + bins * 40}" '
            f'height="210" role="img" aria-label="histogram of final grades">'
            + "".join(bars) +
            f'<text x="40" y="198" font-size="11">{lo:g}</text>'
            f'<text x="{40 + bins * 40}" y="198" font-size="11" text-anchor="end">{hi:g}</text>'
            f'<text x="{40 + bins * 20}" y="208" font-size="11" text-anchor="middle">'
            f'final grade ({len(totals)} submissions)</text></svg>')


def _table(header: list[str], rows: list[list[str]], ident: str) -> str:
    head = "".join(f"<th>{esc(h)}</th>" for h in header)
    body = "".join("<tr>" + "".join(f"<td>{c}</td>" for c in r) + "</tr>" for r in rows)
    return f'<table id="{ident}"><tr>{head}</tr>{body}</table>'


def _link(label: str, links: dict[str, str]) -> str:
    target = links.get(label)
    return f'<a href="{esc(target)}">{esc(label)}</a>' if target else esc(label)


def final_text(row: Row) -> str:
    """The final grade as a person reads it: a number, or why there is none."""
    if row.final is None or row.final.points is None:
        return "needs regrade"
    return f"{row.final.points:g}" + (" (override)" if row.final.overridden else "")


def to_regrade(row: Row) -> bool:
    """Tests not judged, or a grading the grader could not finish; a module
    the student did not hand in is their zero, not a regrade."""
    return row.needs_regrade > 0 or row.grading_failed


def grade_lines(row: Row) -> list[str]:
    """A student's grade in words, for their page."""
    f = row.final
    lines = [f"Grader's points: {row.total:g} of {row.max_total:g}"]
    if row.staff_max:
        lines.append(f"Staff's points: {f.staff:g} of {row.staff_max:g}"
                     + "".join(f"; {e['question']}: {e['points']:g}"
                               + (f" ({e['comment']})" if e["comment"] else "")
                               for e in row.staff))
    if f.late_units:
        lines.append(f"Late: {f.late_units} unit(s) after {row.due}: -{f.penalty:g}")
    if row.override:
        lines.append(f"Override: {row.override['points']:g} ({row.override['reason']})")
    lines.append(f"Final grade: {final_text(row)} of {row.final_max:g}")
    return lines


def class_page(rows: list[Row], exercises: list[str], mistakes: list[list], pairs: list,
               links: dict[str, str], pair_pages: int) -> str:
    """``report/index.html``.  ``links``: {submission label: its page's file name}."""
    graded = [r for r in rows if r.final is not None and r.final.points is not None]
    parts = ["<h1>Class report</h1>", f"<p>{len(rows)} submissions.</p>"]
    parts += ["<h2>Students</h2>", _table(
        ["submission", "final grade", "of", "grader's points", "staff's points",
         "late penalty", *exercises],
        [[_link(r.submission, links), f"<strong>{esc(final_text(r))}</strong>",
          num(r.final_max), num(r.total), num(r.final.staff) if r.staff_max else "",
          num(-r.final.penalty) if r.final.penalty else "",
          *(num(r.scores.get(ex, (0, 0))[0]) for ex in exercises)] for r in rows],
        "students")]
    regrade = [r for r in rows if to_regrade(r)]
    parts += ["<h2>To regrade</h2>", _table(
        ["submission", "tests needing a regrade", "why"],
        [[_link(r.submission, links), esc(r.needs_regrade), esc(r.error)] for r in regrade],
        "regrade") if regrade else '<p id="regrade">Nothing to regrade.</p>']
    parts += ["<h2>What the class got wrong</h2>", _table(
        ["exercise", "mistake", "text", "students", "who"],
        [[esc(ex), f"<code>{esc(ident)}</code>", esc(text), str(n), esc(who)]
         for ex, ident, text, n, who in mistakes], "mistakes")]
    parts += ["<h2>Final grades</h2>", histogram_svg([r.final.points for r in graded])]
    means = [[esc(ex), f'<span class="num">{sum(r.scores.get(ex, (0, 0))[0] for r in rows) / len(rows):.2f}'
              "</span>"] for ex in exercises] if rows else []
    if graded:
        means.append(["final grade", f'<span class="num">'
                      f'{sum(r.final.points for r in graded) / len(graded):.2f}</span>'])
    parts += ["<h2>Per-exercise means</h2>", _table(["exercise", "mean"], means, "means")]
    parts += [f"<h2>Similar submissions (a lead, never a grade)</h2>",
              _pairs_table(pairs[:TOP_PAIRS], pair_pages, "similar")]
    if len(pairs) > TOP_PAIRS:
        parts.append(f'<p><a href="similar.html">All {len(pairs)} similar pairs</a></p>')
    return page("Class report", "\n".join(parts))


def _pairs_table(pairs: list, pair_pages: int, ident: str) -> str:
    return _table(["exercise", "score", "a", "b", ""],
                  [[esc(p.exercise), f"{p.score:.2f}", esc(p.a), esc(p.b),
                    f'<a href="pair-{i}.html">side by side</a>' if i < pair_pages else ""]
                   for i, p in enumerate(pairs)], ident)


def similar_page(pairs: list, pair_pages: int) -> str:
    more = (f"<p>The {LISTED_PAIRS} most similar of {len(pairs)} pairs; similarity.csv "
            "beside grades.csv has them all.</p>") if len(pairs) > LISTED_PAIRS else ""
    return page("Similar submissions", "<h1>Similar submissions (a lead, never a grade)</h1>"
                + more + _pairs_table(pairs[:LISTED_PAIRS], pair_pages, "all-similar"))


def _marked(source: str, spans: list[tuple[int, int]]) -> str:
    lines = clean(source).split("\n")
    inside = {n for a, b in spans for n in range(a, b + 1)}
    return "\n".join(f"<mark>{html.escape(line)}</mark>" if i + 1 in inside
                     else html.escape(line) for i, line in enumerate(lines))


def pair_page(pair) -> str:
    """Two submissions side by side, the shared lines marked."""
    body = (f"<h1>{esc(pair.exercise)}: {esc(pair.a)} and {esc(pair.b)}</h1>"
            f"<p>score {pair.score:.2f} (shares {pair.share_a:.2f} and {pair.share_b:.2f}); "
            "marked: the lines the other also has, after names and comments are "
            "ignored. A lead for a person, never a grade.</p><div class=\"side\">"
            f"<div><h2>{esc(pair.a)}</h2><pre>{_marked(pair.source_a, pair.spans_a)}</pre></div>"
            f"<div><h2>{esc(pair.b)}</h2><pre>{_marked(pair.source_b, pair.spans_b)}</pre></div>"
            "</div>")
    return page(f"{pair.exercise}: {pair.a} and {pair.b}", body)


def student_href(key: str) -> str:
    """Where the class page links a student's page: ``students/<key>.html``."""
    return f"{STUDENTS}/{key}.html"


def write_class_report(folder: Path, book: Gradebook, rows: list[Row], mistakes: list[list],
                       results_dir: Path | None) -> Path:
    """``folder/index.html``, a page per graded student in ``folder/students/``
    (with the pictures its grading left beside its result in ``results_dir``),
    ``similar.html`` and the side-by-side pages; returns index.html."""
    folder = Path(folder)
    by_label = {r.submission: r for r in rows}
    links: dict[str, str] = {}
    for label, key, data in book.results():
        links[label] = student_href(key)
        page_dir = (folder / links[label]).parent
        pictures = {png.name: Path(os.path.relpath(png, page_dir)).as_posix() for png in
                    png_files(artifacts_of(Path(results_dir) / f"{key}.json"))} \
            if results_dir is not None else {}
        row = by_label.get(label)
        write_private(folder / links[label], student_page(
            data, label, None, grade_lines(row) if row is not None else None, pictures,
            list_passed=False))
    pairs = book.pairs()
    shown = min(len(pairs), PAIR_PAGES)
    for i, pair in enumerate(pairs[:shown]):
        write_private(folder / f"pair-{i}.html", pair_page(pair))
    for stale in folder.glob("pair-*.html"):     # an earlier run's pages past today's
        suffix = stale.stem.removeprefix("pair-")
        if suffix.isdigit() and int(suffix) >= shown:
            stale.unlink()
    if len(pairs) > TOP_PAIRS:
        write_private(folder / "similar.html", similar_page(pairs, shown))
    index = folder / "index.html"
    write_private(index, class_page(rows, book.exercises(), mistakes, pairs, links, shown))
    return index
