"""A call's kernel launches, made again on the grader's own buffers.

What a kernel computed is shown by running it again where nothing else can
write: ``Replay`` keeps every launch of a watched call (the kernel, its
arguments, its grid) and, for each buffer a launch was handed that is not
``q``, ``k`` or ``v``, a copy of it as it was before its first launch (an
output, a scratch buffer, a table the host filled).  ``run`` then makes the
same launches, in order, with ``q``, ``k`` and ``v`` replaced by new values
in buffers of the grader's and every other buffer by a fresh copy of its
first state, and returns the output the launches leave there.

Host arithmetic is not in a replay, and numbers made before the kernels
ran belong to the old inputs: only a kernel that computes attention from
``q``, ``k`` and ``v`` gives the new inputs' answer.  It works the same on
a GPU (``JITFunction.run``) and in the interpreter (``GridExecutor``), so it
is the GPU's check of where the output came from, where no load or store
can be counted (``ex07_work.py``).  Limits: a kernel that reads a copy of
``q`` made on the host (``q * scale``) replays on the old copy and fails,
so the kernel must read the inputs themselves; arguments that are neither
tensors nor tensor descriptors are passed as they were.
"""
from __future__ import annotations

import dataclasses

import torch


def _key(t: torch.Tensor):
    return t.untyped_storage().data_ptr(), t.device.type


def _on(t: torch.Tensor, storage) -> torch.Tensor:
    """``t``'s view (offset, shape, strides) on another storage."""
    return torch.empty(0, dtype=t.dtype, device=t.device).set_(
        storage, t.storage_offset(), t.shape, t.stride())


class Replay:
    """Keeps a call's launches (``keep``, from the launch recorder); ``run`` replays them."""

    def __init__(self, q, k, v):
        self.inputs = {_key(t): (name, t) for name, t in (("q", q), ("k", k), ("v", v))}
        self.launches: list = []
        self.first: dict = {}          # storage key -> a copy of it before its first launch
        self.problem = ""

    def _tensors(self, value):
        if isinstance(value, torch.Tensor):
            yield value
        elif isinstance(value, (list, tuple)):
            for v in value:
                yield from self._tensors(v)
        elif dataclasses.is_dataclass(value) and isinstance(getattr(value, "base", None),
                                                            torch.Tensor):
            yield value.base            # a TensorDescriptor

    def keep(self, launch, this, args, kwargs) -> None:
        """One launch, and a first copy of each buffer it is handed."""
        try:
            for t in self._tensors(list(args) + list(kwargs.values())):
                key = _key(t)
                if key not in self.inputs and key not in self.first:
                    self.first[key] = t.untyped_storage().clone()
            self.launches.append((launch, this, args, dict(kwargs)))
        except Exception as exc:  # noqa: BLE001 - a buffer that cannot be copied: said
            self.problem = self.problem or f"{type(exc).__name__}: {exc}"[:300]

    def _swap(self, value, storages):
        if isinstance(value, torch.Tensor):
            storage = storages.get(_key(value))
            return value if storage is None else _on(value, storage)
        if isinstance(value, tuple):
            return tuple(self._swap(v, storages) for v in value)
        if isinstance(value, list):
            return [self._swap(v, storages) for v in value]
        if dataclasses.is_dataclass(value) and isinstance(getattr(value, "base", None),
                                                          torch.Tensor):
            return dataclasses.replace(value, base=self._swap(value.base, storages))
        return value

    def run(self, q, k, v, out) -> dict:
        """The launches again, on new ``q``, ``k``, ``v`` in the grader's buffers.

        Returns ``{"out": ...}`` (the output's view on its replayed buffer, on
        the CPU), or ``{"problem": ...}`` where nothing can be replayed: the
        call launched nothing, or never handed its output to a kernel."""
        if self.problem:
            return {"problem": f"a launch could not be kept: {self.problem}"}
        if not self.launches:
            return {"problem": "no kernel was launched"}
        if not isinstance(out, torch.Tensor) or _key(out) not in self.first:
            return {"problem": "the returned output was never handed to a kernel"}
        storages = {}
        for key, (name, old) in self.inputs.items():
            storage = old.untyped_storage().clone()
            _on(old, storage).copy_({"q": q, "k": k, "v": v}[name])
            storages[key] = storage
        for key, first in self.first.items():
            storages[key] = first.clone()
        try:
            for launch, this, args, kwargs in self.launches:
                launch(this, *self._swap(tuple(args), storages),
                       **{n: self._swap(a, storages) for n, a in kwargs.items()})
        except Exception as exc:  # noqa: BLE001 - the student's kernel failed the second time
            return {"problem": f"a launch made again raised {type(exc).__name__}: "
                               f"{str(exc)[:300]}"}
        if torch.cuda.is_available():
            torch.cuda.synchronize()
        return {"out": _on(out, storages[_key(out)]).detach().cpu().clone()}
