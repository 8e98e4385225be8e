"""The student's loop in the student edition, installed as a student installs it.

Builds the edition (``attn-grade release``), installs it into a fresh
virtual environment with ``pip install -e`` (its dependencies come from this
interpreter's site-packages, through a ``.pth`` file: no network), puts the
reference solutions in its ``exercises/`` (a student who has done the work)
and times, each ``--repeat`` times (median):

* ``check B --no-cache`` (one NumPy exercise, nothing kept), ``check B``
  with its file unchanged and after a one-line edit (what a student runs);
* ``check`` of every exercise with the files unchanged (after a first
  ``check``, also timed);
* ``check G`` after a one-line edit of ex07's kernel (every launch is new:
  `check` compiles fully, per GPU, the config likeliest to need the most
  shared memory, and takes the others through Triton's front end), after a
  one-line edit of its host code (the kernels' launches compiled before are
  kept, by Triton's key of each kernel), and after a comment-only edit
  (which runs nothing: its output says the results were kept).

A benchmark, not a test: the figures depend on the machine and its load
(printed with them).  ``PYTHONDONTWRITEBYTECODE`` is unset for the runs, as
on a student's machine.

    python benchmarks/bench_check_loop.py [--repeat 3] [--keep DIR]
"""
from __future__ import annotations

import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys
import sysconfig
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
KERNEL_LINE = "l_safe = tl.where(l_i > 0.0, l_i, 1.0)"   # in the solution's kernel


def _load() -> str:
    return "load " + ", ".join(f"{x:.2f}" for x in os.getloadavg())


def install(root: Path) -> tuple[Path, Path]:
    edition, venv = root / "edition", root / "venv"
    subprocess.run([sys.executable, "-m", "grader.cli", "release", str(edition), "--install",
                    "git+https://example.invalid/course.git", "--no-git"],
                   cwd=REPO, check=True, capture_output=True)
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    site = next((venv / "lib").glob("python*/site-packages"))
    (site / "outer.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "install", "-q", "--no-deps",
                    "--no-build-isolation", "--no-index", "-e", str(edition)],
                   check=True, capture_output=True)
    for path in (REPO / "solutions").glob("*.py"):
        shutil.copy(path, edition / "exercises" / path.name)
    return edition, venv / "bin" / "attn-grade"


def timed(cmd, cwd: Path, env: dict) -> tuple[float, str]:
    start = time.perf_counter()
    done = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True)
    return time.perf_counter() - start, done.stdout + done.stderr


def report(what: str, runs: list[float]) -> None:
    print(f"{what:52s} median {statistics.median(runs):5.2f} s  "
          f"(runs: {', '.join(f'{r:.2f}' for r in runs)}; {_load()})", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--keep", type=Path, default=None,
                        help="build in this folder and leave it (default: a temporary one)")
    args = parser.parse_args()
    root = args.keep or Path(tempfile.mkdtemp(prefix="attn-check-loop-"))
    root.mkdir(parents=True, exist_ok=True)
    try:
        print(f"building and installing the edition in {root}; {_load()}", flush=True)
        edition, cli = install(root)
        env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
        env["XDG_CACHE_HOME"] = str(root / "xdg")
        run = lambda *a: timed([str(cli), "check", *a], edition, env)  # noqa: E731
        seconds, _ = run()
        print(f"{'first check of everything (empty caches)':52s} {seconds:5.2f} s; {_load()}")
        report("check B --no-cache (one NumPy exercise)",
               [run("B", "--no-cache")[0] for _ in range(args.repeat)])
        report("check B, its file unchanged", [run("B")[0] for _ in range(args.repeat)])
        ex02 = edition / "exercises" / "ex02_mha.py"
        mha, edited = ex02.read_text(), []
        for i in range(args.repeat):   # a line of code added: B is checked again
            ex02.write_text(mha + f"\n_EDITED = {i}\n")
            seconds, out = run("B")
            assert "kept from an earlier check" not in out, out
            edited.append(seconds)
        ex02.write_text(mha)
        report("check B after a one-line edit", edited)
        report("check (everything), files unchanged", [run()[0] for _ in range(args.repeat)])
        ex07 = edition / "exercises" / "ex07_flash_attention.py"
        original = ex07.read_text()
        kernels, edits, comments = [], [], []
        assert original.count(KERNEL_LINE) == 1
        for i in range(args.repeat):
            # one line of the kernel changed: a row that saw no key divides
            # its zeros by another number (what the kernel means changes)
            ex07.write_text(original.replace(KERNEL_LINE, KERNEL_LINE.replace(
                "1.0)", f"{2.0 + i})"), 1))
            seconds, out = run("G")
            assert re.search(r"Total: (\d+)/\1\b", out) and \
                "checked by Triton's front end only" in out, out
            kernels.append(seconds)
            # one line of the host code changed (what it means changes)
            ex07.write_text(ex07.read_text().replace("LOG2E = 1.4426950408889634",
                                                     f"LOG2E = 1.44269504088896{40 + i}", 1))
            seconds, out = run("G")
            edits.append(seconds)
            # a comment only, edited in place: the results are kept (check's key
            # is the code and its places, not the bytes), nothing runs
            ex07.write_text(ex07.read_text().replace("# 1/ln(2)", f"# 1/ln(2), edit {i}", 1))
            seconds, out = run("G")
            assert "kept from an earlier check of these same files" in out, out
            comments.append(seconds)
        report("check G after a one-line edit of its kernel", kernels)
        report("check G after a one-line edit of its host code", edits)
        report("check G after a comment-only edit (runs nothing)", comments)
    finally:
        if args.keep is None:
            shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
