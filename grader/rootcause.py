"""Root causes: one slip costs once, is named first, and is said once.

A student's own ``softmax`` feeds their ``attention``, which feeds their
``multi_head_attention``; their ``ex03_gqa`` imports their ``ex02_mha``.  One
wrong axis fails every test downstream.  After a grading ran, for each
exercise:

1. A failure follows from upstream work when it passes once that work is the
   reference's (``upstream_evidence`` grades the exercise again so, through
   the ``grade`` that ``grader.core`` hands it, an ``Upstream`` each): the
   earlier exercise its module imports, or the most upstream function of the
   exercise that a failing test reached.
2. Without that evidence (the student edition has no solutions), a failure
   that names the same known mistake as a failure of a more upstream
   function of its exercise follows from that function (the contract lists
   an exercise's functions upstream first; ``called`` says which functions
   each test reached).
3. A follower keeps its points (``deduct_each``, ``--deduct-each``, restores
   the old count: each failure costs), and its feedback is one line that says
   where the cause is.  The failures of the mistaken part itself cost their
   points: that is the root cause's cost, paid once, where it is.
4. The first failure shown names the diagnosis first: in every failure the
   "This looks like: ..." line comes before expected and got, and the failure
   of the most upstream function that names a mistake is moved to the place
   of the exercise's first failure.
5. No sentence is said twice in one exercise's failures: a mistake named again
   is referred to ("the same mistake as above, test 2 of 5 that show it"), and
   a repeated line of text is left out.

The formats show a follower that kept its points as passed with its line
("KEPT" in the text table), never as a failure at full score; the report's
notes count them.
"""
from __future__ import annotations

import ast
import dataclasses
import re
import shutil
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from grader.feedback import LOOKS_LIKE, OR, diagnosis_first, named_mistake, one_or_two, \
    ruled_out, still_possible
from grader.options import Options
from grader.paths import SOLUTIONS_DIR
from grader.reference.cases import RANDOM_ONLY
from grader.registry import EXERCISES, contract
from grader.report import FAILED, PASSED, Report, TestResult

if TYPE_CHECKING:   # only named in annotations: the sandbox is core's to start
    from grader.sandbox.forkserver import ForkServer

KEEPS = "it keeps its points."
COSTS = "it costs its points too (--deduct-each)."
SAME = "This looks like the same mistake as above (test {n} of {k} that show it)."
FOLLOWS = "This follows from the {where} mistake named above (test {n} of {k} that show it): {end}"
FOLLOWS_NAMED = "This follows from the {where} mistake named {side} ({mistake}): {end}"
# Followers with evidence (rule 1): "your ex02_mha", "your decode_attention".
FROM = ("This follows from your {cause} ({what}): with a correct {cause} this test passes, "
        "so {end}")
FROM_AGAIN = ("This follows from your {cause}, as said above (test {n} of {k} that pass with "
              "a correct {cause}): {end}")


@dataclass(frozen=True)
class Upstream:
    """An exercise graded again with the reference in place of part of the
    student's work (``upstream_evidence``)."""
    cause: str            # the earlier exercise ("ex02_mha") or the function replaced
    module: bool          # True: earlier exercises' modules; False: a function of this one
    passes: frozenset     # names of the tests that failed, and passed then


def function_order(exercise: str) -> list[str]:
    """The exercise's public functions, upstream first (the contract's order)."""
    module = contract()["modules"].get(exercise, {})
    return list(module.get("functions", {}))


def _depth(called: list[str], order: list[str]) -> int | None:
    """How far downstream a test reaches: the latest contract function it called."""
    known = [order.index(name) for name in called if name in order]
    return max(known) if known else None


def subject(test: TestResult, order: list[str]) -> str | None:
    """The contract function a test is named after (the longest name found in
    ``test_<function>_...``), or None.  A test that drives the student's code
    through a probe records no call (ex04's time_fn and measure_scaling
    tests), and one may call a later function only to show something (ex04's
    slope test fits the student's times with their loglog_slope): its name
    says what it tests."""
    name = test.name.split("[")[0].removeprefix("test_")
    found = [fn for fn in order if name == fn or name.startswith(fn + "_")]
    return max(found, key=len) if found else None


def depth_of(test: TestResult, called: dict[int, list[str]], order: list[str]) -> int | None:
    """Where in the exercise's order a test sits: its subject's place, else
    the latest function it called."""
    named = subject(test, order)
    return order.index(named) if named else _depth(called.get(id(test), []), order)


def upstream_function(failed: list[TestResult], called: dict[int, list[str]],
                      exercise: str) -> tuple[str | None, list[TestResult]]:
    """The most upstream function a failing test of the exercise reached, and
    the failing tests that reach further downstream (the ones to grade again
    with the reference's function)."""
    order = function_order(exercise)
    depths = {id(t): depth_of(t, called, order) for t in failed}
    known = [d for d in depths.values() if d is not None]
    if not known:
        return None, []
    top = min(known)
    return order[top], [t for t in failed if depths[id(t)] is not None and depths[id(t)] > top]


def upstream_functions(failed: list[TestResult], called: dict[int, list[str]],
                       exercise: str) -> tuple[tuple[str, ...], list[TestResult]]:
    """Every function a failing test of the exercise reached last, but those
    of the tests that reach furthest downstream, upstream first; and those
    tests (the ones to grade again with all of those functions the
    reference's).  (), [] when the failing tests reach one function."""
    order = function_order(exercise)
    depths = {id(t): depth_of(t, called, order) for t in failed}
    known = sorted({d for d in depths.values() if d is not None})
    if len(known) < 2:
        return (), []
    return (tuple(order[d] for d in known[:-1]),
            [t for t in failed if depths[id(t)] == known[-1]])


def _names(mistake: str) -> list[str]:
    """"X (or: Y)" names X and Y, in that order (two mistakes gave the same
    answer on that case)."""
    first, _, other = mistake.partition(OR)
    return [n for n in (first, other.removesuffix(")")) if n]


def _same(a: str | None, b: str | None) -> bool:
    """Do two named mistakes agree (name one mistake in common)?"""
    return bool(a and b and set(_names(a)) & set(_names(b)))


@dataclass
class _Failure:
    test: TestResult
    mistake: str | None = None
    depth: int | None = None
    root: _Failure | None = None       # rule 2: the failure whose mistake it follows
    where: str = ""                    # that root's function, or its test's title
    evidence: Upstream | None = None   # rule 1: what it passes with


def _within(failures: list[_Failure], called: dict[int, list[str]], order: list[str]) -> None:
    """Rule 2: mark each failure that follows a more upstream one's mistake."""
    for f in failures:
        f.mistake = named_mistake(f.test.output)
        f.depth = depth_of(f.test, called, order)
    named = [f for f in failures if f.mistake and f.depth is not None and f.evidence is None]
    for f in named:
        roots = [r for r in named if _same(r.mistake, f.mistake) and r.depth < f.depth]
        if roots:
            f.root = min(roots, key=lambda r: r.depth)   # the first of the most upstream
            fns = [subject(f.root.test, order)] if subject(f.root.test, order) else \
                [g for g in called.get(id(f.root.test), []) if g in order]
            f.where = fns[0] if len(set(fns)) == 1 else f'"{f.root.test.title}"'


def _lift(failures: list[_Failure], order: list[str]) -> None:
    """Where the mistaken function's own failures name no mistake but one that
    follows from it does (its test had a known mistake to compare with), the
    first of its own failures names that mistake: the diagnosis is said where
    the cause is."""
    if any(f.mistake for f in failures if f.evidence is None):
        return
    for f in failures:
        up = f.evidence
        if up is None or up.module or not f.mistake or up.cause not in order:
            continue
        own = [g for g in failures if g.evidence is None and g.depth == order.index(up.cause)]
        if own:
            own[0].mistake = f.mistake
            own[0].test.output = f"{LOOKS_LIKE}{f.mistake}.\n{own[0].test.output}"
            return


def _lead(failures: list[_Failure]) -> _Failure | None:
    """The failure to show first: the most upstream one naming a mistake of its
    own, else the first that follows from an earlier exercise."""
    roots = [f for f in failures if f.mistake and f.root is None and f.evidence is None]
    if roots:
        return min(roots, key=lambda f: (f.depth is None, f.depth or 0))
    return next((f for f in failures if f.evidence is not None and f.evidence.module), None)


def _show_first(report: Report, lead: TestResult, first: TestResult) -> None:
    """Move ``lead`` to the place of ``first`` in the report's order."""
    if lead is first:
        return
    tests = report.tests
    tests.remove(lead)
    tests.insert(tests.index(first), lead)


def _what(report: Report, up: Upstream, failures: list[_Failure],
          leads: dict[str, str | None]) -> str:
    """What the first follower of ``up`` says of its cause."""
    if not up.module:
        named = any(f.mistake for f in failures if f.evidence is None)
        return "the mistake named above" if named else "see its failures above"
    parts = []
    for module in up.cause.split(" and "):
        if module not in report.exercises:
            # An exercise's module that imports it failed for want of its file:
            # the student's is missing, not merely left out of this run.
            missing = any(f"No module named '{module}'" in why
                          for why in report.import_errors.values())
            parts.append("not in this submission" if missing else "not graded in this run")
        elif leads.get(module):
            parts.append(f"{leads[module]}, named there")
        elif any(t.exercise == module and t.status == FAILED for t in report.tests):
            parts.append("see its failures there")
        else:
            parts.append("a mistake its own tests did not catch")
    return "; ".join(parts)


def _word(failures: list[_Failure], report: Report, leads: dict[str, str | None],
          end: str) -> None:
    """Rules 3 and 5: the followers' one line, and a mistake named once."""
    said = [f.mistake for f in failures if f.mistake and f.evidence is None]
    for up in dict.fromkeys(f.evidence for f in failures if f.evidence is not None):
        mine = [f for f in failures if f.evidence is up]
        for n, f in enumerate(mine, start=1):
            line = (FROM.format(cause=up.cause, end=end,
                                what=_what(report, up, failures, leads)) if n == 1 else
                    FROM_AGAIN.format(cause=up.cause, n=n, k=len(mine), end=end))
            if f.mistake and not any(_same(f.mistake, m) for m in said):
                line += f" Here it looks like: {f.mistake}."   # not said in the exercise yet
                said.append(f.mistake)
            f.test.output = line
    # Each mistake under the words it was first said in.
    first: dict[int, str] = {}
    for f in failures:
        if f.mistake and f.evidence is None:
            first[id(f)] = next((m for m in first.values() if _same(m, f.mistake)), f.mistake)
    counts: dict[str, int] = {}
    totals = {m: list(first.values()).count(m) for m in set(first.values())}
    for f in failures:
        if id(f) not in first:
            continue
        first_said = first[id(f)]
        n = counts[first_said] = counts.get(first_said, 0) + 1
        k = totals[first_said]
        more = not set(_names(f.mistake)) <= set(_names(first_said))   # one not yet said
        if f.root is not None:
            f.test.output = (FOLLOWS.format(where=f.where, n=n, k=k, end=end)
                             if n > 1 and not more else
                             FOLLOWS_NAMED.format(where=f.where, mistake=f.mistake, end=end,
                                                  side="above" if n > 1 else "below"))
        elif n > 1 and not more:
            lines = f.test.output.splitlines()
            if lines and lines[0].startswith(LOOKS_LIKE):   # first: ``diagnosis_first``
                f.test.output = "\n".join([SAME.format(n=n, k=k)] + lines[1:])


def _said_once(failures: list[_Failure]) -> None:
    """Rule 5 for the rest: a sentence (a line that is not an indented detail)
    already shown in an earlier failure of the exercise is left out."""
    seen: set[str] = set()
    for f in failures:
        lines = f.test.output.splitlines()
        # (a random case's note, with the seed that draws it again, is each
        # failure's own: ``cases.RANDOM_ONLY``)
        kept = [x for x in lines if x.startswith(" ") or not x.strip() or x not in seen
                or RANDOM_ONLY in x]
        seen.update(x for x in lines if x.strip() and not x.startswith(" "))
        # Never only a heading (a fixed case's "on a case with ...:" before what
        # went wrong): the sentence then stays, for this failure says nothing else.
        if any(x.strip() and not x.rstrip().endswith(":") for x in kept):
            f.test.output = "\n".join(kept)


def _tested(test: TestResult, called: dict[int, list[str]], order: list[str]) -> str | None:
    """The contract function a test checks: the one it is named after, else
    the latest one it called (``depth_of``)."""
    at = depth_of(test, called, order)
    return order[at] if at is not None else None


def uncontradicted(report: Report, passed_checks: dict[int, list],
                   called: dict[int, list[str]]) -> int:
    """Choose, between known mistakes that give a failure's answer, those that
    the submission's other checks of the same function leave possible
    (``feedback.ruled_out``: a mistake whose own answer fails a check the
    submission passed, or differs from what it returned on another failing
    case), so that a mistake is named from every case that tells the slips
    apart (a missing element size and a missing V give the same answer in
    2-byte elements, not in 4) and no "This looks like" line contradicts
    another test where another known mistake explains the answer.  Only
    checks of the same function count: a plot drawn from the student's own
    weights passes whatever their ``attention`` does.  Where two mistakes
    were named, the one still possible stays; where none is left, another
    known mistake that gives the answer and that nothing rules out is named
    (``feedback.still_possible``); where there is none, the diagnosis stays:
    evidence chooses, it never leaves a failure without the mistake that
    gives its answer (a suite's candidate may be a pattern of the answer,
    "one token short", rather than the slip itself).  ``passed_checks`` maps
    ``id(test_result)`` to that test's checks, ``called`` to the functions
    it called.  Returns how many diagnoses were changed."""
    taken = 0
    for exercise in report.by_exercise():
        order = function_order(exercise)
        tests = [t for t in report.tests if t.exercise == exercise]
        ruled: dict[object, set[str]] = {}     # per function, only where needed
        for t in tests:
            said = named_mistake(t.output or "") if t.status == FAILED else None
            if not said:
                continue
            function = _tested(t, called, order)
            key = function if function is not None else id(t)   # unknown: its own checks
            if key not in ruled:
                ruled[key] = ruled_out([c for u in tests if u is t or (
                    function is not None and _tested(u, called, order) == function)
                    for c in passed_checks.get(id(u), [])])
            out = ruled[key]
            names = [said] if said in out else _names(said)
            left = [n for n in names if n not in out]
            if left == names:
                continue
            # another known mistake that gives this answer and that nothing rules out
            left = left or still_possible(passed_checks.get(id(t), []), out)[:2]
            if not left:
                continue
            taken += 1
            line = f"{LOOKS_LIKE}{one_or_two(left)}."
            lines = t.output.splitlines()
            at = next(i for i, x in enumerate(lines) if x.startswith(LOOKS_LIKE))
            t.output = "\n".join(lines[:at] + [line] + lines[at + 1:])
    return taken


def attribute(report: Report, called: dict[int, list[str]], *,
              upstream: dict[str, list[Upstream]] | None = None,
              deduct_each: bool = False) -> list[TestResult]:
    """Apply the rules above to a graded report, exercise by exercise in course
    order.  ``called`` maps ``id(test_result)`` to the submission's functions
    the test called; ``upstream`` holds, per exercise, what grading it again
    with a reference showed (earlier modules first).  Returns the tests that
    follow from a root cause (unless ``deduct_each``, they now hold their
    points)."""
    followers: list[TestResult] = []
    leads: dict[str, str | None] = {}   # exercise -> the mistake its first failure names
    end = COSTS if deduct_each else KEEPS
    for exercise in report.exercises + [e for e in report.by_exercise()
                                        if e not in report.exercises]:
        tests = [t for t in report.tests if t.exercise == exercise and t.status == FAILED]
        if not tests:
            continue
        failures = []
        for t in tests:
            t.output = diagnosis_first(t.output)
            evidence = next((up for up in (upstream or {}).get(exercise, [])
                             if t.name in up.passes), None)
            failures.append(_Failure(t, evidence=evidence))
        order = function_order(exercise)
        _within(failures, called, order)
        _lift(failures, order)
        lead = _lead(failures)
        if lead is not None:
            _show_first(report, lead.test, tests[0])
            leads[exercise] = lead.mistake
            position = {id(t): i for i, t in enumerate(report.tests)}
            failures.sort(key=lambda f: position[id(f.test)])
        _word(failures, report, leads, end)
        _said_once(failures)
        for f in failures:
            if f.root is not None or f.evidence is not None:
                if not deduct_each:
                    f.test.score, f.test.kept = f.test.max_score, True
                followers.append(f.test)
    if followers:
        report.notes.append(
            f"--deduct-each: {len(followers)} test(s) that fail only from a mistake found "
            "upstream cost their points too; each says where." if deduct_each else
            f"{len(followers)} test(s) kept their points: each fails only from a mistake "
            "found upstream, which costs once (--deduct-each counts each), and says where.")
    return followers


# -- the evidence: a second grading with a reference in place -----------------

def _names_module(module: Path, names) -> bool:
    """Does a student's module name any of these modules?  Read as text, never run."""
    try:
        text = module.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return False
    return any(re.search(rf"\b{re.escape(n)}\b", text) for n in names)


def reaching(module: Path, names) -> set[str] | None:
    """The top-level functions of a student's module whose code can reach a
    name imported from any of the modules ``names`` (ex03's functions that
    call into ex02), following calls to the module's other top-level
    functions; read as text (``ast``), never run.  None where the module
    cannot be read so (nothing is then ruled out)."""
    try:
        tree = ast.parse(module.read_text(encoding="utf-8", errors="replace"))
    except (OSError, SyntaxError, ValueError, RecursionError):
        return None
    upstream: set[str] = set()       # local names bound to the upstream modules or their names
    functions: dict[str, set[str]] = {}
    for node in tree.body:
        if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] in names:
            upstream |= {a.asname or a.name for a in node.names}
        elif isinstance(node, ast.Import):
            upstream |= {(a.asname or a.name).split(".")[0] for a in node.names
                         if a.name.split(".")[0] in names}
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            functions[node.name] = {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}
    if not upstream:
        return None          # reached some other way (importlib, a string): not judged
    reach = {f for f, used in functions.items() if used & upstream}
    grew = True
    while grew:
        more = {f for f, used in functions.items() if f not in reach and used & reach}
        grew = bool(more)
        reach |= more
    return reach


def _same_file(a: Path, b: Path) -> bool:
    try:
        return a.is_file() and not a.is_symlink() and a.read_bytes() == b.read_bytes()
    except OSError:
        return False


def reference_excerpt(source: str, name: str, *more: str) -> str | None:
    """The reference solution's function ``name`` (and the functions ``more``),
    with the imports, helpers and constants they use, and nothing else of the
    module: what replaces the student's functions in ``upstream_evidence``,
    so that the student's code there can reach no other reference answer."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None
    defined: dict[str, ast.stmt] = {}
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            defined[node.name] = node
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            for target in node.targets if isinstance(node, ast.Assign) else [node.target]:
                if isinstance(target, ast.Name):
                    defined[target.id] = node
    if any(n not in defined for n in (name, *more)):
        return None
    needed, todo = set(), [name, *more]
    while todo:
        node = defined[todo.pop()]
        if id(node) in needed:
            continue
        needed.add(id(node))
        todo += [n.id for n in ast.walk(node) if isinstance(n, ast.Name) and n.id in defined]
    keep = [node for node in tree.body if id(node) in needed
            or isinstance(node, (ast.Import, ast.ImportFrom))]
    return "\n\n".join(ast.get_source_segment(source, node) or "" for node in keep) + "\n"


REFERENCE_MODULE = "_attn_reference_{}"   # the excerpt's module, beside the student's


def regrade(report: Report, submission: Path, options: Options,
            jobs: dict[str, tuple[dict[str, str], str | None]], start: float,
            fork_server: ForkServer | None = None, *, grade) -> set[tuple]:
    """The (exercise, test name) pairs that pass when each exercise of ``jobs``
    (exercise -> (files, keyword)) is graded again with its files (name ->
    text) in a copy of the submission of its own: one grading for them all,
    each exercise's workers seeing only its own copy, so that what one
    exercise's files fix reaches no other (ex03 imports ex02), forked from
    ``fork_server`` (the first grading's) where it is given.  The same cases
    (the run's seed), its workers confined as every worker is.  Only pass or
    fail is read: its feedback, which could quote the reference, is never
    shown.  Nothing where too little of the grading's budget is left for a
    second grading: then each failure costs."""
    left = options.grading_budget
    if left is not None:
        left -= time.perf_counter() - start
    if not jobs or (left is not None and left < 10):
        return set()
    keyword = " or ".join(f"({kw})" for _, kw in jobs.values() if kw)
    if keyword and options.keyword:
        keyword = f"({options.keyword}) and ({keyword})"
    with tempfile.TemporaryDirectory(prefix="attn-upstream-") as tmp:
        folders = {}
        try:
            for exercise, (files, _) in jobs.items():
                folder = folders[exercise] = Path(tmp) / exercise / "submission"
                shutil.copytree(submission, folder, symlinks=True)   # links stay links
                for file, text in files.items():
                    (folder / file).unlink(missing_ok=True)
                    (folder / file).write_text(text, encoding="utf-8")
        except OSError:
            return set()      # no evidence: each failure costs
        again = grade(submission, dataclasses.replace(
            options, exercises=list(jobs), seed=report.seed, check_upstream=False,
            keyword=keyword or options.keyword, artifacts_dir=None, grading_budget=left),
            folders=folders, fork_server=fork_server)
    return set() if again.errors else {(t.exercise, t.name) for t in again.tests
                                       if t.status == PASSED}


def _only(tests) -> str:
    """A pytest -k expression that selects these tests (and perhaps others
    whose names contain theirs: only these are read)."""
    return " or ".join(sorted({t.name.split("[")[0] for t in tests}))


def upstream_evidence(report: Report, called: dict[int, list[str]], submission: Path,
                      options: Options, start: float,
                      fork_server: ForkServer | None = None, *, grade
                      ) -> dict[str, list[Upstream]]:
    """The evidence for root causes (``grader.rootcause``): an exercise with a
    failing test is graded again with a reference in place of the part of the
    student's work it builds on, and a failure that passes then follows from
    that part.  Two parts, each tried once per exercise, each one grading for
    every exercise (``regrade``):

    - the earlier exercises its module names (``Exercise.after``: ex03
      imports ex02), replaced by their reference solutions;
    - the most upstream function of the exercise that a failing test reached,
      for the failing tests that reach further, unexplained by the first
      (their own module, with that function taken from ``reference_excerpt``);
    - for the failing tests still unexplained, every function upstream of
      them whose own tests fail, replaced together: one slip in a helper that
      two functions share (ex05's ``_attend`` under prefill and decode) fails
      both, and what calls the second passes only when both are right.

    Not in the student edition (no solutions), nor inside such a grading,
    nor where the grading keeps the solutions from workers that could
    otherwise keep a copy (the fallback isolation as root: ``grade`` does not
    call it there)."""
    if not options.check_upstream or not SOLUTIONS_DIR.is_dir():
        return {}
    failing = {name: failed for name in report.exercises
               if (failed := [t for t in report.tests
                              if t.exercise == name and t.status == FAILED])}
    out: dict[str, list[Upstream]] = {name: [] for name in failing}
    earlier: dict[str, tuple[str, ...]] = {}
    for name, failed in failing.items():
        # (a module that is the reference already cannot be the cause)
        deps = tuple(d for d in EXERCISES[name].after if (SOLUTIONS_DIR / f"{d}.py").is_file()
                     and not _same_file(submission / f"{d}.py", SOLUTIONS_DIR / f"{d}.py"))
        if deps and _names_module(submission / f"{name}.py", deps):
            earlier[name] = deps
    # only the failing tests: a passing one has nothing to explain
    passed = regrade(report, submission, options, {
        name: ({f"{d}.py": (SOLUTIONS_DIR / f"{d}.py").read_text() for d in deps},
               _only(failing[name])) for name, deps in earlier.items()}, start, fork_server,
        grade=grade)
    for name, deps in earlier.items():
        # A failure follows from an earlier module only where the functions
        # the test called can reach it: a red team's ex03 answered wrongly
        # beside its own ex02 and rightly beside the reference, in functions
        # that never call ex02 (the points were kept for answers never right).
        reach = reaching(submission / f"{name}.py", deps)
        out[name].append(Upstream(" and ".join(deps), True, frozenset(
            t.name for t in failing[name] if (name, t.name) in passed
            and (reach is None or not called.get(id(t)) or set(called[id(t)]) & reach))))
    own: dict[str, tuple[str, list]] = {}
    for name, failed in failing.items():
        explained = {t.name for up in out[name] for t in failed if t.name in up.passes}
        fn, downstream = upstream_function(
            [t for t in failed if t.name not in explained], called, name)
        solution, module = SOLUTIONS_DIR / f"{name}.py", submission / f"{name}.py"
        excerpt = reference_excerpt(solution.read_text(), fn) if fn and downstream \
            and solution.is_file() else None
        if excerpt is None or not module.is_file() or module.is_symlink():
            continue
        ref = REFERENCE_MODULE.format(name)
        patched = (module.read_text(encoding="utf-8", errors="replace") +
                   f"\n\n# attn-grade: the reference's {fn} in place of yours\n"
                   f"from {ref} import {fn}  # noqa: E402,F811\n")
        own[name] = (fn, downstream, {f"{name}.py": patched, f"{ref}.py": excerpt})
    passed = regrade(report, submission, options, {
        name: (files, _only(downstream)) for name, (_, downstream, files) in own.items()},
        start, fork_server, grade=grade)
    for name, (fn, downstream, _) in own.items():
        out[name].append(Upstream(fn, False, frozenset(
            t.name for t in downstream if (name, t.name) in passed)))
    _several_upstream(report, out, failing, called, submission, options, start, fork_server,
                      grade)
    return out


def _several_upstream(report: Report, out: dict[str, list[Upstream]],
                      failing: dict[str, list],
                      called: dict[int, list[str]], submission: Path, options: Options,
                      start: float, fork_server: ForkServer | None, grade) -> None:
    """The third part of ``upstream_evidence``: the failing tests no part
    explained yet, graded again with every function upstream of them whose
    own tests fail taken from the reference (two or more; one was the second
    part), in one grading for every exercise."""
    jobs: dict[str, tuple[tuple[str, ...], list, dict[str, str]]] = {}
    for name, failed in failing.items():
        explained = {t.name for up in out[name] for t in failed if t.name in up.passes}
        fns, downstream = upstream_functions(
            [t for t in failed if t.name not in explained], called, name)
        solution, module = SOLUTIONS_DIR / f"{name}.py", submission / f"{name}.py"
        if len(fns) < 2 or not downstream or not solution.is_file() or not module.is_file() \
                or module.is_symlink():
            continue
        excerpt = reference_excerpt(solution.read_text(), *fns)
        if excerpt is None:
            continue
        ref = REFERENCE_MODULE.format(name)
        patched = (module.read_text(encoding="utf-8", errors="replace") +
                   f"\n\n# attn-grade: the reference's {', '.join(fns)} in place of yours\n"
                   f"from {ref} import {', '.join(fns)}  # noqa: E402,F811\n")
        jobs[name] = (fns, downstream, {f"{name}.py": patched, f"{ref}.py": excerpt})
    if not jobs:
        return
    passed = regrade(report, submission, options, {
        name: (files, _only(downstream)) for name, (_, downstream, files) in jobs.items()},
        start, fork_server, grade=grade)
    for name, (fns, downstream, _) in jobs.items():
        out[name].append(Upstream(" and ".join(fns), False, frozenset(
            t.name for t in downstream if (name, t.name) in passed)))
