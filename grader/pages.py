"""Static HTML pages: a student's feedback page, and what every page shares.

``student_page`` renders one results JSON (``grader.report.to_gradescope``'s
dict: what ``grade --format json`` and every batch result hold), so that
``grade --format html`` and the batch's ``report/students/<key>.html`` are
one function (``key``: the submission's result name, unique in the batch).
The class's pages (``grader.classroom.pages``) are built from the same
``page`` and ``esc``.

Pages have no script, styles inline, pictures as ``data:`` URIs (a class
report's link the files beside the results instead: ``CSP_LINKED``), and a
Content-Security-Policy that forbids any other request, so a page reads the
same offline and a student's text cannot make it load anything.  Every
text shown has been through ``grader.safetext`` (clean) and is escaped here
with ``html.escape``.
"""
from __future__ import annotations

import base64
import html
from pathlib import Path

from grader.safetext import NAME_LIMIT, clean

CSP = ("default-src 'none'; style-src 'unsafe-inline'; img-src data:; "
       "form-action 'none'; base-uri 'none'")
# A class report's pages show the pictures a grading left beside its result by
# a relative link (a class of hundreds would carry megabytes of them inline):
# images from the report's own origin may load, still nothing from elsewhere.
CSP_LINKED = CSP.replace("img-src data:", "img-src 'self' data:")
STYLE = """body{font-family:system-ui,sans-serif;margin:2em;max-width:70em;color:#222}
table{border-collapse:collapse;margin:1em 0}td,th{border:1px solid #bbb;padding:.25em .6em;
text-align:left;vertical-align:top}th{background:#eee}pre{background:#f6f6f6;padding:.6em;
white-space:pre-wrap;margin:.2em 0 .8em}.failed{color:#a00}.passed{color:#070}
mark{background:#fd6}.side{display:flex;gap:1em}.side>div{flex:1;min-width:0}
.num{text-align:right}"""


def esc(text: object, limit: int = NAME_LIMIT * 8) -> str:
    """Cleaned (grader.safetext), then escaped for HTML."""
    return html.escape(clean(text, limit), quote=True)


def page(title: str, body: str, csp: str = CSP) -> str:
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            f"<meta http-equiv=\"Content-Security-Policy\" content=\"{csp}\">"
            f"<title>{esc(title)}</title><style>{STYLE}</style></head>\n"
            f"<body>\n{body}\n</body></html>\n")


def png_img(data: bytes, alt: str) -> str:
    return (f'<img alt="{esc(alt)}" src="data:image/png;base64,'
            f'{base64.b64encode(data).decode()}">')


def num(x) -> str:
    try:
        return f"{float(x):g}"
    except (TypeError, ValueError):
        return esc(x)


def student_page(data: dict, name: str, pictures: dict[str, bytes] | None = None,
                 grade_lines: list[str] | None = None,
                 linked: dict[str, str] | None = None, list_passed: bool = True) -> str:
    """One student's feedback: per exercise, each test's points and output
    (``grade_lines``: the class's final grade, late penalty and staff points,
    shown under the total on a batch's page).  ``pictures`` are put inside
    the page; ``linked`` ({name: relative href}) are linked instead, as a
    class report does.  Tests that passed without a word are a line each, or
    with ``list_passed`` false (a class's pages, read for what went wrong)
    only counted, with those that passed with a note (but a kept follower's,
    which says where the mistake is)."""
    by_exercise: dict[str, list[dict]] = {}
    for test in data.get("tests") or []:
        if test.get("visibility") == "hidden" and "staff" in (test.get("tags") or []):
            continue    # free-text answers for staff: the rubric sheet has them
        exercise = str(test.get("name", "")).split(":", 1)[0]
        by_exercise.setdefault(exercise, []).append(test)
    total = sum(float(t.get("max_score", 0) or 0) for ts in by_exercise.values() for t in ts)
    parts = [f"<h1>{esc(name)}</h1>",
             f"<p id=\"total\">Total: {num(data.get('score', 0))}/{num(total)}</p>"]
    if grade_lines:
        parts.append('<ul id="grade">' + "".join(f"<li>{esc(line)}</li>"
                                                  for line in grade_lines) + "</ul>")
    if data.get("output"):
        parts.append(f"<pre>{esc(data['output'])}</pre>")
    for exercise, tests in by_exercise.items():
        got = sum(float(t.get("score", 0) or 0) for t in tests)
        most = sum(float(t.get("max_score", 0) or 0) for t in tests)
        parts.append(f"<h2>{esc(exercise)} {num(got)}/{num(most)}</h2>")
        # What did not pass, in full; what passed, a line each (a class's
        # pages stay small, and the page reads from what to fix).
        # Passed without a word; on a class's pages, passed with a note too,
        # unless the note says where a mistake upstream is (a kept follower).
        passed = [t for t in tests if t.get("status") == "passed" and (
            not t.get("output") or not list_passed and "follows from" not in t["output"])]
        counted = {id(t) for t in passed}
        for t in tests:
            if id(t) in counted:
                continue
            status = str(t.get("status", "not run"))
            parts.append(f"<h3 class=\"{esc(status)}\">{esc(status.upper())} {esc(_title(t))} "
                         f"({num(t.get('score', 0))}/{num(t.get('max_score', 0))})</h3>")
            if t.get("output"):
                parts.append(f"<pre>{esc(t['output'])}</pre>")
        if passed and not list_passed:
            points = sum(float(t.get("score", 0) or 0) for t in passed)
            parts.append(f'<p class="passed">{len(passed)} more test'
                         f'{"" if len(passed) == 1 else "s"} passed ({num(points)} points).</p>')
        elif passed:
            parts.append('<ul class="passed">' + "".join(
                f"<li>PASSED {esc(_title(t))} ({num(t.get('score', 0))}/"
                f"{num(t.get('max_score', 0))})</li>" for t in passed) + "</ul>")
    for label, data_png in (pictures or {}).items():
        parts.append(f"<h2>{esc(label)}</h2>{png_img(data_png, label)}")
    for label, href in (linked or {}).items():
        parts.append(f'<h2>{esc(label)}</h2><img alt="{esc(label)}" src="{esc(href)}">')
    return page(f"{name}: feedback", "\n".join(parts), CSP_LINKED if linked else CSP)


def png_files(folder: Path | None) -> list[Path]:
    """The PNGs a grading left in its artifacts folder (the ex04 plot), in
    name order; links and anything else are not taken."""
    if folder is None or not Path(folder).is_dir() or Path(folder).is_symlink():
        return []
    return [png for png in sorted(Path(folder).glob("*.png"))
            if png.is_file() and not png.is_symlink()]


def _title(test: dict) -> str:
    return str(test.get("name", "")).split(": ", 1)[-1]


def pictures_in(folder: Path | None) -> dict[str, bytes]:
    """``png_files``' bytes, by file name."""
    return {png.name: png.read_bytes() for png in png_files(folder)}


