"""Exercise G's GPU compile: a kernel launch is compiled once, for a student and for a class.

The launch key leaves out where the kernel sits in its file (Triton's own
key holds each function's first line), so a line added above the kernel or
an edit of the host code compiles nothing again; a grading run's shared
cache (``grader/reference/compile_cache.py``) gives a launch compiled for
one submission to the next submission with the same kernel, and only to
one whose kernel the grading process finds, token for token, in its files.
The compiles here are counted, not run (``gpu_compile.compile_launch`` is
replaced): what a real compile answers is ``tests/test_gpu_compile.py``'s.
"""
from __future__ import annotations

import importlib.util
import json
import os
import threading
from pathlib import Path

import pytest

from grader.reference import compile_cache, flash_judge
from tests.conftest import copy_solutions

triton = pytest.importorskip("triton")
if os.environ.get("TRITON_INTERPRET"):
    pytest.skip("the kernels must be JITFunctions (no TRITON_INTERPRET)", allow_module_level=True)

FILE = "ex07_flash_attention.py"
HOST_LINE = "def flash_attention(q, k, v, *, causal=True, sm_scale=None):"
KERNEL_LINE = "    def _flash_fwd("


def _variant(folder: Path, *, line_above=False, host_edit=False, kernel_edit=False) -> Path:
    """The solution's ex07 in ``folder``, with what is asked: a module line
    added above the imports, a line added to the host function, a statement
    added to the kernel."""
    sub = copy_solutions(folder, ["ex07_flash_attention"])
    text = (sub / FILE).read_text()
    assert HOST_LINE in text and KERNEL_LINE in text
    if line_above:
        text = text.replace("from __future__ import annotations",
                            "from __future__ import annotations\nEXTRA_LINE = 1", 1)
    if host_edit:
        text = text.replace(HOST_LINE, HOST_LINE + "\n    host_only = 0  # a host-only edit", 1)
    if kernel_edit:     # the same kernel with one more statement: another kernel
        start = text.index(KERNEL_LINE)
        body = text.index("):\n", start) + 3
        text = text[:body] + "        unused_in_kernel = 0\n" + text[body:]
    (sub / FILE).write_text(text)
    return sub


def _load(sub: Path, name: str):
    """The module as a GPU compile sees it (its kernels ``JITFunction`` s)."""
    spec = importlib.util.spec_from_file_location(name, sub / FILE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _plan(module, sub: Path, monkeypatch) -> dict:
    from grader.sandbox.runtime.probes import ex07_flash_attention as probe
    monkeypatch.chdir(sub)        # the worker's folder: what is in the submission
    return probe.compile_plan(module)


def _keys(plan) -> list:
    return [row.get("key") for t in plan["targets"] for row in t["rows"]]


def test_the_launch_key_leaves_out_lines_and_host_code(tmp_path, monkeypatch):
    """Triton's own key of the kernel changes when a line is added above it;
    the launch key does not, nor with an edit of the host code; an edit of
    the kernel changes it.  Triton's own key is left as it was."""
    from grader.sandbox.runtime.probes import ex07_flash_attention as probe
    plans, triton_keys = {}, {}
    for n, (name, edit) in enumerate((("plain", {}), ("line", {"line_above": True}),
                                      ("host", {"host_edit": True}),
                                      ("kernel", {"kernel_edit": True}))):
        sub = _variant(tmp_path / name, **edit)
        module = _load(sub, f"ex07_key_{n}")
        plans[name] = _plan(module, sub, monkeypatch)
        fn = module._flash_fwd.fn        # the autotuner's kernel
        before = fn.cache_key
        assert probe.source_key(fn) is not None
        assert fn.cache_key == before    # Triton's key, and its checks, untouched
        triton_keys[name] = before
    assert len(_keys(plans["plain"])) == 12 and None not in _keys(plans["plain"])
    assert triton_keys["line"] != triton_keys["plain"]      # why: its first line is in it
    assert _keys(plans["line"]) == _keys(plans["host"]) == _keys(plans["plain"])
    assert not set(_keys(plans["kernel"])) & set(_keys(plans["plain"]))


class _InProcess:
    """The compile worker of one submission, answering as the probes do but in
    this process; the grading's ``launch_worker`` is the module itself."""

    def __init__(self, module):
        self.module = module
        self._worker = self

    def close(self):
        pass

    _ensure = kill = close

    def probe(self, name, *args, **kwargs):
        from grader.sandbox.runtime.probes import ex07_flash_attention as probe
        return getattr(probe, name.split(".")[-1])(self.module, *args, **kwargs)


@pytest.fixture
def counted(monkeypatch):
    """The full compiles made, as ``(capability, kernel name)``; each answers
    as a compile that fits would."""
    from grader.sandbox.runtime.probes import gpu_compile
    monkeypatch.setattr(flash_judge, "compile_worker", _InProcess)
    made, lock = [], threading.Lock()

    def fake_compile(fn, args, kwargs, capability, front_end_only=False):
        with lock:
            made.append((capability, fn.__name__))
        shared = kwargs["BLOCK_N"] * kwargs["D_HEAD"] * 4 * kwargs["num_stages"]
        return {"ok": True, "registers": 100 + capability, "spill_bytes": 0,
                "shared_bytes": shared, "fits": True, "wgmma": capability >= 90,
                "tma": False, "num_warps": kwargs["num_warps"],
                "num_stages": kwargs["num_stages"], "settings": []}
    monkeypatch.setattr(gpu_compile, "compile_launch", fake_compile)
    return made


def _grade(sub: Path, name: str, shared: Path, monkeypatch) -> dict:
    monkeypatch.chdir(sub)
    res, cached = flash_judge.compile_results(sub, _load(sub, name), None, shared)
    assert not cached                   # a grading keeps no whole answer
    return res


def _rows(res) -> list:
    return [row for t in res["targets"] for row in t["rows"]]


def test_a_batch_compiles_a_shared_kernel_once(tmp_path, monkeypatch, counted):
    """Two submissions of a class with the same kernel (the second with a line
    above its imports and other host code) compile it once: the second
    grading takes every launch from the class's cache, with the same answer.
    A third whose kernel differs compiles all of its own."""
    shared = tmp_path / "class_compile"
    first = _grade(_variant(tmp_path / "s1"), "ex07_s1", shared, monkeypatch)
    assert len(counted) == 12 and not any(r.get("kept") for r in _rows(first))
    assert len(list(shared.rglob("*.json"))) == 12

    second = _grade(_variant(tmp_path / "s2", line_above=True, host_edit=True), "ex07_s2",
                    shared, monkeypatch)
    assert len(counted) == 12                                   # nothing compiled again
    assert all(r.get("kept") and r.get("shared") for r in _rows(second))
    answer = ("ok", "registers", "shared_bytes", "fits", "num_stages")
    assert [[r[k] for k in answer] for r in _rows(second)] == \
        [[r[k] for k in answer] for r in _rows(first)]
    said = flash_judge.judge_compile(second)
    assert "12 of 12 answered from this grading run's compile cache" in said
    assert "compile cache" not in flash_judge.judge_compile(first)

    third = _grade(_variant(tmp_path / "s3", kernel_edit=True), "ex07_s3", shared, monkeypatch)
    assert len(counted) == 24 and not any(r.get("kept") for r in _rows(third))


def test_a_forged_row_reaches_only_the_same_kernel(tmp_path, monkeypatch, counted):
    """What a worker says of its launches is bound here to the kernel's text
    as the grading process reads it from the files: a row is read back only
    for a kernel found once there, only as an answer that compiled and fits,
    of the expected types."""
    shared = tmp_path / "class_compile"
    sub = _variant(tmp_path / "s1")
    files = [sub / FILE]
    cache = compile_cache.SharedCompiles(shared, files, digest="d")
    row = {"kernel": "_flash_fwd", "key": "launch-key", "in_submission": True}
    good = {"ok": True, "registers": 1, "spill_bytes": 0, "shared_bytes": 2, "fits": True,
            "wgmma": False, "tma": False, "num_warps": 4, "num_stages": 2}
    cache.put(80, {**row, **good, "settings": []})
    assert cache.get(80, row) == good and cache.get(90, row) is None
    # compiled under Triton settings the module changed (a red team's knob
    # allowing globals, which Triton's own error suggests): never shared
    for settings in (["TRITON_ALLOW_NON_CONSTEXPR_GLOBALS"], None):
        cache.put(90, {**row, **good, **({} if settings is None else {"settings": settings})})
        assert cache.get(90, row) is None
    # another grader (digest), another launch key, a kernel the files lack: nothing
    assert compile_cache.SharedCompiles(shared, files, digest="e").get(80, row) is None
    assert cache.get(80, {**row, "key": "other"}) is None
    assert cache.get(80, {**row, "kernel": "no_such_kernel"}) is None
    assert cache.get(80, {**row, "in_submission": False}) is None
    # the same launch key said by a submission whose kernel differs: nothing
    other = _variant(tmp_path / "s2", kernel_edit=True)
    assert compile_cache.SharedCompiles(shared, [other / FILE], digest="d").get(80, row) is None
    # only answers that compiled and fit are kept, and only plain ones are read
    for bad in ({"fits": False}, {"ok": False}, {"registers": True}, {"shared_bytes": "2"}):
        cache.put(90, {**row, **good, "settings": [], **bad})
        assert cache.get(90, row) is None
    path = cache._path(cache.key(80, row))
    path.write_text(json.dumps({**good, "fits": 1}))
    assert cache.get(80, row) is None
    # a kernel defined twice in the files is never shared
    twice = tmp_path / "twice.py"
    twice.write_text("def _flash_fwd():\n    pass\n")
    assert compile_cache.SharedCompiles(shared, files + [twice], digest="d").key(80, row) is None


def test_kernel_text_ignores_comments_layout_and_decorators(tmp_path):
    a, b, c = (tmp_path / n for n in ("a.py", "b.py", "c.py"))
    a.write_text("import triton\n@triton.jit\ndef k(x):\n    y = x + 1  # one\n    return y\n")
    b.write_text("# moved\n\nimport triton\n@triton.jit(debug=False)\ndef k(x):\n"
                 "    y = (x +\n         1)\n\n    return y\n")
    c.write_text("def k(x):\n    y = x + 2\n    return y\n")
    text = compile_cache.kernel_text
    assert text([a], "k") == text([b], "k") != text([c], "k")
    assert text([a], "missing") is None and text([a, c], "k") is None


def test_grade_and_batch_own_a_shared_compile_cache(tmp_path, monkeypatch):
    """`grade` shares compiles where --compile-cache says (none without it:
    its default options are an empty command line); `batch` keeps one beside
    the class's gradebook, which its grading slots are given; `check` none
    (it keeps its own)."""
    from click.testing import CliRunner

    from grader import cli
    from grader.classroom import batch as batch_module
    seen = []

    def fake_run(path, options):
        seen.append(options)
        raise SystemExit(0)

    monkeypatch.setattr(cli, "_run", fake_run)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    sub = copy_solutions(tmp_path / "sub", ["ex07_flash_attention"])
    for flags in ([], ["--compile-cache", str(tmp_path / "mine")]):
        result = CliRunner().invoke(cli.main, ["grade", str(sub), *flags])
        assert result.exit_code == 0, result.output
    result = CliRunner().invoke(cli.main, ["check", "G", "--path", str(sub)])
    assert result.exit_code == 0, result.output
    assert [o.compile_cache for o in seen] == [None, tmp_path / "mine", None]
    assert "--compile-cache" in seen[1].argv()      # what a batch slot's grade is given

    def fake_batch(subs, results, options, **kwargs):
        seen.append(options)
        return []
    monkeypatch.setattr(batch_module, "run_batch", fake_batch)
    folder = tmp_path / "class"
    copy_solutions(folder / "alice", ["ex07_flash_attention"])
    out = tmp_path / "book" / "grades.csv"
    CliRunner().invoke(cli.main, ["batch", str(folder), "--out", str(out)])
    assert seen[-1].compile_cache == tmp_path / "book" / "grades_compile"
    # shards of one class on many machines: one folder for all (the Slurm script's)
    CliRunner().invoke(cli.main, ["batch", str(folder), "--out", str(out),
                                  "--compile-cache", str(tmp_path / "all")])
    assert seen[-1].compile_cache == tmp_path / "all"
