"""The staff's grading page: free-text answers graded by rubric item in a browser.

``attn-grade staff GRADEBOOK --grader NAME`` serves one class's gradebook
on 127.0.0.1 at a random port, under a one-time token that the printed URL
carries (a request without it, or for another host name, is refused with
403), and opens nothing itself.  A grader picks a question, reads its text
and rubric, and grades one answer at a time, its student hidden until
asked: rubric items by click or key (1-9), a comment, then the next
ungraded answer.  One answer text handed in by several students is one
group, graded once for all of them.

Every change is written to the gradebook at once (``Gradebook.mark_answers``:
points, items, comment, who, when, and the history); each answer's grade
carries a version, so two graders on one gradebook never overwrite each
other without being asked.  A rubric item's points changed here score
every answer that used it again.  The class's files (``views.write_all``)
are written when asked and when the server stops.

What a student wrote reaches the page only as JSON that the page's own
script puts in with ``textContent``: never markup.  The page loads no script
but ``staff.js`` from this server (``script-src 'self'``, no inline script),
and a POST must carry the token, JSON and this server's own Origin.
"""
from __future__ import annotations

import hashlib
import hmac
import json
import re
import secrets
import threading
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

from grader.classroom import views
from grader.classroom.gradebook import Gradebook, GradebookError, StaleMark, path_for
from grader.paths import EXERCISES_DIR, PACKAGE_DIR
from grader.safetext import NAME_LIMIT, clean

ASSETS = PACKAGE_DIR / "data"
FILES = {"staff.js": "text/javascript; charset=utf-8", "staff.css": "text/css; charset=utf-8"}
CSP = ("default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; "
       "img-src 'self'; form-action 'none'; base-uri 'none'; frame-ancestors 'none'")
ITEM = re.compile(r"\s*\d+\. ")     # a numbered item of a docstring's list
BODY_LIMIT = 64_000      # a POST: a comment and a few numbers
SHELL = """<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>Staff grading</title>
<link rel="icon" href="favicon.ico"><link rel="stylesheet" href="staff.css"><script src="staff.js" defer></script></head>
<body>
<header><h1>Staff grading</h1><span id="who"></span>
<button id="write" type="button" title="w">Write the class's files (w)</button>
<p id="status" role="status" aria-live="polite"></p></header>
<main>
<nav aria-label="Questions"><h2>Questions</h2><ul id="questions"></ul></nav>
<section id="grading" aria-label="Grading" hidden>
<h2 id="qname"></h2><p id="qtext"></p>
<p id="place"></p><p id="identity" hidden></p>
<pre id="answer" tabindex="0" aria-label="The answer"></pre>
<h3>Rubric <span id="score"></span></h3><ol id="rubric"></ol>
<label for="comment">Comment (c; Enter saves)</label>
<textarea id="comment" rows="2"></textarea>
<div id="conflict" role="alertdialog" aria-labelledby="conflict-text" hidden>
<p id="conflict-text"></p>
<button id="replace" type="button">Replace theirs with mine (r)</button>
<button id="keep" type="button">Keep theirs (k)</button></div>
<p class="keys">Keys: 1-9 apply an item; 0 none applies; c comment; n next ungraded;
j/k next/previous answer; i show the student; w write the class's files; q questions.</p>
</section>
</main>
</body></html>
"""


def gradebook_path(given: Path) -> tuple[Path, Path]:
    """(the gradebook, the grades CSV its views go to) from either of them."""
    given = Path(given)
    if given.suffix == ".sqlite":
        return given, given.with_suffix(".csv")
    return path_for(given), given


def question_text(exercise: str, question: str) -> str:
    """What the student was asked: the comment block above ``question`` in
    the exercise's stub, or the docstring's list item or paragraph that
    names it ("" when neither is found)."""
    if not re.fullmatch(r"[a-z0-9_]{1,80}", exercise):
        return ""       # a name from the gradebook, never a path
    try:
        lines = (EXERCISES_DIR / f"{exercise}.py").read_text(encoding="utf-8").splitlines()
    except (OSError, ValueError):
        return ""
    for at, line in enumerate(lines):
        if line.startswith(f"{question} ="):
            above = []
            while at > 0 and lines[at - 1].startswith("#"):
                at -= 1
                above.insert(0, lines[at].lstrip("#").strip())
            if above:
                return " ".join(above)
    for at, line in enumerate(lines):
        if f"``{question}``" in line:
            found = [line]
            for more in lines[at + 1:]:
                if not more.strip() or ITEM.match(more):
                    break
                found.append(more)
            return " ".join(" ".join(found).split())
    return ""


class Session:
    """One gradebook served to staff: what the page asks, answered under one
    lock (the gradebook's connection is shared by the server's threads)."""

    def __init__(self, book: Gradebook, out: Path, who: str):
        self.book, self.out, self.who = book, Path(out), clean(who, NAME_LIMIT, one_line=True)
        self.lock = threading.Lock()

    def questions(self) -> list[dict]:
        """Each question with its progress: answers and groups, graded or not."""
        found: dict[str, dict] = {}
        for q in self.book.questions():
            entry = found.setdefault(q["question"], {
                "question": q["question"], "exercise": q["exercise"],
                "points_possible": q["points_possible"], "answers": 0, "graded": 0})
            entry["answers"] += 1
            entry["graded"] += q["points"] is not None
        return list(found.values())

    def question(self, name: str) -> dict:
        """A question's text, rubric and answer groups (one per answer text),
        in an order that says nothing of who wrote them."""
        rows = [q for q in self.book.questions() if q["question"] == name]
        if not rows:
            raise GradebookError(f"no grading asks staff to grade a question {name!r}.")
        groups: dict[str, list] = {}
        for q in rows:
            groups.setdefault(q["answer"].strip(), []).append(q["submission"])
        out = []
        for text, members in sorted(groups.items(), key=lambda g: _digest(g[0])):
            marks = {s: self.book.staff_mark(s, name) for s in members}
            first = marks[members[0]]
            out.append({"answer": text, "members": members,
                        "versions": {s: m["version"] for s, m in marks.items()},
                        "graded": all(m["points"] is not None for m in marks.values()),
                        "points": first["points"], "items": first["items"],
                        "comment": first["comment"], "grader": first["grader"]})
        return {"question": name, "exercise": rows[0]["exercise"],
                "text": question_text(rows[0]["exercise"], name),
                "points_possible": max(q["points_possible"] for q in rows),
                "rubric": self.book.rubric(name), "groups": out}

    def mark(self, body: dict) -> dict:
        members = [str(s) for s in _list(body, "submissions")]
        seen = body.get("seen") if isinstance(body.get("seen"), dict) else {}
        versions = self.book.mark_answers(
            members, str(body.get("question", "")), [_int(i) for i in _list(body, "items")],
            str(body.get("comment", "")), self.who, {str(k): _int(v) for k, v in seen.items()},
            replace=body.get("replace") is True)
        return {"versions": versions}

    def rubric(self, body: dict) -> dict:
        count = self.book.set_rubric_points(str(body.get("question", "")),
                                            _int(body.get("position")),
                                            _number(body.get("points")), self.who)
        return {"rescored": count}

    def write(self, _body: dict | None = None) -> dict:
        written = views.write_all(self.book, self.out, whole_class=self.book.meta("shard") is None,
                                  results_dir=self.out.parent / "results")
        return {"written": [str(self.out)] + [str(p) for p in written]}


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8", "replace")).hexdigest()


def _list(body: dict, key: str) -> list:
    value = body.get(key)
    if not isinstance(value, list):
        raise GradebookError(f"the request needs a list {key!r}.")
    return value


def _int(value) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        raise GradebookError(f"{value!r} is not a whole number.")
    try:
        return int(value)
    except ValueError:
        raise GradebookError(f"{value!r} is not a whole number.") from None


def _number(value) -> float:
    if isinstance(value, bool):
        raise GradebookError(f"{value!r} is not a number of points.")
    try:
        return float(value)
    except (TypeError, ValueError):
        raise GradebookError(f"{value!r} is not a number of points.") from None


class Handler(BaseHTTPRequestHandler):
    """The page, its two files and its JSON; everything under /TOKEN/."""

    server: "StaffServer"
    server_version = "attn-grade-staff"
    sys_version = ""

    def log_message(self, *args) -> None:
        pass    # the token is in every path: a log line would print it

    def _send(self, status: int, body: bytes, kind: str) -> None:
        self.send_response(status)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Content-Security-Policy", CSP)
        self.send_header("X-Content-Type-Options", "nosniff")
        self.send_header("Referrer-Policy", "no-referrer")
        self.send_header("Cache-Control", "no-store")
        self.end_headers()
        self.wfile.write(body)

    def _json(self, status: int, data: dict) -> None:
        self._send(status, json.dumps(data).encode(), "application/json; charset=utf-8")

    def _route(self) -> str | None:
        """The path after the token, or None (a 403 sent) for a request
        without it or for another host name than this server's."""
        here = f"127.0.0.1:{self.server.server_address[1]}"
        parts = urlsplit(self.path).path.split("/", 2)
        if (self.headers.get("Host") != here or len(parts) < 3
                or not hmac.compare_digest(parts[1].encode(), self.server.token.encode())):
            self._send(HTTPStatus.FORBIDDEN, b"forbidden\n", "text/plain; charset=utf-8")
            return None
        return parts[2]

    def do_GET(self) -> None:
        route = self._route()
        if route is None:
            return
        session = self.server.session
        if route == "":
            self._send(HTTPStatus.OK, SHELL.encode(), "text/html; charset=utf-8")
        elif route == "favicon.ico":
            self._send(HTTPStatus.NO_CONTENT, b"", "image/x-icon")   # asked for by every browser
        elif route in FILES:
            self._send(HTTPStatus.OK, (ASSETS / route).read_bytes(), FILES[route])
        elif route == "api/questions":
            self._answer(lambda: {"grader": session.who, "questions": session.questions()})
        elif route == "api/question":
            name = parse_qs(urlsplit(self.path).query).get("q", [""])[0]
            self._answer(lambda: session.question(name))
        else:
            self._send(HTTPStatus.NOT_FOUND, b"not found\n", "text/plain; charset=utf-8")

    def do_POST(self) -> None:
        route = self._route()
        if route is None:
            return
        origin = f"http://127.0.0.1:{self.server.server_address[1]}"
        if self.headers.get("Origin") != origin or \
                self.headers.get("Content-Type", "").split(";")[0] != "application/json":
            self._send(HTTPStatus.FORBIDDEN, b"same-origin JSON only\n", "text/plain")
            return
        actions = {"api/mark": self.server.session.mark, "api/rubric": self.server.session.rubric,
                   "api/write": self.server.session.write}
        if route not in actions:
            self._send(HTTPStatus.NOT_FOUND, b"not found\n", "text/plain; charset=utf-8")
            return
        try:
            size = int(self.headers.get("Content-Length", "0"))
        except ValueError:
            size = -1
        if not 0 <= size <= BODY_LIMIT:
            self._json(HTTPStatus.REQUEST_ENTITY_TOO_LARGE, {"error": "request too large."})
            return
        try:
            body = json.loads(self.rfile.read(size) or b"{}")
        except ValueError:
            body = None
        if not isinstance(body, dict):
            self._json(HTTPStatus.BAD_REQUEST, {"error": "the request is not a JSON object."})
            return
        self._answer(lambda: actions[route](body))

    def _answer(self, work) -> None:
        """Run ``work`` under the session's lock; a refusal is one sentence."""
        try:
            with self.server.session.lock:
                data = work()
        except StaleMark as exc:
            # an answer for the grader to give, not a failed request (nor a console error)
            self._json(HTTPStatus.OK, {"stale": str(exc), "current": exc.current})
            return
        except GradebookError as exc:
            self._json(HTTPStatus.BAD_REQUEST, {"error": str(exc)})
            return
        self._json(HTTPStatus.OK, data)


class StaffServer(ThreadingHTTPServer):
    """The grading page's server: 127.0.0.1 only, a random port, one token."""

    daemon_threads = True

    def __init__(self, session: Session, port: int = 0):
        super().__init__(("127.0.0.1", port), Handler)
        self.session = session
        self.token = secrets.token_urlsafe(24)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}/{self.token}/"


def open_session(given: Path, who: str) -> Session:
    """The session for a gradebook named by its .sqlite or its grades CSV;
    ``GradebookError`` when there is none or it asks staff nothing."""
    book_path, out = gradebook_path(given)
    if not book_path.is_file() and out.is_file():
        views.import_folder(out)        # an output folder of an earlier version, read in once
    if not book_path.is_file():
        raise GradebookError(f"{given} is not a class's gradebook (no {book_path.name}): "
                             "grade the class with `attn-grade batch` first.")
    book = Gradebook(book_path)
    if not book.questions():
        book.close()
        raise GradebookError(f"{book_path} holds no free-text answer for staff to grade.")
    return Session(book, out, who)
