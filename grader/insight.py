"""What the class got wrong: a stable id for every diagnosis, and the table.

A diagnosis is a feedback line "This looks like: <text>." (``grader.feedback``,
``grader.reference.mistakes.looks_like``).  Its id is the key of the text in a
table of mistakes' words (``no_scale``, the key of
``grader.reference.secret.attention.MISTAKES``; every table is found by
``tables``), found by its text, so that rewording a mistake's description
changes no id and two exercises naming the same slip share one (exercise A's
by-hand slips are ``by_hand.MISTAKES``; a key another table has already for
other words is qualified by its module: ``by_hand.no_scale``; an interview
question's slip is ``questions.<key>``, one key for a slip made in several
questions).  A line may say more after a table's words ("timing without
synchronization (call torch.cuda.synchronize() ...)", "the wrong grouping: the
value listed under h_kv=4 ..."): it is keyed by the longest table text it
starts with, followed by " (", ": ", ". ", ", " or "; ".  Text found in no
table gets ``unkeyed-<slug>-<hash>`` of its words: stable as long as its
wording is (tests/test_mistake_keys.py holds the grader to writing none).

``annotate`` puts the ids into a Gradescope result (each test's
``extra_data.mistakes`` and the result's ``extra_data.mistakes``), and
``result_mistakes`` reads them back; the class's table of them
(``grader.classroom.views.class_mistakes``) counts each student once per
exercise and mistake, however many tests named it.
"""
from __future__ import annotations

import ast
import hashlib
import importlib
import re

from grader.feedback import LOOKS_LIKE
from grader.paths import PACKAGE_DIR, SUITES_DIR

# The line rootcause puts first on a downstream failure (grader.rootcause.FOLLOWS).
FOLLOWS_START = "This follows from the "
OR = " (or: "    # two mistakes giving one answer (grader.feedback.matching_mistake)

# Every table of mistakes' words ({key: text}) the grader writes diagnoses
# from is found by ``tables``: a module-level dict named ``MISTAKES`` or
# ``*_MISTAKES`` in ``grader/reference/secret/``, then ``grader/reference/``,
# then the hidden suites (words only a hidden suite writes stay with it; the
# edition has none), each folder in name order.  Nothing lists them: a new
# module's table is found where it is written.  The order keeps ids stable: a
# key met again with other words is qualified by its module (``mla.no_scale``).
# The interview questions' slips (several wordings to a key) are read by
# ``_question_ids``.
TABLE_FOLDERS = (("grader.reference.secret", "reference/secret"),
                 ("grader.reference", "reference"),
                 ("grader.suites.hidden", "suites/hidden"))
SUITES_PACKAGE = "grader.suites."
# What may follow a table's words on a diagnosis line that says more.
DETAIL_STARTS = (" (", ": ", ". ", ", ", "; ")

_known: dict[str, str] | None = None
_by_length: list[str] = []
_heads: dict[str, str | None] = {}


def table_of(module: str, attribute: str) -> dict[str, str]:
    """One table of ``tables()``, its empty words left out (``FLASH_MISTAKES``
    has a key for a mistake ``attention.MISTAKES`` words).  A suite's table
    is read from its file as a literal, never imported: a suite is pytest's
    to import (its marks, its fixtures)."""
    if module.startswith(SUITES_PACKAGE):
        path = SUITES_DIR.joinpath(*module[len(SUITES_PACKAGE):].split(".")).with_suffix(".py")
        tree = ast.parse(path.read_text(encoding="utf-8"))
        table = next(ast.literal_eval(node.value) for node in tree.body
                     if isinstance(node, ast.Assign)
                     and [getattr(t, "id", None) for t in node.targets] == [attribute])
    else:
        table = getattr(importlib.import_module(module), attribute)
    return {k: v for k, v in table.items() if v}


def tables() -> list[tuple[str, str]]:
    """(module, attribute) of every table of mistakes' words, found in the
    source (a dict literal named ``MISTAKES`` or ``*_MISTAKES`` at a
    module's top), in ``TABLE_FOLDERS``'s order."""
    found = []
    for package, folder in TABLE_FOLDERS:
        for path in sorted((PACKAGE_DIR / folder).glob("*.py")):
            try:
                tree = ast.parse(path.read_text(encoding="utf-8"))
            except (OSError, SyntaxError, ValueError):
                continue
            for node in tree.body:
                names = [getattr(t, "id", "") for t in getattr(node, "targets", [])]
                if (isinstance(node, ast.Assign) and isinstance(node.value, ast.Dict)
                        and len(names) == 1 and names[0].endswith("MISTAKES")):
                    found.append((f"{package}.{path.stem}", names[0]))
    return found


def _reference_tables() -> list[tuple[str, dict]]:
    """(module's short name, {key: text}) of every table that loads.  The
    student edition ships no hidden suite, and its secret modules are
    replays: a table that does not load there keys nothing."""
    out = []
    for module, attribute in tables():
        try:
            out.append((module.rsplit(".", 1)[-1], table_of(module, attribute)))
        except Exception:   # noqa: BLE001 - the edition's stubs may raise anything: no keys
            continue
    return out


def _question_ids() -> dict[str, str]:
    """{text: questions.<key>} of the questions' slips: one key may have several wordings."""
    found: dict[str, str] = {}
    try:
        from grader.reference.secret import questions
        for name in questions.FORMS:
            for key, (text, _) in questions.key(name).get("mistakes", {}).items():
                found.setdefault(text, f"questions.{key}")
    except Exception:   # noqa: BLE001 - the edition: no keys
        return {}
    return found


def known_ids() -> dict[str, str]:
    """{description: mistake id}.  A key that two tables use for two
    texts is qualified by its module (``mla.no_scale``) after the first."""
    global _known, _by_length
    if _known is None:
        known: dict[str, str] = {}
        owner: dict[str, str] = {}    # id -> its text
        for module, table in _reference_tables():
            for key, text in table.items():
                if text in known:
                    continue
                ident = key if owner.get(key, text) == text else f"{module}.{key}"
                owner[ident] = text
                known[text] = ident
        for text, ident in _question_ids().items():
            known.setdefault(text, ident)
        _by_length = sorted(known, key=len, reverse=True)
        _known = known
    return _known


def known_text(text: str) -> str | None:
    """The table's words a diagnosis ``text`` names: itself when a table has
    it, else the longest table text it starts with, followed by more about
    the case (``DETAIL_STARTS``); None when it names no table's words."""
    known = known_ids()
    if text in known:
        return text
    if text not in _heads:
        _heads[text] = next((t for t in _by_length if text.startswith(t)
                             and text[len(t):len(t) + 2] in DETAIL_STARTS), None)
    return _heads[text]


def mistake_id(text: str) -> str:
    """The stable id of one mistake's description."""
    head = known_text(text)
    if head is not None:
        return known_ids()[head]
    slug = re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")[:40].strip("-")
    digest = hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:8]
    return f"unkeyed-{slug}-{digest}"


def _split(text: str) -> list[str]:
    """"A (or: B)" is two mistakes where either part is a known one."""
    known = known_ids()
    if text in known or OR not in text or not text.endswith(")"):
        return [text]
    start = 0
    while (at := text.find(OR, start)) >= 0:
        left, right = text[:at], text[at + len(OR):-1]
        if left in known or right in known:
            return [left, right]
        start = at + 1
    return [text]


def diagnoses(output: str) -> list[tuple[str, str]]:
    """[(id, text)] of the mistakes a test's feedback names, each once; the
    text is the table's words (without what the line says after them)."""
    found: dict[str, str] = {}
    for line in output.splitlines():
        line = line.strip()
        if not (line.startswith(LOOKS_LIKE) and line.endswith(".")):
            continue
        for text in _split(line[len(LOOKS_LIKE):-1]):
            head = known_text(text)
            found.setdefault(mistake_id(text), text if head is None else head)
    return list(found.items())


def follows(output: str) -> bool:
    """Does this feedback say it follows from a mistake named upstream?"""
    return output.startswith(FOLLOWS_START)


def annotate(report, out: dict) -> None:
    """Each failed test's mistake ids into ``out`` (``to_gradescope``'s dict):
    ``tests[i].extra_data.mistakes`` and the list of all under
    ``extra_data.mistakes`` (exercise, test, id, text, follows)."""
    every = []
    for t, entry in zip(report.tests, out.get("tests", [])):
        if t.status != "failed":
            continue
        named = diagnoses(t.output)
        if not named:
            continue
        entry.setdefault("extra_data", {})["mistakes"] = [i for i, _ in named]
        every += [{"exercise": t.exercise, "test": t.name, "id": i, "text": text,
                   "follows": follows(t.output)} for i, text in named]
    if every:
        out.setdefault("extra_data", {})["mistakes"] = every


def result_mistakes(data: dict) -> list[tuple[str, str, str]]:
    """[(exercise, id, text)] of one results JSON: the ids ``annotate``
    stored, else (a result of an earlier version) read from the feedback."""
    extra = data.get("extra_data") if isinstance(data.get("extra_data"), dict) else {}
    stored = extra.get("mistakes")
    if isinstance(stored, list):
        return [(str(m.get("exercise", "")), str(m.get("id", "")), str(m.get("text", "")))
                for m in stored if isinstance(m, dict)]
    out = []
    for test in data.get("tests") or []:
        exercise = str(test.get("name", "")).split(":", 1)[0]
        out += [(exercise, i, text) for i, text in diagnoses(str(test.get("output", "")))]
    return out
