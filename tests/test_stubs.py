"""Stubs are derived from the solutions, and both follow the contract."""
from __future__ import annotations

import ast
import json

import pytest

from grader.registry import EXERCISES, contract
from grader.paths import CONTRACT_PATH
from grader.stubs import StubError, derive_stub
from tests.conftest import EXERCISES_DIR, REPO, SOLUTIONS

# The quick tier (tests/conftest.py): no PyTorch import, no grading.
pytestmark = pytest.mark.quick

SOLVED = sorted(p.stem for p in SOLUTIONS.glob("*.py"))
CONTRACT_SOLVED = [n for n in SOLVED if n in contract()["modules"]]


def contract_gaps(shared: dict, ours: dict) -> list[str]:
    """What of the shared contract ``ours`` lacks or changes (empty: a superset).

    The project's contract extends the shared one with graded tasks of its own
    (additions only): every shared module, function (with its parameters, in
    order, defaults included) and constant must be there unchanged; new
    modules, functions and constants may be added."""
    gaps = []
    for name, spec in shared["modules"].items():
        mine = ours["modules"].get(name)
        if mine is None:
            gaps.append(f"module {name} is missing")
            continue
        for fname, params in spec["functions"].items():
            if fname not in mine["functions"]:
                gaps.append(f"{name}.{fname} is missing")
            elif mine["functions"][fname] != params:
                gaps.append(f"{name}.{fname}: parameters differ from the shared contract")
        gaps += [f"{name}.{c} is missing" for c in spec["constants"]
                 if c not in mine["constants"]]
    return gaps


def test_contract_copy_matches_the_curriculum():
    """The shared contract is a subset of the project's (which only adds)."""
    shared = REPO.parent / "shared" / "contract.json"
    if not shared.exists():
        pytest.skip("no ../shared/contract.json beside this checkout")
    assert not contract_gaps(json.loads(shared.read_text()),
                             json.loads(CONTRACT_PATH.read_text()))


def contract_additions(shared: dict, ours: dict) -> list[tuple[str, str]]:
    """(module, name) of each function or constant ``ours`` adds to ``shared``."""
    added = []
    for module, spec in ours["modules"].items():
        theirs = shared["modules"].get(module, {"functions": {}, "constants": []})
        added += [(module, f) for f in spec["functions"] if f not in theirs["functions"]]
        added += [(module, c) for c in spec["constants"] if c not in theirs["constants"]]
    return added


def _call_as_written(params: list[dict]) -> str:
    """How the curriculum notes write a call's opening: ``name(a, b`` (the
    parameters without a default, in order)."""
    return ", ".join(p["name"] for p in params if "default" not in p
                     and p["kind"] == "positional_or_keyword")


def test_each_addition_to_the_contract_is_written_down():
    """grader/contract.json strictly extends the shared one (issue 29: the new
    graded tasks), and each addition is stated where an independent author
    reads it: docs/CURRICULUM_NOTES.md writes its call, and the stub's
    function carries a docstring (its shapes and conventions)."""
    shared = REPO.parent / "shared" / "contract.json"
    if not shared.exists():
        pytest.skip("no ../shared/contract.json beside this checkout")
    ours = json.loads(CONTRACT_PATH.read_text())
    added = contract_additions(json.loads(shared.read_text()), ours)
    assert added, "grader/contract.json adds nothing to the shared contract"
    notes = " ".join((REPO / "docs" / "CURRICULUM_NOTES.md").read_text().split())
    unwritten = []
    for module, name in added:
        params = ours["modules"][module]["functions"].get(name)
        written = f"`{name}({_call_as_written(params)}" if params is not None else f"`{name}`"
        if written not in notes:
            unwritten.append(f"docs/CURRICULUM_NOTES.md lacks {written}")
        tree = ast.parse((EXERCISES_DIR / f"{module}.py").read_text())
        found = {n.name: n for n in tree.body if isinstance(n, ast.FunctionDef)}
        if params is not None and not (name in found and ast.get_docstring(found[name])):
            unwritten.append(f"exercises/{module}.py: {name} has no docstring")
        if name not in ast.get_docstring(tree):
            unwritten.append(f"exercises/{module}.py's docstring never names {name}")
    assert not unwritten, "\n".join(unwritten)


def test_contract_subset_rule_catches_a_removal_or_a_change():
    ours = json.loads(CONTRACT_PATH.read_text())
    assert not contract_gaps(ours, ours)
    bigger = json.loads(CONTRACT_PATH.read_text())
    bigger["modules"]["ex06_gqa_intensity"]["functions"]["extra_task"] = []
    assert not contract_gaps(ours, bigger)              # an addition is fine
    assert contract_gaps(bigger, ours) == ["ex06_gqa_intensity.extra_task is missing"]
    changed = json.loads(CONTRACT_PATH.read_text())
    changed["modules"]["ex03_gqa"]["functions"]["kv_cache_saving"][0]["name"] = "h"
    assert contract_gaps(ours, changed) == [
        "ex03_gqa.kv_cache_saving: parameters differ from the shared contract"]
    del changed["modules"]["ex01_by_hand"]["constants"][0]
    assert "ex01_by_hand.SCORES is missing" in contract_gaps(ours, changed)


def test_every_contract_module_is_an_exercise():
    in_contract = [name for name, ex in EXERCISES.items() if ex.in_contract]
    assert sorted(contract()["modules"]) == sorted(in_contract)


def test_extras_beyond_the_contract_are_declared_and_solved():
    """A registered module outside the contract (the questions) says so, and
    is a full exercise: a solution, a derived stub (checked below), suites."""
    from grader.registry import suite_files

    extras = [name for name in EXERCISES if name not in contract()["modules"]]
    assert "questions" in extras   # and any other the registry declares
    for name in extras:
        assert not EXERCISES[name].in_contract
        assert name in SOLVED and suite_files(name, "hidden")


@pytest.mark.author
@pytest.mark.parametrize("name", SOLVED)
def test_committed_stub_is_the_derived_one(name):
    want = derive_stub((SOLUTIONS / f"{name}.py").read_text(), name)
    stub = EXERCISES_DIR / f"{name}.py"
    assert stub.exists(), f"exercises/{name}.py is missing: run `attn-grade stubs`"
    assert stub.read_text() == want, f"exercises/{name}.py is stale: run `attn-grade stubs`"


def _signature(fn: ast.FunctionDef) -> list[dict]:
    a = fn.args
    out = []
    positional = a.posonlyargs + a.args
    defaults = [None] * (len(positional) - len(a.defaults)) + list(a.defaults)
    for arg, default in zip(positional, defaults):
        out.append(("positional_or_keyword", arg.arg, default))
    if a.vararg:
        out.append(("var_positional", a.vararg.arg, None))
    for arg, default in zip(a.kwonlyargs, a.kw_defaults):
        out.append(("keyword_only", arg.arg, default))
    if a.kwarg:
        out.append(("var_keyword", a.kwarg.arg, None))
    return out


def _default_text(node):
    if node is None:
        return "<none>"
    try:
        value = ast.literal_eval(node)
    except ValueError:
        return ast.unparse(node)
    return list(value) if isinstance(value, tuple) else value


@pytest.mark.author
@pytest.mark.parametrize("folder", ["solutions", "exercises"])
@pytest.mark.parametrize("name", CONTRACT_SOLVED)
def test_module_follows_the_contract(folder, name):
    spec = contract()["modules"][name]
    tree = ast.parse((REPO / folder / f"{name}.py").read_text())
    functions = {n.name: n for n in tree.body if isinstance(n, ast.FunctionDef)}
    assigned = {t.id for n in tree.body if isinstance(n, (ast.Assign, ast.AnnAssign))
                for t in (n.targets if isinstance(n, ast.Assign) else [n.target])
                if isinstance(t, ast.Name)}
    for const in spec["constants"]:
        assert const in assigned, f"{folder}/{name}.py does not define {const}"
    for fname, params in spec["functions"].items():
        assert fname in functions, f"{folder}/{name}.py does not define {fname}()"
        got = _signature(functions[fname])
        assert len(got) >= len(params), f"{fname}: fewer parameters than the contract"
        for want, (kind, pname, default) in zip(params, got):
            assert (kind, pname) == (want["kind"], want["name"]), f"{fname}: {pname}"
            if "default" in want:
                want_default = want["default"]
                have = _default_text(default)
                if isinstance(want_default, str) and want_default.startswith("torch."):
                    assert have == want_default, f"{fname}({pname}) default"
                else:
                    assert have == want_default, f"{fname}({pname}) default {have!r}"
        for kind, pname, default in got[len(params):]:
            assert default is not None or kind.startswith("var_"), \
                f"{fname}: extra parameter {pname} needs a default"


def test_stub_rules():
    src = ('"""doc"""\n'
           "def f(x):\n    '''task'''\n    # BEGIN SOLUTION\n    return x\n    # END SOLUTION\n"
           "# BEGIN SOLUTION\nA = 1\ndef _helper():\n    pass\n# END SOLUTION\n"
           "def g():\n    # BEGIN SOLUTION\n    # STUB: return 0  # your code\n"
           "    return 1\n    # END SOLUTION\n")
    out = derive_stub(src, "m")
    assert 'raise NotImplementedError("m.f: your code here")' in out
    assert "A = None" in out and "_helper" not in out
    assert "    return 0  # your code" in out and "return 1" not in out
    with pytest.raises(StubError, match="never ended"):
        derive_stub("# BEGIN SOLUTION\nA = 1\n", "m")


def test_stubs_command_check_mode_passes_on_the_committed_tree():
    from click.testing import CliRunner

    from grader.cli import main
    result = CliRunner().invoke(main, ["stubs", "--check"])
    assert result.exit_code == 0, result.output


def test_stubs_command_says_what_it_wrote_and_when_nothing_was(tmp_path, monkeypatch):
    import shutil

    from click.testing import CliRunner

    from grader import cli
    from tests.conftest import SOLUTIONS
    (tmp_path / "solutions").mkdir()
    for name in ("ex01_by_hand", "questions"):
        shutil.copy(SOLUTIONS / f"{name}.py", tmp_path / "solutions" / f"{name}.py")
    monkeypatch.setattr(cli, "REPO_DIR", tmp_path)
    monkeypatch.setattr(cli, "SOLUTIONS_DIR", tmp_path / "solutions")
    monkeypatch.setattr(cli, "EXERCISES_DIR", tmp_path / "exercises")
    first = CliRunner().invoke(cli.main, ["stubs"])
    assert first.exit_code == 0, first.output
    assert "wrote exercises/ex01_by_hand.py" in first.output
    assert "2 stubs written, 0 already up to date in exercises/" in first.output
    again = CliRunner().invoke(cli.main, ["stubs"])
    assert "all 2 stubs in exercises/ are up to date with their solutions; nothing written" \
        in again.output
