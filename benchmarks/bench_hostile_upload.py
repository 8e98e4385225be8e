"""Peak disk use of the intake while it refuses hostile uploads, against its caps.

Builds a few hostile uploads (``tests/hostile_uploads.py``'s builders, some
made larger here: a 1 GB zip bomb, 200 zips of 1 MB, 40 zips of 1999
files, trees nested 200 deep) and one just under the caps, then runs the intake on each
(``grader.submission.materialize``, what ``grade``, ``batch`` and Gradescope
all call first) with the temporary folder pointed at a fresh one, which a
thread walks every few milliseconds: the peak is the most disk (allocated
blocks) and files it ever held.  Grading is not run: what workers copy is
the sandbox's part.  With ``--rev REV`` the same uploads also go through
``grader/submission.py`` as it was at that git revision, for a before and
after.  A benchmark, not a test: it writes up to a few hundred MB.

    python benchmarks/bench_hostile_upload.py [--rev 38880ff] [--only zip_bomb,many_zips]
"""
from __future__ import annotations

import argparse
import importlib.util
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import types
import zipfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from grader import submission  # noqa: E402
from tests import hostile_uploads as hostile  # noqa: E402

MB = 1 << 20


def bomb_1gb(folder: Path) -> Path:
    """1 GB of zeros in one module, about 1 MB compressed (1000:1)."""
    path = folder / "bomb.zip"
    path.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr(hostile.MODULE, hostile.SOLUTION)
        with z.open("zeros.py", "w") as out:
            chunk = bytes(MB)
            for _ in range(1024):
                out.write(chunk)
    return path


def bomb_lying(folder: Path) -> Path:
    """The 1 GB bomb with its central directory declaring 1 KB: what a
    reader that trusts the declared size would stop at, and one that
    does not would not."""
    path = bomb_1gb(folder)
    data = bytearray(path.read_bytes())
    where = data.find(b"PK\x01\x02", data.find(b"PK\x01\x02") + 4)   # zeros.py's entry
    data[where + 24:where + 28] = (1024).to_bytes(4, "little")     # its uncompressed size
    path.write_bytes(bytes(data))
    return path


def many_zips(folder: Path) -> Path:
    """200 zips of a 1 MB helper each: each far under 50 MB, 200 MB together."""
    return hostile.many_zips(folder, count=200, mb=1)


def zips_under_the_cap(folder: Path) -> Path:
    """45 zips of a 1 MB helper each, and exercise A: accepted, its peak."""
    up = folder / "underzips"
    up.mkdir(parents=True)
    for i in range(45):
        hostile._zip(up / f"part{i:03}.zip", [(f"helper{i:03}.py", bytes(MB))])
    hostile._zip(up / "work.zip", [(hostile.MODULE, hostile.SOLUTION)])
    return up


def many_zip_files(folder: Path) -> Path:
    """40 zips of 1999 empty modules each: each under 2000 files, 80 000 together."""
    up = folder / "manyfiles"
    up.mkdir(parents=True)
    for i in range(40):
        with zipfile.ZipFile(up / f"part{i:02}.zip", "w", zipfile.ZIP_STORED) as z:
            for j in range(1999):
                z.writestr(f"h{i:02}_{j:04}.py", b"")
    hostile._zip(up / "work.zip", [(hostile.MODULE, hostile.SOLUTION)])
    return up


UPLOADS = {
    "zip_bomb": bomb_1gb,
    "zip_bomb_lying": bomb_lying,
    "many_zips": many_zips,
    "zips_under_the_cap": zips_under_the_cap,
    "many_zip_files": many_zip_files,
    "deep_zip": hostile.deep_zip,
    "deep_folder": hostile.deep_folder,
    "deep_notebook": hostile.deep_notebook,
    "file_and_folder": hostile.file_and_folder,
    "long_name": hostile.long_name,
}


class Peak(threading.Thread):
    """The most disk (allocated blocks) and files below ``root``, polled."""

    def __init__(self, root: Path, every_s: float = 0.002):
        super().__init__(daemon=True)
        self.root, self.every_s = root, every_s
        self.bytes = self.files = 0
        self._done = threading.Event()

    def measure(self) -> tuple[int, int]:
        total = files = 0
        stack = [str(self.root)]
        while stack:
            try:
                entries = list(os.scandir(stack.pop()))
            except OSError:
                continue   # removed while we looked
            for e in entries:
                try:
                    if e.is_dir(follow_symlinks=False):
                        stack.append(e.path)
                    else:
                        total += e.stat(follow_symlinks=False).st_blocks * 512
                        files += 1
                except OSError:
                    pass
        return total, files

    def run(self) -> None:
        while not self._done.is_set():
            size, files = self.measure()
            self.bytes, self.files = max(self.bytes, size), max(self.files, files)
            time.sleep(self.every_s)

    def stop(self) -> None:
        self._done.set()
        self.join()
        size, files = self.measure()
        self.bytes, self.files = max(self.bytes, size), max(self.files, files)


def intake_at(rev: str) -> types.ModuleType:
    """``grader/submission.py`` as it was at ``rev``, as a module of its own."""
    source = subprocess.run(["git", "show", f"{rev}:grader/submission.py"], cwd=REPO,
                            capture_output=True, text=True, check=True).stdout
    spec = importlib.util.spec_from_loader(f"grader._submission_{rev}", loader=None)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    exec(compile(source, f"{rev}:grader/submission.py", "exec"), module.__dict__)
    return module


def run_intake(intake: types.ModuleType, upload: Path, tmp: Path) -> dict:
    tmp.mkdir()
    tempfile.tempdir = str(tmp)   # materialize makes its folder here
    peak = Peak(tmp)
    peak.start()
    start = time.perf_counter()
    try:
        with intake.materialize(upload) as folder:
            outcome = f"accepted: {len(list(Path(folder).glob('*.py')))} modules"
    except intake.SubmissionError as exc:
        outcome = f"sentence: {str(exc).replace(str(upload.parent), '')[:90]}"
    except BaseException as exc:   # what the old intake let through
        outcome = f"TRACEBACK {type(exc).__name__}: {str(exc)[:70]}"
    seconds = time.perf_counter() - start
    peak.stop()
    tempfile.tempdir = None
    left = peak.measure()[0]
    shutil.rmtree(tmp, ignore_errors=True)
    return {"seconds": seconds, "peak": peak.bytes, "files": peak.files, "left": left,
            "outcome": outcome}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rev", default=None, help="also run the intake of this git revision")
    parser.add_argument("--only", default=None, help="comma-separated upload names")
    args = parser.parse_args()
    names = args.only.split(",") if args.only else list(UPLOADS)
    intakes = {"now": submission}
    if args.rev:
        intakes[args.rev] = intake_at(args.rev)
    cap = submission.MAX_UNPACKED_BYTES
    print(f"caps: {cap // MB} MB unpacked, {submission.MAX_FILES} files, folders "
          f"{submission.MAX_DEPTH} deep, names {submission.MAX_NAME_BYTES} bytes, paths "
          f"{submission.MAX_PATH_BYTES} bytes, notebook JSON {submission.MAX_JSON_DEPTH} deep; "
          "peak disk stays under twice the byte cap (what is unpacked, and the exercise "
          "modules written from it; helpers are moved)")
    with tempfile.TemporaryDirectory(prefix="attn-bench-upload-") as work:
        work = Path(work)
        print(f"{'upload':<18} {'size':>9} {'intake':<8} {'peak disk':>10} {'files':>6} "
              f"{'seconds':>7}  outcome")
        for name in names:
            start = time.perf_counter()
            upload = UPLOADS[name](work / name / "up")
            built = time.perf_counter() - start
            size = sum(p.stat().st_size for p in [upload, *upload.rglob("*")] if p.is_file())
            for label, intake in intakes.items():
                r = run_intake(intake, upload, work / name / f"tmp-{label}")
                over = " OVER 2x cap" if r["peak"] > 2 * cap else ""
                print(f"{name:<18} {size / 1024:>7.0f}KB {label:<8} {r['peak'] / MB:>8.1f}MB "
                      f"{r['files']:>6} {r['seconds']:>7.2f}  {r['outcome']}{over}"
                      + (f" (left {r['left'] / MB:.1f} MB)" if r["left"] else ""))
            print(f"{'':<18} (built in {built:.1f} s)")
            shutil.rmtree(work / name, ignore_errors=True)


if __name__ == "__main__":
    main()
