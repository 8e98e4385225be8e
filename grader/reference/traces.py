"""Adding up an op-level trace of ex06's decode attention (from probes/ex06_gqa_intensity.py).

Judging code, not an answer: it ships with the student edition, where the
public suite reads the trace of the student's own call.
"""
from __future__ import annotations

# Ops that reshape without copying although PyTorch does not mark them as views.
NO_COPY_OPS = {"_unsafe_view.default"}


def read_bytes(ops) -> dict:
    """Bytes read by a traced call, under the readings of "a view reads nothing"
    a careful student may choose: ``is_view`` ops only; those plus
    ``_unsafe_view``; or every op whose output shares its input's storage."""
    marked = sum(o["read"] for o in ops if not o["is_view"])
    no_copy = sum(o["read"] for o in ops if not o["is_view"] and o["op"] not in NO_COPY_OPS)
    aliasing = sum(o["read"] for o in ops if not o["is_view"] and not o["aliases"])
    return {"views marked by PyTorch": marked, "views and _unsafe_view": no_copy,
            "ops that allocate": aliasing}


def materialized(ops, numel: int) -> list:
    """Ops that allocated a tensor of at least ``numel`` elements."""
    return [o for o in ops if not o["is_view"] and not o["aliases"]
            and any(n >= numel for n in o["out_numel"])]

