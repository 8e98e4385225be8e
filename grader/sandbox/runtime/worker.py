"""The worker: the only process that imports and runs a student's code.

Started by ``grader.sandbox.client.Worker`` as ``python -I worker.py CONFIG``
from a private directory holding a copy of the submission's modules; this
file lies in the worker runtime's folder, used as it is (bound read-only at
``/sandbox/runtime`` under namespaces, a whole copy of the folder without
them).  It loads that folder as the package ``runtime`` (its folder's name)
before the submission is on ``sys.path``, so a student's module cannot stand
in for ``runtime.codec`` or a probe.  It reads framed requests on a private
copy of stdin, answers on a private copy of stdout, and points the real
stdin/stdout at /dev/null and stderr, so a student's ``print`` or ``input``
cannot touch the protocol.

Requests (dicts): ``load`` (import a module: the student's, or for a trusted
worker one of the runtime's own, ``runtime.kernels.flash``), ``getattr`` (a
constant, or a note that the attribute is callable), ``call`` (a function of
the loaded module), ``probe`` (a trusted function of ``runtime.probes.<pkg>``
run on the loaded module).  Answers: ``{"ok": value}``, ``{"raised":
Raised}`` or ``{"bad_value": text}``.  Must not import the ``grader``
package.  With ``drop_to`` in its configuration it switches to that user
first.
"""
from __future__ import annotations

import importlib
import importlib.util
import json
import os
import sys
import traceback

MAX_TEXT = 4000


def _private_channels():
    req = os.fdopen(os.dup(0), "rb", buffering=0)
    resp = os.fdopen(os.dup(1), "wb", buffering=0)
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.dup2(2, 1)  # student prints land on stderr, which the grader caps
    os.close(devnull)
    return req, resp


def _close_channels(*channels) -> None:
    for channel in channels:
        try:
            os.close(channel.fileno())
        except OSError:
            pass


def _apply_limits(cfg: dict) -> None:
    try:
        import resource
    except ImportError:  # pragma: no cover - not on POSIX
        return
    for name, value in cfg.get("rlimits", {}).items():
        which = getattr(resource, name, None)
        if which is None or value is None:
            continue
        soft, hard = resource.getrlimit(which)
        value = int(value)
        if hard != resource.RLIM_INFINITY:
            value = min(value, hard)
        try:
            resource.setrlimit(which, (value, value))
        except (ValueError, OSError):
            pass


def _drop_to(uid) -> None:
    """Become the worker's own unprivileged user before any request is read.

    Under bubblewrap as root the worker starts as root with only the setuid
    and setgid capabilities (no user namespace could map another uid); they
    go with the switch, and no-new-privileges keeps them gone."""
    if uid is None:
        return
    uid = int(uid)
    os.setgroups([])
    os.setresgid(uid, uid, uid)
    os.setresuid(uid, uid, uid)
    if os.getuid() != uid or os.geteuid() != uid:  # pragma: no cover - refuse to go on
        os._exit(70)


def _where(exc: BaseException, tb_exc: traceback.TracebackException, root: str) -> str:
    """The last frame inside the submission, as 'file, line N, in fn'."""
    if isinstance(exc, SyntaxError):
        return f"{os.path.basename(exc.filename or '?')}, line {exc.lineno}"
    frames = tb_exc.stack
    if not frames:
        return ""
    f = frames[-1]
    return f"{os.path.basename(f.filename)}, line {f.lineno}, in {f.name}"


def _raised(codec, exc: BaseException, root: str):
    tb = traceback.TracebackException.from_exception(exc, limit=30)
    # Only the submission's own frames: the runtime's are noise to a student.
    tb.stack = traceback.StackSummary.from_list(
        [f for f in tb.stack if os.path.abspath(f.filename).startswith(root)])
    text = "".join(tb.format())
    try:
        message = str(exc)
    except BaseException:  # a hostile __str__
        message = "<unprintable exception>"
    bases = [c.__name__ for c in type(exc).__mro__]
    return codec.Raised(type(exc).__name__, message[:MAX_TEXT], _where(exc, tb, root),
                        text[-MAX_TEXT:], bases)


def _runtime_package() -> str:
    """The name this folder is imported as, importing it first when this file
    runs as a script: the package named after the folder, loaded from where
    it lies (nothing is put on ``sys.path`` for it)."""
    if __package__:  # imported as a module of the package (the grader's tests)
        return __package__
    folder = os.path.dirname(os.path.abspath(__file__))
    name = os.path.basename(folder)
    spec = importlib.util.spec_from_file_location(
        name, os.path.join(folder, "__init__.py"), submodule_search_locations=[folder])
    package = importlib.util.module_from_spec(spec)
    sys.modules[name] = package
    spec.loader.exec_module(package)
    return name


class Session:
    def __init__(self, codec, root: str, package: str):
        self.codec, self.root, self.package = codec, root, package
        self.module = None

    def resolve(self, ref: str):
        kind, _, name = ref.partition(":")
        if kind == "student":
            if self.module is None:
                raise RuntimeError("no module is loaded")
            return getattr(self.module, name)
        if kind == "probe":
            pkg, _, fn = name.rpartition(".")
            probes = f"{self.package}.probes"
            return getattr(importlib.import_module(f"{probes}.{pkg}" if pkg else probes), fn)
        raise ValueError(f"unknown function reference {ref!r}")

    def materialize(self, value):
        """Turn ``Func`` markers in the arguments into real callables."""
        Func = self.codec.Func
        if isinstance(value, Func):
            fn = self.resolve(value.ref)
            args = self.materialize(list(value.args))
            kwargs = self.materialize(dict(value.kwargs))
            if not args and not kwargs:
                return fn
            return lambda *a, **k: fn(*args, *a, **{**kwargs, **k})
        if isinstance(value, list):
            return [self.materialize(v) for v in value]
        if isinstance(value, tuple):
            return tuple(self.materialize(v) for v in value)
        if isinstance(value, dict):
            return {k: self.materialize(v) for k, v in value.items()}
        return value

    def handle(self, req: dict):
        op = req["op"]
        if op == "load":
            self.module = importlib.import_module(req["module"])
            return None
        if op == "getattr":
            value = getattr(self.module, req["name"])
            if callable(value) and not isinstance(value, type):
                return {"$callable": True}
            return value
        if op == "call":
            fn = getattr(self.module, req["name"])
            return fn(*self.materialize(req["args"]), **self.materialize(req["kwargs"]))
        if op == "probe":
            fn = self.resolve("probe:" + req["name"])
            return fn(self.module, *self.materialize(req["args"]),
                      **self.materialize(req["kwargs"]))
        raise ValueError(f"unknown request {op!r}")


def _die_with_parent() -> None:
    """SIGKILL when the parent (the fork server) dies; set after the uid switch,
    which clears it.  Linux only; elsewhere there is no fork server."""
    import ctypes
    import signal
    parent = os.getppid()
    ctypes.CDLL(None, use_errno=True).prctl(1, int(signal.SIGKILL))  # PR_SET_PDEATHSIG
    if os.getppid() != parent:  # pragma: no cover - it died before the call
        os._exit(70)


def main() -> None:
    cfg = json.loads(sys.argv[1]) if len(sys.argv) > 1 else {}
    if "fork_server" in cfg:  # the grading's fork server: forks workers that run serve()
        package = _runtime_package()
        importlib.import_module(f"{package}.fork_server_loop").run(cfg["fork_server"], serve)
        return
    serve(cfg)


def serve(cfg: dict) -> None:
    """The request loop, on stdin and stdout; ``main`` for a worker started as
    a script, and what a fork server's child runs (``fork_server_loop.py``) after its fork."""
    req_ch, resp_ch = _private_channels()
    _drop_to(cfg.get("drop_to"))
    if cfg.get("forked"):
        _die_with_parent()
    if cfg.get("cwd"):  # the submission's folder is its user's alone: entered as that user
        os.chdir(cfg["cwd"])
    root = os.path.abspath(os.getcwd())
    for key, value in cfg.get("env", {}).items():
        os.environ[key] = str(value)  # e.g. TRITON_INTERPRET before any import
    # The runtime first, then the submission: python -I puts neither the
    # script's folder nor the cwd on sys.path.  A trusted worker runs the
    # runtime's own module: no folder of the submission's is on its path.
    package = _runtime_package()
    codec = importlib.import_module(f"{package}.codec")
    front = [] if cfg.get("trusted") else [root]
    sys.path[:] = front + [p for p in sys.path if p not in (root, "")]

    _apply_limits(cfg)  # after the switch: RLIMIT_NPROC counts the worker's uid
    session = Session(codec, root, package)
    # A process the student's code forks is not this worker: it never reads a
    # request or writes an answer (two readers of one channel would take each
    # other's requests and answers); one that returns into this loop ends.
    own = os.getpid()
    os.register_at_fork(after_in_child=lambda: _close_channels(req_ch, resp_ch))
    max_request = int(cfg.get("max_request_bytes", 1 << 31))

    def read_exact(n: int) -> bytes:
        chunks, got = [], 0
        while got < n:
            chunk = req_ch.read(n - got)
            if not chunk:
                raise EOFError
            chunks.append(chunk)
            got += len(chunk)
        return b"".join(chunks)

    while True:
        try:
            req = codec.read_message(read_exact, max_request)
        except EOFError:
            return
        try:
            answer = {"ok": session.handle(req)}
        except BaseException as exc:  # SystemExit and KeyboardInterrupt too
            answer = {"raised": _raised(codec, exc, root)}
        if os.getpid() != own:
            os._exit(0)
        try:
            data = codec.pack(answer)
        except BaseException as exc:
            data = codec.pack({"bad_value": str(exc)[:MAX_TEXT]})
        resp_ch.write(data)


if __name__ == "__main__":
    main()
