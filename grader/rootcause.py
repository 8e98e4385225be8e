"""Root causes: one slip, named once, explained everywhere it shows.

A student's own ``softmax`` feeds their ``attention``, which feeds their
``multi_head_attention``: one wrong axis fails every test downstream, and
each failure names the same mistake.  After an exercise's tests ran, this
module finds, for each named mistake, the most upstream function whose test
named it (the contract lists an exercise's functions upstream first), and
puts a first line on each downstream failure that names the same mistake:
"This follows from the softmax mistake named above (...)".

With ``deduct_once`` (an instructor's choice, ``--deduct-once``) those
downstream failures keep their points: their answer is exactly what the
named mistake gives, so they fail only because of it.  The report's notes
say which tests kept their points, and the formats show each as passed with
that note ("KEPT" in the text table), not as a failure at full score.
"""
from __future__ import annotations

from grader.exercises import contract
from grader.feedback import named_mistake
from grader.report import FAILED, Report, TestResult

FOLLOWS = "This follows from the {where} mistake named {side} ({mistake})."
KEPT = ("It keeps its points (--deduct-once): a root cause costs points once per "
        "exercise.")


def function_order(exercise: str) -> list[str]:
    """The exercise's public functions, upstream first (the contract's order)."""
    module = contract()["modules"].get(exercise, {})
    return list(module.get("functions", {}))


def _depth(called: list[str], order: list[str]) -> int | None:
    """How far downstream a test reaches: the latest contract function it called."""
    known = [order.index(name) for name in called if name in order]
    return max(known) if known else None


def attribute(report: Report, called: dict[int, list[str]], *,
              deduct_once: bool = False) -> list[TestResult]:
    """Mark downstream failures that follow from a mistake named upstream.

    ``called`` maps ``id(test_result)`` to the submission's functions the
    test called.  Returns the tests that follow from a root cause (with
    ``deduct_once``, they now hold their points)."""
    followers: list[TestResult] = []
    for exercise, tests in report.by_exercise().items():
        order = function_order(exercise)
        named = []   # (position in report, test, mistake, depth)
        for pos, t in enumerate(tests):
            if t.status != FAILED:
                continue
            mistake = named_mistake(t.output)
            depth = _depth(called.get(id(t), []), order)
            if mistake and depth is not None:
                named.append((pos, t, mistake, depth))
        for pos, t, mistake, depth in named:
            roots = [(p, r, d) for p, r, m, d in named if m == mistake and d < depth]
            if not roots:
                continue
            root_depth = min(d for _, _, d in roots)
            p_root, root, _ = next(x for x in roots if x[2] == root_depth)
            fns = [f for f in called.get(id(root), []) if f in order]
            where = fns[0] if len(set(fns)) == 1 else f'"{root.title}"'
            first = FOLLOWS.format(where=where, side="above" if p_root < pos else "below",
                                   mistake=mistake)
            if deduct_once:
                t.score, t.kept = t.max_score, True
                first += " " + KEPT
            t.output = f"{first}\n{t.output}"
            followers.append(t)
    if deduct_once and followers:
        names = "; ".join(f"{t.exercise}: {t.title}" for t in followers)
        report.notes.append(f"--deduct-once: {len(followers)} test(s) kept their points "
                            f"because they fail only from a mistake named upstream: {names}")
    return followers
