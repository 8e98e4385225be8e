"""Fixtures for the grading suites: everything a suite needs of the grading
run, so that no suite reaches into the plugin (``grader.core``) or pytest's
configuration itself.

``student``: the submission's module for the test's exercise (declared on
the suite module with ``pytestmark = [pytest.mark.exercise("ex02_mha")]``),
run in a sandboxed worker.  ``machine``: facts about the grading machine
measured once per run and shown at the top of the report;
``machine_peaks``: its measured peaks (kept there).  ``run_seed``
(automatic): the run's secret seed, from which every random hidden case is
drawn (``grader.reference.cases``).  ``roster_student_id``,
``artifacts_dir``, ``check_cache_dir``, ``compile_cache_dir``, ``for_staff``, ``self_check``,
``submission_dir`` and ``launch_worker``: what a few suites need of the run.
"""
from __future__ import annotations

from pathlib import Path

import pytest

from grader.core import PLUGIN_KEY
from grader.reference import cases

# Exercise G's compile check (``flash_judge.compile_results``), named here so
# that a check without G never imports flash_judge (PyTorch)
COMPILE_EXERCISE = "ex07_flash_attention"
COMPILE_TEST_NAME = "test_kernel_compiles_for_sm80_and_sm90"
# The exercises whose tests time the submission (against a reference measured
# in the same run) or the machine: nothing of the grading runs beside them.
TIMED = ("ex04_quadratic", "ex05_decode_prefill")
EARLY_PHASE = "ex07 compile, in the background"   # Report.phase_seconds' key


def _plugin(config):
    plugin = config.stash.get(PLUGIN_KEY, None)
    if plugin is None:
        pytest.exit("the grading suites run through `attn-grade`, not plain pytest", 2)
    return plugin


@pytest.fixture
def student(request):
    mark = request.node.get_closest_marker("exercise")
    if mark is None:
        raise RuntimeError(f"{request.node.nodeid}: the suite declares no exercise marker")
    timeout = request.node.get_closest_marker("timeout_s")
    return _plugin(request.config).student(mark.args[0],
                                           timeout.args[0] if timeout else None)


@pytest.fixture(scope="session")
def machine(request):
    """A dict shown at the top of the report; suites add measured facts."""
    return _plugin(request.config).report.machine


@pytest.fixture
def machine_peaks(machine):
    """The grading machine's peaks (``grader.sandbox.runtime.measure.Peaks``),
    measured the first time a test asks and then kept in ``machine`` (top of
    the report); a suite that measures them again stores them there too.  A
    test that reads them asks for this fixture (or says
    ``pytest.mark.usefixtures("machine_peaks")`` to show them at the top),
    never ``measure.grading_peaks`` itself: such a test runs with nothing of
    the grading beside it (``_quiet``)."""
    # here: it imports PyTorch, which NumPy suites never need
    from grader.sandbox.runtime import measure

    return measure.grading_peaks(machine, measure.default_device())


@pytest.fixture(scope="session")
def roster_student_id(request) -> str | None:
    """Exercise A's identifier for this submission from the course roster
    (``attn-grade batch --roster``), or None."""
    return _plugin(request.config).options.student_id


@pytest.fixture(scope="session")
def artifacts_dir(request) -> Path | None:
    """The grader-owned folder for files made for the student (``--artifacts``,
    ``Options.artifacts_dir``), or None: never the submission's folder."""
    folder = _plugin(request.config).options.artifacts_dir
    return Path(folder) if folder else None


@pytest.fixture(scope="session")
def self_check(request) -> bool:
    """Whether this run is a student's self-check (the public suites alone,
    as `attn-grade check` runs them) rather than a grade: a measurement a
    busy machine distorts is judged against the machine's own control when
    graded, while a student checking is told to close other programs and
    run it again."""
    return _plugin(request.config).options.suite == "public"


@pytest.fixture
def for_staff(request):
    """``for_staff(entry)`` keeps a free-text answer for staff grading
    (``Report.manual``): a dict with exercise, question, points (the staff's),
    answer and rubric."""
    return _plugin(request.config).report.manual.append


@pytest.fixture(scope="session")
def check_cache_dir(request) -> Path | None:
    """``attn-grade check``'s cache on the student's machine, for answers that
    depend only on the files (ex07's compile check); None when grading."""
    folder = _plugin(request.config).options.check_cache
    return Path(folder) if folder else None


@pytest.fixture(scope="session")
def compile_cache_dir(request) -> Path | None:
    """The grading run's shared cache of ex07's GPU compiles
    (``Options.compile_cache``: beside a class's gradebook, or `grade`'s
    ``--compile-cache``), or None (`check` keeps its own; a grading without one)."""
    folder = _plugin(request.config).options.compile_cache
    return Path(folder) if folder else None


@pytest.fixture
def submission_dir(request) -> Path:
    """The folder the test's exercise is graded from, for a worker a suite
    starts itself (never to be read or imported in the grading process)."""
    mark = request.node.get_closest_marker("exercise")
    plugin = _plugin(request.config)
    return plugin.folder(mark.args[0]) if mark else plugin.submission


@pytest.fixture
def launch_worker(request):
    """``launch_worker(module, call_timeout=..., env=None, trusted=False,
    locked=False)``: another worker for the test's exercise (ex07's compile
    and speed workers, the reference's trusted worker), confined as every
    worker of this grading is and drawing on the exercise's time budget
    (``grader.sandbox.launch``).  A suite never builds a worker itself."""
    mark = request.node.get_closest_marker("exercise")
    if mark is None:
        raise RuntimeError(f"{request.node.nodeid}: the suite declares no exercise marker")
    return _plugin(request.config).binder(mark.args[0])


@pytest.fixture(scope="session", autouse=True)
def run_seed(request):
    """The seed of this grading's random cases (recorded in the report)."""
    seed = _plugin(request.config).report.seed
    with cases.run_seed(cases.DEFAULT_SEED if seed is None else seed) as value:
        yield value


def _compiles_early(session) -> bool:
    """Will this grading run exercise G's compile check (its test selected,
    not skipped for want of Triton, the module there)?"""
    plugin = session.config.stash.get(PLUGIN_KEY, None)
    if plugin is None:
        return False
    if not (plugin.folder(COMPILE_EXERCISE) / f"{COMPILE_EXERCISE}.py").is_file():
        return False
    return any(item.name == COMPILE_TEST_NAME and not any(
        mark.args and mark.args[0] is True for mark in item.iter_markers("skipif"))
        for item in session.items)


def _exercise_of(item) -> str | None:
    mark = item.get_closest_marker("exercise")
    return mark.args[0] if mark else None


def _quiet(item) -> bool:
    """Does this test measure with nothing beside it: an exercise that times
    the submission (``TIMED``), or a test that reads the machine's peaks
    (measured by the first that asks: ``machine_peaks``)?"""
    return _exercise_of(item) in TIMED or "machine_peaks" in getattr(item, "fixturenames", ())


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(session, config, items):
    """Where G's compile check runs in the background (``compile_early``),
    the tests that measure (``_quiet``) run last, once it has ended: nothing
    of the grading runs beside their measurements, the machine's peaks
    among them; and the compile check's own test, which waits for its
    answer, runs just before them, so that every other test runs while it
    compiles.  The report keeps the course order, each exercise's tests as
    collected (``GradingPlugin.unrecorded``)."""
    if _compiles_early(session):
        items.sort(key=lambda item: (_quiet(item),
                                     item.name == COMPILE_TEST_NAME))   # stable: in order


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item):
    """A test that measures (``_quiet``) waits, before its fixtures measure
    anything, until nothing else of the grading runs: every worker
    ``prestart`` began has started, and the background compile has ended
    (`check`'s is ended once its answer is ready: ``CompileEarly.quiet``)."""
    if _quiet(item):
        from grader.reference import flash_judge   # PyTorch: a quiet test's suite has it
        plugin = _plugin(item.config)
        plugin.wait_started()
        flash_judge.wait_early(plugin.folder(COMPILE_EXERCISE))


@pytest.fixture(scope="session", autouse=True)
def compile_early(request):
    """Exercise G's compile check (``flash_judge.compile_results``), begun in
    the background before the first test when the grading runs it, so that
    its compiling overlaps the other exercises' tests: the same probes in
    workers from the same ``launch_worker``, its test takes the answer up
    (`check`'s once its first launches are compiled: ``CompileEarly``).  It
    begins once the fork server is up, beside the other workers' starts;
    what measures, the machine's peaks among it, runs after it has ended
    (``pytest_collection_modifyitems``)."""
    plugin = _plugin(request.config)
    if not _compiles_early(request.session):
        yield
        return
    from grader.reference import flash_judge   # PyTorch: only where G is checked

    plugin.wait_serving()   # its workers forked, beside the other workers' starts
    submission = plugin.folder(COMPILE_EXERCISE)
    flash_judge.compile_early(submission, plugin.binder(COMPILE_EXERCISE),
                              plugin.options.check_cache, plugin.options.compile_cache)
    try:
        yield
    finally:
        early = flash_judge.forget_early(submission)
        if early is not None:
            plugin.report.phase_seconds[EARLY_PHASE] = early.seconds
