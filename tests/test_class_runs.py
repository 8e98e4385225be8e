"""A realistic class on each path that grades it in parts: the Actions
workflow's shell steps, and the Slurm job array, run here as their platforms
run them, join into what one unsharded ``batch`` writes.

The class has what a real one has: complete work with free-text answers
(rubric rows), an empty folder and a broken zip (ungraded: zero rows that say
why, and ``batch`` exits 3).  Exercise A and the questions only: no PyTorch
in the gradings.
"""
from __future__ import annotations

import csv
import json
import os
import re
import shlex
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from grader.cli import main
from tests.conftest import REPO, copy_solutions

yaml = pytest.importorskip("yaml", reason="pyyaml (the dev extra) reads the workflow")

EXERCISES = "ex01_by_hand questions"
WORKFLOW = REPO / ".github" / "workflows" / "grade-class.yml"
SLURM = REPO / "deploy" / "slurm"


def make_class(root: Path) -> Path:
    copy_solutions(root / "alice", ["ex01_by_hand", "questions"])   # rubric rows
    copy_solutions(root / "carol", ["questions"])                   # rubric rows, another shard
    (root / "empty").mkdir()                                        # nothing to grade
    (root / "broken.zip").write_bytes(b"PK\x03\x04 this is no zip")
    # What staff give every path alike, beside the class: a roster (dan handed
    # nothing in), the LMS's times (carol two days late) and a late policy.
    staff = root.parent / "staff"
    staff.mkdir()
    (staff / "roster.csv").write_text("submission,student_id\ncarol,carol02\n,dan03\n")
    (staff / "times.csv").write_text("submission,submitted_at\nalice,2026-12-15T10:00\n"
                                     "carol,2026-12-17T10:00\n")
    return root


# The same options on every path: batch's own, Slurm's `submit.sh ... --`, the workflow's input.
OPTIONS = ["--roster", "staff/roster.csv", "--due", "2026-12-15T23:59", "--late-policy",
           "10%/day,max 3", "--submitted-times", "staff/times.csv", "--seed", "7"]


def export(grades: Path) -> str:
    """``attn-grade export`` of a class's grades: the generic CSV's text."""
    out = grades.with_name("export-for-test.csv")
    result = CliRunner().invoke(main, ["export", str(grades), "--out", str(out)])
    assert result.exit_code == 0, result.output
    return out.read_text()


def rows(path: Path) -> dict:
    return {r["submission"]: r for r in csv.DictReader(path.open(encoding="utf-8"))}


@pytest.fixture(scope="module")
def one_run(tmp_path_factory):
    """The class graded by one unsharded batch: (class folder, its grades.csv)."""
    from grader.sandbox import bwrap
    ok, why = bwrap.usable()
    if not ok:   # as the workflow and the Slurm script grade: namespaces or nothing
        pytest.skip(f"the class paths grade with --isolation strict, and {why}")
    top = tmp_path_factory.mktemp("one-run")
    cls = make_class(top / "submissions")
    out = top / "whole" / "grades.csv"
    only = [w for e in EXERCISES.split() for w in ("-e", e)]
    here = os.getcwd()
    os.chdir(top)   # the class named as the workflow names it: errors name `submissions/...`
    try:
        result = CliRunner().invoke(main, ["batch", "submissions", "--out", str(out), "-j",
                                           "2", "--isolation", "strict", *only, *OPTIONS])
    finally:
        os.chdir(here)
    assert result.exit_code == 3, result.output      # empty/ and broken.zip: not graded
    graded = rows(out)
    assert "no exercise modules" in graded["empty"]["error"]
    assert graded["broken"]["error"] and float(graded["broken"]["total"]) == 0
    assert float(graded["alice"]["total"]) == float(graded["alice"]["max_total"]) > 0
    assert graded["dan03"]["status"] == "missing" and graded["dan03"]["student_id"] == "dan03"
    assert graded["carol"]["late_units"] == "2" and float(graded["carol"]["penalty"]) > 0
    return cls, out


def tools(folder: Path) -> Path:
    """What a runner or a cluster node has on PATH, made of this environment:
    ``python`` and ``attn-grade`` (this checkout), and ``sudo`` (we are root
    or not: either way the command runs as us, environment kept)."""
    folder.mkdir(parents=True, exist_ok=True)
    scripts = {"python": f'exec {sys.executable} "$@"',
               "attn-grade": f'exec {sys.executable} -m grader.cli "$@"',
               "sudo": 'exec "$@"'}
    for name, body in scripts.items():
        path = folder / name
        path.write_text(f"#!/bin/sh\n{body}\n")
        path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return folder


def base_env(bin_dir: Path) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GITHUB_", "SLURM_"))}
    env.update(PATH=f"{bin_dir}{os.pathsep}{env['PATH']}", PYTHONPATH=str(REPO), CI="true")
    return env


# -- the Actions workflow ------------------------------------------------------

INSTALL = re.compile(r"\b(apt-get|pip install)\b")   # this environment has them already


def expand(text: str, context: dict) -> str:
    """``${{ a.b }}`` as Actions expands it, from ``context``; any other
    expression fails the test (the test would not run what Actions runs)."""
    def one(m):
        key = m.group(1).strip()
        assert key in context, f"the test does not know ${{{{ {key} }}}}"
        return str(context[key])
    return re.sub(r"\$\{\{(.*?)\}\}", one, text)


def run_steps(job: dict, context: dict, workspace: Path, env: dict, artifacts: Path) -> list:
    """Each step of ``job`` in order, as a runner does: ``run`` in bash (``-e``,
    and pipefail under ``shell: bash``), ``if: always()`` after a failure,
    uploads and downloads as folders under ``artifacts``.  [(step, status)]."""
    job_env = {k: expand(str(v), context) for k, v in (job.get("env") or {}).items()}
    summary = workspace / "summary.md"
    done, failed = [], False
    for i, step in enumerate(job["steps"]):
        condition = str(step.get("if", "success()"))
        assert condition in ("always()", "success()"), condition
        if failed and condition != "always()":
            continue
        uses = step.get("uses", "")
        if uses.startswith(("actions/checkout", "actions/setup-python")):
            continue                               # the workspace and this Python
        if uses.startswith("actions/upload-artifact"):
            name = expand(step["with"]["name"], context)
            shutil.copytree(workspace / step["with"]["path"], artifacts / name)
            continue
        if uses.startswith("actions/download-artifact"):
            pattern = step["with"]["pattern"]
            # several artifacts by pattern: each in a folder of its name under path
            for found in sorted(artifacts.glob(pattern)):
                shutil.copytree(found, workspace / step["with"]["path"] / found.name)
            continue
        assert not uses, f"the test does not know {uses}"
        script = expand(step["run"], context)
        if INSTALL.search(script):
            assert all(INSTALL.search(line) for line in script.splitlines() if line.strip())
            continue
        shell = ["bash", "--noprofile", "--norc", "-eo", "pipefail"] \
            if step.get("shell") == "bash" else ["bash", "-e"]
        path = workspace / f".step-{i}.sh"
        path.write_text(script)
        proc = subprocess.run([*shell, str(path)], cwd=workspace, capture_output=True,
                              text=True, timeout=600, stdin=subprocess.DEVNULL,
                              env={**env, **job_env, "GITHUB_STEP_SUMMARY": str(summary),
                                   "GITHUB_WORKSPACE": str(workspace)})
        done.append((step.get("name", script.splitlines()[0]), proc.returncode,
                     proc.stdout + proc.stderr))
        failed = failed or proc.returncode != 0
    return done


@pytest.mark.slow
def test_the_class_workflows_shell_steps_end_in_one_artifact(tmp_path, one_run):
    cls, whole = one_run
    workflow = yaml.safe_load(WORKFLOW.read_text())
    grade, merge = workflow["jobs"]["grade"], workflow["jobs"]["merge"]
    assert merge["needs"] == "grade" and merge["if"] == "always()"
    on = workflow.get("on", workflow.get(True))    # YAML 1.1 reads a bare `on` as true
    inputs = {f"inputs.{k}": v.get("default", "")
              for k, v in on["workflow_dispatch"]["inputs"].items()}
    inputs.update({"inputs.submissions": "submissions", "inputs.exercises": EXERCISES,
                   "inputs.batch_options": " ".join(shlex.quote(o) for o in OPTIONS)})
    env = base_env(tools(tmp_path / "bin"))
    artifacts = tmp_path / "artifacts"
    matrix = grade["strategy"]["matrix"]
    for shard in matrix["shard"]:
        machine = tmp_path / f"runner-{shard}"
        shutil.copytree(cls, machine / "submissions")          # the checkout
        shutil.copytree(cls.parent / "staff", machine / "staff")
        context = {**inputs, "matrix.shard": shard, "matrix.of": matrix["of"][0]}
        steps = run_steps(grade, context, machine, env, artifacts)
        assert all(code == 0 for _, code, _ in steps), steps
        summary = (machine / "summary.md").read_text()
        assert f"### Shard {shard}/{matrix['of'][0]}" in summary
    # a shard with ungraded submissions reported them, and still uploaded
    said = {p.name: (p / "batch.txt").read_text() for p in artifacts.iterdir()}
    assert any("empty: " in text for text in said.values()), said
    assert any("broken.zip" in text or "broken: " in text for text in said.values()), said

    machine = tmp_path / "runner-merge"
    machine.mkdir()
    steps = run_steps(merge, inputs, machine, env, artifacts)
    assert all(code == 0 for _, code, _ in steps), steps
    joined = artifacts / "grades"
    assert (joined / "grades.csv").read_text() == whole.read_text()
    assert export(joined / "grades.csv") == export(whole)
    rubric = (joined / "grades_rubric.csv").read_text()
    assert rubric == whole.with_name("grades_rubric.csv").read_text()
    assert {r["submission"] for r in csv.DictReader(rubric.splitlines())} == {"alice", "carol"}
    results = {p.stem for p in (joined / "results").glob("*.json")}
    assert results == {"alice", "carol", "empty", "broken"}
    assert "not graded" in json.loads((joined / "results" / "empty.json").read_text())["output"]
    assert (joined / "grades-summary.txt").read_text().startswith("5 submissions")  # dan too


# -- the Slurm job array --------------------------------------------------------

FAKE_SBATCH = r'''#!{python}
"""sbatch, as Slurm runs it, on one machine: a job array's tasks one after
another (SLURM_ARRAY_TASK_ID/_COUNT/_MIN/_MAX set), a job after the jobs it
depends on (every job here ends before the next is submitted); each call is
logged."""
import json, os, subprocess, sys
log = os.environ["FAKE_SLURM_LOG"]
args, script = sys.argv[1:-1], sys.argv[-1]
with open(log, "a") as f:
    f.write(json.dumps(sys.argv[1:]) + "\n")
job = sum(1 for _ in open(log)) + 1000
options = dict(a.lstrip("-").split("=", 1) for a in args if "=" in a)
first, last = map(int, options.get("array", "0-0").split("-"))
for task in range(first, last + 1):
    env = dict(os.environ, SLURM_JOB_ID=str(job), SLURM_CPUS_PER_TASK="2")
    if "array" in options:
        env.update(SLURM_ARRAY_JOB_ID=str(job), SLURM_ARRAY_TASK_ID=str(task),
                   SLURM_ARRAY_TASK_MIN=str(first), SLURM_ARRAY_TASK_MAX=str(last),
                   SLURM_ARRAY_TASK_COUNT=str(last - first + 1))
    out = open(f"{{log}}.{{job}}_{{task}}.out", "w")
    code = subprocess.run(["bash", script], env=env, stdout=out, stderr=out).returncode
    with open(log + ".status", "a") as f:
        f.write(f"{{job}} {{task}} {{code}}\n")
print(f"{{job}};cluster" if "--parsable" in args else f"Submitted batch job {{job}}")
'''


@pytest.mark.slow
def test_the_slurm_job_array_merges_to_one_runs_csv(tmp_path, one_run):
    cls, whole = one_run
    bin_dir = tools(tmp_path / "bin")
    sbatch = bin_dir / "sbatch"
    sbatch.write_text(FAKE_SBATCH.format(python=sys.executable))
    sbatch.chmod(0o755)
    log = tmp_path / "slurm.log"
    env = base_env(bin_dir)
    env.update(FAKE_SLURM_LOG=str(log), OUT=str(tmp_path / "grades"), EXERCISES=EXERCISES)
    proc = subprocess.run(["bash", str(SLURM / "submit.sh"), "submissions", "3", "--", *OPTIONS],
                          cwd=cls.parent, env=env, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    calls = [json.loads(line) for line in log.read_text().splitlines()]
    assert "--array=1-3" in calls[0] and calls[0][-1].endswith("grade-class.sbatch")
    assert "--dependency=afterany:1001" in calls[1] and calls[1][-1].endswith("merge.sbatch")
    statuses = (tmp_path / "slurm.log.status").read_text().split("\n")
    assert [s.split()[-1] for s in statuses if s] == ["0", "0", "0", "0"], \
        [p.read_text() for p in tmp_path.glob("slurm.log.*.out")]
    merged = tmp_path / "grades" / "grades.csv"
    assert merged.read_text() == whole.read_text()
    assert export(merged) == export(whole)
    assert (tmp_path / "grades" / "grades_rubric.csv").read_text() == \
        whole.with_name("grades_rubric.csv").read_text()
    assert {p.stem for p in (tmp_path / "grades" / "results").glob("*.json")} == \
        {"alice", "carol", "empty", "broken"}
    # the array script asks for a GPU node, for exercise G's speed tier
    header = (SLURM / "grade-class.sbatch").read_text()
    assert "#SBATCH --gres=gpu:1" in header and "#SBATCH --partition=gpu" in header
