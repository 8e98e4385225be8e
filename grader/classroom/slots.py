"""Grading slots: one long-lived grading process per ``batch --jobs`` slot.

A fresh ``attn-grade grade`` process per submission pays the grader's whole
start-up every time (its imports, a fork server that imports NumPy,
matplotlib and PyTorch again).  A slot is one ``attn-grade slot`` process (a
hidden command) that grades submission after submission: it reads one JSON
request per line on its standard input (the submission's path, the
``grade`` options as ``Options.argv`` gives them, the result's path), grades
it exactly as ``attn-grade grade ... --format json --out PATH`` would, and
answers one JSON line (``{"code": exit status, "error": one sentence,
"fork_servers": how many it has started}``) once the result is written.

What one submission did never reaches the next: the slot itself runs no
student code (its pytest runs the suites, the workers run the submission);
each request materializes the submission into a folder of its own; every
worker of every grading is a fresh process (a fork, in namespaces of its
own, of the slot's fork server, which never runs student code either and is
kept only while the next grading would ask for the same one:
``ForkServer.same``; or, where there is none, spawned as ``grade`` spawns it).

The batch side (``SlotPool``) starts at most one process per slot, kills a
slot whose process died or whose request ran past the submission's time
limit (with everything below it, and its workers' folders), closes one
that has graded its share (``GRADINGS_PER_SLOT``), and starts another in
its place for the next request.

Two environment variables exist for the tests only: ``ATTN_GRADE_SLOT_STARTS``
(a folder: each slot writes a file named by its pid there when it starts) and
``ATTN_GRADE_SLOT_FAULT`` (a submission whose folder has that name kills the
slot that grades it, as a grader crash would).
"""
from __future__ import annotations

import json
import os
import queue
import signal
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

from grader.sandbox.process import remove_stale_staging

STARTS_ENV = "ATTN_GRADE_SLOT_STARTS"
FAULT_ENV = "ATTN_GRADE_SLOT_FAULT"
CLOSE_TIMEOUT = 30.0     # an idle slot asked to stop: it closes its fork server, then exits
# A slot's process grows with each grading (0.7 MB a grading of A-C,
# measured over 8): after this many it is closed, and a fresh one starts.
GRADINGS_PER_SLOT = 100


class SlotFailed(Exception):
    """The slot's process died or ran out of time; the text is one sentence."""


# -- the slot process ------------------------------------------------------

class KeptForkServer:
    """The slot process's fork server, kept from one grading to the next while
    they ask for the same one (the command line's ``_begin_fork_server`` and
    ``grade`` ask it, in a slot, instead of beginning and closing one per
    grading).  Started and closed from the main thread: a fork server dies
    with the thread that started it (``ForkServer.begin``)."""

    def __init__(self) -> None:
        self.server = None
        self.ready = False  # ``start`` has returned for ``server``
        self.started = 0    # fork servers started in this slot (the tests count them)

    def _wanted(self, options):
        """The fork server a grading with ``options`` would start (not started),
        with what its first worker wants, or (None, ()) where it uses none."""
        from grader.options import exercises_of
        from grader.registry import EXERCISES, fork_server_preloads
        from grader.sandbox import bwrap, forkserver
        from grader.sandbox.launch import Launcher
        if not options.fork_server:
            return None, ()
        try:
            names = exercises_of(options)
            launcher = Launcher.here(options.isolation, memory_mb=options.memory_mb)
        except Exception:   # a bad option, isolation unavailable: the grading says why
            return None, ()
        gpu = bool(bwrap.gpu_devices())
        needs, extra = fork_server_preloads(names, gpu)
        forked = [e for e in names if not (gpu and "GPU" in EXERCISES[e].needs)]
        first = forkserver.wanted(EXERCISES[forked[0]].needs, EXERCISES[forked[0]].preload) \
            if forked else ()
        return launcher.fork_server(needs, extra, font_cache=options.font_cache), first

    def begin(self, options) -> None:
        """Keep the fork server if the grading about to begin asks for the same
        one, else close it and begin the one it asks for (its imports run
        beside the grading's own start)."""
        wanted, first = self._wanted(options)
        if wanted is None:
            return
        server = self.server
        if server is not None and server.alive and server.same(wanted):
            return
        self.close()
        self.server, self.ready = wanted, False
        self.started += 1
        wanted.begin(first)

    def lend(self, options):
        """The started fork server for a grading with ``options`` (``grade``'s
        ``fork_server``: the grading forks from it and leaves it open), or
        None: the grading then starts its own, or spawns its workers."""
        if not options.fork_server:
            return None
        self.begin(options)   # a no-op where it was begun for these options
        server = self.server
        if server is None:
            return None
        if not self.ready:    # (``start`` waits for its first message: only once)
            server.start()    # waits until it is ready; on failure ``failed`` says why
            self.ready = True
        if not server.alive:
            self.close()
            return None
        return server

    def close(self) -> None:
        if self.server is not None:
            self.server.close()
            self.server = None


def _grade_request(request: dict, command) -> tuple[int, str]:
    """One request graded by ``command`` (``attn-grade grade``'s) as the command
    line would: (exit status, the one sentence its error said, if any)."""
    import click

    submission = str(request["submission"])
    if os.environ.get(FAULT_ENV) and Path(submission).name == os.environ[FAULT_ENV]:
        os.kill(os.getpid(), signal.SIGKILL)     # the tests' grader crash
    args = [submission, *[str(a) for a in request.get("argv", [])],
            "--format", "json", "--out", str(request["out"])]
    try:
        command.main(args=args, prog_name="attn-grade grade", standalone_mode=False)
        return 0, ""
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        return code, "" if code in (0, 3) else str(exc.code or "")
    except click.ClickException as exc:
        return exc.exit_code, exc.format_message()
    except click.Abort:
        return 1, "the grading was aborted"
    except Exception as exc:   # the grader's own failure: this row is a regrade
        return 1, f"{type(exc).__name__}: {exc}"
    finally:
        sys.stdout.flush()
        sys.stderr.flush()


def serve(command, kept: KeptForkServer) -> None:
    """The ``attn-grade slot`` process: requests on standard input, graded by
    ``command`` (``attn-grade grade``), whose gradings fork from ``kept``;
    answers on standard output, one JSON line each, until standard input
    ends.  What the grading prints goes to standard error, never into the
    answers."""
    requests = os.fdopen(os.dup(0), "r", encoding="utf-8")
    answers = os.fdopen(os.dup(1), "w", encoding="utf-8", buffering=1)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)      # nothing of the grading reads the requests
    os.close(null)
    os.dup2(2, 1)         # ``grade``'s "N/M points" line is not an answer
    starts = os.environ.get(STARTS_ENV)
    if starts:
        Path(starts, str(os.getpid())).write_text("")
    for line in requests:
        if not line.strip():
            continue
        try:
            request = json.loads(line)
            code, error = _grade_request(request, command)
        except (ValueError, KeyError, TypeError) as exc:
            code, error = 2, f"a malformed request: {exc}"
        answers.write(json.dumps({"code": code, "error": error,
                                  "fork_servers": kept.started}) + "\n")


# -- the batch side --------------------------------------------------------

class Slot:
    """One ``attn-grade slot`` process and the answers read from it."""

    def __init__(self) -> None:
        self._err = tempfile.TemporaryFile()    # read only when it fails: never a full pipe
        # Its own session: killed, everything it started goes with its group.
        self.proc = subprocess.Popen([sys.executable, "-m", "grader.cli", "slot"],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=self._err, text=True, start_new_session=True)
        self._answers: queue.Queue = queue.Queue()
        self.answer: dict = {}    # the latest answer, whole
        self.graded = 0           # requests answered
        self._reader = threading.Thread(target=self._read, daemon=True,
                                        name=f"attn-grade-slot-{self.proc.pid}")
        self._reader.start()

    @property
    def pid(self) -> int:
        return self.proc.pid

    def _read(self) -> None:
        for line in self.proc.stdout:
            self._answers.put(line)
        self._answers.put(None)    # its end

    def _said(self) -> str:
        """The last line the slot wrote to its standard error."""
        if self._err.closed:
            return ""
        try:
            self._err.seek(0, os.SEEK_END)
            self._err.seek(max(0, self._err.tell() - 4000))
            lines = self._err.read().decode(errors="replace").strip().splitlines()
        except OSError:
            return ""
        return lines[-1].removeprefix("Error: ") if lines else ""

    def grade(self, submission: Path, argv: list[str], out: Path,
              timeout: float) -> tuple[int, str]:
        """(exit status, error) of ``attn-grade grade SUBMISSION ARGV --format
        json --out OUT``, graded in this slot; ``SlotFailed`` where the slot
        died or did not answer within ``timeout`` seconds."""
        request = {"submission": str(submission), "argv": list(argv), "out": str(out)}
        try:
            self.proc.stdin.write(json.dumps(request) + "\n")
            self.proc.stdin.flush()
        except (BrokenPipeError, OSError):
            pass            # it is gone: the answer says so
        try:
            line = self._answers.get(timeout=timeout)
        except queue.Empty:
            raise SlotFailed(f"grading took longer than {timeout:g} s and was stopped") from None
        if line is None:
            code = self.proc.wait()
            said = self._said()
            raise SlotFailed(said if said and code != -signal.SIGKILL else
                             f"the grader exited with {code}")
        self.answer = json.loads(line)
        self.graded += 1
        return int(self.answer["code"]), str(self.answer.get("error", ""))

    def kill(self) -> None:
        """Kill it with everything below it; its workers' folders go too."""
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        self.proc.wait()
        # Killed, it could not remove its fork server's and workers' folders.
        remove_stale_staging(pid=self.proc.pid)
        self._finish()

    def close(self) -> None:
        """Ask it to stop (the end of its input), and kill it if it does not."""
        try:
            self.proc.stdin.close()
        except OSError:
            pass
        try:
            self.proc.wait(timeout=CLOSE_TIMEOUT)
        except subprocess.TimeoutExpired:
            self.kill()
            return
        remove_stale_staging(pid=self.proc.pid)
        self._finish()

    def _finish(self) -> None:
        for stream in (self.proc.stdin, self.proc.stdout, self._err):
            try:
                stream.close()
            except OSError:
                pass


class SlotPool:
    """At most ``size`` slots, each started when first needed and reused by
    the next request; one that failed is killed, and one that has graded
    ``gradings_per_slot`` submissions closed: another starts in its place when
    a request next needs one."""

    def __init__(self, size: int, gradings_per_slot: int = GRADINGS_PER_SLOT) -> None:
        self.size = max(1, size)
        self.gradings_per_slot = gradings_per_slot
        self.started = 0
        self._free = threading.BoundedSemaphore(self.size)
        self._idle: list[Slot] = []
        self._live: set[Slot] = set()
        self._lock = threading.Lock()
        self._stopped = False

    def acquire(self) -> Slot:
        """An idle slot, or a new one; ``SlotFailed`` once the pool is stopped."""
        if self._stopped:
            raise SlotFailed("the batch was stopped before it was graded")
        self._free.acquire()
        with self._lock:
            if self._stopped:
                self._free.release()
                raise SlotFailed("the batch was stopped before it was graded")
            if self._idle:
                return self._idle.pop()
            self.started += 1
        try:
            slot = Slot()
        except BaseException:
            self._free.release()
            raise
        with self._lock:
            self._live.add(slot)
        return slot

    def release(self, slot: Slot) -> None:
        """Back to the pool, or, after ``gradings_per_slot`` gradings, closed."""
        if slot.graded >= self.gradings_per_slot:
            with self._lock:
                self._live.discard(slot)
            try:
                slot.close()
            finally:
                self._free.release()
            return
        with self._lock:
            self._idle.append(slot)
        self._free.release()

    def discard(self, slot: Slot) -> None:
        """A slot that failed: killed, never handed out again."""
        try:
            slot.kill()
        finally:
            with self._lock:
                self._live.discard(slot)
            self._free.release()

    def close(self) -> None:
        with self._lock:
            live, self._live, self._idle = list(self._live), set(), []
        for slot in live:
            slot.close()

    def stop(self) -> None:
        """Kill every slot now, busy or idle (the batch was interrupted): the
        gradings under way end with ``SlotFailed``, and no slot starts again."""
        with self._lock:
            self._stopped = True
            live = list(self._live)
        for slot in live:
            slot.kill()

    def __enter__(self) -> "SlotPool":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
