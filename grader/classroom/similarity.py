"""Submissions whose code is suspiciously alike: a lead for a person, never a grade.

The measure is copydetect's (``copydetect.CodeFingerprint``, MOSS's
winnowing): each module is tokenized by Pygments with every name, function
name and string replaced by one letter and comments and blank space dropped,
so renaming and re-commenting change nothing; its k-grams are hashed and
winnowed into fingerprints, and two modules are alike by the share of each
one's tokens that their common fingerprints cover.  Reordering functions
moves whole fingerprints, which match wherever they sit.  The stub's own
fingerprints (``exercises/<module>.py``: docstrings, signatures, the code
the course hands out) are boilerplate and never count.

A pair is listed when its score (the larger of the two shares: a copy padded
with extra code still covers the original) reaches ``THRESHOLD``.
Exercises whose module holds answers, not code (``ex01_by_hand``,
``questions``: every right answer is the same numbers), are not compared.
Nothing here is read by any grade.
"""
from __future__ import annotations

import io
import itertools
from dataclasses import dataclass
from pathlib import Path

from grader.registry import EXERCISES
from grader.paths import PACKAGE_DIR
from grader.safetext import NAME_LIMIT, clean, csv_text

# copydetect's noise threshold (k, in filtered characters: shorter matches are
# chance) and guarantee threshold (any match this long is found); its defaults.
NOISE_T = 25
GUARANTEE_T = 30
# Share of a module's fingerprinted tokens covered by the other's: calibrated
# on the solutions and tests/data/independent/* (independent right answers reach
# 0.55 at most, tests/test_similarity.py), and planted copies 0.72 at least.
THRESHOLD = 0.65
# A module with fewer fingerprinted characters than this (a stub with a line
# filled in) is too short for its share to mean anything.
MIN_TOKENS = 60
# Modules of answers, not code: right answers are alike by necessity.
NOT_CODE = ("ex01_by_hand", "questions")
SIMILARITY_COLUMNS = ["exercise", "score", "submission_a", "submission_b", "share_a",
                      "share_b", "spans_a", "spans_b"]


@dataclass
class Pair:
    exercise: str
    a: str
    b: str
    share_a: float      # of a's tokens, the share found in b
    share_b: float
    spans_a: list       # [(first line, last line)] of a's code found in b
    spans_b: list
    source_a: str = ""
    source_b: str = ""

    @property
    def score(self) -> float:
        return max(self.share_a, self.share_b)


def stub_of(exercise: str, stubs: Path | None = None) -> str:
    """The stub's text (the boilerplate) of an exercise, '' when none ships."""
    folder = stubs or PACKAGE_DIR.parent / "exercises"
    path = folder / f"{exercise}.py"
    return path.read_text(encoding="utf-8", errors="replace") if path.is_file() else ""


def _fingerprint(name: str, source: str, boilerplate=None):
    from copydetect import CodeFingerprint
    return CodeFingerprint(name, NOISE_T, GUARANTEE_T - NOISE_T + 1, boilerplate,
                           fp=io.StringIO(source), language="python")


def _lines(source: str, slices) -> list[tuple[int, int]]:
    """copydetect's character slices as (first, last) line numbers, merged."""
    spans: list[tuple[int, int]] = []
    if len(slices) != 2:     # no overlap: copydetect gives an empty array
        return spans
    starts, ends = slices
    for start, end in sorted(zip((int(s) for s in starts), (int(e) for e in ends))):
        first = source.count("\n", 0, start) + 1
        last = source.count("\n", 0, max(start, end - 1)) + 1
        if spans and first <= spans[-1][1] + 1:
            spans[-1] = (spans[-1][0], max(spans[-1][1], last))
        else:
            spans.append((first, last))
    return spans


def compare_exercise(exercise: str, sources: dict[str, str], *, stub: str = "",
                     threshold: float = THRESHOLD) -> list[Pair]:
    """The pairs of ``sources`` ({submission: module text}) at or above
    ``threshold``, most alike first."""
    from copydetect import compare_files

    boiler = _fingerprint("stub.py", stub).hashes if stub else None
    prints = {}
    for name, source in sources.items():
        try:
            found = _fingerprint(f"{name}.py", source, boiler and list(boiler))
        except Exception:   # noqa: BLE001 - a module the tokenizer cannot read is no lead
            continue
        if found.token_coverage >= MIN_TOKENS:
            prints[name] = found
    pairs = []
    for a, b in itertools.combinations(sorted(prints), 2):
        _, (share_a, share_b), (slices_a, slices_b) = compare_files(prints[a], prints[b])
        if max(share_a, share_b) < threshold:
            continue
        pairs.append(Pair(exercise, a, b, float(share_a), float(share_b),
                          _lines(prints[a].raw_code, slices_a),
                          _lines(prints[b].raw_code, slices_b),
                          prints[a].raw_code, prints[b].raw_code))
    return sorted(pairs, key=lambda p: (-p.score, p.a, p.b))


def class_sources(subs, exercises: list[str] | None = None) -> dict[str, dict[str, str]]:
    """{exercise: {submission label: module text}} of a batch's submissions
    (folders, notebooks and zips, as ``grade`` reads them)."""
    from grader.submission import SubmissionError, materialize

    out: dict[str, dict[str, str]] = {}
    for sub in subs:
        if sub.error:
            continue
        try:
            with materialize(sub.path) as folder:
                for exercise in exercises or EXERCISES:
                    path = Path(folder) / f"{exercise}.py"
                    if exercise in NOT_CODE or not path.is_file() or path.is_symlink():
                        continue
                    out.setdefault(exercise, {})[sub.label] = path.read_text(
                        encoding="utf-8", errors="replace")
        except (SubmissionError, OSError):
            continue   # its grading row says why
    return out


def class_pairs(subs, *, exercises: list[str] | None = None,
                threshold: float = THRESHOLD) -> list[Pair]:
    """Every exercise's alike pairs (of ``exercises``, default all)."""
    pairs = []
    for exercise, sources in class_sources(subs, exercises).items():
        pairs += compare_exercise(exercise, sources, stub=stub_of(exercise),
                                  threshold=threshold)
    return ordered(pairs)


def _order(p: Pair):
    return (-p.score, p.exercise, p.a, p.b)


def ordered(pairs: list[Pair]) -> list[Pair]:
    """Most alike first: ``similarity.csv``'s order, and the report's pair-<n>."""
    return sorted(pairs, key=_order)


def _spans(spans) -> str:
    return " ".join(f"{a}-{b}" if a != b else str(a) for a, b in spans)


def to_csv(pairs: list[Pair]) -> str:
    """``similarity.csv``: most alike first."""
    rows = sorted(pairs, key=_order)
    one = lambda s: clean(s, NAME_LIMIT, one_line=True)  # noqa: E731
    return csv_text(SIMILARITY_COLUMNS, [
        [p.exercise, round(p.score, 3), one(p.a), one(p.b), round(p.share_a, 3),
         round(p.share_b, 3), _spans(p.spans_a), _spans(p.spans_b)] for p in rows])


def similarity_csv(out: Path) -> Path:
    """``similarity.csv`` beside ``grades.csv``."""
    return Path(out).with_name("similarity.csv")


def available() -> bool:
    """Is copydetect installed (``pip install copydetect``, or the similarity extra)?"""
    try:
        import copydetect  # noqa: F401
    except ImportError:
        return False
    return True
