"""What each known mistake would have answered: the one ``mistakes_of``.

A secret reference (``grader/reference/secret/``) has a ``mistake=`` switch
on its functions and a ``MISTAKES`` table of the words that name each one;
its suites ask ``ref.mistakes_of(ref.attention, ["no_scale", ...], q, k, v)``
for the wrong answers to compare a student's with (``check_close``'s
``mistakes=``).  Each secret module imports this function, so there is one.
It ships with the student edition (it holds no answer): there ``fn`` is a
replay of the recorded reference, and a mistake whose answer was never
recorded is left out, as one that cannot apply to these arguments is.

``looks_like`` writes the feedback line that names a known mistake: its words
come from a ``MISTAKES`` table (``grader.insight.tables()`` finds every one), so
that the class's table gives the line its key.
"""
from __future__ import annotations

import sys

import pytest

from grader.feedback import LOOKS_LIKE

# What a mistaken reference raises where its mistake cannot apply to these
# arguments (a shape it cannot take, a width that does not divide).
CANNOT_APPLY = (RuntimeError, ValueError, ZeroDivisionError)


def mistakes_of(fn, names, *args, **kwargs) -> dict:
    """``{description: fn(*args, mistake=name, **kwargs)}`` for the named
    mistakes, described by ``MISTAKES`` of ``fn``'s own module; a mistake that
    cannot apply to these arguments is left out."""
    described = sys.modules[fn.__module__].MISTAKES
    out = {}
    for name in names:
        try:
            out[described[name]] = fn(*args, mistake=name, **kwargs)
        except CANNOT_APPLY:
            pass
        except pytest.skip.Exception:   # the edition: this answer was never recorded
            pass
    return out


def looks_like(text: str, detail: str = "") -> str:
    """The line "This looks like: <text><detail>." for a mistake whose words
    ``text`` are a ``MISTAKES`` table's; ``detail`` says more about this case
    (", here ...", " (call ...)", ". Reshape ...") and is no part of its name:
    ``grader.insight`` keys the line by ``text``."""
    return f"{LOOKS_LIKE}{text}{detail}."
