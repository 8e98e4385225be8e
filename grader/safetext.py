"""Text a student controls, made safe once, where it enters a report.

A submission controls much of what the grader writes: error messages,
free-text answers, printed output, test feedback, import errors, file and
folder names, student identifiers.  Each such field of ``Report``,
``TestResult`` (``grader.report``), ``Submission`` and ``Outcome``
(``grader.classroom.batch``) passes through ``clean`` as it is assigned (the
``fields`` decorator; lists and mappings clean what is added to them), so
every writer (text, JSON, JUnit, Gradescope, the batch's CSVs and summary,
the terminal) gets text that is

- valid Unicode: a lone surrogate becomes U+FFFD (a pair becomes its
  character), so UTF-8 encodes it with ``errors="strict"``;
- free of controls: C0 but newline and tab, DEL, C1 (ESC, CSI, OSC among
  them), the bidi overrides and isolates, and U+FFFE/U+FFFF are written as
  visible escapes (ESC as the four characters ``\\x1b``), so nothing reaches
  a terminal as a command and everything is a character XML 1.0 allows;
  ``\\r\\n`` becomes ``\\n``;
- bounded: at most ``ANSWER_LIMIT`` characters for a free-text answer,
  ``FIELD_LIMIT`` for feedback, output or an error, ``NAME_LIMIT`` (one
  line: newline and tab escaped too) for a name, identifier, path or title;
  a cut text ends with a note that says so, within the limit.

``clean`` is idempotent and leaves ordinary text (printable characters,
newlines, tabs) unchanged, so the grader's own text prints as written.

CSV is the one format with a rule of its own: a cell that begins with
``=``, ``+``, ``-``, ``@``, tab or CR (or their full-width forms, or any of
them after spaces) is a formula to a spreadsheet, so ``csv_text``, which
writes every CSV the grader writes, puts a ``'`` before it (OWASP's advice on
CSV injection).  Numbers the grader writes are passed as numbers and stay
numbers.
"""
from __future__ import annotations

import csv
import io
import re
from typing import Callable, Iterable

ANSWER_LIMIT = 20_000   # a free-text answer: 250 words are about 1,500 characters
FIELD_LIMIT = 8_000     # feedback, printed output, an error, an import error
NAME_LIMIT = 1_000      # one line: a submission or folder name, an identifier, a path, a title

CUT_NOTE = "[cut by the grader: {size:,} characters, at most {limit:,} kept]"

# Shown as escapes: C0 but tab and newline, DEL, C1, the bidi embeddings and
# overrides (U+202A-202E) and isolates (U+2066-2069), and the two code points
# XML 1.0 forbids that are not controls or surrogates (U+FFFE, U+FFFF).
_UNSAFE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069\ufffe\uffff]")
_UNSAFE_ONE_LINE = re.compile("[\x00-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069\ufffe\uffff]")
_SURROGATE = re.compile("[\ud800-\udfff]")


def _escape(match: re.Match) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code <= 0xFF else f"\\u{code:04x}"


def clean(text: object, limit: int = FIELD_LIMIT, *, one_line: bool = False) -> str:
    """``text`` as every output may show it (see the module's docstring):
    valid Unicode, controls escaped, at most ``limit`` characters."""
    text = text if isinstance(text, str) else str(text)
    size = len(text)
    text = text[:limit]       # the rest is never looked at: a 60 MB answer costs 20 kB
    text = text.replace("\r\n", "\n")
    if _SURROGATE.search(text):
        # Pairs join into their character, lone halves become U+FFFD.
        text = text.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace")
    text = (_UNSAFE_ONE_LINE if one_line else _UNSAFE).sub(_escape, text)
    if size > limit or len(text) > limit:    # escapes can lengthen it
        note = (" " if one_line else "\n") + CUT_NOTE.format(size=size, limit=limit)
        text = text[:max(limit - len(note), 0)] + note
    return text


def cleaner(limit: int = FIELD_LIMIT, *, one_line: bool = False) -> Callable[[object], str]:
    """``clean`` with its limit fixed, for ``fields``."""
    return lambda text: clean(text, limit, one_line=one_line)


def clean_entry(entry: dict) -> dict:
    """A free-text answer for staff (``Report.manual``): its ``answer`` up to
    ``ANSWER_LIMIT``, its other text up to ``FIELD_LIMIT``; numbers as they are."""
    return {key: (clean(value, ANSWER_LIMIT if key == "answer" else FIELD_LIMIT)
                  if isinstance(value, str) else value)
            for key, value in dict(entry).items()}


class Texts(list):
    """A list that cleans each item as it enters (``Report.errors``, ``notes``)."""
    _clean = staticmethod(cleaner(FIELD_LIMIT))

    def __init__(self, items: Iterable = ()):
        super().__init__(self._clean(x) for x in items)

    def append(self, item) -> None:
        super().append(self._clean(item))

    def extend(self, items: Iterable) -> None:
        super().extend(self._clean(x) for x in items)

    def insert(self, index, item) -> None:
        super().insert(index, self._clean(item))

    def __setitem__(self, index, item) -> None:
        super().__setitem__(index, [self._clean(x) for x in item]
                            if isinstance(index, slice) else self._clean(item))

    def __iadd__(self, items: Iterable):
        self.extend(items)
        return self


class Entries(Texts):
    """A list of free-text answers for staff, each cleaned by ``clean_entry``."""
    _clean = staticmethod(clean_entry)


class TextMap(dict):
    """A mapping of names to text (``Report.import_errors``), both cleaned as
    they enter."""

    def __init__(self, items=(), **more):
        super().__init__()
        self.update(items, **more)

    def __setitem__(self, key, value) -> None:
        super().__setitem__(clean(key, NAME_LIMIT, one_line=True), clean(value))

    def update(self, items=(), **more) -> None:
        pairs = items.items() if hasattr(items, "items") else items
        for key, value in [*pairs, *more.items()]:
            self[key] = value

    def setdefault(self, key, value=None):
        if key not in self:
            self[key] = value
        return self[key]


def fields(**cleaners: Callable) -> Callable[[type], type]:
    """A class decorator: assigning one of these attributes (in ``__init__``
    too) stores ``cleaner(value)``; None stays None.  The cleaners are
    ``cleaner(...)``, ``Texts``, ``Entries`` or ``TextMap``."""
    def decorate(cls: type) -> type:
        base = cls.__setattr__

        def __setattr__(self, name, value):
            how = cleaners.get(name)
            base(self, name, value if how is None or value is None else how(value))

        cls.__setattr__ = __setattr__
        return cls
    return decorate


# -- CSV -------------------------------------------------------------------

FORMULA_START = ("=", "+", "-", "@", "\t", "\r", "\n", "\uff1d", "\uff0b", "\uff0d", "\uff20")


def csv_cell(value: object) -> str:
    """One cell: a number as the grader writes it (``:g``), text with a
    ``'`` before a formula's first character (after any spaces)."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return f"{value:g}"
    text = "" if value is None else str(value)
    # A text that already begins with the marker gets one too, so that
    # ``csv_value`` can always take exactly one off (``'=x`` stays ``'=x``).
    marked = text.lstrip(" ").startswith(FORMULA_START) or text.startswith("'")
    return "'" + text if marked else text


def csv_value(cell: str) -> str:
    """The text a cell of ``csv_cell`` was written from (``merge`` reads a part's
    CSV back; ``csv_cell`` of the result writes the same cell again)."""
    rest = cell[1:]
    marked = cell.startswith("'") and (rest.lstrip(" ").startswith(FORMULA_START)
                                       or rest.startswith("'"))
    return rest if marked else cell


def csv_text(header: list[str], rows: Iterable[Iterable[object]]) -> str:
    """Every CSV the grader writes (grades, rubric sheet, merged parts)."""
    buf = io.StringIO()
    writer = csv.writer(buf)
    writer.writerow([csv_cell(h) for h in header])
    for row in rows:
        writer.writerow([csv_cell(value) for value in row])
    return buf.getvalue()


def csv_number(text: str) -> float | str:
    """A number read back from a grader's CSV (``merge``), to be written as
    one again; anything else stays text."""
    try:
        return float(text)
    except (TypeError, ValueError):
        return text
