"""Static HTML pages: one per student, and the class's page that links them.

``student_page`` renders one results JSON (``grader.report.to_gradescope``'s
dict: what ``grade --format json`` and every batch result hold), so that
``grade --format html`` and the batch's ``report/students/<key>.html`` are
one function (``key``: the submission's result name, unique in the batch).
``class_page`` is ``report/index.html``: the histogram of totals
(an inline SVG), per-exercise means, the mistakes table (``grader.insight``),
the similar pairs (``grader.similarity``), each linking a side-by-side page
with the shared lines marked, the submissions to regrade, and a link per
student.

Pages are self-contained: no script, styles inline, pictures as ``data:``
URIs, and a Content-Security-Policy that forbids any request, so a page reads
the same offline and a student's text cannot make it load anything.  Every
text shown has been through ``grader.safetext`` (clean) and is escaped here
with ``html.escape``.

The class's own pages (``index.html``, ``pair-<n>.html``) and the students'
pages never share a folder: a student named ``index`` or ``pair-0`` has a
page of their own in ``students/`` and overwrites nothing.
"""
from __future__ import annotations

import base64
import csv
import html
import io
import json
from pathlib import Path

from grader.registry import EXERCISES
from grader.safetext import NAME_LIMIT, clean, csv_value

CSP = ("default-src 'none'; style-src 'unsafe-inline'; img-src data:; "
       "form-action 'none'; base-uri 'none'")
STYLE = """body{font-family:system-ui,sans-serif;margin:2em;max-width:70em;color:#222}
table{border-collapse:collapse;margin:1em 0}td,th{border:1px solid #bbb;padding:.25em .6em;
text-align:left;vertical-align:top}th{background:#eee}pre{background:#f6f6f6;padding:.6em;
white-space:pre-wrap;margin:.2em 0 .8em}.failed{color:#a00}.passed{color:#070}
mark{background:#fd6}.side{display:flex;gap:1em}.side>div{flex:1;min-width:0}
.num{text-align:right}"""


def esc(text: object, limit: int = NAME_LIMIT * 8) -> str:
    """Cleaned (grader.safetext), then escaped for HTML."""
    return html.escape(clean(text, limit), quote=True)


def page(title: str, body: str) -> str:
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            f"<meta http-equiv=\"Content-Security-Policy\" content=\"{CSP}\">"
            f"<title>{esc(title)}</title><style>{STYLE}</style></head>\n"
            f"<body>\n{body}\n</body></html>\n")


def png_img(data: bytes, alt: str) -> str:
    return (f'<img alt="{esc(alt)}" src="data:image/png;base64,'
            f'{base64.b64encode(data).decode()}">')


def _num(x) -> str:
    try:
        return f"{float(x):g}"
    except (TypeError, ValueError):
        return esc(x)


def student_page(data: dict, name: str, pictures: dict[str, bytes] | None = None) -> str:
    """One student's feedback: per exercise, each test's points and output."""
    by_exercise: dict[str, list[dict]] = {}
    for test in data.get("tests") or []:
        if test.get("visibility") == "hidden" and "staff" in (test.get("tags") or []):
            continue    # free-text answers for staff: the rubric sheet has them
        exercise = str(test.get("name", "")).split(":", 1)[0]
        by_exercise.setdefault(exercise, []).append(test)
    total = sum(float(t.get("max_score", 0) or 0) for ts in by_exercise.values() for t in ts)
    parts = [f"<h1>{esc(name)}</h1>",
             f"<p id=\"total\">Total: {_num(data.get('score', 0))}/{_num(total)}</p>"]
    if data.get("output"):
        parts.append(f"<pre>{esc(data['output'])}</pre>")
    for exercise, tests in by_exercise.items():
        got = sum(float(t.get("score", 0) or 0) for t in tests)
        most = sum(float(t.get("max_score", 0) or 0) for t in tests)
        parts.append(f"<h2>{esc(exercise)} {_num(got)}/{_num(most)}</h2>")
        for t in tests:
            status = str(t.get("status", "not run"))
            title = str(t.get("name", "")).split(": ", 1)[-1]
            parts.append(f"<h3 class=\"{esc(status)}\">{esc(status.upper())} {esc(title)} "
                         f"({_num(t.get('score', 0))}/{_num(t.get('max_score', 0))})</h3>")
            if t.get("output"):
                parts.append(f"<pre>{esc(t['output'])}</pre>")
    for label, data_png in (pictures or {}).items():
        parts.append(f"<h2>{esc(label)}</h2>{png_img(data_png, label)}")
    return page(f"{name}: feedback", "\n".join(parts))


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
            f'height="210" role="img" aria-label="histogram of totals">'
            + "".join(bars) +
            f'<text x="40" y="198" font-size="11">{lo:g}</text>'
            f'<text x="{40 + bins * 40}" y="198" font-size="11" text-anchor="end">{hi:g}</text>'
            f'<text x="{40 + bins * 20}" y="208" font-size="11" text-anchor="middle">'
            f'total points ({len(totals)} submissions)</text></svg>')


def _table(header: list[str], rows: list[list[str]], ident: str) -> str:
    head = "".join(f"<th>{esc(h)}</th>" for h in header)
    body = "".join("<tr>" + "".join(f"<td>{c}</td>" for c in r) + "</tr>" for r in rows)
    return f'<table id="{ident}"><tr>{head}</tr>{body}</table>'


def _rows(text: str) -> list[dict]:
    return [{k: clean(csv_value(v or "")) for k, v in r.items() if k is not None}
            for r in csv.DictReader(io.StringIO(text))]


def class_page(grades_csv: str, mistakes: list[list], pairs: list, links: dict[str, str],
               rubric: dict | None = None) -> str:
    """``report/index.html``.  ``links``: {submission label: its page's file name};
    ``pairs``: ``grader.similarity.Pair`` list, the n-th opening ``pair-<n>.html``."""
    rows = _rows(grades_csv)
    exercises = [c for c in (rows[0] if rows else {}) if c in EXERCISES]
    totals = [float(r.get("total") or 0) for r in rows]
    parts = ["<h1>Class report</h1>", f"<p>{len(rows)} submissions.</p>",
             "<h2>Totals</h2>", histogram_svg(totals)]
    means = [[esc(ex), f'<span class="num">{sum(float(r.get(ex) or 0) for r in rows) / len(rows):.2f}'
              "</span>"] for ex in exercises + ["total"]] if rows else []
    parts += ["<h2>Per-exercise means</h2>", _table(["exercise", "mean"], means, "means")]
    parts += ["<h2>What the class got wrong</h2>", _table(
        ["exercise", "mistake", "text", "students", "who"],
        [[esc(ex), f"<code>{esc(ident)}</code>", esc(text), str(n), esc(who)]
         for ex, ident, text, n, who in mistakes], "mistakes")]
    parts += ["<h2>Similar submissions (a lead, never a grade)</h2>", _table(
        ["exercise", "score", "a", "b", ""],
        [[esc(p.exercise), f"{p.score:.2f}", esc(p.a), esc(p.b),
          f'<a href="pair-{i}.html">side by side</a>'] for i, p in enumerate(pairs)],
        "similar")]
    regrade = [r for r in rows if (r.get("needs_regrade") or "0") not in ("0", "0.0")
               or r.get("error")]
    parts += ["<h2>To regrade or look at</h2>", _table(
        ["submission", "tests needing a regrade", "error"],
        [[_link(r["submission"], links), esc(r.get("needs_regrade", "")),
          esc(r.get("error", ""))] for r in regrade], "regrade")]
    staff = ["staff points"] if rubric else []
    parts += ["<h2>Students</h2>", _table(
        ["submission", *exercises, "total", *staff],
        [[_link(r["submission"], links), *(_num(r.get(ex)) for ex in exercises),
          _num(r.get("total"))] + ([_num((rubric or {}).get(r["submission"], ""))]
                                   if rubric else []) for r in rows], "students")]
    return page("Class report", "\n".join(parts))


def _link(label: str, links: dict[str, str]) -> str:
    target = links.get(label)
    return f'<a href="{esc(target)}">{esc(label)}</a>' if target else esc(label)


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


def pictures_in(folder: Path | None) -> dict[str, bytes]:
    """The PNGs a grading left in its artifacts folder (the ex04 plot), by
    file name; links and anything else are not read."""
    pictures = {}
    if folder is None or not Path(folder).is_dir() or Path(folder).is_symlink():
        return pictures
    for png in sorted(Path(folder).glob("*.png")):
        if png.is_file() and not png.is_symlink():
            pictures[png.name] = png.read_bytes()
    return pictures


STUDENTS = "students"   # the students' pages' folder, beside the class's own pages


def student_href(key: str) -> str:
    """Where the class page links a student's page: ``students/<key>.html``."""
    return f"{STUDENTS}/{key}.html"


def write_class_report(folder: Path, grades_csv: str, results: list[tuple[str, str, dict]],
                       mistakes: list[list], pairs: list, rubric: dict | None = None,
                       pictures: dict[str, dict[str, bytes]] | None = None) -> Path:
    """``folder/index.html``, a page per student in ``folder/students/``
    (``results``: (label, result file stem, results JSON), labels unique, as
    ``grader.batch.discover`` makes them; ``pictures``: label -> that
    grading's PNGs) and one per similar pair; returns index.html."""
    from grader.report import write_private

    folder = Path(folder)
    links: dict[str, str] = {}
    for label, key, data in results:
        if label in links:   # two rows of one name could not be told apart
            raise ValueError(f"two results are labelled {label!r}")
        links[label] = student_href(key)
        write_private(folder / links[label],
                      student_page(data, label, (pictures or {}).get(label)))
    for i, pair in enumerate(pairs):
        write_private(folder / f"pair-{i}.html", pair_page(pair))
    index = folder / "index.html"
    write_private(index, class_page(grades_csv, mistakes, pairs, links, rubric))
    return index


def rewrite_class_page(folder: Path, grades_csv: Path, results_dir: Path,
                       rubric: dict[str, float] | None = None) -> Path | None:
    """``folder/index.html`` again from what lies beside ``grades_csv`` (after
    ``merge --rubric``: with the staff's points); None when there is none."""
    from grader import insight, similarity
    from grader.report import write_private

    index = Path(folder) / "index.html"
    if not index.is_file():
        return None
    sheet = insight.mistakes_of_csv(grades_csv)
    mistakes = insight.read_mistakes_csv(sheet.read_text(encoding="utf-8")) \
        if sheet.is_file() else []
    alike = similarity.similarity_csv(grades_csv)
    pairs = similarity.read_csv(alike.read_text(encoding="utf-8")) if alike.is_file() else []
    links = {}
    for path in sorted(Path(results_dir).glob("*.json")):
        try:
            label = json.loads(path.read_text())["extra_data"]["batch"]["submission"]
        except (OSError, ValueError, KeyError, TypeError):
            continue
        links[str(label)] = student_href(path.stem)
    text = Path(grades_csv).read_text(encoding="utf-8")
    write_private(index, class_page(text, mistakes, pairs, links, rubric))
    return index
