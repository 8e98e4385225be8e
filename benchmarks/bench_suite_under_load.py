"""The README's test command in a fresh clone while the machine is busy.

Clones this repository into a temporary folder, builds its environment as
``.ci/run`` does (or reuses one with ``--venv``), starts two busy loops per
core (plain CPU-bound processes, started and stopped here), and runs
``python -m pytest -q`` there.  Prints the wall time, pytest's closing line
and the load average seen; exits with pytest's status.  The suite must pass
like this: no test may depend on the machine being quiet.

    python benchmarks/bench_suite_under_load.py [--per-core 2] [--venv PATH] [--log FILE] [-- PYTEST_ARGS]

With ``--venv`` an existing environment is reused (nothing is downloaded):
the clone gets one of its own on top of it.  What follows ``--`` goes to
pytest (a few tests under the same load, say); without it, the whole suite.

A benchmark, not a test: it keeps every core busy for as long as the suite
takes (about 20 minutes on 2 cores at two loops per core).
"""
from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def _spin(stop) -> None:
    x = 0
    while not stop.is_set():
        for _ in range(100_000):
            x += 1


def _overlay(base: Path, clone: Path) -> Path:
    """A fresh environment in the clone (``.venv``) that sees ``base``'s
    packages and holds its own editable install of the clone: the README's
    ``pip install -e ".[dev]"`` without downloading anything, and without
    touching ``base`` (re-pointing its editable install at a clone that is
    deleted afterwards would break it for whoever else uses it).  Returns
    the environment's Python."""
    base_python = base / "bin" / "python"
    site = subprocess.run([str(base_python), "-c", "import sysconfig; "
                           "print(sysconfig.get_paths()['purelib'])"],
                          capture_output=True, text=True, check=True).stdout.strip()
    venv = clone / ".venv"
    # Without pip or setuptools of its own: base's (and its wheel) do the install.
    subprocess.run([str(base_python), "-m", "venv", "--without-pip", str(venv)], check=True)
    python = venv / "bin" / "python"
    own = subprocess.run([str(python), "-c", "import sysconfig; "
                          "print(sysconfig.get_paths()['purelib'])"],
                         capture_output=True, text=True, check=True).stdout.strip()
    # A plain path line: base's packages are importable, but base's own .pth
    # files (its editable install of another checkout) are not run.
    (Path(own) / "zz_base_packages.pth").write_text(site + "\n")
    subprocess.run([str(python), "-m", "pip", "install", "-q", "--no-deps",
                    "--no-build-isolation", "-e", str(clone)], check=True)
    where = subprocess.run([str(python), "-c", "import grader, torch; print(grader.__file__)"],
                           capture_output=True, text=True, check=True, cwd="/").stdout.strip()
    if not where.startswith(str(clone)):
        raise SystemExit(f"the overlay imports grader from {where}, not from the clone")
    return python


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--per-core", type=int, default=2)
    parser.add_argument("--venv", type=Path, default=None,
                        help="an environment with the package's dev extra already installed "
                             "(e.g. a checkout's .venv): the clone gets an environment of its "
                             "own on top of it, and this one is left as it is")
    parser.add_argument("--log", type=Path, default=None,
                        help="also write pytest's whole output here (to read a failure)")
    parser.add_argument("pytest_args", nargs="*",
                        help="after --: what pytest is given besides -q (default: nothing, "
                             "the README's whole suite), e.g. -- tests/test_budget.py -n 0")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="suite-under-load-"))
    clone = work / "clone"
    subprocess.run(["git", "clone", "-q", str(REPO), str(clone)], check=True)
    if args.venv is None:   # as .ci/run installs, before its test command
        python = clone / ".venv" / "bin" / "python"
        subprocess.run([sys.executable, "-m", "venv", str(clone / ".venv")], check=True)
        for what in (["torch"], ["-e", ".[dev]"]):
            subprocess.run([str(python), "-m", "pip", "install", "-q", "-c",
                            ".ci/constraints.txt", *what], cwd=clone, check=True)
    else:
        python = _overlay(args.venv, clone)
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    stop = mp.Event()
    loops = [mp.Process(target=_spin, args=(stop,), daemon=True)
             for _ in range(args.per_core * cores)]
    for p in loops:
        p.start()
    loads = []
    start = time.monotonic()
    try:
        # The clone's own code only: a PYTHONPATH of the caller's checkout would win.
        env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
        proc = subprocess.Popen([str(python), "-m", "pytest", "-q", *args.pytest_args],
                                cwd=clone, env=env,
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        lines = []
        for line in proc.stdout:
            lines.append(line.rstrip())
            loads.append(os.getloadavg()[0])
        code = proc.wait()
    finally:
        stop.set()
        for p in loops:
            p.join(timeout=5)
            if p.is_alive():
                p.kill()
    wall = time.monotonic() - start
    closing = next((ln for ln in reversed(lines) if " in " in ln and ("passed" in ln
                                                                      or "failed" in ln)), "")
    print(f"{len(loops)} busy loops on {cores} cores; load average up to "
          f"{max(loads, default=0):.1f}")
    print(f"pytest: {closing}")
    print(f"wall {wall:.0f} s, exit status {code}")
    if args.log is not None:
        args.log.write_text("\n".join(lines) + "\n")
    if code:
        print("\n".join(ln for ln in lines if ln.startswith(("FAILED", "ERROR"))))
    shutil.rmtree(work, ignore_errors=True)
    return code


if __name__ == "__main__":
    sys.exit(main())
