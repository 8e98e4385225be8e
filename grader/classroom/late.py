"""Late work: a small policy language, applied to the batch's grades.

``batch --due 2026-12-15T23:59 --late-policy "10%/day,max 3"``.  A policy is
clauses separated by commas:

- ``P%/day`` or ``P%/hour``: P percent of the raw total off per started day
  (hour) after the due time;
- ``max N``: more than N days (hours) late earns nothing;
- ``grace M min``: submissions within M minutes of the due time are on time.

How late a submission is comes from what the LMS recorded, never from a
file in the submission (its student controls those): the times staff give
(``--submitted-times FILE``, a CSV of ``submission,submitted_at``), else a
Canvas bulk download's ``late`` flag, which carries no time and counts as
one day (hour) late.  The due time without a
zone is UTC; a student's extension (``--extensions FILE``: ``submission,due``)
is their own due time.  The penalty is taken from the sum of the grader's
and the staff's points: the gradebook's ``final_grade`` is the one place
that applies it.
"""
from __future__ import annotations

import csv
import io
import math
import re
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from pathlib import Path

from grader.safetext import clean

UNITS = {"day": timedelta(days=1), "hour": timedelta(hours=1)}


class LatePolicyError(ValueError):
    """A policy or due time that cannot be read; the text is one sentence."""


@dataclass(frozen=True)
class Policy:
    percent: float          # of the raw total, per unit late
    unit: str               # "day" or "hour"
    max_units: int | None = None
    grace: timedelta = timedelta(0)


_RATE = re.compile(r"^(\d+(?:\.\d+)?)\s*%\s*/\s*(day|hour)$")
_MAX = re.compile(r"^max\s+(\d+)$")
_GRACE = re.compile(r"^grace\s+(\d+)\s*min$")


def parse(text: str) -> Policy:
    """``"10%/day,max 3"`` -> Policy(10, "day", 3)."""
    rate = unit = limit = None
    grace = timedelta(0)
    for clause in (c.strip().lower() for c in text.split(",")):
        if m := _RATE.match(clause):
            if rate is not None:
                raise LatePolicyError(f"the policy {text!r} gives two rates; give one "
                                      "(10%/day or 2%/hour).")
            rate, unit = float(m[1]), m[2]
        elif m := _MAX.match(clause):
            limit = int(m[1])
        elif m := _GRACE.match(clause):
            grace = timedelta(minutes=int(m[1]))
        else:
            raise LatePolicyError(f"{clause!r} in the policy {text!r} is none of P%/day, "
                                  "P%/hour, max N, grace M min.")
    if rate is None:
        raise LatePolicyError(f"the policy {text!r} gives no rate (10%/day or 2%/hour).")
    if rate > 100:
        raise LatePolicyError(f"the rate {rate:g}% is more than the whole score.")
    return Policy(rate, unit, limit, grace)


def parse_time(text: str) -> datetime:
    """An ISO time (``2026-12-15T23:59``, a zone optional: UTC without)."""
    try:
        when = datetime.fromisoformat(text.strip())
    except ValueError:
        raise LatePolicyError(f"{text!r} is not a time like 2026-12-15T23:59.") from None
    return when if when.tzinfo else when.replace(tzinfo=timezone.utc)


def read_times(path: Path) -> dict[str, datetime]:
    """Submission times that staff give (``batch --submitted-times``): a CSV
    with ``submission`` and ``submitted_at`` columns, as an LMS export has
    them.  Never read from a submission's own folder, which its student
    controls (a file there could claim any time)."""
    return _times(path, _sheet(path, "submitted_at"), "submitted_at")


def read_extensions(path: Path) -> dict[str, tuple[datetime, str]]:
    """Per-student due times (``batch --extensions``): a CSV with
    ``submission`` and ``due`` columns, and an optional ``reason``."""
    rows = _sheet(path, "due")
    reasons = {clean(r.get("submission") or "").strip(): r.get("reason") or "" for r in rows}
    return {name: (when, clean(reasons.get(name, ""), 1000))
            for name, when in _times(path, rows, "due").items()}


def _sheet(path: Path, column: str) -> list[dict]:
    """The rows of a staff's CSV that has ``submission`` and ``column``."""
    try:
        rows = list(csv.DictReader(io.StringIO(Path(path).read_text(encoding="utf-8-sig"))))
    except (OSError, UnicodeDecodeError, csv.Error) as exc:
        raise LatePolicyError(f"{path} could not be read as a CSV: {exc}") from None
    if rows and not {"submission", column} <= set(rows[0]):
        raise LatePolicyError(f"{path} needs the columns submission and {column}")
    return rows


def _times(path: Path, rows: list[dict], column: str) -> dict[str, datetime]:
    """{submission: time} of a staff sheet's rows; a row named twice, or a
    time that is not one, is refused with its line."""
    out: dict[str, datetime] = {}
    for line, r in enumerate(rows, start=2):
        name, when = clean(r.get("submission") or "").strip(), (r.get(column) or "").strip()
        if not name and not when:
            continue
        if not name or not when:
            raise LatePolicyError(f"{path} line {line}: give both submission and {column}.")
        if name in out:
            raise LatePolicyError(f"{path} line {line}: {name!r} is listed twice.")
        try:
            out[name] = parse_time(when)
        except LatePolicyError as exc:
            raise LatePolicyError(f"{path} line {line}: {exc}") from None
    return out


def units_late(policy: Policy, due: datetime, submitted: datetime | None,
               flagged: bool) -> int:
    """Started days (hours) past the due time and its grace; a late flag
    without a time is one."""
    if submitted is None:
        return 1 if flagged else 0
    over = submitted - due - policy.grace
    if over <= timedelta(0):
        return 0
    return math.ceil(over / UNITS[policy.unit])


def penalty(policy: Policy, raw: float, units: int) -> float:
    """Points off a total ``units`` late: never more than the total, all of
    it past the policy's ``max``."""
    if units <= 0:
        return 0.0
    if policy.max_units is not None and units > policy.max_units:
        return raw
    return min(raw, round(raw * policy.percent * units / 100, 6))
