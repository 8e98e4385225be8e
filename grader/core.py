"""The pure core: ``grade(submission, ...) -> Report``.

Runs the pytest suites of the chosen exercises in this process (the suites
and references never leave it) with a plugin that owns one sandboxed worker
per exercise and turns each test's outcome into a ``TestResult``.  Student
code runs only in the workers.  Whatever happens, ``grade`` returns a
report: a problem in the grader itself is recorded in ``report.errors``.

What a grading is out of is fixed in one place, ``plan``, once the suites
are collected and before any test runs: each test's points marker, and the
setup the grading declares (``Options.gpu_tier``).  Every result takes its
maximum from there, whatever its outcome; ``maximum`` gives the same without
a submission (a batch's row that could not be graded).

After the tests ran, a failing exercise may be graded again with a reference
in place of what it builds on (``grader.rootcause.upstream_evidence``, which
calls back into ``grade``), and ``grader.rootcause`` reads which failures
follow from a mistake upstream, so that it costs once.
"""
from __future__ import annotations

import contextlib
import os
import re
import secrets
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from grader import fault, linepointer, rootcause
from grader.registry import EXERCISES, fork_server_preloads, suite_files
from grader.feedback import Feedback, take_passed
from grader.options import GraderConfigError, Options, exercises_of as _exercises
from grader.paths import SUITES_DIR
from grader.report import FAILED, NEEDS_REGRADE, NOT_RUN, PASSED, Report, TestResult
from grader.sandbox import bwrap, confine, forkserver, isolation, reach
from grader.sandbox.client import StudentError, StudentModule, Worker
from grader.sandbox.launch import Launcher
from grader.sandbox.process import remove_stale_staging_once

PLUGIN_KEY = pytest.StashKey["GradingPlugin"]()
SEED_LIMIT = 2**32


def _title(item) -> str:
    doc = (getattr(item.function, "__doc__", None) or "").strip()
    title = doc.splitlines()[0].rstrip(".") if doc else item.originalname.replace("_", " ")
    if title.startswith("test "):
        title = title[5:]
    callspec = getattr(item, "callspec", None)
    return f"{title} [{callspec.id}]" if callspec is not None else title


@dataclass(frozen=True)
class Planned:
    """What one collected test is worth in this grading, fixed by ``plan``
    before any test runs: every outcome takes its maximum from here."""
    points: float
    counted: bool          # False: outside this grading (the GPU tier, when it is off)

    @property
    def max_score(self) -> float:
        return self.points if self.counted else 0.0


GPU_TIER_OFF = "not graded: the GPU tier is not part of this grading"


def plan(items, options: Options) -> dict[str, Planned]:
    """The one place the maximum is fixed: each collected test's points marker
    and the grading's declared setup (``Options.gpu_tier``), nothing a run
    finds out.  A missing module, an import error, a crash, a library or a
    GPU the machine lacks change a test's score and status, never its maximum."""
    out = {}
    for item in items:
        mark = item.get_closest_marker("points")
        gpu = item.get_closest_marker("gpu") is not None
        out[item.nodeid] = Planned(float(mark.args[0]) if mark else 0.0,
                                   counted=options.gpu_tier or not gpu)
    return out


# Skips where the grading setup lacks something (no GPU, no Triton, no
# matplotlib: "needs ..."), and the checks only the instructors' edition can
# make (replay.py).  Their points stay in the maximum either way.
NEEDS = "needs "
EDITION_ONLY = "not checked in the student edition"


def _with_pointer(output: str, exercise: str, student: StudentModule, exc,
                  pointed: set) -> str:
    """``output`` with the line pointer's line after it (``grader.linepointer``):
    after what the check said, so the known mistake and expected vs got come
    first.  Its own failure, or a student error while tracing, adds nothing.
    ``pointed``: what this grading has traced already (each function once)."""
    try:
        line = linepointer.point(exercise, student, exc, pointed)
    except Exception:  # noqa: BLE001 - best effort: never the test's result
        return output
    return f"{output}\n{line}" if line else output


def describe_failure(excinfo) -> str:
    """Feedback text for a failed test, from the exception that failed it."""
    exc = excinfo.value
    if isinstance(exc, (Feedback, StudentError)):
        return str(exc)
    if isinstance(exc, pytest.fail.Exception):
        return str(exc.msg if hasattr(exc, "msg") else exc)
    if isinstance(exc, AssertionError):
        text = str(exc).strip()
        return text or "an assertion about your answer failed"
    # A malformed answer that made the grader's line raise (grader.fault);
    # the grader's own exceptions are said in GradingPlugin._record.
    where = fault.where(excinfo)
    return (f"your answer has the wrong type or shape for this check: "
            f"{type(exc).__name__}: {exc}" + (f" (at {where})" if where else "") + ".")


def _skipped(reason: str, planned: Planned) -> tuple[str, str]:
    """(status, output) of a skipped test.  Its maximum is the plan's whatever
    the reason: a skip only says why it scored nothing."""
    pts = f"{planned.points:g} point{'' if planned.points == 1 else 's'}"
    if not planned.counted:   # the GPU tier, off
        return NOT_RUN, f"{reason} (worth {pts} with --gpu-tier, on any machine)"
    if planned.points == 0:   # a check worth nothing (the public self-checks): nothing to regrade
        return NOT_RUN, reason
    if reason.startswith(EDITION_ONLY):
        return NOT_RUN, f"{reason} (worth {pts} when graded)"
    if reason.startswith(NEEDS):
        # This grading machine lacks what the test needs (matplotlib, Triton,
        # a GPU under --gpu-tier): every student alike, but the test is part
        # of the grade.
        return NEEDS_REGRADE, (f"not run: {reason} (0/{planned.points:g} until regraded "
                               "on a grading machine that has it)")
    # Could not be judged this time (a noisy machine, say).
    return NEEDS_REGRADE, f"{reason} (0/{planned.points:g} until regraded)"


MARKERS = ("points(n): points a test is worth",
           "exercise(name): the exercise module a suite grades",
           "hidden: a test whose details stay hidden until grades are published",
           "visibility(name): Gradescope visibility overriding the default "
           "(visible, or after_published for hidden tests)",
           "timeout_s(seconds): time limit for each call into the submission",
           "gpu: needs CUDA; the GPU tier, graded with --gpu-tier only",
           "nothing_to_record: calls no secret reference (the release's "
           "recording run leaves it out)")


def _markers(config) -> None:
    for line in MARKERS:
        config.addinivalue_line("markers", line)


class GradingPlugin:
    """Owns the workers and collects results.  Only the suites' fixtures
    (``suites/conftest.py``) reach it, through ``config.stash[PLUGIN_KEY]``;
    a suite asks those fixtures for what it needs."""

    def __init__(self, submission: Path, options: Options, report: Report,
                 folders: dict[str, Path] | None = None,
                 fork_server: forkserver.ForkServer | None = None):
        self.submission = submission
        self.folders = dict(folders or {})   # exercise -> its own folder (``grade``)
        # The grading's own fork server, lent to its root causes' gradings
        # (``grade``'s ``fork_server``): started, and closed, by its owner.
        self.borrowed = fork_server
        self.options = options
        self.report = report
        self.workers: dict[str, Worker] = {}
        self.called: dict[int, list[str]] = {}   # id(TestResult) -> functions it called
        self.passed_checks: dict[int, list] = {}  # id(TestResult) -> its checks that passed
        self.pointed: set = set()   # (exercise, function) the line pointer traced
        self.plan: dict[str, Planned] = {}       # nodeid -> its points here (``plan``)
        self.results: dict[str, TestResult] = {}   # nodeid -> its result, once recorded
        self.unrecordable: dict[str, str] = {}   # nodeid -> why its result could not be
        self.items: dict = {}                    # nodeid -> the collected item
        self.collected: dict[str, int] = {}      # nodeid -> its place as collected
        self._started: dict[str, threading.Event] = {}
        self._serving = threading.Event()   # the fork server has started (or failed to)
        self._starter: threading.Thread | None = None
        self._closing = threading.Event()
        self.launcher: Launcher | None = None   # set by grade() from the isolation it found
        self.fork_server: forkserver.ForkServer | None = None   # started by prestart
        self.first_test: float | None = None    # perf_counter when the first test began

    # -- used by the suites' fixtures --------------------------------------
    def prestart(self, exercises: list[str]) -> None:
        """Start these exercises' workers in the background, one after another.

        A worker's start is mostly its imports (PyTorch alone is over a
        second): begun here, before pytest starts and collects, it overlaps
        with the grading process's own start-up instead of following it.
        One at a time, in course order, so that no two starts run at once
        (each may take a fresh user id).  ``worker()`` waits for its own."""
        for folder in {self.folder(e) for e in exercises}:
            reach.parse_all(folder)   # here, not beside pytest's parsing (reach)
        if self.borrowed is not None:
            self.fork_server = self.borrowed
        elif self.options.fork_server:   # (the one begun early, where it is the same)
            needs, extra = fork_server_preloads(exercises, bool(bwrap.gpu_devices()))
            self.fork_server = self.launcher.fork_server(
                needs, extra, font_cache=self.options.font_cache)
        for exercise in exercises:
            self.worker(exercise)
            self._started[exercise] = threading.Event()

        def run():
            try:
                if self.fork_server is not None and self.borrowed is None \
                        and not self._closing.is_set():
                    self.fork_server.start()   # on failure workers are spawned
            finally:
                self._serving.set()
            for exercise in exercises:
                try:
                    if not self._closing.is_set():
                        self.workers[exercise].start()
                except Exception:       # the test's own call starts it again and reports
                    self.workers[exercise].kill()
                finally:
                    self._started[exercise].set()
            # Live until close: a worker's parent-death signal (bubblewrap's
            # --die-with-parent, the fallback's) fires when the thread that
            # started it ends, not only when the grader dies.
            self._closing.wait()

        self._starter = threading.Thread(target=run, name="attn-grade-prestart", daemon=True)
        self._starter.start()

    def worker(self, exercise: str) -> Worker:
        started = self._started.get(exercise)
        if started is not None:
            started.wait()
        if exercise not in self.workers:
            ex = EXERCISES[exercise]
            self.launcher.budget(exercise, ex.budget_s)
            # ``env``, the mapping itself: ex07's asks PyTorch whether there is
            # CUDA, which is read when the worker starts (in prestart's thread,
            # beside the grading process's own imports)
            self.workers[exercise] = self.launcher.worker(
                self.folder(exercise), exercise, exercise=exercise,
                call_timeout=self.options.call_timeout or ex.call_timeout,
                env=ex.worker_env, fork_from=self._fork_server_for(ex),
                fork_wants=forkserver.wanted(ex.needs, ex.preload))
        return self.workers[exercise]

    def folder(self, exercise: str) -> Path:
        """The folder ``exercise``'s workers run the submission from."""
        return self.folders.get(exercise, self.submission)

    def _fork_server_for(self, ex):
        """The fork server forks every worker but a GPU exercise's on a machine with
        a GPU: CUDA is set up only in the worker (the fork server never does), but
        that worker is started from scratch until a GPU run has proven the
        fork there (benchmarks/gpu_check.py)."""
        if "GPU" in ex.needs and bwrap.gpu_devices():
            return None
        return self.fork_server

    def binder(self, exercise: str):
        """The suites' ``launch_worker`` for ``exercise``: its further workers
        (ex07's compile worker), forked where its own worker is."""
        ex = EXERCISES[exercise]
        return self.launcher.binder(self.folder(exercise), exercise,
                                    fork_from=self._fork_server_for(ex),
                                    fork_wants=forkserver.wanted(ex.needs, ex.preload))

    def wait_started(self) -> None:
        """Until every worker ``prestart`` began has started (or failed to)."""
        for started in list(self._started.values()):
            started.wait()

    def wait_serving(self) -> None:
        """Until the fork server ``prestart`` began has started (or failed
        to), so that a worker launched now is forked, not spawned."""
        if self._starter is not None:
            self._serving.wait()

    def student(self, exercise: str, timeout: float | None = None) -> StudentModule:
        return StudentModule(self.worker(exercise), timeout)

    def close_workers(self) -> None:
        """Close every worker; the fork server lives on (the root causes'
        gradings borrow it: ``grade``)."""
        for w in self.workers.values():
            w.close()

    def close(self) -> None:
        # The fork server dies with the thread that started it (its parent-
        # death signal): that thread ends only here, after the borrowers.
        self._closing.set()
        if self._starter is not None:
            self._starter.join()     # never a worker started after its clean-up
        self.close_workers()
        if self.fork_server is not None and self.borrowed is None:
            self.fork_server.close()

    # -- pytest hooks ------------------------------------------------------
    @pytest.hookimpl(tryfirst=True)
    def pytest_collection_modifyitems(self, items):
        """The order as collected, before the suites' conftest moves the tests
        that wait for the background compile to the end: the report's."""
        self.collected = {item.nodeid: i for i, item in enumerate(items)}

    def pytest_collection_finish(self, session):
        self.plan = plan(session.items, self.options)
        self.items = {item.nodeid: item for item in session.items}
        _one_thread()      # after collection: the suites that need PyTorch have imported it

    def pytest_configure(self, config):
        config.stash[PLUGIN_KEY] = self
        # pytest formats a traceback for every failed test, with source and
        # arguments ("long", about 60 ms each); feedback comes from the
        # exception itself (``describe_failure``), so Python's own short form
        # is enough where a report's text is read (a suite that fails to load).
        # The terminal plugin, which owns --tb, is off: set its value directly.
        config.option.tbstyle = "native"
        _markers(config)

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_setup(self, item):
        """A test outside this grading (``plan``) is not run.  A module that
        is missing, or that failed to import, fails each of its tests at once,
        before any fixture (a reference measurement, say) runs."""
        take_passed()            # what an earlier test left is not this test's
        planned = self.plan.get(item.nodeid)
        if planned is not None and not planned.counted:
            pytest.skip(GPU_TIER_OFF)
        mark = item.get_closest_marker("exercise")
        if mark is None:
            return
        worker = self.worker(mark.args[0])
        problem = worker.load_error or worker.module_problem()
        if problem is not None:
            raise problem

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_makereport(self, item, call):
        outcome = yield
        rep = outcome.get_result()
        if rep.when == "call" or (rep.when == "setup" and not rep.passed):
            try:
                self._record(item, rep, call)
            except Exception as exc:   # noqa: BLE001 - the grader's own failure
                # this test only: the session goes on, and a person regrades it
                why = f"the grader failed recording this test: {type(exc).__name__}: {exc}"
                self.unrecordable[item.nodeid] = f"{why}; a person regrades it"
                self.report.errors.append(f"{item.nodeid}: {why}")

    def _record(self, item, rep, call) -> None:
        ex_mark = item.get_closest_marker("exercise")
        exercise = ex_mark.args[0] if ex_mark else "unknown"
        planned = self.plan.get(item.nodeid) or plan([item], self.options)[item.nodeid]
        hidden = item.get_closest_marker("hidden") is not None
        vis_mark = item.get_closest_marker("visibility")
        visibility = vis_mark.args[0] if vis_mark else \
            ("after_published" if hidden else "visible")
        result = TestResult(exercise=exercise, name=item.name, title=_title(item),
                            max_score=planned.max_score, score=0.0, status=FAILED,
                            hidden=hidden, visibility=visibility)
        if rep.skipped:
            reason = rep.longrepr[2] if isinstance(rep.longrepr, tuple) else str(rep.longrepr)
            # "Skipped: ", or the student edition's grading-only stub's name
            reason = re.sub(r"^(Skipped|[\w.]*GradingOnly): ", "", reason)
            result.status, result.output = _skipped(reason, planned)
        elif rep.passed:
            result.status, result.score = PASSED, planned.max_score
            result.output = getattr(item, "feedback_on_pass", "")
        else:
            result.output = describe_failure(call.excinfo) if call.excinfo else str(rep.longrepr)
            students = [v for v in getattr(item, "funcargs", {}).values()
                        if isinstance(v, StudentModule)]
            if call.excinfo is not None and fault.graders(call.excinfo, students):
                # The grader's own exception (grader.fault): never the student's
                # loss; the points stay in the maximum, 0 until a person regrades.
                result.status = NEEDS_REGRADE
                result.output = (f"the grader failed here: {fault.what(call.excinfo)}; "
                                 f"a person regrades this (0/{planned.max_score:g} until then)")
                self.report.errors.append(f"{item.nodeid}: {fault.what(call.excinfo)}")
        self.passed_checks[id(result)] = take_passed()
        student = item.funcargs.get("student") if hasattr(item, "funcargs") else None
        if isinstance(student, StudentModule):
            self.called[id(result)] = list(student.called)
            if result.status == FAILED and call.excinfo is not None \
                    and isinstance(call.excinfo.value, Feedback):
                result.output = _with_pointer(result.output, exercise, student,
                                              call.excinfo.value, self.pointed)
        self.results[item.nodeid] = result
        self.report.tests.append(result)

    def unrecorded(self) -> None:
        """A planned test that never reported (the session ended early): in
        its place, at its place, one that needs a regrade, so that the
        maximum is still the plan's."""
        tests = []
        for nodeid in sorted(self.plan, key=lambda n: self.collected.get(n, len(self.collected))):
            planned = self.plan[nodeid]
            result = self.results.get(nodeid)
            if result is None:
                item = self.items[nodeid]
                mark = item.get_closest_marker("exercise")
                result = TestResult(exercise=mark.args[0] if mark else "unknown",
                                    name=item.name, title=_title(item),
                                    max_score=planned.max_score, score=0.0,
                                    status=NEEDS_REGRADE if planned.counted else NOT_RUN,
                                    output=self.unrecordable.get(
                                        nodeid, "not run: the grading stopped before this test"))
            tests.append(result)
        # In course order, as collected: the suites' conftest may run the
        # timed exercises and the compile check's test last
        # (``pytest_collection_modifyitems``).
        course = list(EXERCISES)
        tests.sort(key=lambda t: course.index(t.exercise) if t.exercise in course
                   else len(course))
        planned_ids = {id(t) for t in tests}
        self.report.tests[:] = tests + [t for t in self.report.tests if id(t) not in planned_ids]

    def pytest_runtest_logstart(self, nodeid, location):
        if self.first_test is None:
            self.first_test = time.perf_counter()

    def pytest_runtest_logreport(self, report):
        """Each test's time (setup, call, teardown) to its exercise."""
        item = self.items.get(report.nodeid)
        mark = item.get_closest_marker("exercise") if item is not None else None
        exercise = mark.args[0] if mark else "unknown"
        seconds = self.report.exercise_seconds
        seconds[exercise] = seconds.get(exercise, 0.0) + report.duration

    def pytest_collectreport(self, report):
        if report.failed:
            self.report.errors.append(f"could not load suite {report.nodeid}: "
                                      f"{str(report.longrepr)[-800:]}")

    def pytest_internalerror(self, excrepr, excinfo):
        """The grader's own crash inside pytest (a hook that raised): the
        session ends there, the tests not run are marked for regrade
        (``unrecorded``), and the report says where it broke."""
        self.report.errors.append(f"the grader failed inside pytest: {str(excrepr)[-800:]}")


def _one_thread() -> None:
    """The references' arithmetic is small: one PyTorch thread in the grading
    process, so that parallel gradings do not spin against each other.

    Only where a suite has imported PyTorch: importing it here would cost a
    NumPy exercise's check more than a second (most of `attn-grade check ex02`)."""
    torch = sys.modules.get("torch")
    if torch is not None:
        torch.set_num_threads(1)


def run_seed(seed: int | None) -> int:
    """The seed of this run's random hidden cases: the one given (to reproduce
    a grade), else a fresh secret one, so that hidden cases learned from an
    earlier run are worth nothing.  Recorded in the report."""
    if seed is None:
        return secrets.randbelow(SEED_LIMIT)
    if not 0 <= seed < SEED_LIMIT:
        raise GraderConfigError(f"a seed is a whole number from 0 to {SEED_LIMIT - 1}")
    return seed


def protect_secret_folders(iso: isolation.Isolation) -> list[Path]:
    """A step of grading, before any worker starts: where the workers see this
    machine's files (no namespaces) and we are root, the hidden suites, secret
    references, solutions and tests become readable by root alone
    (``confine.protect_secrets``).  In namespaces nothing of the package is
    mounted, and without root nothing can be done: then nothing changes."""
    return [] if iso.namespaces else confine.protect_secrets()


def grade(submission: Path | str, options: Options | None = None, *,
          folders: dict[str, Path] | None = None,
          fork_server: forkserver.ForkServer | None = None) -> Report:
    """Grade a folder of exercise modules; always returns a ``Report``.
    ``folders`` (exercise -> folder) grades those exercises from folders of
    their own instead, and ``fork_server`` is the started fork server of the
    grading they are part of, to fork their workers from (the root causes'
    second grading, ``rootcause.regrade``).

    Protects the secret folders first where workers could read them
    (``protect_secret_folders``).  Sets PyTorch to one thread in this process once a suite has imported it
    (see ``_one_thread``)."""
    options = options or Options()
    submission = Path(submission).resolve()
    names = _exercises(options)
    try:
        iso = isolation.decide(options.isolation, options.memory_mb)
    except (ValueError, isolation.IsolationUnavailable) as exc:
        raise GraderConfigError(str(exc)) from None
    # Where this keeps the solutions from the workers, none is handed to one
    # either (``rootcause.upstream_evidence``).
    secrets_kept = bool(protect_secret_folders(iso))
    remove_stale_staging_once()   # what graders killed with kill -9 left in /tmp
    report = Report(submission=str(submission), suite=options.suite, exercises=list(names),
                    seed=run_seed(options.seed), student_id=options.student_id,
                    isolation=iso.level, isolation_text=iso.text)
    plugin = GradingPlugin(submission, options, report, folders, fork_server)
    plugin.launcher = Launcher(iso, memory_mb=options.memory_mb,
                               import_timeout=options.import_timeout,
                               grading_budget_s=options.grading_budget,
                               exercise_budget_s=options.exercise_budget)
    start = time.perf_counter()
    args = _pytest_args(options, names)
    try:
        try:
            plugin.prestart(names)
            with _own_plugins_only():
                code = pytest.main(args, plugins=[plugin])
            if code not in (0, 1, 5) and not report.errors:
                report.errors.append(f"pytest stopped with exit code {int(code)}")
        except BaseException as exc:  # the report is written whatever happens
            report.errors.append(f"the grader failed: {type(exc).__name__}: {exc}")
            if isinstance(exc, KeyboardInterrupt):
                raise
        finally:
            plugin.unrecorded()
            for name, worker in plugin.workers.items():
                if worker.load_error is not None:
                    report.import_errors[name] = str(worker.load_error)
            plugin.close_workers()
        if plugin.first_test is not None:
            report.phase_seconds = {"start and collection": plugin.first_test - start,
                                    **report.phase_seconds}
        report.exercise_seconds = {e: report.exercise_seconds[e] for e in
                                   list(EXERCISES) + sorted(report.exercise_seconds)
                                   if e in report.exercise_seconds}   # course order
        began = time.perf_counter()
        try:
            # The same student's code, graded again: its gradings fork their
            # workers from this grading's fork server, which never runs a
            # student's code (its imports are not paid again, up to 3 s each).
            lent = plugin.fork_server if plugin.fork_server is not None \
                and plugin.fork_server.alive else None
            upstream = {} if secrets_kept else rootcause.upstream_evidence(
                report, plugin.called, submission, options, start, lent, grade=grade)
            if upstream:
                report.phase_seconds["root causes"] = time.perf_counter() - began
            report.deduct_each = options.deduct_each
            rootcause.uncontradicted(report, plugin.passed_checks, plugin.called)
            rootcause.attribute(report, plugin.called, upstream=upstream,
                                deduct_each=options.deduct_each)
        except Exception as exc:
            report.errors.append(f"the grader failed: {type(exc).__name__}: {exc}")
    finally:
        plugin.close()
    report.seconds = time.perf_counter() - start
    return report


@contextlib.contextmanager
def _own_plugins_only():
    """No pytest plugin installed beside the grader is loaded (xdist, say):
    the grading asks for none, and loading each one's entry point costs a
    quarter of a quick check.  (The variable, not pytest 8.4's option: any
    pytest the edition supports reads it.)"""
    saved = os.environ.get(AUTOLOAD)
    os.environ[AUTOLOAD] = "1"
    try:
        yield
    finally:
        if saved is None:
            os.environ.pop(AUTOLOAD, None)
        else:
            os.environ[AUTOLOAD] = saved


AUTOLOAD = "PYTEST_DISABLE_PLUGIN_AUTOLOAD"


def _pytest_args(options: Options, names: list[str]) -> list[str]:
    files = [str(p) for e in names for p in suite_files(e, options.suite)]
    args = ["-c", str(SUITES_DIR / "pytest.ini"), "--rootdir", str(SUITES_DIR),
            "-p", "no:cacheprovider", "-p", "no:terminal", "-p", "no:randomly",
            # Student code never runs in this process, so there is nothing for
            # these to report; each ends the session with a full gc.collect().
            "-p", "no:unraisableexception", "-p", "no:threadexception",
            "--import-mode=importlib"]
    if options.keyword:
        args += ["-k", options.keyword]
    if options.markers:
        args += ["-m", options.markers]
    return args + files


class _Collector:
    """Collects the suites without running a test, for ``maximum``."""

    def __init__(self, options: Options):
        self.options = options
        self.maxima: dict[str, float] = {}
        self.errors: list[str] = []

    def pytest_configure(self, config):
        _markers(config)

    def pytest_collection_finish(self, session):
        planned = plan(session.items, self.options)
        for item in session.items:
            mark = item.get_closest_marker("exercise")
            name = mark.args[0] if mark else "unknown"
            self.maxima[name] = self.maxima.get(name, 0.0) + planned[item.nodeid].max_score

    def pytest_collectreport(self, report):
        if report.failed:
            self.errors.append(f"could not load suite {report.nodeid}")


def maximum(options: Options | None = None) -> dict[str, float]:
    """Each exercise's maximum under these options, from ``plan``, without a
    submission: what every grading with them is out of (a batch's row that
    could not be graded carries it)."""
    options = options or Options()
    names = _exercises(options)
    collector = _Collector(options)
    with _own_plugins_only():
        pytest.main(_pytest_args(options, names) + ["--collect-only"], plugins=[collector])
    if collector.errors:
        raise RuntimeError("; ".join(collector.errors))
    return {e: round(collector.maxima.get(e, 0.0), 6) for e in names}
