"""The questions' sealed key: the public check says right or wrong, never the answer.

The answer key (``grader/reference/secret/questions.py``) stays with the
instructors.  What ships is ``grader/data/questions_sealed.json``: for each
graded question, salted slow hashes (PBKDF2) of the answers that are right
and of those a known slip gives, never a value.  Checking an answer hashes
that one answer and looks it up, so the check tells right from wrong, and
names the slip, for the student's own answer only.

What the public check may reveal, decided (issue 51, item 4):

- For every number and letter: whether the student's answer is right, and
  the words of the slip a known wrong answer shows.  Never the right value,
  how it is found, or the grade's tolerance beyond "to 2 %".
- A letter has four options: "right or wrong" tells the letter in at most
  three more tries, so hashing hides nothing there, and the sealed key does
  not pretend to; a multiple-choice point is earned by whoever runs the
  check.  The hashes only keep the letter out of plain sight.
- A number is graded to a relative tolerance, so the seal holds one hash per
  cell of a logarithmic grid (``CELLS_PER_TOLERANCE`` cells to a tolerance)
  that lies wholly inside the accepted interval: "right" here is always
  right when graded (an answer within one cell of the tolerance's edge may
  read "not right" here and still earn its points).  Reading a number out
  of the seal means hashing every cell of the number line where it may lie,
  a few minutes of CPU per question for a known order of magnitude: no
  faster than trying numbers with the check itself, which is the limit of
  any check that runs on the student's machine.
"""
from __future__ import annotations

import hashlib
import json
import math
import secrets
from pathlib import Path

SEALED = Path(__file__).resolve().parent.parent / "data" / "questions_sealed.json"
ITERATIONS = 20_000          # PBKDF2 rounds per hash: about 10 ms, per answer checked
CELLS_PER_TOLERANCE = 20     # a number's grid: cells of rtol / 20 (relative)
DIGEST_BYTES = 12            # 96 bits: no two cells of the key collide by chance


def _digest(salt: str, name: str, token: str) -> str:
    """The hash of one answer token of question ``name``."""
    return hashlib.pbkdf2_hmac("sha256", f"{name}:{token}".encode(), bytes.fromhex(salt),
                               ITERATIONS, dklen=DIGEST_BYTES).hex()


def _cell(x: float, step: float) -> int:
    """The cell of ``|x| > 0`` on the logarithmic grid of relative ``step``."""
    return math.floor(math.log(abs(x)) / math.log1p(step))


def number_token(x: float, rtol: float) -> str:
    """The token a number is hashed as: its sign and its cell."""
    if x == 0 or not math.isfinite(x):
        return "0" if x == 0 else "nonfinite"
    return f"{'-' if x < 0 else '+'}{_cell(x, rtol / CELLS_PER_TOLERANCE)}"


def _accepted(want: float, rtol: float) -> tuple[float, float]:
    """The |answers| ``math.isclose(got, want, rel_tol=rtol)`` accepts (the
    hidden suite's test)."""
    return abs(want) * (1 - rtol), abs(want) / (1 - rtol)


def _cells(want: float, rtol: float, inside: bool) -> list[str]:
    """The tokens of the cells wholly inside (``inside``) or touching the
    interval the grade accepts around ``want``."""
    if want == 0:
        return ["0"]
    step = rtol / CELLS_PER_TOLERANCE
    base = 1 + step
    lo, hi = _accepted(want, rtol)
    sign = "-" if want < 0 else "+"
    first, last = _cell(lo, step), _cell(hi, step)
    cells = range(first + 1, last) if inside else range(first, last + 1)
    return [f"{sign}{c}" for c in cells if not inside or lo <= base ** c <= base ** (c + 1) <= hi]


def seal(key, numbers: list[str], choices: list[str], salt: str | None = None) -> dict:
    """The sealed key of the questions ``numbers`` and ``choices``;
    ``key(name)`` is the hidden suite's entry (answer, rtol, mistakes, wrong)."""
    salt = salt or secrets.token_hex(16)
    out = {"salt": salt, "iterations": ITERATIONS, "numbers": {}, "choices": {}}
    for name in numbers:
        entry = key(name)
        rtol = entry["rtol"]
        right = sorted(_digest(salt, name, t) for t in _cells(entry["answer"], rtol, True))
        slips = [{"words": words,
                  "cells": sorted(_digest(salt, name, t) for t in _cells(value, rtol, False))}
                 for words, value in entry["mistakes"].values()]
        out["numbers"][name] = {"rtol": rtol, "right": right, "slips": slips}
    for name in choices:
        entry = key(name)
        out["choices"][name] = {
            "right": _digest(salt, name, entry["answer"]),
            "wrong": {_digest(salt, name, letter): why for letter, why in entry["wrong"].items()}}
    return out


def sealed(path: Path = SEALED) -> dict:
    """The shipped sealed key."""
    return json.loads(path.read_text())


def judge_number(key: dict, name: str, got: float) -> tuple[bool, str | None]:
    """(right?, the words of the slip ``got`` looks like, or None)."""
    entry = key["numbers"][name]
    digest = _digest(key["salt"], name, number_token(float(got), entry["rtol"]))
    if digest in entry["right"]:
        return True, None
    return False, next((s["words"] for s in entry["slips"] if digest in s["cells"]), None)


def judge_choice(key: dict, name: str, letter: str) -> tuple[bool, str | None]:
    """(right?, why this wrong letter is wrong, or None)."""
    entry = key["choices"][name]
    digest = _digest(key["salt"], name, letter)
    return digest == entry["right"], entry["wrong"].get(digest)


def write_sealed(path: Path = SEALED, new_salt: bool = False) -> Path:
    """Seal the instructors' key into ``path`` (keeping its salt unless
    ``new_salt``): run after changing the key, ``python -m
    grader.reference.questions_checks``."""
    from grader.reference.secret import questions as qref
    salt = None if new_salt or not path.exists() else sealed(path)["salt"]
    kinds = {kind: [n for n, f in qref.FORMS.items() if f["kind"] == kind]
             for kind in (qref.NUMBER, qref.CHOICE)}
    data = seal(qref.key, kinds[qref.NUMBER], kinds[qref.CHOICE], salt)
    path.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")
    return path


if __name__ == "__main__":
    import sys
    print(write_sealed(new_salt="--new-salt" in sys.argv))
