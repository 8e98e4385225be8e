"""The zygote: one process per grading that imports the heavy libraries once
and forks a worker for each exercise (and each restart) of that grading.

Importing PyTorch takes a worker one to three seconds, and a grading starts
one worker per exercise, again after every time-out or crash: the zygote pays
it once.  It holds no student code, ever: it imports only the libraries named
in its configuration, then waits on its control socket (its stdin, a Unix
``SOCK_SEQPACKET`` socket) for requests from the grading process:

* ``{"op": "fork", "id": n, "cfg": {...}}`` with three file descriptors (the
  worker's stdin, stdout and stderr, made by the grading process): fork; the
  child makes them its 0, 1 and 2, closes every other descriptor (the control
  socket first), starts its own session and runs ``worker.serve(cfg)``, which
  switches to the worker's own uid and asks to be killed with the zygote.
  The answer is ``{"forked": n, "pid": pid}`` (its pid as seen here).
* A child's end is told as ``{"exited": pid, "code": c}`` (negative: killed
  by that signal).

The grading process owns everything else: the child's memory cgroup, its time
limits and killing it.  When the control socket closes, the zygote exits, and
its children are killed with it (their parent-death signal; under
bubblewrap the whole PID namespace goes too).  Started as
``worker.py`` with ``{"zygote": {...}}`` as its configuration.  Linux only.
"""
from __future__ import annotations

import importlib
import json
import os
import select
import signal
import socket
import sys

MAX_FDS = 3


def _send(sock: socket.socket, message: dict) -> None:
    try:
        sock.send(json.dumps(message).encode())
    except OSError:  # the grading process is gone: so are we, shortly
        pass


def _reap(sock: socket.socket) -> None:
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        _send(sock, {"exited": pid, "code": os.waitstatus_to_exitcode(status)})


def _child(fds: list[int], cfg: dict, serve) -> None:
    """In the forked child: become a worker, on the grading process's pipes."""
    try:
        os.setsid()
        for target, fd in enumerate(fds):
            os.dup2(fd, target)   # over fd 0 first: the control socket is gone
        os.closerange(MAX_FDS, os.sysconf("SC_OPEN_MAX") if hasattr(os, "sysconf") else 4096)
        for sig in (signal.SIGCHLD, signal.SIGPIPE, signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, signal.SIG_DFL)
        serve(dict(cfg, forked=True))
    except BaseException:  # nothing of the zygote's must run on in a child
        os._exit(71)
    os._exit(0)


def run(cfg: dict, serve) -> None:
    """The zygote's loop; ``serve`` is the worker's request loop."""
    for key, value in cfg.get("env", {}).items():
        os.environ[key] = str(value)
    for name in cfg.get("preload", []):
        try:
            importlib.import_module(name)
        except Exception:   # a library that is not installed: the worker says so later
            pass
    sock = socket.socket(fileno=os.dup(0))
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.close(devnull)
    _send(sock, {"ready": os.getpid(), "preloaded": [m for m in cfg.get("preload", [])
                                                      if m in sys.modules]})
    while True:
        _reap(sock)
        if not select.select([sock], [], [], 0.05)[0]:
            continue
        try:
            data, fds, _flags, _addr = socket.recv_fds(sock, 1 << 20, MAX_FDS)
        except OSError:
            return
        if not data:
            return   # the grading process closed its end
        try:
            req = json.loads(data)
        except ValueError:
            req = {}
        if req.get("op") != "fork" or len(fds) != MAX_FDS:
            for fd in fds:
                os.close(fd)
            continue
        pid = os.fork()
        if pid == 0:
            sock.close()
            _child(fds, req.get("cfg", {}), serve)
        for fd in fds:
            os.close(fd)
        _send(sock, {"forked": req.get("id"), "pid": pid})
