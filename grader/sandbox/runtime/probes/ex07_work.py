"""The work a call's Triton launches did, counted in Triton's interpreter.

Watching for known escapes (threads, forks, NumPy) loses to the next one
(DLPack, ``data_ptr`` and ctypes, ``__array_interface__``): ``KernelWork``
counts instead.  Under ``TRITON_INTERPRET=1`` every ``tl.load``, ``tl.store``,
atomic and ``tl.dot`` of a kernel goes through one object, the interpreter's
builder; while a call runs, its methods are wrapped to record

* which elements of ``q``, ``k`` and ``v`` a launch loaded;
* the FLOPs of every ``tl.dot`` (2 * M * N * K a product);
* every address a launch wrote, and the value it held when that launch
  ended (read back through the interpreter's own load).

``result(out)`` then says, element by element, whether the returned output
was written by a launch of this call and still holds what that launch left
there: numbers computed on the host and copied in, or kept from an earlier
call, were not.  The grading process judges it (``flash_judge.check_work``).

Only the CPU interpreter can be counted so; on a GPU ``result`` says
``counted: False`` and the grade rests on the replay (``ex07_replay.py``).
"""
from __future__ import annotations

import numpy as np
import torch

# The builder's methods wrapped, by what they do; each may be missing in some
# Triton version (``create_atomic_store`` is new), never all of them.
LOADS = ("create_masked_load",)
STORES = ("create_masked_store",)
ATOMICS = ("create_atomic_rmw", "create_atomic_cas")
DOTS = ("create_dot",)


def _addresses(t: torch.Tensor) -> np.ndarray:
    """The byte address of every element of ``t``, in ``t``'s own order."""
    offsets = torch.arange(t.untyped_storage().nbytes() // max(t.element_size(), 1),
                           dtype=torch.int64)
    view = offsets.as_strided(t.shape, t.stride(), t.storage_offset()) if t.numel() \
        else offsets[:0]
    base = t.untyped_storage().data_ptr()
    return (base + view.reshape(-1).numpy() * t.element_size()).astype(np.uint64)


class _Seen:
    """Which elements of one tensor were loaded (by address)."""

    def __init__(self, t: torch.Tensor):
        self.shape = tuple(t.shape)
        addrs = _addresses(t)
        self.order = np.argsort(addrs, kind="stable")
        self.sorted = addrs[self.order]
        self.hit = np.zeros(addrs.size, dtype=bool)

    def mark(self, addrs: np.ndarray) -> None:
        if not self.sorted.size or not addrs.size:
            return
        addrs = addrs[(addrs >= self.sorted[0]) & (addrs <= self.sorted[-1])]
        if not addrs.size:
            return
        pos = np.searchsorted(self.sorted, addrs)
        pos = pos[self.sorted[np.minimum(pos, self.sorted.size - 1)] == addrs]
        self.hit[self.order[pos]] = True

    def tensor(self) -> torch.Tensor:
        return torch.from_numpy(self.hit.reshape(self.shape).copy())


class KernelWork:
    """``with KernelWork({"q": q, ...}) as work: call()``; then ``work.result(out)``."""

    def __init__(self, inputs: dict):
        self.inputs = {name: _Seen(t) for name, t in inputs.items()}
        self.error = ""
        self.launches = 0
        self.dot_flops = 0
        self._depth = 0
        self._writes: list = []        # (addresses, dtype) of the launch in progress
        self._left: dict = {}          # itemsize -> (addresses, raw values), last write wins
        self._saved: list = []

    # -- the hooks
    def _wrap(self, cls, name, after):
        original = cls.__dict__.get(name)
        if original is None:
            return False

        def hooked(this, *args, _original=original, **kwargs):
            out = _original(this, *args, **kwargs)
            if self._depth:
                self._safely(after, args, out)
            return out

        self._saved.append((cls, name, original))
        setattr(cls, name, hooked)
        return True

    def _loaded(self, args, out):
        ptrs, mask = args[0], args[1]
        addrs = ptrs.data[np.broadcast_to(mask.data, ptrs.data.shape)].astype(np.uint64)
        for seen in self.inputs.values():
            seen.mark(addrs.ravel())

    def _stored(self, args, out):
        ptrs, value, mask = args[0], args[1], args[2]
        keep = np.broadcast_to(mask.data, ptrs.data.shape)
        self._writes.append((ptrs.data[keep].astype(np.uint64).ravel(), value.data.dtype))

    def _atomic(self, args, out):
        if hasattr(args[0], "data"):      # cas (ptr, cmp, val, ...): every lane may write
            ptr, val, keep = args[0], args[2], True
        else:                             # rmw (op, ptr, val, mask, ...)
            ptr, val, keep = args[1], args[2], args[3].data
        addrs = np.asarray(ptr.data)
        keep = np.broadcast_to(keep, addrs.shape)
        self._writes.append((addrs[keep].astype(np.uint64).ravel(), np.asarray(val.data).dtype))

    def _dotted(self, args, out):
        a, b = np.asarray(args[0].data), np.asarray(args[1].data)
        batch = int(np.prod(a.shape[:-2])) if a.ndim > 2 else 1
        self.dot_flops += 2 * batch * a.shape[-2] * a.shape[-1] * b.shape[-1]

    def _launch(self, cls, name):
        original = cls.__dict__[name]
        work = self

        def launched(this, *args, **kwargs):
            work._depth += 1
            try:
                return original(this, *args, **kwargs)
            finally:
                work._depth -= 1
                if not work._depth:
                    work.launches += 1
                    work._safely(work._settle)

        self._saved.append((cls, name, original))
        setattr(cls, name, launched)

    def _safely(self, count, *args) -> None:
        """Count, never failing the student's kernel: a count that fails is
        the grader's (``error``: the test is a regrade)."""
        try:
            count(*args)
        except Exception as exc:  # noqa: BLE001 - any failure of the count is ours
            self.error = self.error or f"counting failed: {type(exc).__name__}: {exc}"[:300]

    def _settle(self) -> None:
        """What the launch that just ended left at every address it wrote."""
        from triton.runtime import interpreter
        by_size: dict = {}
        for addrs, dtype in self._writes:
            by_size.setdefault(np.dtype(dtype).itemsize, []).append(addrs)
        self._writes = []
        for size, parts in by_size.items():
            addrs = np.unique(np.concatenate(parts))
            raw = np.dtype(f"u{size}") if size in (1, 2, 4, 8) else None
            if raw is None or not addrs.size:
                continue
            values = interpreter._interpreter.load(
                addrs, np.ones(addrs.shape, dtype=bool), np.zeros(addrs.shape, dtype=raw), raw)
            old = self._left.get(size)
            if old is not None:       # this launch's values replace earlier ones
                stale = ~np.isin(old[0], addrs)
                addrs = np.concatenate([old[0][stale], addrs])
                values = np.concatenate([old[1][stale], values])
                order = np.argsort(addrs, kind="stable")
                addrs, values = addrs[order], values[order]
            self._left[size] = (addrs, values)

    def __enter__(self):
        try:
            from triton.runtime import interpreter
            builder = interpreter.InterpreterBuilder
            executor = interpreter.GridExecutor
        except (ImportError, AttributeError) as exc:
            self.error = f"Triton's interpreter has no builder to count with ({exc})"
            return self
        if "__call__" not in executor.__dict__:
            self.error = "Triton's interpreter has no GridExecutor.__call__ to count launches"
            return self
        hooked = [self._wrap(builder, n, self._loaded) for n in LOADS] + \
            [self._wrap(builder, n, self._stored) for n in STORES] + \
            [self._wrap(builder, n, self._dotted) for n in DOTS]
        for n in ATOMICS:
            self._wrap(builder, n, self._atomic)
        if not all(hooked):
            self.error = "Triton's interpreter builder lacks a load, store or dot to count"
        self._launch(executor, "__call__")
        return self

    def __exit__(self, *exc):
        for cls, name, original in reversed(self._saved):
            setattr(cls, name, original)
        self._saved.clear()
        return False

    # -- the answer
    def result(self, out) -> dict:
        """Counted work, and for ``out`` (a CPU tensor, or None) which elements a
        launch of this call wrote (``written``) and which still hold what it
        left there (``kept``), as bool tensors of ``out``'s shape."""
        seen = {"counted": not self.error, "error": self.error, "launches": self.launches,
                "dot_flops": int(self.dot_flops),
                "loaded": {name: s.tensor() for name, s in self.inputs.items()}}
        if self.error or not isinstance(out, torch.Tensor) or out.device.type != "cpu":
            return seen
        size = out.element_size()
        addrs = _addresses(out)
        written = np.zeros(addrs.size, dtype=bool)
        kept = np.zeros(addrs.size, dtype=bool)
        left = self._left.get(size)
        if left is not None and addrs.size and size in (1, 2, 4, 8):
            pos = np.minimum(np.searchsorted(left[0], addrs), max(left[0].size - 1, 0))
            written = left[0][pos] == addrs
            now = out.detach().contiguous().view(-1).numpy().view(f"u{size}")
            kept = written & (left[1][pos] == now)
        shape = tuple(out.shape)
        seen["written"] = torch.from_numpy(written.reshape(shape).copy())
        seen["kept"] = torch.from_numpy(kept.reshape(shape).copy())
        return seen
