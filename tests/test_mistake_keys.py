"""Every diagnosis the grader writes has a key (issue 30, item 1).

A "This looks like: ..." line names its mistake in words from a table
(``{key: text}``: ``timing.MISTAKES``, ``heatmap_checks.MISTAKES``, the
secret references' ...), and ``grader.insight`` keys the line by those
words; ``insight.tables`` finds every table.  Words written straight into a
line would get an ``unkeyed-`` id in the class's table, so the grader's
source is read for them: a line written without ``looks_like``, a
``looks_like`` of words that are no table's, a ``mistakes=`` mapping or an
``unchecked=`` (``expect_raises``) with words of its own.  The corpus of mutants (tests/test_mutants.py) checks the
same on what the grader really prints.
"""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

from grader.paths import PACKAGE_DIR

PHRASE = "This looks like:"
# Where the line itself is written: the constant, the builders that put a
# table's words (or an upstream line's) after it, and the reader.
BUILDERS = {"feedback.py", "reference/mistakes.py", "rootcause.py", "insight.py"}


def _docstrings(tree) -> set[int]:
    """ids of the docstring nodes (their words describe the line, write none)."""
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                out.add(id(body[0].value))
    return out


def _literal(node) -> bool:
    """Words written in place: a string or an f-string."""
    return isinstance(node, ast.JoinedStr) or (isinstance(node, ast.Constant)
                                               and isinstance(node.value, str))


def _is_looks_like_const(node, parents) -> bool:
    """feedback.py's ``LOOKS_LIKE = "This looks like: "`` itself."""
    parent = parents.get(id(node))
    return isinstance(parent, ast.Assign) and [getattr(t, "id", None) for t in
                                               parent.targets] == ["LOOKS_LIKE"]


def unkeyed_lines(path: Path, rel: str) -> list[str]:
    """'file:line: why' for each diagnosis ``path`` writes in words of its own."""
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    docs = _docstrings(tree)
    parents = {id(child): node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}
    found = []

    def flag(node, why):
        found.append((node.lineno, f"grader/{rel}:{node.lineno}: {why}"))

    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) \
                and PHRASE in node.value and id(node) not in docs \
                and not (rel == "feedback.py" and _is_looks_like_const(node, parents)):
            flag(node, f"{PHRASE!r} written out: use grader.reference.mistakes.looks_like "
                       "with a MISTAKES table's words")
        elif isinstance(node, ast.Name) and node.id == "LOOKS_LIKE" and rel not in BUILDERS:
            flag(node, "LOOKS_LIKE used outside the builders: use looks_like(MISTAKES[...])")
        elif isinstance(node, ast.Call):
            name = getattr(node.func, "id", getattr(node.func, "attr", None))
            if name == "looks_like" and node.args and _literal(node.args[0]):
                flag(node, "looks_like of words that are no table's: put them in a "
                           "MISTAKES table (grader.insight.tables)")
            for kw in node.keywords:
                if kw.arg == "unchecked" and _literal(kw.value):   # expect_raises's mistake
                    flag(kw.value, "unchecked= named in words of its own: take them from a "
                                   "MISTAKES table (grader.insight.tables)")
                if kw.arg != "mistakes":
                    continue
                for sub in ast.walk(kw.value):
                    if isinstance(sub, ast.Dict) and any(k is not None and _literal(k)
                                                         for k in sub.keys):
                        flag(sub, "mistakes= named in words of its own: take them from a "
                                  "MISTAKES table (grader.insight.tables)")
    return [why for _, why in sorted(found)]


def _sources():
    for path in sorted(PACKAGE_DIR.rglob("*.py")):
        yield path, path.relative_to(PACKAGE_DIR).as_posix()


@pytest.mark.quick
@pytest.mark.author
def test_no_diagnosis_in_the_grader_is_written_in_words_of_its_own():
    found = [line for path, rel in _sources() for line in unkeyed_lines(path, rel)]
    assert not found, "\n".join(found)


@pytest.mark.quick
def test_the_scan_finds_each_way_of_writing_words_of_its_own(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text('"""This looks like: a docstring is fine."""\n'
                   'from grader.feedback import LOOKS_LIKE\n'
                   'A = "\\nThis looks like: the words written out."\n'
                   'B = f"{LOOKS_LIKE}a slip."\n'
                   'C = looks_like("words of its own")\n'
                   'D = looks_like(MISTAKES["kept"])\n'
                   'check_equal(1, 2, what="x", mistakes={"its own words": 1})\n'
                   'check_equal(1, 2, what="x", mistakes=lambda: {f"{n} words": 1})\n'
                   'check_equal(1, 2, what="x", mistakes={MISTAKES["kept"]: 1})\n'
                   'expect_raises(f, "ValueError", what="x", unchecked="not checked")\n'
                   'expect_raises(f, "ValueError", what="x", unchecked=MISTAKES["kept"])\n')
    lines = [int(x.split(":")[1]) for x in unkeyed_lines(bad, "reference/bad.py")]
    assert lines == [3, 4, 5, 7, 8, 10], unkeyed_lines(bad, "reference/bad.py")


@pytest.mark.quick
@pytest.mark.author
def test_insight_finds_every_table_where_it_is_written(tmp_path, monkeypatch):
    """Every module-level dict named MISTAKES or *_MISTAKES in the reference
    folders and the hidden suites is a table (nothing lists them by hand:
    adding an exercise's table is writing it); a list of mistake names is none."""
    from grader import insight
    found = insight.tables()
    assert ("grader.reference.secret.attention", "MISTAKES") in found
    assert ("grader.reference.secret.flash", "FLASH_MISTAKES") in found
    assert not any(attr == "BLOCK_MISTAKES" for _, attr in found)      # a tuple of names
    # a new reference module's table is found, in its folder's name order
    root = tmp_path / "grader"
    for _, folder in insight.TABLE_FOLDERS:
        (root / folder).mkdir(parents=True, exist_ok=True)
    (root / "reference" / "zz_new.py").write_text('NEW_MISTAKES = {"slip": "a new slip"}\n'
                                                  'NAMES_MISTAKES = ["slip"]\n')
    monkeypatch.setattr(insight, "PACKAGE_DIR", root)
    assert insight.tables() == [("grader.reference.zz_new", "NEW_MISTAKES")]


# -- the round trip (these import the references, PyTorch with them) --------

def test_every_table_loads_and_its_words_render_to_a_line_keyed_by_its_key():
    from grader import insight
    from grader.reference.mistakes import looks_like

    tables = insight._reference_tables()
    assert [m for m, _ in tables] == [m.rsplit(".", 1)[-1] for m, _ in insight.tables()]
    seen: dict[str, str] = {}
    for module, table in tables:
        assert table, module
        for key, text in table.items():
            assert isinstance(text, str) and text.strip() == text and "\n" not in text, \
                (module, key)
            assert not text.endswith("."), (module, key, "the line adds the period")
            want = seen.get(text) or (key if insight.known_ids().get(text) == key
                                      else f"{module}.{key}")
            seen.setdefault(text, want)
            line = "what came back ...\n" + looks_like(text) + "\nexpected ..."
            assert insight.diagnoses(line) == [(want, text)], (module, key)
            # a line that says more after the words keeps their key and words
            more = looks_like(text, " (here: 3 of 4)")
            assert insight.diagnoses(more) == [(want, text)], (module, key)
            assert not want.startswith("unkeyed-")


def test_the_keys_of_the_references_stay_the_same():
    """Adding tables moved no id: the references' keys are their own, and a
    key met again with other words is qualified by its module."""
    from grader import insight
    from grader.reference import heatmap_checks, timing
    from grader.reference.secret import attention, by_hand, mla, roofline

    ids = insight.known_ids()
    assert all(ids[text] == key for key, text in attention.MISTAKES.items())
    assert ids[by_hand.MISTAKES["no_scale"]] == "by_hand.no_scale"
    assert ids[mla.MISTAKES["no_scale"]] == "mla.no_scale"
    assert ids[roofline.MISTAKES["flops_half"]] == "flops_half"
    assert ids[timing.MISTAKES["milliseconds"]] == "milliseconds"
    assert ids[heatmap_checks.MISTAKES["transposed"]] == "transposed"


def test_the_graders_own_lines_are_keyed():
    """Lines built where the words vary with the case keep the key."""
    from grader import insight
    from grader.reference import timing

    calls = [0.010, 0.011, 0.012]
    assert insight.diagnoses(timing._why_not_measured(11.0, calls, 5)) == \
        [("milliseconds", timing.MISTAKES["milliseconds"])]
    assert insight.diagnoses(timing._why_not_measured(0.055, calls, 5))[0][0] == "repeats_total"
    assert insight.diagnoses(timing._why_not_measured(1e-4, calls, 5))[0][0] == \
        "clock_stopped_early"
    assert insight.diagnoses(timing.NOT_MEASURED) == \
        [("not_measured", timing.MISTAKES["not_measured"])]
    line = ("This looks like: the wrong grouping: the value listed under h_kv=4 was measured "
            "with 2 KV heads (pass each h_kv itself as n_kv_heads).")
    assert insight.diagnoses(line) == [("wrong_grouping", "the wrong grouping")]
    # words no table holds still get an id, stable as long as they are
    unkeyed = insight.diagnoses("This looks like: a slip nobody named.")
    assert unkeyed[0][0].startswith("unkeyed-a-slip-nobody-named-")
