"""A student's first steps: the README's install line, and `check` on the zip
they hand in."""
from __future__ import annotations

import zipfile

from click.testing import CliRunner

from grader.cli import main
from tests.conftest import SOLUTIONS


def _zip(path, sources):
    with zipfile.ZipFile(path, "w") as z:
        for source in sources:
            z.write(source, f"handin/{source.name}")
    return path


def test_check_takes_the_handin_zip(tmp_path):
    """`check --path handin.zip` checks the modules in the zip, as grading
    unpacks them: the solution passes, the stub fails."""
    good = _zip(tmp_path / "good.zip", [SOLUTIONS / "ex02_mha.py"])
    result = CliRunner().invoke(main, ["check", "B", "--path", str(good)])
    assert result.exit_code == 0, result.output
    assert "ex02_mha  " in result.output and "FAIL" not in result.output, result.output
    stub = _zip(tmp_path / "stub.zip", [SOLUTIONS.parent / "exercises" / "ex02_mha.py"])
    result = CliRunner().invoke(main, ["check", "B", "--path", str(stub)])
    assert result.exit_code == 1 and "NotImplementedError" in result.output, result.output


def test_check_refuses_a_file_that_is_no_zip_in_one_sentence(tmp_path):
    other = tmp_path / "notes.txt"
    other.write_text("x")
    result = CliRunner().invoke(main, ["check", "--path", str(other)])
    assert result.exit_code == 2, result.output
    assert "is not a folder of exercise modules, nor the zip you hand in" in result.output
    assert "Traceback" not in result.output


def test_the_readmes_first_code_block_installs_the_cpu_build_of_pytorch_first():
    """The edition's README: PyTorch's CPU build before the package, so pip does
    not fetch the CUDA build first on a laptop."""
    from grader.release import student_readme
    from grader.registry import EXERCISES
    readme = student_readme(list(EXERCISES))
    block = readme.split("```bash\n", 1)[1].split("```", 1)[0]
    commands = [ln.split("#")[0].strip() for ln in block.splitlines()
                if ln.strip() and not ln.lstrip().startswith("#")]
    assert commands[0] == "pip install torch --index-url https://download.pytorch.org/whl/cpu"
    assert commands[1] == "pip install -e ."
