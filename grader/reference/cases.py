"""Seeded random inputs for the hidden suites (reproducible grades).

Every random case of the hidden suites comes from ``rng_for(*key)`` (NumPy)
or ``case_seed(*key)`` (an int for ``torch.Generator().manual_seed``): a
test's own key mixed with the run's seed.  ``attn-grade`` draws a fresh
secret run seed for every grading and records it in the result
(``Report.seed``; ``--seed`` reproduces a grade), so hidden cases learned from
one run are worth nothing in the next.  The suites' conftest sets the run
seed (``run_seed``) for the duration of a grading; outside one, the fixed
``DEFAULT_SEED`` keeps the cases reproducible.

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


def rng_for(*key) -> np.random.Generator:
    """A generator seeded from a test's own key and the run's seed, e.g.
    ``rng_for("mha", 3)``."""
    seed = zlib.crc32("/".join(str(k) for k in key).encode())
    return np.random.default_rng([seed, _RUN_SEED.get()])


def case_seed(*key) -> int:
    """An int seed for a test's key in this run (for ``torch.Generator``)."""
    return int(rng_for(*key).integers(2**62))


def mha_case(rng: np.random.Generator, dtype=np.float64, *, gqa=False, positions=False,
             max_s=64) -> MhaCase:
    b = int(rng.integers(1, 4))
    s = int(rng.integers(1, max_s + 1))
    h = int(rng.choice([1, 2, 3, 4, 6, 8]))
    h_kv = int(rng.choice([d for d in range(1, h + 1) if h % d == 0])) if gqa else h
    d_head = int(rng.choice([2, 4, 8, 16, 32, 64]))
    d = int(rng.choice([8, 16, 24, 32]))   # d need not equal h * d_head
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
