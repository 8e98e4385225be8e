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
``artifacts_dir``, ``check_cache_dir``, ``for_staff``, ``submission_dir`` and
``launch_worker``: what a few suites need of the run.
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
    suite that wants them measured before its first test says
    ``pytest.mark.usefixtures("machine_peaks")``."""
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


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(session, config, items):
    """Where G's compile check runs in the background (``compile_early``),
    the exercises that time the submission (``TIMED``) run last, once it has
    ended: nothing of the grading runs beside their measurements; and the
    compile check's own test, which waits for its answer, runs just before
    them, so that every other test runs while it compiles.  The report keeps
    the course order, each exercise's tests as collected
    (``GradingPlugin.unrecorded``)."""
    if _compiles_early(session):
        items.sort(key=lambda item: (_exercise_of(item) in TIMED,
                                     item.name == COMPILE_TEST_NAME))   # stable: in order


def pytest_runtest_setup(item):
    """A timed exercise's test waits for the background compile to end
    (`check`'s is ended once its answer is ready: ``CompileEarly.quiet``)."""
    if _exercise_of(item) in TIMED:
        from grader.reference import flash_judge
        flash_judge.wait_early(_plugin(item.config).folder(COMPILE_EXERCISE))


@pytest.fixture(scope="session", autouse=True)
def compile_early(request):
    """Exercise G's compile check (``flash_judge.compile_results``), begun in
    the background before the first test when the grading runs it, so that
    its compiling overlaps the other exercises' tests: the same probes in
    workers from the same ``launch_worker``, its test takes the answer up
    (`check`'s once its first launches are compiled: ``CompileEarly``).
    Before it begins, the machine's peaks are measured where a test may read
    them (``machine``), so that nothing runs beside that measurement either,
    and the workers ``prestart`` began have started."""
    plugin = _plugin(request.config)
    if not _compiles_early(request.session):
        yield
        return
    from grader.reference import flash_judge   # PyTorch: only where G is checked

    plugin.wait_started()
    if any({"machine", "machine_peaks"} & set(getattr(item, "fixturenames", ()))
           for item in request.session.items):
        from grader.sandbox.runtime import measure
        try:
            measure.grading_peaks(plugin.report.machine, measure.default_device())
        except Exception:  # noqa: BLE001 - measured again by the first test that asks
            pass
    submission = plugin.folder(COMPILE_EXERCISE)
    flash_judge.compile_early(submission, plugin.binder(COMPILE_EXERCISE),
                              plugin.options.check_cache)
    try:
        yield
    finally:
        early = flash_judge.forget_early(submission)
        if early is not None:
            plugin.report.phase_seconds[EARLY_PHASE] = early.seconds
