"""The one way to make a process that runs student code.

A ``Launcher`` is made once per grading from the isolation this machine
gives (``isolation.decide``), and every worker of that grading comes from
it: each exercise's worker, ex07's compile worker and speed worker, the
trusted worker that runs the reference kernel, and the fork server that forks
them.  So no worker can be weaker than the grading's isolation: no caller
passes sandbox settings, only what the worker is for (its module, its time
limit per call, its environment, whether it is the trusted reference side or
must not write its copy of the submission).  ``tests/test_launch.py`` fails
when code anywhere else constructs a worker or a fork server.

It also holds the grading's time budgets: each exercise's (the time its
workers spend starting and answering, the compile and speed workers' too)
and the whole grading's (wall clock from its start).  Once one is spent, every further call it covers fails at once
with one sentence, and the grading still writes its result.
"""
from __future__ import annotations

from pathlib import Path

from grader.sandbox import confine, isolation, forkserver, process
from grader.sandbox.client import Budget, Confinement, Limits, Worker

# Seconds of wall clock, by default: an exercise's workers together
# (``Exercise.budget_s`` where an exercise needs more), and a whole grading.
# The reference grades in about a minute on 2 busy cores; a submission that
# hangs or crashes in every call is cut off within these.
EXERCISE_BUDGET_S = 300.0
GRADING_BUDGET_S = 1800.0


class Launcher:
    def __init__(self, iso: isolation.Isolation, *, memory_mb: int = 8192,
                 import_timeout: float = 60.0, grading_budget_s: float | None = GRADING_BUDGET_S,
                 exercise_budget_s: float | None = None):
        self.isolation = iso
        self.confinement = Confinement(namespaces=iso.namespaces, own_uids=True)
        self.memory_bytes = memory_mb << 20
        self.import_timeout = import_timeout
        self.grading_budget = Budget(grading_budget_s, "this grading", "--grading-budget",
                                     deadline=True)
        self.exercise_budget_s = exercise_budget_s
        self._budgets: dict[str, Budget] = {}
        process.become_subreaper()

    @classmethod
    def here(cls, mode: str = "auto", *, memory_mb: int = 8192, **kwargs) -> "Launcher":
        """A launcher with the isolation this machine gives in ``mode``
        (``auto``, ``strict`` or ``fallback``)."""
        return cls(isolation.decide(mode, memory_mb), memory_mb=memory_mb, **kwargs)

    @property
    def namespaces(self) -> bool:
        return self.confinement.namespaces

    def budget(self, exercise: str, default_s: float | None = EXERCISE_BUDGET_S) -> Budget:
        """The exercise's budget (made the first time it is asked for)."""
        if exercise not in self._budgets:
            seconds = self.exercise_budget_s if self.exercise_budget_s is not None else default_s
            self._budgets[exercise] = Budget(seconds, exercise, "--exercise-budget")
        return self._budgets[exercise]

    def worker(self, submission: Path, module: str, *, call_timeout: float,
               env=None, exercise: str | None = None, trusted: bool = False,
               locked: bool = False, fork_from=None, fork_wants=None) -> Worker:
        """A worker running ``module`` of ``submission``, confined as every
        worker of this grading is.  ``exercise``: whose budget it draws on
        (the grading's always); ``trusted``: the reference side (the
        runtime's own module, its kernels visible, the grading user kept);
        ``locked``: its copy of the submission is read-only to it;
        ``fork_from``: this grading's fork server, to fork it from, once it
        has imported ``fork_wants`` of its preloads (all of them: None)."""
        limits = Limits(call_timeout=call_timeout, import_timeout=self.import_timeout,
                        memory_bytes=self.memory_bytes, env=env if env is not None else {})
        budgets = (self.grading_budget,) if exercise is None else \
            (self.budget(exercise), self.grading_budget)
        return Worker(submission, module, limits, self.confinement, trusted=trusted,
                      locked=locked, fork_server=fork_from, fork_wants=fork_wants,
                      budgets=budgets)

    def binder(self, submission: Path, exercise: str | None = None, fork_from=None,
               fork_wants=None):
        """``launch(module, call_timeout=..., env=None, trusted=False,
        locked=False)`` for ``submission``: the suites' ``launch_worker``.
        ``fork_from``: the grading's fork server for the exercise, which
        forks its student workers (a trusted one is always spawned)."""
        def launch(module: str, *, call_timeout: float, env=None, trusted: bool = False,
                   locked: bool = False) -> Worker:
            return self.worker(submission, module, call_timeout=call_timeout, env=env,
                               exercise=exercise, trusted=trusted, locked=locked,
                               fork_from=fork_from, fork_wants=fork_wants)
        return launch

    def fork_server(self, needs: set[str], extra: tuple[str, ...] = (), *,
                    font_cache: Path | None = None) -> "forkserver.ForkServer | None":
        """A fork server for a grading whose exercises need ``needs``, or None
        where none is used: not on this platform, nothing to preload (no
        library of ``forkserver.PRELOAD`` and no ``extra``: exercise A's
        matplotlib is worth one too), or namespaces without root (a forked
        worker's own namespaces need root there; each worker is then spawned
        in a sandbox of its own).
        ``extra``: what their tests import besides (``Exercise.preload``),
        preloaded too where there is a fork server.  ``font_cache``: where
        `check` keeps matplotlib's font list (``fonts``)."""
        if not forkserver.supported() or not (needs & set(forkserver.PRELOAD) or extra):
            return None
        if self.namespaces and not confine.is_root():
            return None
        server = forkserver.ForkServer(needs, namespaces=self.namespaces,
                                       memory_bytes=self.memory_bytes, extra=extra,
                                       font_cache=font_cache)
        return _take_begun(server) or server


# A fork server begun before its grading (``begin_fork_server``), until the
# grading's ``Launcher.fork_server`` takes it.
_begun: list[forkserver.ForkServer] = []


def begin_fork_server(mode: str, memory_mb: int, needs: set[str], extra: tuple[str, ...],
                      first: tuple[str, ...], *, font_cache: Path | None = None) -> None:
    """Spawn, now, the fork server that a grading about to begin in this
    process will ask for (``Launcher.fork_server`` with the same arguments),
    importing ``first`` (what its first worker will want) at once: the
    command line calls it before it imports the grader's core, so that those
    imports run beside the grading process's own start instead of after it.
    Only under namespaces: there the secret folders need no protecting before
    anything starts (``grader.core.protect_secret_folders``), and nothing of
    this machine's is visible to it.  It is the same fork server, confined
    the same way, that the grading would have started: a grading whose
    arguments differ closes it and starts its own, and ``drop_begun`` closes
    one that no grading took.  Call it from the main thread (``ForkServer.begin``)."""
    drop_begun()
    try:
        iso = isolation.decide(mode, memory_mb)
        if not iso.namespaces:
            return
        server = Launcher(iso, memory_mb=memory_mb).fork_server(needs, extra,
                                                                font_cache=font_cache)
        if server is not None:
            _begun.append(server)
            server.begin(first)
    except Exception:   # a head start, never a condition: the grading decides and says why
        drop_begun()


def _take_begun(wanted: forkserver.ForkServer) -> forkserver.ForkServer | None:
    while _begun:
        server = _begun.pop()
        if server.same(wanted) and server.failed is None:
            return server
        server.close()
    return None


def drop_begun() -> None:
    """Close a fork server begun early that no grading took."""
    while _begun:
        _begun.pop().close()
