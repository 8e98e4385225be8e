"""Exercise A's inputs for each student: Q, K and V from a student identifier.

Every student works the same steps on their own small matrices, so that one
student's answers are no use to another.  ``inputs_for(student_id)`` derives
them from the identifier alone (a hash, then a seeded draw), the same on
every machine and in every edition: students print theirs with
``attn-grade variant ID``, and the grader recomputes the expected answers
for the same identifier.  ``inputs_for(None)`` is the common exercise of the
contract (the seed's Q and K with V = [[1, 2], [3, 4], [5, 6]]): a submission
without an identifier is graded on it.

This module ships in the student edition, so it holds the inputs only, never
an answer: the rules below guarantee the properties the grading relies on
without computing any step (``tests/test_variants.py`` checks them against
the reference over many identifiers):

- entries of Q and K in {-1, 0, 1}: every score is an integer in [-2, 2], so
  scaled scores differ by at most 2*sqrt(2) and every softmax weight is at
  least exp(-2.83)/3 ~ 0.02 (small numbers, easy by hand);
- no zero row in Q, and K's rows not on one line: no row of scores is
  constant, so no query attends uniformly by accident;
- V's rows strictly increase, by at least 2 per coordinate: rows 0 and 1
  change under the causal mask by at least 0.02 * 2 > the 0.01 tolerance,
  and row 2 (which sees every key) never does, so the answer of step 7 is
  unambiguous.
"""
from __future__ import annotations

import hashlib
import itertools
import unicodedata
from dataclasses import dataclass

import numpy as np

# The contract's exercise A: the seed's section-4 Q and K, with its own V.
COMMON_Q = ((1, 0), (0, 1), (1, 1))
COMMON_K = ((1, 0), (0, 1), (1, 1))
COMMON_V = ((1, 2), (3, 4), (5, 6))
MAX_ID_CHARS = 200
# Part of the hash: changing it gives every student new matrices (a new term).
SALT = "attn-course/ex01_by_hand/v1"


@dataclass(frozen=True)
class Inputs:
    """One student's exercise A: three 3 x 2 integer matrices."""

    q: tuple
    k: tuple
    v: tuple
    student_id: str | None = None     # normalized; None for the common exercise

    def arrays(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(Q, K, V) as float64 arrays, each (3, 2)."""
        return tuple(np.array(m, dtype=np.float64) for m in (self.q, self.k, self.v))

    def text(self) -> str:
        """Q, K and V side by side, as the exercise's docstring prints them."""
        rows = []
        for i in range(3):
            cells = [f"[{', '.join(f'{x:2d}' for x in m[i])}]" for m in (self.q, self.k, self.v)]
            label = ["Q = ", "K = ", "V = "] if i == 0 else ["    "] * 3
            rows.append("    ".join(f"{lab}{c}" for lab, c in zip(label, cells)).rstrip())
        return "\n".join(rows)


COMMON = Inputs(COMMON_Q, COMMON_K, COMMON_V)


class AssignedId(str):
    """An identifier the platform gives a submission (a course roster's,
    Gradescope's account of the submitter), not one the student declared,
    with how a student's feedback names it: ``named`` ("your Gradescope
    email") and ``accepted``, what a STUDENT_ID may be there ("your
    Gradescope student ID (sid) or email").  A plain ``str`` everywhere else."""

    named: str
    accepted: str

    def __new__(cls, value: str, named: str = "the course roster's identifier",
                accepted: str = "the course roster's identifier for this submission"):
        self = super().__new__(cls, value)
        self.named, self.accepted = named, accepted
        return self


class BadStudentId(ValueError):
    """An identifier that cannot name a student; the text is one sentence."""


def normalize(student_id) -> str:
    """The identifier as the hash sees it: text, trimmed, case-folded, NFC.

    ``" S1234 "`` and ``"s1234"`` name the same student; an int is accepted
    as its decimal text (a course's numeric IDs)."""
    if isinstance(student_id, bool) or not isinstance(student_id, (str, int)):
        raise BadStudentId(f"a student identifier must be text, like \"s1234567\"; "
                           f"got {type(student_id).__name__}")
    text = unicodedata.normalize("NFC", str(student_id)).strip().casefold()
    if not text:
        raise BadStudentId("the student identifier is empty")
    if len(text) > MAX_ID_CHARS or not text.isprintable():
        raise BadStudentId(f"a student identifier is at most {MAX_ID_CHARS} printable "
                           "characters")
    return text


def _increasing_column(rng: np.random.Generator) -> list[int]:
    """Three integers in 0..9, each at least 2 above the one before."""
    choices = [c for c in itertools.combinations(range(10), 3)
               if c[1] - c[0] >= 2 and c[2] - c[1] >= 2]
    return list(choices[int(rng.integers(len(choices)))])


def _acceptable(q: np.ndarray, k: np.ndarray) -> bool:
    if np.any(np.all(q == 0, axis=1)):
        return False
    # K's rows on one line (k1 - k0 parallel to k2 - k0) could make a row constant.
    return bool(np.linalg.det(np.stack([k[1] - k[0], k[2] - k[0]])) != 0)


def inputs_for(student_id) -> Inputs:
    """This student's Q, K, V; ``None``: the common exercise of the contract."""
    if student_id is None:
        return COMMON
    sid = normalize(student_id)
    digest = hashlib.sha256(f"{SALT}\0{sid}".encode()).digest()
    rng = np.random.default_rng(int.from_bytes(digest[:16], "big"))
    while True:  # a few draws at most: most draws are acceptable
        q = rng.integers(-1, 2, size=(3, 2))
        k = rng.integers(-1, 2, size=(3, 2))
        if not _acceptable(q, k):
            continue
        v = np.stack([_increasing_column(rng), _increasing_column(rng)], axis=1)
        as_tuple = lambda m: tuple(tuple(int(x) for x in row) for row in m)  # noqa: E731
        found = Inputs(as_tuple(q), as_tuple(k), as_tuple(v), sid)
        if (found.q, found.k, found.v) != (COMMON.q, COMMON.k, COMMON.v):
            return found
