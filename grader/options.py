"""One grading's options (``Options``), and the exercises they cover.

Light on purpose: the command line reads and checks its options, and starts
a grading's fork server (``grader.sandbox.launch.begin_fork_server``), before
it imports the grader's core (pytest, NumPy), so that the fork server's
imports run beside those.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path

from grader.registry import EXERCISES, suite_files
from grader.sandbox.launch import GRADING_BUDGET_S


class GraderConfigError(ValueError):
    """Bad input from the person running the grader (not the student)."""


def _option(default, flag: str | None = None, *, scores: bool = True):
    """A field of ``Options``: ``flag``, its ``attn-grade grade`` option (None:
    none, it must keep its default to be said on a command line); ``scores``:
    whether it can change a grade (then it is in ``cache_key``)."""
    return dataclasses.field(default=default, metadata={"flag": flag, "scores": scores})


@dataclass
class Options:
    """One grading's options: every one once, with its command-line form
    (``argv``, what a batch's grading process is given) and whether it can
    change a grade (``cache_key``, what a stored result must match)."""
    suite: str = _option("hidden", "--suite")   # "public" or "hidden" (public + hidden)
    exercises: list[str] | None = _option(None, "--exercise")  # None: every one with a suite
    call_timeout: float | None = _option(None, "--timeout")   # overrides each exercise's default
    import_timeout: float = _option(60.0)        # importing a submission's module
    memory_mb: int = _option(8192)               # per worker (RLIMIT_DATA)
    # The GPU tier (tests marked ``gpu``) is graded: in the maximum on every
    # machine, needing a regrade where no GPU is present.  Off: not run, in no
    # maximum, on any machine.  A declared choice, never what the machine has.
    gpu_tier: bool = _option(False, "--gpu-tier")
    keyword: str | None = _option(None, "--keyword")   # a pytest -k expression: only these tests
    markers: str | None = _option(None)         # a pytest -m expression: only these tests
    seed: int | None = _option(None, "--seed")  # hidden suites' random cases; None: a fresh secret
    student_id: str | None = _option(None, "--student-id")   # exercise A's identifier (roster)
    # Every failure costs, even one that follows a root cause.
    deduct_each: bool = _option(False, "--deduct-each")
    # Grade a failing exercise again with a reference in place of what it
    # builds on (``rootcause.upstream_evidence``).  False inside that second grading.
    check_upstream: bool = _option(True)
    isolation: str = _option("auto", "--isolation")   # auto, strict or fallback (sandbox.isolation)
    # A grader-owned folder for files like the ex04 plot.
    artifacts_dir: Path | None = _option(None, "--artifacts", scores=False)
    # `check` only: answers kept for unchanged files.
    check_cache: Path | None = _option(None, scores=False)
    # A grading run's shared cache of exercise G's GPU compiles
    # (``grader.reference.compile_cache``): grader-owned, never in a submission.
    compile_cache: Path | None = _option(None, "--compile-cache", scores=False)
    # `check` only, --no-cache too: where matplotlib's font list is kept
    # (``grader.sandbox.fonts``), a fact of this machine, not of the files.
    font_cache: Path | None = _option(None, scores=False)
    # Fork workers from one process per grading (read by GradingPlugin.prestart).
    fork_server: bool = _option(True, scores=False)
    # Seconds per exercise (None: each one's default), and for the whole grading.
    exercise_budget: float | None = _option(None, "--exercise-budget")
    grading_budget: float | None = _option(GRADING_BUDGET_S, "--grading-budget")

    def argv(self) -> list[str]:
        """The ``attn-grade grade`` options that grade with these options (the
        defaults left out).  An option without a flag must have its default."""
        out: list[str] = []
        for f in dataclasses.fields(self):
            value, flag = getattr(self, f.name), f.metadata["flag"]
            if value == f.default:
                continue
            if flag is None or value is False:
                raise ValueError(f"Options.{f.name}={value!r} has no command-line form")
            if isinstance(value, bool):   # the flags turn on what is off by default
                out.append(flag)
            elif isinstance(value, (list, tuple)):
                out += [word for item in value for word in (flag, str(item))]
            else:
                out += [flag, str(value)]   # a float's repr: read back exactly
        return out

    def cache_key(self) -> dict:
        """The options that can change a grade, as a stored result records them."""
        key = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)
               if f.metadata["scores"]}
        key["exercises"] = sorted(self.exercises) if self.exercises else "all"
        return key


def exercises_of(options: Options) -> list[str]:
    """The exercises a grading covers, in course order; bad names are a
    ``GraderConfigError``."""
    if options.suite not in ("public", "hidden"):
        raise GraderConfigError(f"unknown suite {options.suite!r}: use public or hidden")
    requested = options.exercises or [e for e in EXERCISES if suite_files(e, "public")]
    unknown = [e for e in requested if e not in EXERCISES]
    if unknown:
        raise GraderConfigError(f"unknown exercise {unknown[0]!r}; known: "
                                f"{', '.join(EXERCISES)}")
    return [e for e in EXERCISES if e in requested]  # course order, no repeats
