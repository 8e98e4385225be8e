"""Point a wrong value at the line of the student's file where it went wrong.

On a failed value check (``feedback.check_close``, or a suite's own check
that says what it compared with ``feedback.with_values``), the grading
process asks the worker to run the failing call again under a tracer
(``grader/sandbox/runtime/probes/linetrace.py``: the values each line of the
student's own file made, as data), traces the reference on the same inputs
the same way here (it is trusted), and names the first line whose value
leaves the reference's steps:

    line 42, `scores = q @ k.T`: your scores differ from the reference's (first at (0, 1, 0): 2.69 vs 3.3)

The reference's steps are its own local names and return values, in the
order it makes them (``STEP_WORDS`` gives the words a student reads for
each); a suite may give explicit steps instead (exercise A's constants).

The rule, conservative because a wrong pointer is worse than none (see
``locate``): a step is reproduced when some value of the student's has its
shape (equal; of another length, equal but for dimensions of size 1; never
a transpose) and is close to it at the check's own tolerance.  Steps the
student never forms on their own (a scale folded into the scores) are
skipped when a later step is reproduced: the pointer looks past the last
reproduced step, at the first value made after the line that reproduced
the steps before it, in order, that is no step and has the shape of a step
not reproduced.  A function's result or a tile's running state that is not
reproduced though a later step is (a branch gone wrong beside one done
right) is looked for only between its neighbours.  A number is a step only
by its name.  Where nothing fits, the feedback says that no line could be
matched.  Everything here is best effort: a failure of its own adds
nothing to the feedback and never changes a grade.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np

from grader import safetext
from grader.sandbox.runtime.probes import linetrace

NO_MATCH = "no line of your file could be matched to the reference's steps"
ANOTHER_ANSWER = ("your function returned another answer when it was run again on the same "
                  "inputs, so no line can be named (does it keep state between calls, or "
                  "draw random numbers?)")
PREFIX = "Where it goes wrong: "
TEXT_LIMIT = 120        # characters of a line's text shown
REFERENCE_BUDGET = 30.0  # seconds for tracing the reference (trusted, small inputs)

# The reference's helpers that only convert what they are given (a
# projection made inside an argument comes back from ``t64``): their results
# are no step of the student's own that a pointer could wait for.
PLUMBING = {"t64()", "_pos()", "_uk_blocks()"}   # _uk_blocks: W_uk reshaped per head

# Steps a student cannot fold into another, like a function's result: the
# running state a tile loop carries (a running sum gone wrong beside an
# accumulator done right is still wrong there).
CARRIED = {"m_new", "l_new", "acc_new"}

# Student-facing words for the reference's step names: a local's name, or
# "name()" for what the function of that name returned.
STEP_WORDS = {
    "scores": "scores", "weights": "attention weights", "allowed": "causal mask",
    "m": "row maxima of the softmax", "e": "exponentials of the softmax",
    "s": "row sums of the softmax", "softmax()": "softmax weights",
    "causal_allowed()": "causal mask", "causal_mask()": "causal mask",
    "q": "queries", "k": "keys", "v": "values",
    "split_heads()": "heads (after the split)", "merge_heads()": "merged heads",
    "repeat_kv()": "repeated K/V heads", "rope()": "rotated (RoPE) queries or keys",
    "theta": "RoPE angles", "cos": "RoPE cosines", "sin": "RoPE sines",
    "a": "first halves of RoPE's pairs", "b": "second halves of RoPE's pairs",
    "pos": "positions", "attention()": "attention output of each head",
    "_attend()": "output", "gqa()": "output", "output()": "output", "t64()": "projections",
    "c_kv": "latent cache c_kv", "k_rope": "RoPE keys k_rope", "k_nope": "keys without RoPE",
    "q_nope": "queries without RoPE", "q_rope": "RoPE part of the queries",
    "uk": "per-head W_uk blocks", "uv": "per-head W_uv blocks",
    "cache()": "latent cache", "_queries()": "queries",
    "flops": "FLOP count", "nbytes": "byte count", "attention_flops()": "FLOP count",
    "attention_bytes()": "byte count", "elems": "element count", "q_rows": "rows of q",
    "o_rows": "rows of the output", "kv_rows": "rows of K and V", "pairs": "query-key pairs",
    "per_pair": "FLOPs per query-key pair",
    "m_new": "running max", "l_new": "running sum", "acc_new": "accumulator",
    "alpha": "rescaling factor exp(m_old - m_new)", "p": "tile's exponentials",
    "shift": "shift of the exponentials", "step_reference()": "updated (m, l, acc)",
    "SCORES": "SCORES (Q @ K.T)", "SCALED": "SCALED scores",
    "WEIGHTS_FULL": "WEIGHTS_FULL", "OUT_FULL": "OUT_FULL",
    "WEIGHTS_CAUSAL": "WEIGHTS_CAUSAL", "OUT_CAUSAL": "OUT_CAUSAL",
}
_SINGULAR = {"causal mask", "output", "FLOP count", "byte count", "element count", "attention output of each head", "running max",
             "running sum", "accumulator", "rescaling factor exp(m_old - m_new)",
             "shift of the exponentials", "latent cache", "latent cache c_kv",
             "RoPE part of the queries", "SCORES (Q @ K.T)", "WEIGHTS_FULL", "OUT_FULL",
             "WEIGHTS_CAUSAL", "OUT_CAUSAL"}


@dataclass
class Step:
    """One value of the reference's: its name and numbers (flat, capped).
    ``fixed``: the same whatever the inputs' numbers (a causal mask, RoPE's
    angles): a student's copy of it says nothing about how far their work
    on the inputs got right."""
    name: str
    shape: tuple
    values: np.ndarray
    fixed: bool = False
    aliases: list = None    # later names of the same value (``flops = attention_flops(...)``)


@dataclass
class Made:
    """One value a line of the student's file made."""
    line: int
    text: str
    name: str
    shape: tuple
    values: np.ndarray
    file: str = ""          # where not the module's own file (ex03 calling ex02)
    fn: str = ""            # the function whose line it is


def words(name: str) -> str:
    return STEP_WORDS.get(name, f"`{name}`")


def steps_of(pairs) -> list[Step]:
    """Explicit steps: ``(name, value)`` pairs in the reference's order."""
    out = []
    for name, value in pairs:
        got = linetrace._numbers(value) if not isinstance(value, np.ndarray) else \
            (tuple(value.shape), value.reshape(-1)[:linetrace.MAX_ELEMENTS].astype(np.float64))
        if got is not None:
            out.append(Step(name, tuple(got[0]), got[1]))
    return out


def trace_reference(call: Callable[[], object], files) -> list[Step]:
    """The reference's steps: what each line of ``files`` made while
    ``call()`` ran, named by its local (or ``fn()`` for a return value)."""
    tracer = linetrace._Tracer([str(Path(f)) for f in files], REFERENCE_BUDGET)
    import sys
    previous = sys.gettrace()
    sys.settrace(tracer.global_trace)
    try:
        call()
    finally:
        sys.settrace(previous)
    return [Step(f"{r['fn']}()" if r["name"] == "return" else r["name"], tuple(r["shape"]),
                 np.asarray(r["values"], dtype=np.float64)) for r in tracer.records]


def made_of(records, own: str = "") -> list[Made]:
    """The student's values, ``own`` the module's file name (its lines are
    said without it).  The worker's answer is held to the tracer's own
    bounds again here: a submission that forges it gets no more of the
    grading's time than an honest trace."""
    out = []
    for r in records[:linetrace.MAX_RECORDS]:
        try:
            out.append(Made(int(r["line"]), str(r["text"])[:linetrace.MAX_TEXT],
                            str(r["name"])[:linetrace.MAX_TEXT],
                            tuple(int(n) for n in r["shape"][:32]),
                            np.asarray(r["values"], dtype=np.float64).reshape(-1)[
                                :linetrace.MAX_ELEMENTS],
                            "" if r.get("file") == own else str(r.get("file", "")),
                            str(r.get("fn", ""))))
        except (AttributeError, KeyError, TypeError, ValueError):
            continue
    return out


def _squeezed(shape) -> tuple:
    return tuple(n for n in shape if n != 1)


def _same_shape(a, b) -> bool:
    """Equal shapes; of different lengths, equal but for dimensions of size
    1 (a group axis of one).  Never a transpose: ``(1, S)`` is not ``(S, 1)``."""
    a, b = tuple(a), tuple(b)
    return a == b if len(a) == len(b) else _squeezed(a) == _squeezed(b)


def _close(a: np.ndarray, b: np.ndarray, atol: float, rtol: float) -> bool:
    n = min(a.size, b.size)
    if n == 0:
        return a.size == b.size
    with np.errstate(invalid="ignore", over="ignore"):
        return bool(np.all(np.isclose(a[:n], b[:n], atol=atol, rtol=rtol, equal_nan=True)))


def _reproduces(made, step: Step, atol: float, rtol: float) -> bool:
    return _same_shape(made.shape, step.shape) and _close(made.values, step.values, atol, rtol)


def _may_be(made: Made, step: Step) -> bool:
    """Could ``made`` be the student's ``step``: its shape, and not the result
    of a function the contract names for another step (the student's
    ``repeat_kv`` is never the reference's ``rope()``)."""
    if not _same_shape(made.shape, step.shape) or step.name in PLUMBING:
        return False
    theirs = f"{made.fn}()"
    return not (made.name == "return" and step.name.endswith("()") and theirs in STEP_WORDS
                and theirs not in PLUMBING and theirs != step.name)


def _telling(steps: list[Step], inputs: list[Step], atol: float, rtol: float,
             scalars: bool = False) -> list[Step]:
    """The steps that say something: not an input over again, not a
    constant (an all-zero accumulator matches too much), not a scalar, not
    ``fixed`` (a mask copied right says nothing of the work on the inputs),
    and not a value an earlier step already was (the reference reading its
    own ``v`` again must not count as a later step reproduced)."""
    out: list[Step] = []
    for step in steps:
        if step.fixed or (not scalars and (not step.shape or step.values.size < 2
                                           or np.all(step.values == step.values[0]))):
            continue
        if any(_reproduces(x, step, atol, rtol) for x in inputs):
            continue
        same = next((earlier for earlier in out if _reproduces(earlier, step, 0.0, 0.0)), None)
        if same is not None:
            same.aliases = (same.aliases or []) + [step.name]
            continue
        out.append(step)
    return out


@dataclass
class Pointer:
    made: Made | None       # None: no line could be matched
    step: Step | None
    also: list = None       # other steps of that shape it may be (a fused line)

    def text(self, atol: float, rtol: float) -> str:
        if self.made is None:
            return f"{PREFIX}{NO_MATCH}."
        made, step = self.made, self.step
        n = min(made.values.size, step.values.size)
        with np.errstate(invalid="ignore", over="ignore"):
            off = ~np.isclose(made.values[:n], step.values[:n], atol=atol, rtol=rtol,
                              equal_nan=True)
        where = ""
        if off.any():
            flat = int(np.argmax(off))
            idx = tuple(int(i) for i in np.unravel_index(flat, made.shape)) if made.shape else ()
            at = f"first at {list(idx)}: " if idx else ""
            where = f" ({at}yours {made.values[flat]:.6g} vs {step.values[flat]:.6g})"
        elif made.values.size != step.values.size:
            where = f" (shape {list(made.shape)} vs {list(step.shape)})"
        line_text = safetext.clean(made.text, TEXT_LIMIT, one_line=True)
        of = f" of {safetext.clean(made.file, 80, one_line=True)}" if made.file else ""
        head = f"{PREFIX}line {made.line}{of}, `{line_text}`: "
        if self.also:
            name = safetext.clean(made.name, 60, one_line=True)
            mine = "the value it returns" if made.name == "return" else f"your `{name}`"
            return (f"{head}{mine} is neither the reference's {words(step.name)} nor its "
                    f"{words(self.also[0].name)}{where}.")
        said = words(step.name)
        verb = "differs" if said in _SINGULAR else "differ"
        return f"{head}your {said} {verb} from the reference's{where}."


def locate(steps: list[Step], made: list[Made], expected, atol: float, rtol: float,
           inputs: list[Step] = (), by_name: bool = False) -> Pointer | None:
    """The pointer for a wrong value (see the module's docstring), or None
    when the student's values reproduce every step (nothing to point at).
    ``by_name``: the student's values carry the steps' own names (exercise
    A's constants), and only a value of a step's name can be that step."""
    if by_name:
        named = {s.name for s in steps}
        made = [m for m in made if m.name in named]
        return _by_name(steps, made, expected, atol, rtol)
    # A number's steps are numbers (exercises E and F's formulas): only
    # there are scalars steps; elsewhere a scalar (a width, a count) is none.
    scalars = expected is not None and not expected.shape
    steps = _telling(steps, list(inputs), atol, rtol, scalars)
    # Neither an input over again nor a constant (a running max that starts
    # at -inf is no step gone wrong).
    made = [m for m in made if (scalars and not m.shape) or (
        m.shape and m.values.size > 1 and not np.all(m.values == m.values[0]))]
    made = [m for m in made if not any(_reproduces(m, x, 0.0, 0.0) for x in inputs)]
    if expected is not None:
        # Only the steps up to the value the check expected: later ones are
        # another answer's.
        end = next((i for i, s in enumerate(steps)
                    if _reproduces(expected, s, atol, rtol)), None)
        if end is None:
            steps = steps + [expected]
        else:
            steps = steps[:end + 1]
    if not steps:
        return Pointer(None, None)
    if steps[-1].name.endswith("()"):    # the call's result: its output, whatever its name
        steps[-1] = Step("output()", steps[-1].shape, steps[-1].values)
    hits = [[i for i, m in enumerate(made) if _reproduces(m, s, atol, rtol)] if not s.fixed
            else [] for s in steps]
    done = [k for k, h in enumerate(hits) if h]
    last = max(done) if done else -1
    if last == len(steps) - 1:
        return None
    skipped = next((k for k in range(last) if not hits[k] and steps[k].name not in PLUMBING
                    and (steps[k].name.endswith("()") or steps[k].name in CARRIED)), None)
    if scalars:
        found = _by_number_names(steps, made, hits)
        if found is not None:
            return found
    elif skipped is not None:
        return _within(steps, made, hits, skipped)
    after = _aligned(hits, last)
    # The first step not reproduced, or a later one where the student's
    # values have another layout there (a softmax's maxima as (1, S) rows);
    # never the output past a step not reproduced (a line of the student's
    # that the tracer cannot see, a tuple's unchanged item, must not be
    # blamed on the last line).
    later = steps[last + 1:] if last + 1 == len(steps) - 1 else steps[last + 1:-1]
    right = {i for h in hits for i in h}    # a value that is a step is no divergence
    for i in range(after + 1, len(made)):
        if i == len(made) - 1 and made[i].name == "return":
            break   # the call's own result: only ever the output (below)
        if i in right:
            continue
        fits = [step for step in later if _may_be(made[i], step)]
        if scalars:
            # Every number has a number's shape: only its name can say which
            # step it is (the student's `flops` is the reference's `flops`).
            fits = [step for step in fits if _same_name(made[i], step)]
        if fits:
            return _named(made[i], fits)
    # Wrong only at the output: the line that returned it (for a formula,
    # one whose every number before its return is one of the reference's).
    final = steps[-1]
    inline = scalars and all(i in right for i in range(len(made) - 1))
    if (last + 1 == len(steps) - 1 or inline) and made and made[-1].name == "return" \
            and _same_shape(made[-1].shape, final.shape) \
            and not _reproduces(made[-1], final, atol, rtol):
        return Pointer(made[-1], final)
    return Pointer(None, None)


def _aligned(hits: list, last: int) -> int:
    """Where the student's values reproduced steps 0..``last``, read in
    order: each step at its first value after the previous step's (a tile's
    running sum is the one after that tile's exponentials, not the same
    numbers stored again by the caller's line, nor an earlier tile's)."""
    at = -1
    for k in range(last + 1):
        at = next((i for i in hits[k] if i > at), at)
    return at


def _by_name(steps: list[Step], made: list[Made], expected, atol: float,
             rtol: float) -> Pointer | None:
    """The first step, in order, whose value of the same name is wrong."""
    latest = {m.name: m for m in made}      # a name assigned twice: its last value
    for step in steps:
        mine = latest.get(step.name)
        if mine is None:
            return Pointer(None, None)
        if not _reproduces(mine, step, atol, rtol):
            return Pointer(mine, step) if _same_shape(mine.shape, step.shape) \
                else Pointer(None, None)
    return None


def _within(steps: list[Step], made: list[Made], hits: list, skipped: int) -> Pointer:
    """A function's result (or a tile's running state) the student never
    reproduced, though a later step is (a branch gone wrong beside one done
    right): only a value made after the last such step that was reproduced,
    and before the first reproduced step after it, can be where it went
    wrong, and only as a step not reproduced in between."""
    anchor = max((k for k in range(skipped) if hits[k] and (
        steps[k].name.endswith("()") or steps[k].name in CARRIED)), default=-1)
    first = next(k for k in range(anchor + 1, skipped + 1) if not hits[k])
    before = _aligned(hits, first - 1)
    until = min((i for k in range(skipped + 1, len(steps)) for i in hits[k] if i > before),
                default=len(made))
    wanted = [steps[k] for k in range(first, skipped + 1) if not hits[k]]
    right = {i for h in hits for i in h}
    for i in range(before + 1, until):
        fits = [step for step in wanted if _may_be(made[i], step)] if i not in right else []
        if fits:
            return _named(made[i], fits)
    return Pointer(None, None)


def _same_name(made: Made, step: Step) -> bool:
    names = [step.name] + (step.aliases or [])
    return made.name in names or (made.name == "return" and f"{made.fn}()" in names)


def _by_number_names(steps: list[Step], made: list[Made], hits: list) -> Pointer | None:
    """A formula's pointer: the first step not reproduced that a number of the
    student's bears the name of (its `flops`, `nbytes`), that number wrong."""
    right = {i for h in hits for i in h}
    for k, step in enumerate(steps[:-1]):
        if hits[k]:
            continue
        mine = next((m for i, m in enumerate(made) if i not in right and _same_name(m, step)),
                    None)
        if mine is not None:
            return Pointer(mine, step)
    return None


def _named(made: Made, fits: list[Step]) -> Pointer:
    """``made`` as the step among ``fits`` (those of its shape) it is: the one
    the student's local is named after; else, where a line fusing two (scores
    and softmax) cannot be told, both are named."""
    named = [s for s in fits if s.name == made.name]
    if named:
        return Pointer(made, named[0])
    others = [s for s in fits[1:] if words(s.name) != words(fits[0].name)]
    return Pointer(made, fits[0], others[:1])


def as_step(value, name: str = "output") -> Step | None:
    got = steps_of([(name, np.asarray(value, dtype=np.float64))]) if value is not None else []
    return got[0] if got else None


MIN_BUDGET = 0.2   # seconds of tracing below which no pointer is tried


def budget_for(timeout: float | None) -> float:
    """Seconds the traced call may trace: half the call's own limit, so the
    call (traced, then untraced) ends within that limit."""
    limit = 10.0 if timeout is None or not math.isfinite(timeout) else float(timeout)
    return limit / 2


def _moved(values: list) -> list:
    """The arguments with every float array's numbers changed (an affine map
    keeps shapes, dtypes and which entries are finite); a formula's
    arguments (numbers only) each one more."""
    if all(type(v) in (int, float) for v in values):
        return [v + 1 for v in values]
    out = []
    for v in values:
        if isinstance(v, np.ndarray) and v.dtype.kind == "f":
            v = v * 1.25 + 0.125
        elif type(v).__module__ == "torch" and getattr(v, "is_floating_point", lambda: False)():
            v = v * 1.25 + 0.125
        out.append(v)
    return out


def _mark_fixed(steps: list[Step], moved: list[Step]) -> None:
    """Mark the steps the moved inputs left unchanged; none when the two runs
    made different sequences of values (control flow that follows the data)."""
    if len(steps) != len(moved) or any(a.name != b.name for a, b in zip(steps, moved)):
        return
    for a, b in zip(steps, moved):
        a.fixed = a.shape == b.shape and a.values.size == b.values.size and \
            bool(np.array_equal(a.values, b.values, equal_nan=True))


def _checked(exc):
    """The ``Checked`` of a failed value check: on the feedback, or on one it
    was raised from (``on_case`` says which case, raising anew)."""
    seen = 0
    while exc is not None and seen < 8:
        checked = getattr(exc, "checked", None)
        if checked is not None:
            return checked
        exc, seen = exc.__context__, seen + 1
    return None


def _the_call(student, got):
    """The test's call whose answer ``got`` is (or is an item of), if any."""
    for value, name, args, kwargs, took in reversed(student.calls):
        if value is got or (isinstance(value, (tuple, list)) and any(v is got for v in value)):
            return name, args, kwargs, took
    return None


def _same_answer(result, got, atol: float, rtol: float) -> bool:
    """Did the traced rerun return the answer being explained?  Where either
    is not an array of numbers, nothing is compared (True)."""
    if not isinstance(result, dict):
        return True
    try:
        want = np.asarray(got, dtype=np.float64)
        values = np.asarray(result.get("values"), dtype=np.float64).reshape(-1)
        shape = tuple(int(n) for n in result.get("shape", ()))
    except (TypeError, ValueError):
        return True
    if shape != want.shape:
        return False
    flat = want.reshape(-1)[:values.size]
    return values.size == flat.size and bool(np.allclose(values, flat, atol=atol, rtol=rtol,
                                                         equal_nan=True))


def point(exercise: str, student, exc, pointed: set | None = None) -> str | None:
    """The line pointer's line for a test that failed with ``exc``, or None
    (not a value check, a call not traced here, or nothing to point at).
    ``pointed``: the (exercise, function) pairs already traced in this
    grading: a function is traced once, for its first failure (the root
    cause is said once, and a traced rerun costs up to a call's time again)."""
    checked = _checked(exc)
    if checked is None:
        return None
    pointed = set() if pointed is None else pointed
    atol, rtol = float(checked.atol), float(checked.rtol)
    expected = as_step(checked.expected)
    budget = budget_for(student.call_limit)
    if checked.steps is not None:
        if (exercise, "steps") in pointed:
            return None
        pointed.add((exercise, "steps"))
        steps, inputs = steps_of(checked.steps), []
        traced = student.trace_lines(None, [], {}, budget) if checked.module else None
    else:
        from grader.reference.line_steps import references
        found = _the_call(student, checked.got)
        table = references()
        if found is None or (exercise, found[0]) not in table:
            return None
        name, args, kwargs, took = found
        if (exercise, name) in pointed:
            return None
        pointed.add((exercise, name))
        # Traced, then untraced for what is left, the call must end well
        # within its limit: a time-out would end the worker and count
        # against the submission's later calls.
        budget = budget_for(student.call_limit) - 1.5 * took
        if budget < MIN_BUDGET:
            return None
        modules, call = table[(exercise, name)]
        files = [m.__file__ for m in modules]
        steps = trace_reference(lambda: call(*args, **kwargs), files)
        try:
            moved = trace_reference(lambda: call(*_moved(args), **dict(zip(
                kwargs, _moved(list(kwargs.values()))))), files)
        except Exception:  # noqa: BLE001 - moved inputs it refuses: nothing is fixed
            moved = []
        _mark_fixed(steps, moved)
        inputs = steps_of([("input", a) for a in list(args) + list(kwargs.values())])
        traced = student.trace_lines(name, args, kwargs, budget)
    if not isinstance(traced, dict) or not isinstance(traced.get("records"), list):
        return None
    if checked.steps is None and not _same_answer(traced.get("result"), checked.got, atol, rtol):
        return f"{PREFIX}{ANOTHER_ANSWER}."
    own = f"{student._worker.module}.py"
    pointer = locate(steps, made_of(traced["records"], own), expected, atol, rtol, inputs,
                     by_name=bool(checked.module))
    if pointer is None:
        return None
    text = pointer.text(atol, rtol)
    if pointer.made is None and traced.get("stopped"):
        text = text[:-1] + " (the trace stopped at its time limit)."
    return text
