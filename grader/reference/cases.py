"""Fixed and seeded random inputs for the hidden suites (reproducible grades).

Two kinds of case, in this order in every test that has both:

* **Fixed cases** (``fixed_rng(*key)``, ``fixed_seed(*key)``, or literal
  data): the same in every grading, whatever the run's seed.  They are
  chosen to expose every known mistake (the curriculum's "Common mistakes"
  and the mutant corpus, ``tests/data/mutants/``), so that a known mistake costs
  the same points under every seed: same work, same grade
  (``tests/test_same_grade.py`` grades every mutant under 20 seeds).
* **Random cases** (``rng_for(*key)`` for NumPy, ``case_seed(*key)`` for
  ``torch.Generator().manual_seed``): a test's own key mixed with the run's
  seed.  ``attn-grade`` draws a fresh secret run seed for every grading and
  records it in the result (``Report.seed``; ``--seed`` reproduces a grade),
  so hidden cases learned from one run are worth nothing in the next.  They
  only add coverage.

When only a random case fails (a mistake no fixed case knows), the test
still fails, and ``on_case(..., drawn=True)`` says so in its feedback: the
case, the run's seed and how to get the same case again (``RANDOM_ONLY``).
The course adds a fixed case for it (see docs/AUTHORING.md, "Same work,
same grade").  The suites' conftest sets the run seed (``run_seed``) for the
duration of a grading; outside one, the fixed ``DEFAULT_SEED`` keeps the
cases reproducible.

Shapes cover the contract's ranges: batch 1-3, 1-64 positions, 1-8 heads,
head widths 2-64 (even, for RoPE).
"""
from __future__ import annotations

import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass

import numpy as np

from grader.feedback import Feedback
from grader.sandbox.client import StudentError


@dataclass
class MhaCase:
    x: np.ndarray
    w_q: np.ndarray
    w_k: np.ndarray
    w_v: np.ndarray
    w_o: np.ndarray
    n_heads: int
    n_kv_heads: int
    positions: np.ndarray | None

    @property
    def shape_text(self) -> str:
        b, s, d = self.x.shape
        d_head = self.w_q.shape[0] // self.n_heads
        return (f"B={b}, S={s}, d={d}, h={self.n_heads}, h_kv={self.n_kv_heads}, "
                f"d_head={d_head}, {self.x.dtype}")


DEFAULT_SEED = 20261129
# A context variable, not a module global: gradings in two threads keep their own.
_RUN_SEED: ContextVar[int] = ContextVar("attn_run_seed", default=DEFAULT_SEED)


@contextmanager
def run_seed(seed: int) -> Iterator[int]:
    """Within this block, every hidden case is drawn for ``seed``."""
    token = _RUN_SEED.set(int(seed))
    try:
        yield int(seed)
    finally:
        _RUN_SEED.reset(token)


# The fixed cases' own seed: their data never depend on the run's seed.
FIXED_SEED = 7


def _key(key) -> int:
    return zlib.crc32("/".join(str(k) for k in key).encode())


def rng_for(*key) -> np.random.Generator:
    """A generator for a RANDOM case, seeded from a test's own key and the
    run's seed, e.g. ``rng_for("mha", 3)``."""
    return np.random.default_rng([_key(key), _RUN_SEED.get()])


def case_seed(*key) -> int:
    """An int seed for a RANDOM case of a test's key in this run (for
    ``torch.Generator``)."""
    return int(rng_for(*key).integers(2**62))


def fixed_rng(*key) -> np.random.Generator:
    """A generator for a FIXED case's data: seeded from the key alone, the
    same in every grading."""
    return np.random.default_rng([_key(key), FIXED_SEED])


def fixed_seed(*key) -> int:
    """An int seed for a FIXED case (for ``torch.Generator``): the same in
    every grading."""
    return int(fixed_rng(*key).integers(2**62))


def current_seed() -> int:
    """The run's seed (what ``attn-grade grade --seed`` takes to draw the same
    random cases again)."""
    return _RUN_SEED.get()


# The words that mark a failure only a random case found (staff search for them).
RANDOM_ONLY = "only a random case of this run found this"


def random_only_note() -> str:
    """What a failure on a random case adds to its feedback."""
    return (f"({RANDOM_ONLY}: the fixed cases, the same in every grading, all passed. "
            f"Random cases change with each grading's seed; `attn-grade grade ... --seed "
            f"{current_seed()}` draws this one again.)")


def on_case(text: str, check, *, drawn: bool = False) -> None:
    """Run ``check()``; a failure says which case it failed on and, for a
    random case (``drawn``), that only a random case found it and how to
    draw that case again (see the module's docstring)."""
    try:
        check()
    except (Feedback, StudentError) as exc:
        if not drawn:
            raise Feedback(f"on a case with {text}:\n{exc}") from None
        raise Feedback(f"on a random case with {text}:\n{exc}\n{random_only_note()}") \
            from None


def mha_case(rng: np.random.Generator, dtype=np.float64, *, gqa=False, positions=False,
             max_s=64) -> MhaCase:
    """A random case: shapes and data drawn from ``rng``."""
    b = int(rng.integers(1, 4))
    s = int(rng.integers(1, max_s + 1))
    h = int(rng.choice([1, 2, 3, 4, 6, 8]))
    h_kv = int(rng.choice([d for d in range(1, h + 1) if h % d == 0])) if gqa else h
    d_head = int(rng.choice([2, 4, 8, 16, 32, 64]))
    d = int(rng.choice([8, 16, 24, 32]))   # d need not equal h * d_head
    return mha_data(rng, b=b, s=s, d=d, h=h, h_kv=h_kv, d_head=d_head, dtype=dtype,
                    positions=positions)


def mha_data(rng: np.random.Generator, *, b, s, d, h, h_kv, d_head, dtype=np.float64,
             positions=False) -> MhaCase:
    """Data for the given shapes (a fixed case passes ``fixed_rng(...)``)."""
    scale = 1.0 / np.sqrt(d)
    x = rng.standard_normal((b, s, d)).astype(dtype)
    w = lambda rows, cols: (rng.standard_normal((rows, cols)) * scale).astype(dtype)  # noqa
    pos = None
    if positions:  # absolute positions with gaps and an offset, as in a packed batch
        pos = np.sort(rng.choice(np.arange(4 * s + 10), size=s, replace=False)).astype(np.int64)
    return MhaCase(x, w(h * d_head, d), w(h_kv * d_head, d), w(h_kv * d_head, d),
                   (rng.standard_normal((d, h * d_head)) / np.sqrt(h * d_head)).astype(dtype),
                   h, h_kv, pos)


def heads(rng: np.random.Generator, dtype=np.float64, *, s_q=None, s_k=None, h=None,
          d_head=None, b=None):
    """Random split-head q, k, v: (B, h, S_q, d), (B, h, S_k, d) x 2."""
    b = b or int(rng.integers(1, 4))
    h = h or int(rng.integers(1, 9))
    d_head = d_head or int(rng.choice([2, 4, 8, 16, 32, 64]))
    s_q = s_q or int(rng.integers(1, 65))
    s_k = s_k or s_q
    make = lambda s: rng.standard_normal((b, h, s, d_head)).astype(dtype)  # noqa: E731
    return make(s_q), make(s_k), make(s_k)
