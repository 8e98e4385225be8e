"""A grading run's shared cache of GPU compiles: one kernel launch is compiled once per class.

Exercise G compiles every config of a student's kernel for two GPUs (one to
two seconds of CPU each).  Students of one class often launch the same
kernel (the tutorial's, a kernel passed around, a resubmission with only
the host code changed); ``SharedCompiles`` keeps each launch that compiled
and fitted, in a folder the grading run owns (``Options.compile_cache``:
beside the class gradebook for ``batch``, ``--compile-cache`` for ``grade``),
and a later grading with the same launch takes the answer instead of
compiling it.

Trust.  A row comes from a worker that imported the student's code, so a
hostile worker can say anything of its own launches: the key and the
answer.  What bounds it:

* the key the folder is read and written by is made here, in the grading
  process: the worker's launch key (the kernel's code, its specialization,
  constexprs and options, the target: ``probes/ex07_flash_attention._launch_key``)
  bound to the kernel's own text as this process reads it from the
  submission's files (``kernel_text``), and to the grader's validity digest
  (``grader.digest.grader_version``: a new Triton, PyTorch or grader compiles
  again).  A row is shared only where the kernel is found, once, in the files;
* only an answer that compiled and fitted is kept, so a row read back can
  only ever say "passes", never cost a point;
* so a forged row can reach only a submission whose kernel is, token for
  token, the forger's own, launched as the forger claimed: two students
  handing in the same kernel (what the similarity report flags) and one of
  them subverting its worker.  ``docs/THREAT_MODEL.md`` names this limit.

Rows are files of their own (one per key, written under a fresh name and
renamed into place), so the ``--jobs`` slots of a batch share the folder
without a lock.
"""
from __future__ import annotations

import ast
import hashlib
import json
import os
import uuid
from pathlib import Path

# What a kept row may hold, and of which type: nothing else is read back.
ANSWER_TYPES = {"ok": bool, "fits": bool, "wgmma": bool, "tma": bool, "registers": int,
                "spill_bytes": int, "shared_bytes": int, "num_warps": int, "num_stages": int}
KEY_TEXT = b"attn-grade shared compile 1\0"


def kernel_text(files, name: str) -> str | None:
    """The code of the one function named ``name`` in ``files`` (its ``def``
    and body, decorators left out, comments and layout normalized by
    ``ast.unparse``), read by the grading process; None where no file, or
    more than one function, has that name, or a file does not parse."""
    found = []
    for path in files:
        try:
            tree = ast.parse(Path(path).read_bytes())
        except (OSError, SyntaxError, ValueError):
            return None
        found += [node for node in ast.walk(tree)
                  if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
                  and node.name == name]
    if len(found) != 1:
        return None
    node = found[0]
    node.decorator_list = []           # configs are in the launch key, not here
    return ast.unparse(node)


class SharedCompiles:
    """The shared cache's rows for one submission's compile check: ``get``
    a launch's kept answer, ``put`` one that compiled.

    ``folder``: the grading run's cache (grader-owned, never inside a
    submission); ``files``: the submission's modules the kernel can be in
    (``flash_judge.compile_inputs``).  ``stats`` counts what was taken and
    kept (the tests and benchmarks read it)."""

    def __init__(self, folder, files, digest: str | None = None):
        from grader.digest import grader_version
        self.folder = Path(folder)
        self.files = list(files)
        self.digest = digest if digest is not None else grader_version()
        self._texts: dict = {}
        self.stats = {"taken": 0, "kept": 0}

    def key(self, capability, row) -> str | None:
        """The shared key of a compile plan's ``row``, made here; None where
        the row cannot be shared (no worker key, its kernel not found once)."""
        name, launch = row.get("kernel"), row.get("key")
        if not isinstance(name, str) or not isinstance(launch, str) or not row.get(
                "in_submission") or row.get("skipped"):
            return None
        if name not in self._texts:
            self._texts[name] = kernel_text(self.files, name)
        text = self._texts[name]
        if text is None:
            return None
        h = hashlib.sha256(KEY_TEXT)
        for part in (self.digest, str(capability), launch, text):
            h.update(part.encode("utf-8", "surrogateescape") + b"\0")
        return h.hexdigest()

    def _path(self, key: str) -> Path:
        return self.folder / key[:2] / f"{key}.json"

    def get(self, capability, row) -> dict | None:
        """The kept answer of ``row``'s launch (``ANSWER_TYPES``' fields, each
        of its type, ok and fitting), or None."""
        key = self.key(capability, row)
        if key is None:
            return None
        try:
            fd = os.open(self._path(key), os.O_RDONLY | os.O_NOFOLLOW)
            with os.fdopen(fd) as f:
                kept = json.load(f)
        except (OSError, ValueError):
            return None
        answer = _clean(kept)
        if answer is not None:
            self.stats["taken"] += 1
        return answer

    def put(self, capability, row) -> None:
        """Keep the answer of ``row`` (the plan's row with its compile's answer)
        if it compiled and fits; best effort: a folder that cannot be written
        only costs a compile later."""
        key = self.key(capability, row)
        answer = _clean(row)
        # Compiled under Triton settings the module changed (a knob allowing
        # globals, say: ``gpu_compile.changed_settings``): this submission's only.
        if key is None or answer is None or row.get("settings") != []:
            return
        path = self._path(key)
        try:
            path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            # a fresh name: the shards of a class may write one folder from many machines
            tmp = path.with_name(f".{key}.{uuid.uuid4().hex}.tmp")
            tmp.write_text(json.dumps(answer))
            os.replace(tmp, path)
            self.stats["kept"] += 1
        except (OSError, TypeError, ValueError):
            pass


def _clean(row) -> dict | None:
    """``row``'s answer as plain data of the expected types, if it compiled
    and fits; else None."""
    if not isinstance(row, dict):
        return None
    answer = {}
    for name, kind in ANSWER_TYPES.items():
        value = row.get(name)
        if type(value) is not kind:     # bool is no int here, and an int no bool
            return None
        answer[name] = value
    return answer if answer["ok"] and answer["fits"] else None
