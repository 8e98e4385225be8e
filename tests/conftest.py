"""Shared helpers for the package's own tests."""
from __future__ import annotations

import functools
import os
import shutil
from pathlib import Path

import pytest
from filelock import FileLock

from grader.core import Options, grade

REPO = Path(__file__).resolve().parent.parent
SOLUTIONS = REPO / "solutions"
EXERCISES_DIR = REPO / "exercises"


def pytest_addoption(parser):
    parser.addoption("--corpus", action="store_true", default=False,
                     help="run the corpus tier too (tests marked corpus: every mutant's round, "
                          "every independent submission, each attack in the other isolation); "
                          "the default run holds one or a few of each. CI runs it")
    parser.addoption("--full-matrix", action="store_true", default=False,
                     help="tests/test_gpu_compile.py: compile every configuration of every "
                          "kernel in every case (192 compiles), not aot.default_matrix()")
    parser.addoption("--exercise", action="append", default=[], metavar="NAME",
                     type=_exercise_name,
                     help="an author's loop: only the checks of this exercise end to end "
                          "(its suites on the solution and the stub, its mutants alone, the "
                          "release's leak tests); a name, its number or its letter "
                          "(ex02_mha, ex02, B); may be given more than once")


def _exercise_name(text: str) -> str:
    """``--exercise``'s value as the registry names it (a file's path, the
    name, its number or its letter, as ``attn-grade check`` takes them)."""
    import argparse

    from grader.registry import EXERCISES, by_letter
    text = Path(text).stem
    found = by_letter(text) if len(text) == 1 else None
    names = [found.name] if found else [n for n in EXERCISES
                                        if text in (n, n.split("_")[0])]
    if not names:
        raise argparse.ArgumentTypeError(f"no exercise {text!r}; one of {', '.join(EXERCISES)}")
    return names[0]


# The tiers a marker selects, and the text that a test file holding one of
# their tests contains: a file without it is not even imported, so that the
# quick tier never pays for PyTorch (which many test files import) and an
# author's loop collects in seconds.
QUICK, AUTHOR = "quick", "author"
TIER_TEXT = {QUICK: "mark.quick", AUTHOR: "mark.author"}


def _tier(config) -> str | None:
    if config.getoption("exercise"):
        return AUTHOR
    return QUICK if (config.getoption("markexpr") or "").strip() == QUICK else None


def pytest_ignore_collect(collection_path, config):
    tier = _tier(config)
    if tier and collection_path.is_file() and collection_path.name.startswith("test_"):
        if TIER_TEXT[tier] not in collection_path.read_text(errors="replace"):
            return True
    return None


def pytest_configure(config):
    if _tier(config) == QUICK:
        import sys

        from grader.sandbox.launch import Launcher
        sys.meta_path.insert(0, _NoTorch())
        Launcher.worker = _no_worker


def _no_worker(*args, **kwargs):
    """The quick tier's other guard: no worker starts, so nothing is graded
    in the test process (a grading in a subprocess is not seen here; the
    tier's minute is)."""
    raise RuntimeError("the quick tier (-m quick) grades nothing: mark this test slow, "
                       "not quick")


class _NoTorch:
    """The quick tier's guard: importing PyTorch fails, naming the tier, so
    that a quick test that would need it (directly or through the grader)
    is an error the run shows, not a tier that silently got slow."""

    def find_spec(self, name, path=None, target=None):
        if name == "torch" or name.startswith("torch."):
            raise ImportError("the quick tier (-m quick) imports no PyTorch: mark this "
                              "test slow or give it another tier, not quick")
        return None


CORPUS = "corpus"


def _left_out(config, item) -> bool:
    """A test the run leaves out: an author's loop's own test outside a loop,
    and a corpus test (more cases of a promise the default run already
    holds) unless ``--corpus`` asks for them or a loop is run (a loop grades
    its exercise's mutants alone, every one)."""
    if _tier(config) == AUTHOR:
        return False
    if item.get_closest_marker("loop_only"):
        return True
    return item.get_closest_marker(CORPUS) is not None and not config.getoption("corpus")


def pytest_collection_modifyitems(config, items):
    """An author's loop keeps the tests marked ``author``, and of those
    parametrized by exercise only the chosen exercises' ones; other runs
    leave out the loop's own tests (tests/test_author.py) and, without
    ``--corpus``, the corpus tier."""
    if _tier(config) != AUTHOR:
        keep, drop = [], []
        for item in items:
            (drop if _left_out(config, item) else keep).append(item)
        if drop:
            config.hook.pytest_deselected(items=drop)
            items[:] = keep
        return
    from grader.registry import EXERCISES
    chosen = set(config.getoption("exercise"))
    keep, drop = [], []
    for item in items:
        params = getattr(getattr(item, "callspec", None), "params", {})
        others = {v for v in params.values() if isinstance(v, str) and v in EXERCISES}
        ours = item.get_closest_marker(AUTHOR) is not None and not others - chosen
        (keep if ours else drop).append(item)
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    """Say that a run without ``--corpus`` left the corpus tier out (the
    deselected count, under pytest-xdist, is its workers' to know)."""
    if _tier(config) is None and not config.getoption("corpus"):
        terminalreporter.write_line(
            "The corpus tier was left out (the rest of the mutants, independent "
            "submissions and attack variants): python -m pytest -q --corpus runs it; CI does.")


def author_exercises(config) -> list[str]:
    """The exercises of an author's loop (``--exercise``), or [] without one."""
    return list(config.getoption("exercise"))


def pytest_xdist_auto_num_workers(config) -> int:
    """``-n auto`` (the default, pyproject's addopts): one worker more than
    the cores this process may use.  Many tests wait on a grading's time
    limits or on its workers' pipes; the extra one fills those waits (the
    suite on 2 cores, measured: 490 s with 2 workers, 448 s with 3).  The
    timing grades must hold under that load too."""
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:   # not on Linux
        cores = os.cpu_count() or 1
    return cores + 1


_launchers: dict = {}


def package_dirs() -> list[str]:
    """The folders this Python imports installed packages from: its
    site-packages, then any other site-packages folder on ``sys.path`` (a
    layered environment's base, as benchmarks/bench_suite_under_load.py
    --venv makes), for the tests that build an environment over this one's
    packages."""
    import site
    import sys
    dirs = list(site.getsitepackages())
    return dirs + [p for p in sys.path
                   if p.endswith(("site-packages", "dist-packages")) and p not in dirs]


def launcher(mode: str = "auto"):
    """A ``Launcher`` for this machine in ``mode`` (``strict``: namespaces,
    ``fallback``), one per mode for the test process: the one way a test
    makes a worker, as grading does."""
    from grader.sandbox.launch import Launcher
    if mode not in _launchers:
        _launchers[mode] = Launcher.here(mode, grading_budget_s=None)
    return _launchers[mode]


def launch(folder: Path, module: str, *, namespaces: bool | None = None,
           call_timeout: float = 10.0, **kwargs):
    """A worker for ``module`` of ``folder``: under namespaces (True), in the
    fallback (False), or as this machine gives (None)."""
    mode = "auto" if namespaces is None else ("strict" if namespaces else "fallback")
    return launcher(mode).worker(folder, module, call_timeout=call_timeout, **kwargs)


def copy_solutions(dest: Path, only: list[str] | None = None) -> Path:
    dest.mkdir(parents=True, exist_ok=True)
    for path in SOLUTIONS.glob("*.py"):   # the exercises and the questions
        if only is None or path.stem in only:
            shutil.copy(path, dest / path.name)
    return dest


def grade_dir(path: Path, exercises=None, suite="hidden", fresh=False, **kwargs):
    """Grade in-process.  Exercise G's GPU compile check is kept per file
    contents for the run (``check``'s cache, in the run's folder): many tests
    grade the same solution, and one compile of it proves the path.

    The grading forks its workers from this test process's kept fork server
    (``_kept_fork_server``), as a ``batch`` slot grades submission after
    submission: the fork server never runs student code, and every worker is
    a fresh fork in namespaces of its own (tests/test_batch_slots.py holds
    that a hostile submission leaves nothing for the next).  ``fresh``: the
    grading starts and closes its own, as ``attn-grade grade`` does, for the
    tests of the sandbox's own start, faults and leftovers."""
    kwargs.setdefault("check_cache", _run_cache())
    options = Options(suite=suite, exercises=exercises, **kwargs)
    if fresh:
        return grade(path, options)
    return grade(path, options, fork_server=_kept_fork_server().lend(options))


@functools.lru_cache(maxsize=None)
def _kept_fork_server():
    """One fork server kept for this test process (each xdist worker has its
    own), closed when the process's tests end (``_close_kept_fork_server``).
    Measured on 2 cores: a grading of E and H costs 2.1 processor-seconds
    forked from it, 4.5 starting its own (PyTorch imported again)."""
    from grader.classroom.slots import KeptForkServer
    return KeptForkServer()


@pytest.fixture(scope="session", autouse=True)
def _close_kept_fork_server():
    yield
    if _kept_fork_server.cache_info().currsize:
        _kept_fork_server().close()


def _run_cache() -> Path | None:
    folder = os.environ.get("XDG_CACHE_HOME")
    return Path(folder) / "attn-grade" if folder else None


def failures(report, exercise=None) -> list:
    return [t for t in report.tests if t.status == "failed"
            and (exercise is None or t.exercise == exercise)]


@pytest.fixture
def solutions_copy(tmp_path):
    return copy_solutions(tmp_path / "submission")


def _run_root(tmp_path_factory) -> Path:
    """The test run's base folder: one for the run, shared by xdist's workers
    (each has its own folder inside it)."""
    root = tmp_path_factory.getbasetemp()
    return root.parent if os.environ.get("PYTEST_XDIST_WORKER") else root


@pytest.fixture(scope="session", autouse=True)
def _private_user_cache(tmp_path_factory):
    """`attn-grade check` run by a test keeps its cache in the run's own
    folder (shared by xdist's workers), never in the real user's home."""
    folder = _run_root(tmp_path_factory) / "user-cache"
    folder.mkdir(exist_ok=True)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("XDG_CACHE_HOME", str(folder))
        yield


def built_once(tmp_path_factory, name: str, build) -> Path:
    """``build(folder)`` once for the whole test run, even when pytest-xdist
    spreads the tests over processes (they share the run's base folder); the
    others wait for it.  For large read-only things, like the student edition."""
    root = _run_root(tmp_path_factory)
    folder, done = root / name, root / f"{name}.done"
    with FileLock(str(root / f"{name}.lock")):
        if not done.exists():
            shutil.rmtree(folder, ignore_errors=True)
            build(folder)
            done.touch()
    return folder


def graded_once(tmp_path_factory, name: str, write, exercises=None, suite="hidden",
                **kwargs):
    """The report of one grading, made once for the whole test run and read
    by every test that asks for it by ``name`` (xdist's workers too: the
    report waits on disk, as JSON, for the others).  ``write(folder)`` puts
    the submission in ``folder``; the options are ``grade_dir``'s.  Only for
    tests that read the result: a test that changes how grading runs
    (monkeypatch) grades on its own."""
    import dataclasses
    import json

    from grader.report import Report, TestResult

    def build(folder):
        folder.mkdir()
        write(folder / "submission")
        report = grade_dir(folder / "submission", exercises, suite, **kwargs)
        (folder / "report.json").write_text(json.dumps(dataclasses.asdict(report)))

    data = json.loads((built_once(tmp_path_factory, f"graded-{name}", build)
                       / "report.json").read_text())
    data["tests"] = [_stored(TestResult, t) for t in data["tests"]]
    return _stored(Report, data)


def _stored(cls, data: dict):
    """A ``cls`` holding ``data`` as it was stored: its text was made safe
    when the grading assigned it, and is not cleaned a second time."""
    obj = cls.__new__(cls)
    obj.__dict__.update(data)
    return obj


FOUNDATION = ["ex01_by_hand", "ex02_mha", "ex03_gqa"]


def graded_solutions(tmp_path_factory, suite: str = "hidden"):
    """The reference's A-C graded once a run in ``suite``, every solution
    module handed in (as a student hands in a folder), for the tests that
    read what the reference earns; ``one_exercise`` cuts out one's part."""
    return graded_once(tmp_path_factory, f"solutions-{suite}", copy_solutions,
                       FOUNDATION, suite)


def one_exercise(report, exercise: str):
    """The report of ``exercise`` alone, cut from a grading of several: its
    tests and its time, the rest of the report as it was."""
    data = dict(report.__dict__, exercises=[exercise],
                tests=[t for t in report.tests if t.exercise == exercise],
                exercise_seconds={exercise: report.exercise_seconds[exercise]})
    return _stored(type(report), data)


def graded_stubs(tmp_path_factory):
    """Every exercise's stub graded once in the hidden suite (what a student
    who hands in nothing gets), for the tests that read what a stub scores."""
    from grader.registry import available
    return graded_once(tmp_path_factory, "stubs",
                       lambda folder: shutil.copytree(EXERCISES_DIR, folder,
                                                      ignore=shutil.ignore_patterns("__pycache__")),
                       available(), import_timeout=120)


@functools.lru_cache(maxsize=None)
def ex01_max() -> float:
    """Exercise A's maximum in the hidden suite, from the one place it is fixed
    (``grader.core.maximum``): tests that grade A compare with it, not a number
    that moves when a task is added."""
    from grader.core import maximum
    return maximum(Options(exercises=["ex01_by_hand"]))["ex01_by_hand"]
