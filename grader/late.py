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
zone is UTC.  The CSV keeps the raw total and adds ``submitted_at``,
``late_units``, ``penalty`` and ``final_total``; with no policy, nothing
changes.
"""
from __future__ import annotations

import csv
import io
import math
import re
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from pathlib import Path

from grader.safetext import clean, csv_text, csv_value

LATE_COLUMNS = ["submitted_at", "late_units", "penalty", "final_total"]
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
    try:
        rows = list(csv.DictReader(io.StringIO(Path(path).read_text(encoding="utf-8"))))
    except (OSError, UnicodeDecodeError, csv.Error) as exc:
        raise LatePolicyError(f"{path} could not be read as a CSV: {exc}") from None
    if rows and not {"submission", "submitted_at"} <= set(rows[0]):
        raise LatePolicyError(f"{path} needs the columns submission and submitted_at")
    return {clean(r["submission"]): parse_time(r["submitted_at"]) for r in rows
            if r.get("submission") and r.get("submitted_at")}


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
    """Points off a raw total ``units`` late: never more than the total."""
    if units <= 0:
        return 0.0
    if policy.max_units is not None and units > policy.max_units:
        return raw
    return min(raw, round(raw * policy.percent * units / 100, 6))


def apply_to_csv(text: str, subs, policy: Policy, due: datetime,
                 times: dict[str, datetime] | None = None) -> str:
    """The grades CSV with the late columns after ``total`` is kept as the raw
    one; ``times``: submission -> when it was submitted (``read_times``)."""
    by_label = {s.label: s for s in subs}
    reader = csv.DictReader(io.StringIO(text))
    header = [h for h in (reader.fieldnames or []) if h not in LATE_COLUMNS]
    rows = []
    for row in reader:
        row = {k: csv_value(v or "") for k, v in row.items() if k is not None}
        name = clean(row.get("submission", ""))
        sub = by_label.get(name)
        when = (times or {}).get(name)
        units = units_late(policy, due, when, bool(sub is not None and sub.late))
        raw = float(row.get("total") or 0)
        off = penalty(policy, raw, units)
        row.update(submitted_at=when.isoformat() if when else "", late_units=units,
                   penalty=off, final_total=raw - off)
        rows.append(row)
    from grader.batch import GRADES_NUMBERS
    from grader.registry import EXERCISES

    fields = header + LATE_COLUMNS
    numbers = {*EXERCISES, *GRADES_NUMBERS, "late_units", "penalty", "final_total"}
    return csv_text(fields, [[_number(r.get(f, "")) if f in numbers else r.get(f, "")
                              for f in fields] for r in rows])


def _number(value):
    """A number column's cell, written as a number again."""
    try:
        return float(value)
    except (TypeError, ValueError):
        return value
