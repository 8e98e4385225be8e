"""The registry of exercises: the one manifest of each exercise's facts.

Each entry says, for one exercise module: its ``letter`` (A..H, Q for the
questions) and ``title``; what its module ``needs`` to run (NumPy, PyTorch,
Triton; GPU where some tests need CUDA, ``gpu_for`` saying which); the
earlier exercises it imports (``after``: its notebook loads them); the
secret references its suites import (``secret``: modules of
``grader/reference/secret/``); its probe modules (``probes``: files of
``grader/sandbox/runtime/probes/`` named like the exercise, or, for a helper
of its probe, with the exercise's number first: ``ex07_work``); its default time limit
per call (``call_timeout``), what its worker's environment gets
(``worker_env``) and the libraries its tests make its worker import
(``preload``: a grading's fork server imports them once).

Everything else that lists exercises or their facts reads them from here
(the CLI's letters, the notebooks, both READMEs' table of exercises:
``grader.release.exercise_table``, which ``attn-grade stubs`` writes into
README.md) or is held to them by ``tests/test_manifest.py`` (README.md's
table and count, the suites' imports of secret references and probes, the
solutions' imports, the probe files).  Names are the public contract (``grader/contract.json``, a copy of
the curriculum's).  One module more is graded like an exercise but is not in
the contract (``in_contract=False``): ``questions``, the interview questions
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

# Probe modules of no one exercise: helpers any suite may pass or call.
SHARED_PROBES = ("common", "gpu_compile", "heatmap",   # heatmap: A, B, C, H's plots
                 "offloaded_work",   # work moved out of the traced thread (G)
                 "linetrace")        # the line pointer's tracer (grader.linepointer)
# What an exercise may need, and how the READMEs say it.  NumPy, PyTorch and
# Triton: its module imports them; GPU: some of its tests need CUDA (without
# one they are "not run" and count for nothing).
NEEDS = {"NumPy": "NumPy", "PyTorch": "PyTorch", "Triton": "Triton (Linux only)",
         "GPU": "a GPU"}
# What a grading's fork server imports for the exercises' tests beyond their
# needs (``Exercise.preload``), each a second or more in every fresh worker:
# the picture probes' matplotlib (``runtime/probes/common.py``; its font list
# is built afresh in each sandbox's private /tmp), only the Agg backend's
# module (no backend is chosen for pyplot); and what PyTorch imports the
# first time an operation like ``reshape`` runs under an op trace
# (``TorchDispatchMode``, ``FlopCounterMode``: F's and H's traces), imported
# there with Triton hidden (``runtime/fork_server_loop.py``: ex07's worker is forked
# from the same process and imports Triton itself, after its TRITON_INTERPRET).
PICTURES = ("matplotlib", "matplotlib.figure", "matplotlib.backends.backend_agg")
TRACES = ("torch._dynamo",)


@dataclass(frozen=True)
class Exercise:
    name: str                     # the module: exercises/<name>.py, solutions/<name>.py
    letter: str                   # how the course names it: A..H, Q for the questions
    title: str
    needs: tuple[str, ...] = ()   # keys of NEEDS
    gpu_for: str = ""             # with "GPU" in needs: what a GPU adds
    after: tuple[str, ...] = ()   # earlier exercises its module imports
    secret: tuple[str, ...] = ()  # modules of grader/reference/secret/ its suites import
    probes: tuple[str, ...] = ()  # its modules of grader/sandbox/runtime/probes/
    worker_env: Mapping = field(default_factory=dict)
    call_timeout: float = 10.0    # seconds per call, by default (--timeout overrides)
    budget_s: float = 300.0       # seconds all its workers may use (--exercise-budget overrides)
    in_contract: bool = True      # False: the project's own extension, not a contract module
    preload: tuple[str, ...] = ()  # modules its tests' probes import (PICTURES, TRACES)

    def __post_init__(self):
        unknown = [n for n in self.needs if n not in NEEDS]
        if unknown:
            raise ValueError(f"{self.name}: unknown need {unknown[0]!r}; "
                             f"choose from {', '.join(NEEDS)}")
        if ("GPU" in self.needs) != bool(self.gpu_for):
            raise ValueError(f"{self.name}: say what a GPU is for (gpu_for) exactly "
                             "when it needs one")

    @property
    def label(self) -> str:
        """``"B: multi-head attention with RoPE"``."""
        return f"{self.letter}: {self.title}"

    @property
    def needs_text(self) -> str:
        """The README's "needs" cell: ``"NumPy"``, ``"nothing"``, ..."""
        parts = [NEEDS[n] + (f" for {self.gpu_for}" if n == "GPU" else "") for n in self.needs]
        return ", ".join(parts) or "nothing"


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
    Exercise("ex01_by_hand", "A", "attention by hand", secret=("by_hand",),
             preload=PICTURES),
    Exercise("ex02_mha", "B", "multi-head attention with RoPE", needs=("NumPy",),
             secret=("attention_np",), preload=PICTURES),
    Exercise("ex03_gqa", "C", "grouped-query attention", needs=("NumPy",),
             after=("ex02_mha",), secret=("attention_np",), preload=PICTURES),
    Exercise("ex04_quadratic", "D", "measuring the quadratic", needs=("PyTorch",),
             secret=("attention", "roofline"), probes=("ex04_quadratic",),
             call_timeout=60.0, preload=PICTURES),
    Exercise("ex05_decode_prefill", "E", "decode vs prefill", needs=("PyTorch",),
             secret=("attention", "roofline"), probes=("ex05_decode_prefill",),
             call_timeout=60.0),
    Exercise("ex06_gqa_intensity", "F", "the arithmetic intensity of GQA decode",
             needs=("PyTorch",), secret=("attention", "roofline"),
             probes=("ex06_gqa_intensity",), call_timeout=60.0, preload=TRACES),
    Exercise("ex07_flash_attention", "G", "a fused attention kernel in Triton",
             needs=("NumPy", "PyTorch", "Triton", "GPU"), gpu_for="the speed tiers",
             secret=("flash",),
             probes=("ex07_flash_attention", "ex07_work", "ex07_replay", "ex07_given"),
             worker_env=_InterpretWithoutCuda(), call_timeout=120.0,
             # the compile check compiles every config for two GPUs in a worker of its own
             budget_s=900.0),
    # ex08's probe imports ex06's tracer (a probe module may import another)
    Exercise("ex08_mla", "H", "multi-head latent attention (MLA)", needs=("PyTorch",),
             secret=("mla",), probes=("ex08_mla",), call_timeout=60.0,
             preload=PICTURES + TRACES),
    Exercise("questions", "Q", "interview questions", secret=("questions",),
             in_contract=False),
]}


def fork_server_preloads(exercises, gpu: bool) -> tuple[set[str], tuple[str, ...]]:
    """What a grading of ``exercises`` has its fork server import: the
    libraries they need, and what their tests import besides
    (``Exercise.preload``); PyTorch's trace machinery (TRACES) not on a
    machine with a GPU (``gpu``): there a fork server preloads only what has
    been proven to leave CUDA to its forked workers (benchmarks/gpu_check.py)."""
    needs = {n for e in exercises for n in EXERCISES[e].needs}
    extra = tuple(m for e in exercises for m in EXERCISES[e].preload
                  if not (gpu and m in TRACES))
    return needs, extra


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


def by_letter(letter: str) -> Exercise | None:
    """The exercise the course calls ``letter`` (any case), if any."""
    return next((e for e in EXERCISES.values() if e.letter == letter.upper()), None)
