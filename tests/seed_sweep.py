"""Grading under many run seeds in one process (what tests/test_same_grade.py runs).

A test's points can depend on the run's seed only through the cases it
draws: ``grader.reference.cases`` is the one place that reads the seed
(``rng_for``, ``case_seed``, ``current_seed``; the suites' ``run_seed``
fixture), and ``tests/test_same_grade.py`` holds every other module of the
grader to that.  So:

* ``seed_dependent(path)`` finds, in a suite's source, the tests that can
  read the seed (the test, or a function of its module it calls, names one
  of those); every other test gives the same result under every seed;
* ``Sweep`` runs those tests, with the suite's own code, against a
  submission in a real sandboxed worker (forked from one fork server), under each
  of many seeds, in one process: no grading's start-up per seed.

Two shortcuts keep it cheap, and both are exact:

* a run that ended without reading the seed (a fixed case failed first: the
  fixed cases come before the random ones) ends the same under every seed;
  the other seeds are not run;
* a test that, with the solution, touches none of the functions a mutant
  changed (nor any function that uses one) behaves for the mutant exactly as
  for the solution, seed by seed: it is run with the solution only.  What a
  test touches is every attribute it reads of the submission, and for a
  probe every name the probe's module reads of it.

And the secret references (pure functions) are computed once per input for
the whole sweep (``Memo``): every mutant's run of a case asks for the same
reference answer as the solution's did.
"""
from __future__ import annotations

import ast
import functools
import hashlib
import importlib
import inspect
import itertools
import pkgutil
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from grader.registry import EXERCISES, suite_files
from grader.feedback import Feedback
from grader.paths import PACKAGE_DIR
from grader.reference import cases, secret
from grader.sandbox.client import StudentError, StudentModule
from grader.sandbox.runtime.codec import Func
from tests.conftest import SOLUTIONS, launcher
from tests.data.mutants import Mutant

# Names through which a suite reads the run's seed (grader/reference/cases.py).
SEED_READERS = {"rng_for", "case_seed", "current_seed", "random_only_note"}
SEED_FIXTURE = "run_seed"
PROBES = PACKAGE_DIR / "sandbox" / "runtime" / "probes"
EVERYTHING = "*"


def seeds(n: int) -> list[int]:
    """``n`` run seeds, always the same ones: the default seed first."""
    gen = __import__("numpy").random.default_rng(2026)
    return [cases.DEFAULT_SEED] + [int(s) for s in gen.integers(2**32, size=n - 1)]


# -- which tests read the seed ---------------------------------------------------
def _names(node) -> set[str]:
    out = set()
    for n in ast.walk(node):
        if isinstance(n, ast.Name):
            out.add(n.id)
        elif isinstance(n, ast.Attribute):
            out.add(n.attr)
    return out


def seed_dependent(path: Path) -> set[str]:
    """The test functions of a suite file that can read the run's seed."""
    tree = ast.parse(path.read_text())
    funcs = {n.name: n for n in tree.body if isinstance(n, (ast.FunctionDef,
                                                            ast.AsyncFunctionDef))}
    uses = {name: _names(f) for name, f in funcs.items()}
    reads = {name for name, names in uses.items() if names & SEED_READERS}
    reads |= {name for name, f in funcs.items()
              if SEED_FIXTURE in {a.arg for a in f.args.args}}
    grew = True
    while grew:
        grew = False
        for name, names in uses.items():
            if name not in reads and names & reads:
                reads.add(name)
                grew = True
    return {name for name in reads if name.startswith("test_")}


# -- what a mutant changes -----------------------------------------------------------
def _bound(stmt) -> list[str]:
    if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return [stmt.name]
    if isinstance(stmt, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
        targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
        return [n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)]
    if isinstance(stmt, (ast.Import, ast.ImportFrom)):
        return [(a.asname or a.name).split(".")[0] for a in stmt.names]
    return []


def _top_level(source: str) -> tuple[dict[str, str], list[str], dict[str, set[str]]]:
    """Each bound name's statements (dumped), the unnamed statements, and the
    names each top-level statement reads."""
    named: dict[str, str] = {}
    unnamed: list[str] = []
    reads: dict[str, set[str]] = {}
    for stmt in ast.parse(source).body:
        dump = ast.dump(stmt)
        names = _bound(stmt)
        if isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant):
            continue     # a docstring changes nothing
        if not names:
            unnamed.append(dump)
        for name in names:
            named[name] = named.get(name, "") + dump
            reads[name] = reads.get(name, set()) | _names(stmt)
    return named, unnamed, reads


def affected(solution: str, mutant: str) -> set[str]:
    """The mutant's top-level names that may behave differently: those whose
    statements differ, and every function or constant that uses one of them
    (transitively).  ``{EVERYTHING}`` when a statement that binds no name
    changed."""
    sol_named, sol_unnamed, sol_reads = _top_level(solution)
    mut_named, mut_unnamed, mut_reads = _top_level(mutant)
    if sol_unnamed != mut_unnamed:
        return {EVERYTHING}
    changed = {n for n in set(sol_named) | set(mut_named)
               if sol_named.get(n) != mut_named.get(n)}
    reads = {n: sol_reads.get(n, set()) | mut_reads.get(n, set())
             for n in set(sol_reads) | set(mut_reads)}
    grew = True
    while grew:
        grew = False
        for name, names in reads.items():
            if name not in changed and names & changed:
                changed.add(name)
                grew = True
    return changed


@functools.lru_cache(maxsize=None)
def probe_reads(probe: str) -> frozenset[str]:
    """Every name a probe's module may read of the submission: all attribute
    names and string constants in it (``getattr(module, "name")``)."""
    module = probe.split(".")[0]
    tree = ast.parse((PROBES / f"{module}.py").read_text())
    out = _names(tree)
    out |= {n.value for n in ast.walk(tree) if isinstance(n, ast.Constant)
            and isinstance(n.value, str) and n.value.isidentifier()}
    return frozenset(out)


def _named(value, touched: set[str]) -> None:
    """Note the submission's functions that arguments name (``Func("student:x")``)."""
    if isinstance(value, Func):
        if value.ref.startswith("student:"):
            touched.add(value.ref.split(":", 1)[1])
        for v in (*value.args, *value.kwargs.values()):
            _named(v, touched)
    elif isinstance(value, (tuple, list)):
        for v in value:
            _named(v, touched)
    elif isinstance(value, dict):
        for v in value.values():
            _named(v, touched)


class Spy:
    """A ``StudentModule`` that notes every name a test reads of it.  Which
    names are functions it asks the worker once (``functions``, one per
    worker): a call is then one request instead of two."""

    def __init__(self, student: StudentModule, touched: set[str], functions: set[str]):
        self._student, self._touched, self._functions = student, touched, functions

    def __getattr__(self, name: str):
        if name.startswith("__"):
            raise AttributeError(name)
        self._touched.add(name)
        if name in self._functions:
            return lambda *args, **kwargs: self._call(name, args, kwargs)
        value = getattr(self._student, name)
        if callable(value):
            self._functions.add(name)
            return lambda *args, **kwargs: self._call(name, args, kwargs)
        return value

    def _call(self, name, args, kwargs):
        _named((args, kwargs), self._touched)
        return self._student.call(name, *args, **kwargs)

    def probe(self, name: str, *args, **kwargs):
        self._touched |= probe_reads(name)
        _named((args, kwargs), self._touched)
        return self._student.probe(name, *args, **kwargs)


class SeedReads:
    """Stands in for the run seed's context variable: a seed to give, and how
    often it was read."""

    def __init__(self):
        self.value, self.reads = cases.DEFAULT_SEED, 0

    def get(self, *default) -> int:
        self.reads += 1
        return self.value


# -- references computed once per input -------------------------------------------
def _digest(value, h) -> bool:
    """Feed ``value`` to the hash ``h``; False when it is not plain data."""
    import numpy as np
    import torch
    if value is None or isinstance(value, (bool, int, float, str, bytes, np.generic)):
        h.update(f"{type(value).__name__}:{value!r};".encode())
        return True
    if isinstance(value, torch.Tensor):
        value = value.detach().cpu().contiguous()
        h.update(f"T{value.dtype}{tuple(value.shape)}".encode())
        h.update(value.view(torch.uint8).numpy().tobytes() if value.numel() else b"")
        return True
    if isinstance(value, np.ndarray):
        if value.dtype == object:
            return False
        h.update(f"A{value.dtype}{value.shape}".encode())
        h.update(np.ascontiguousarray(value).tobytes())
        return True
    if isinstance(value, (tuple, list)):
        h.update(f"{type(value).__name__}{len(value)}(".encode())
        return all(_digest(v, h) for v in value) and (h.update(b")") or True)
    if isinstance(value, dict):
        h.update(f"D{len(value)}(".encode())
        for k in sorted(value, key=repr):
            if not (_digest(k, h) and _digest(value[k], h)):
                return False
        return True
    return False


def _copy(value):
    import numpy as np
    import torch
    if isinstance(value, torch.Tensor):
        return value.clone()
    if isinstance(value, np.ndarray):
        return value.copy()
    if isinstance(value, (tuple, list)):
        return type(value)(_copy(v) for v in value)
    if isinstance(value, dict):
        return {k: _copy(v) for k, v in value.items()}
    return value


class Memo:
    """While active, each function of ``grader.reference.secret``'s modules
    answers a repeated call (the same plain-data arguments) from its first
    answer (a copy): they are pure, and every mutant's run of a case asks the
    solution's questions again."""

    def __init__(self):
        self.answers: dict[bytes, object] = {}
        self.hits = self.misses = 0
        self._patched: list[tuple[object, str, object]] = []

    def _wrap(self, fn):
        @functools.wraps(fn)
        def cached(*args, **kwargs):
            h = hashlib.blake2b(f"{fn.__module__}.{fn.__qualname__}".encode())
            if not _digest((args, kwargs), h):
                return fn(*args, **kwargs)
            key = h.digest()
            if key in self.answers:
                self.hits += 1
                return _copy(self.answers[key])
            self.misses += 1
            answer = fn(*args, **kwargs)
            self.answers[key] = _copy(answer)
            return answer
        return cached

    def __enter__(self):
        for info in pkgutil.iter_modules(secret.__path__):
            module = importlib.import_module(f"{secret.__name__}.{info.name}")
            for name, fn in vars(module).items():
                if inspect.isfunction(fn) and fn.__module__ == module.__name__:
                    self._patched.append((module, name, fn))
                    setattr(module, name, self._wrap(fn))
        return self

    def __exit__(self, *exc):
        for module, name, fn in reversed(self._patched):
            setattr(module, name, fn)
        self._patched.clear()


# -- the tests, as pytest would call them ----------------------------------------
@dataclass
class Item:
    name: str               # like pytest's: test_x[float32]
    function: object
    params: dict
    points: float
    timeout: float | None


def _marks(obj) -> list:
    return list(getattr(obj, "pytestmark", []))


def _expand(marks) -> list[tuple[str, dict]]:
    """(id, params) for each combination of the function's parametrize marks."""
    combos = [("", {})]
    # pytest applies the decorator nearest the function first
    for mark in reversed([m for m in marks if m.name == "parametrize"]):
        argnames, argvalues = mark.args[0], mark.args[1]
        names = [a.strip() for a in argnames.split(",")] if isinstance(argnames, str) \
            else list(argnames)
        ids = mark.kwargs.get("ids")
        rows = []
        for i, value in enumerate(argvalues):
            value = getattr(value, "values", value)   # pytest.param(...)
            values = value if len(names) > 1 else (value,)
            label = str(ids[i]) if ids else "-".join(str(v) for v in values)
            rows.append((label, dict(zip(names, values))))
        combos = [((f"{a}-{b}" if a else b), {**pa, **pb}) for (a, pa), (b, pb)
                  in itertools.product(combos, rows)]
    return combos


def _module(path: Path):
    """A suite module, loaded as grading loads it (its marks are the grading
    plugin's, unknown here)."""
    import importlib.util
    import warnings
    spec = importlib.util.spec_from_file_location(f"seed_sweep_{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", pytest.PytestUnknownMarkWarning)
        spec.loader.exec_module(module)
    return module


def items(exercise: str) -> list[Item]:
    """The exercise's seed-dependent tests (public and hidden suites), each
    parametrization its own item; GPU tests only where CUDA is."""
    import torch
    out = []
    for path in suite_files(exercise, "hidden"):
        wanted = seed_dependent(path)
        if not wanted:
            continue
        module = _module(path)
        for mark in _marks(module):
            if mark.name == "skipif" and mark.args and mark.args[0]:
                wanted = set()          # e.g. no Triton: not run, for every seed
        for name in sorted(wanted):
            fn = getattr(module, name)
            marks = _marks(fn)
            if any(m.name == "gpu" for m in marks) and not torch.cuda.is_available():
                continue                # "not run: needs a GPU", for every seed
            points = next(float(m.args[0]) for m in marks if m.name == "points")
            timeout = next((m.args[0] for m in marks if m.name == "timeout_s"), None)
            for label, params in _expand(marks):
                out.append(Item(f"{name}[{label}]" if label else name, fn, params, points,
                                timeout))
    return out


@dataclass
class Run:
    status: str             # passed, failed, skipped or error
    read_seed: bool
    touched: set[str] = field(default_factory=set)
    text: str = ""


def run(item: Item, worker, seed: int, reads: SeedReads, functions: set[str]) -> Run:
    """One test under one seed, as the grading plugin would judge it: with
    its own ``StudentModule`` of ``worker``, under its ``timeout_s`` if any."""
    touched: set[str] = set()
    spy = Spy(StudentModule(worker, item.timeout), touched, functions)
    kwargs = dict(item.params)
    wants = inspect.signature(item.function).parameters
    if "student" in wants:
        kwargs["student"] = spy
    if "machine" in wants:
        kwargs["machine"] = {}
    if SEED_FIXTURE in wants:
        kwargs[SEED_FIXTURE] = seed
    unknown = set(wants) - set(kwargs)
    if unknown:
        raise RuntimeError(f"{item.name}: tests/seed_sweep.py has no fixture {sorted(unknown)}")
    reads.value, reads.reads = seed, 0
    try:
        item.function(**kwargs)
        status, text = "passed", ""
    except pytest.skip.Exception as exc:
        status, text = "skipped", str(exc)
    except (Feedback, StudentError, AssertionError) as exc:
        status, text = "failed", str(exc)
    except Exception as exc:     # the plugin records these as errors of the grader
        status, text = "error", f"{type(exc).__name__}: {exc}"
    return Run(status, reads.reads > 0 or SEED_FIXTURE in wants, touched, text)


# -- the sweep ---------------------------------------------------------------------
def submission(folder: Path, mutant: Mutant | None = None) -> Path:
    folder.mkdir(parents=True)
    for path in SOLUTIONS.glob("*.py"):
        shutil.copy(path, folder / path.name)
    if mutant is not None:
        target = folder / f"{mutant.file}.py"
        target.write_text(mutant.apply(target.read_text()))
    return folder


@dataclass
class Verdict:
    """A submission's seed-dependent tests under every seed."""
    name: str
    statuses: dict[str, dict[int, str]]    # item -> seed -> status (absent: as the first)
    texts: dict[str, str]
    points: dict[str, float]
    seeds: list[int]
    runs: int = 0
    # item -> the seeds under which it failed after drawing a random case
    read_seed_failures: dict[str, list[int]] = field(default_factory=dict)

    def score(self, seed: int) -> float:
        return sum(p for name, p in self.points.items()
                   if self.status(name, seed) == "passed")

    def status(self, name: str, seed: int) -> str:
        per_seed = self.statuses[name]
        return per_seed.get(seed, per_seed[self.seeds[0]])

    def scores(self) -> dict[float, list[int]]:
        out: dict[float, list[int]] = {}
        for seed in self.seeds:
            out.setdefault(self.score(seed), []).append(seed)
        return out

    def problem(self) -> str | None:
        """None when every seed gives the same score and the same outcome of each test."""
        varying = {name: per for name, per in self.statuses.items()
                   if len({self.status(name, s) for s in self.seeds}) > 1}
        if not varying:
            return None
        lines = [f"{self.name}: scores by seed {self.scores()}"]
        for name, per in varying.items():
            by = {}
            for s in self.seeds:
                by.setdefault(self.status(name, s), []).append(s)
            lines.append(f"  {name}: " + "; ".join(f"{k} under seeds {v}"
                                                  for k, v in by.items()))
            lines.append("    " + self.texts.get(name, "").replace("\n", "\n    ")[:1500])
        return "\n".join(lines)


class Sweep:
    """Workers for one exercise's submissions, forked from one fork server, and the
    seed-dependent tests run against them under ``seeds``."""

    def __init__(self, exercise: str, seed_list: list[int], folder: Path):
        self.exercise, self.seeds, self.folder = exercise, seed_list, folder
        self.ex = EXERCISES[exercise]
        import torch
        torch.set_num_threads(1)    # as grading does (grader.core): small references
        self.items = items(exercise)
        self.launcher = launcher("auto")
        self.fork_server = self.launcher.fork_server(set(self.ex.needs))
        if self.fork_server is not None:
            self.fork_server.start()
        self.reads = SeedReads()
        self.memo = Memo()
        self._solution: dict[str, dict[int, Run]] | None = None
        self.seconds = 0.0

    def close(self):
        if self.fork_server is not None:
            self.fork_server.close()

    def _worker(self, folder: Path):
        return self.launcher.worker(folder, self.exercise, call_timeout=self.ex.call_timeout,
                                    env=self.ex.worker_env, fork_from=self.fork_server)

    def _grade(self, name: str, folder: Path, plan) -> tuple[Verdict, dict]:
        """``plan(item)``: the seeds to run it under (None: as the solution)."""
        start = time.perf_counter()
        worker = self._worker(folder)
        functions: set[str] = set()
        verdict = Verdict(name, {}, {}, {i.name: i.points for i in self.items}, self.seeds)
        runs: dict[str, dict[int, Run]] = {}
        saved = cases._RUN_SEED
        cases._RUN_SEED = self.reads
        self.memo.__enter__()
        try:
            for item in self.items:
                todo = plan(item)
                if todo is None:
                    sol = self._solution[item.name]
                    verdict.statuses[item.name] = {s: r.status for s, r in sol.items()}
                    continue
                runs[item.name] = {}
                for seed in todo:
                    r = run(item, worker, seed, self.reads, functions)
                    verdict.runs += 1
                    runs[item.name][seed] = r
                    if r.status != "passed":
                        verdict.texts.setdefault(item.name, r.text)
                        if r.read_seed:
                            verdict.read_seed_failures.setdefault(item.name, []).append(seed)
                    if not r.read_seed:
                        break      # ended before any random case: the same for every seed
                verdict.statuses[item.name] = {s: r.status for s, r in runs[item.name].items()}
        finally:
            self.memo.__exit__()
            cases._RUN_SEED = saved
            worker.close()
            self.seconds += time.perf_counter() - start
        return verdict, runs

    def solution(self) -> Verdict:
        verdict, runs = self._grade("solution", submission(self.folder / "solution"),
                                    lambda item: self.seeds)
        self._solution = runs
        return verdict

    def mutant(self, m: Mutant) -> Verdict:
        if self._solution is None:
            self.solution()
        source = (SOLUTIONS / f"{m.file}.py").read_text()
        changed = affected(source, m.apply(source))

        def plan(item):
            sol = self._solution[item.name]
            if EVERYTHING not in changed and all(
                    not (r.touched & changed) and EVERYTHING not in r.touched
                    for r in sol.values()):
                return None
            return self.seeds
        verdict, _ = self._grade(f"{m.file}:{m.name}", submission(
            self.folder / f"{m.file}-{m.name}", m), plan)
        return verdict
