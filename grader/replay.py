"""Record and replay the secret references, for the student edition.

The public suites compare a student's answers with the ``grader.reference.secret``
modules, which are as good as solutions and stay out of the student edition:
every module in that folder is secret because of where it is, not because a
list names it.
At release time the public suites are run on the solutions with every
function of those modules wrapped by a recorder: each call's arguments are
digested and its result stored (as plain data, ``codec.pack``).  In the
student edition, ``grader/reference/secret/<module>.py`` is a small replay module:
its functions look their answer up by the same digest.  A call that was
never recorded (one made only for a wrong answer, or on data measured on the
student's machine) skips its test with a message: the hidden grade still
runs it.
"""
from __future__ import annotations

import functools
import hashlib
import importlib
import inspect
import json
import sys
from pathlib import Path

import numpy as np

from grader.paths import SECRET_REFERENCE_DIR
from grader.sandbox.runtime import codec

SECRET_PACKAGE = "grader.reference.secret"


def secret_modules(folder: Path = SECRET_REFERENCE_DIR) -> tuple[str, ...]:
    """The short names of the secret reference modules: every module in the
    secret folder (an author adds one by putting it there, nothing else)."""
    return tuple(sorted(p.stem for p in folder.glob("*.py") if p.stem != "__init__"))


SECRET_MODULES = secret_modules()
# Module constants computed where the edition runs, never recorded.
LIVE_CONSTANTS = {
    "flash": {"HAS_TRITON": "__import__('importlib').util.find_spec('triton') is not None"},
}
RECORD_FILE = "recorded.bin"


class NotRecorded(LookupError):
    pass


def _canonical(value, depth=0):
    """A JSON-able, deterministic stand-in for an argument."""
    if depth > 20:
        raise NotRecorded("arguments nested too deeply")
    if callable(value) and hasattr(value, "__qualname__") and not isinstance(value, type):
        target = getattr(value, "__wrapped__", value)
        module = getattr(target, "__module__", "?").rsplit(".", 1)[-1]
        return {"$fn": f"{module}.{target.__qualname__}"}
    if isinstance(value, np.random.Generator):
        raise NotRecorded("a random generator is not a recordable argument")
    if isinstance(value, (list, tuple)):
        return {"$seq": type(value).__name__, "items": [_canonical(v, depth + 1) for v in value]}
    if isinstance(value, dict):
        return {"$map": sorted([str(k), _canonical(v, depth + 1)] for k, v in value.items())}
    if isinstance(value, (np.ndarray, np.generic)) or type(value).__name__ == "Tensor":
        buffers: list = []
        tree = codec.encode(value, buffers)
        digest = hashlib.sha256(b"".join(buffers)).hexdigest()
        tree.pop("buf", None)
        tree.pop("device", None)
        return {"$data": tree, "sha": digest}
    if isinstance(value, float):
        return {"$float": repr(value)}
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if type(value).__name__ in ("dtype", "device"):
        return {"$str": str(value)}
    raise NotRecorded(f"an argument of type {type(value).__name__} is not recordable")


def key_of(module: str, name: str, args, kwargs) -> str:
    text = json.dumps([module, name, _canonical(list(args)), _canonical(dict(kwargs))],
                      sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()


def _public_functions(mod):
    for name, value in vars(mod).items():
        if inspect.isfunction(value) and value.__module__ == mod.__name__ \
                and not name.startswith("_"):
            yield name, value


def _constants(mod, live: dict) -> dict:
    out = {}
    for name, value in vars(mod).items():
        if name.startswith("_") or not name.isupper() or name in live:
            continue
        try:
            codec.pack(value)
        except codec.CodecError:
            continue
        out[name] = value
    return out


class Recorder:
    """Wraps the secret modules' functions while the public suites run."""

    def __init__(self):
        self.calls: dict[str, object] = {}
        self.unrecordable: set[str] = set()
        self._saved: list[tuple] = []

    def _wrap(self, short: str, name: str, fn):
        @functools.wraps(fn)
        def recorder(*args, **kwargs):
            result = fn(*args, **kwargs)
            try:
                key = key_of(short, name, args, kwargs)
                codec.pack(result)
                self.calls[key] = result
            except (NotRecorded, codec.CodecError):
                self.unrecordable.add(f"{short}.{name}")
            return result
        return recorder

    def __enter__(self):
        for short in SECRET_MODULES:
            mod = importlib.import_module(f"{SECRET_PACKAGE}.{short}")
            for name, fn in list(_public_functions(mod)):
                self._saved.append((mod, name, fn))
                setattr(mod, name, self._wrap(short, name, fn))
        return self

    def __exit__(self, *exc):
        for mod, name, fn in self._saved:
            setattr(mod, name, fn)
        self._saved.clear()

    def save(self, folder: Path) -> None:
        """Write the recorded calls and each replay module into ``folder``."""
        folder.mkdir(parents=True, exist_ok=True)
        (folder / RECORD_FILE).write_bytes(codec.pack(self.calls))
        (folder / "__init__.py").write_text(
            '"""Replayed answers of the instructors\' references (student edition)."""\n')
        for short in SECRET_MODULES:
            mod = importlib.import_module(f"{SECRET_PACKAGE}.{short}")
            live = LIVE_CONSTANTS.get(short, {})
            names = sorted(name for name, _ in _public_functions(mod))
            constants = _constants(mod, live)
            imports = _shipped_imports(mod)
            for name in imports:
                constants.pop(name, None)
            (folder / f"{short}.py").write_text(
                _replay_module(short, names, constants, live, imports))


def _shipped_imports(mod) -> dict:
    """{name: module} of what a secret module takes from a module that ships
    (judging code it re-exports): the replay module imports those for real."""
    out = {}
    secret = {f"{SECRET_PACKAGE}.{m}" for m in SECRET_MODULES}
    for name, value in vars(mod).items():
        origin = getattr(value, "__module__", None)
        if name.startswith("_") or not origin or origin == mod.__name__:
            continue
        if origin.startswith("grader.") and origin not in secret and \
                (inspect.isfunction(value) or inspect.isclass(value)):
            out[name] = origin
    # constants defined in a shipped module and re-exported
    for name, value in vars(mod).items():
        if name.isupper() and name not in out:
            for origin in {m for m in out.values()}:
                if getattr(importlib.import_module(origin), name, None) is value:
                    out[name] = origin
    return out


def _replay_module(short: str, names: list[str], constants: dict, live: dict,
                   imports: dict) -> str:
    lines = [f'"""Replayed answers of the reference module {short!r} (student edition).',
             "",
             "The real module stays with the instructors; its answers for the public",
             'tests were recorded from the reference solutions."""',
             "from grader.replay import replay_constants, replay_function", "",
             f"globals().update(replay_constants({short!r}, {codec_literal(constants)!r}))"]
    for name, origin in sorted(imports.items()):
        lines.append(f"from {origin} import {name}  # noqa: E402")
    for name, expr in live.items():
        lines.append(f"{name} = {expr}")
    for name in names:
        lines.append(f"{name} = replay_function({short!r}, {name!r})")
    return "\n".join(lines) + "\n"


def codec_literal(constants: dict) -> str:
    """Constants as a hex string of ``codec.pack`` (plain data, no code)."""
    return codec.pack(constants).hex()


def replay_constants(short: str, packed_hex: str) -> dict:
    return codec.unpack(bytes.fromhex(packed_hex))


def _recorded() -> dict:
    # NumPy arrays in place of tensors until a suite imports PyTorch: the
    # NumPy exercises' public suites then run without it (a second saved).
    # Read once for each state: a first replay before PyTorch was imported (A's
    # public suite) must not hand NumPy arrays to a later PyTorch suite (H's)
    # graded in the same process.
    return _read_recorded("torch" in sys.modules)


@functools.lru_cache(maxsize=2)
def _read_recorded(torch_loaded: bool) -> dict:
    path = SECRET_REFERENCE_DIR / RECORD_FILE
    if not path.is_file():
        return {}
    return codec.unpack(path.read_bytes(), tensors="torch" if torch_loaded else "numpy")


def replay_function(short: str, name: str):
    def replayed(*args, **kwargs):
        import pytest

        try:
            key = key_of(short, name, args, kwargs)
        except NotRecorded:
            key = None
        calls = _recorded()
        if key is None or key not in calls:
            pytest.skip("not checked in the student edition: this check needs the "
                        "instructors' reference (the graded run has it)")
        value = calls[key]
        return _fresh(value)
    replayed.__name__ = replayed.__qualname__ = name
    replayed.__module__ = f"{SECRET_PACKAGE}.{short}"
    return replayed


def _fresh(value):
    """A copy, so a suite that edits an answer in place cannot change the record."""
    if isinstance(value, np.ndarray):
        return value.copy()
    if type(value).__name__ == "Tensor":
        return value.clone()
    if isinstance(value, list):
        return [_fresh(v) for v in value]
    if isinstance(value, tuple):
        return tuple(_fresh(v) for v in value)
    if isinstance(value, dict):
        return {k: _fresh(v) for k, v in value.items()}
    return value
