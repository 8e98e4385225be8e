"""The eight exercises: names, titles, and what their workers need.

Names are the public contract (``grader/contract.json``, a copy of the
curriculum's).  One module more is graded like an exercise but is not in the
contract (``in_contract=False``): ``questions``, the interview questions
(numbers and letters graded here, free text collected for staff).  Being in
this registry gives it everything an exercise has (stub derived from its
solution, notebook, suites, batch column, release) without a second list;
``tests/test_stubs.py`` holds the contract's modules to the ``in_contract``
ones and requires every extra to say so.  ``worker_env`` is set in the
worker before the student's module is imported (ex07's: ``TRITON_INTERPRET=1``
where the grading machine has no CUDA, so that Triton kernels run on the CPU).
"""
from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path

from grader.paths import CONTRACT_PATH, SUITES_DIR


@dataclass(frozen=True)
class Exercise:
    name: str
    title: str
    worker_env: dict = field(default_factory=dict)
    call_timeout: float = 10.0
    in_contract: bool = True      # False: the project's own extension, not a contract module


class _InterpretWithoutCuda(Mapping):
    """``{"TRITON_INTERPRET": "1"}`` when CUDA is absent, else ``{}``.

    Decided on first use (importing torch is slow, and only ex07 asks)."""

    @cached_property
    def _env(self) -> dict:
        import torch
        return {} if torch.cuda.is_available() else {"TRITON_INTERPRET": "1"}

    def __getitem__(self, key):
        return self._env[key]

    def __iter__(self):
        return iter(self._env)

    def __len__(self):
        return len(self._env)


EXERCISES = {e.name: e for e in [
    Exercise("ex01_by_hand", "A: attention by hand"),
    Exercise("ex02_mha", "B: multi-head attention with RoPE"),
    Exercise("ex03_gqa", "C: grouped-query attention"),
    Exercise("ex04_quadratic", "D: measuring the quadratic", call_timeout=60.0),
    Exercise("ex05_decode_prefill", "E: decode vs prefill", call_timeout=60.0),
    Exercise("ex06_gqa_intensity", "F: the arithmetic intensity of GQA decode",
             call_timeout=60.0),
    Exercise("ex07_flash_attention", "G: a fused attention kernel in Triton",
             worker_env=_InterpretWithoutCuda(), call_timeout=120.0),
    Exercise("ex08_mla", "H: multi-head latent attention (MLA)", call_timeout=60.0),
    Exercise("questions", "Q: interview questions", in_contract=False),
]}


def contract() -> dict:
    return json.loads(CONTRACT_PATH.read_text())


def suite_files(exercise: str, suite: str) -> list[Path]:
    """The suite files for one exercise: public, plus hidden when grading."""
    kinds = ["public"] if suite == "public" else ["public", "hidden"]
    files: list[Path] = []
    for kind in kinds:
        files += sorted((SUITES_DIR / kind).glob(f"test_{exercise}*.py"))
    return files


def available() -> list[str]:
    """Exercises that have at least a public suite."""
    return [name for name in EXERCISES if suite_files(name, "public")]
