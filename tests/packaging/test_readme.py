"""The README tells a newcomer the truth: its two commands are the ones CI runs, the CPU-only install line
and the light path are there, and the tests leave no cache in the checkout."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text()
CI = (ROOT / ".ci" / "run").read_text()


def _commands(text: str) -> list[str]:
    """The commands of the ```bash blocks of ``text``, one per line (comments dropped)."""
    blocks = re.findall(r"```bash\n(.*?)```", text, flags=re.S)
    return [line.split("  #")[0].strip() for b in blocks for line in b.splitlines() if line.strip()
            and not line.lstrip().startswith("#")]


def test_the_two_commands_are_the_ones_ci_runs() -> None:
    section = README.split("## Two commands", 1)[1].split("\n## ", 1)[0]
    first, second = _commands(section)[:2]
    install, _, demo = first.partition(" && ")
    ci_lines = [line.strip() for line in CI.splitlines()]
    assert install in ci_lines, (install, "is not what .ci/run installs")
    assert second in ci_lines, (second, "is not how .ci/run runs the tests")
    assert demo == "kvcanary demo"
    assert "`.ci/run`" in section  # "as CI does" names the script


def test_the_readme_gives_the_cpu_only_line_and_the_light_path() -> None:
    commands = _commands(README)
    assert any("--index-url https://download.pytorch.org/whl/cpu" in c and "torch==2.13.0" in c for c in commands)
    light = [c for c in commands if c.startswith("pip install") and "[dev]" not in c and "kvcanary demo" in c]
    assert light, "no light path (core dependencies only) that runs the demo"
    assert "https://github.com/sgl-project/sglang" in README


def test_the_tests_leave_no_cache_in_the_checkout(tmp_path: Path) -> None:
    """pytest with this project's configuration, on a failing Hypothesis test (pytest records the failure,
    Hypothesis its example), writes neither .pytest_cache nor .hypothesis where it runs."""
    shutil.copy2(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    (tmp_path / "tests").mkdir()
    shutil.copy2(ROOT / "tests" / "conftest.py", tmp_path / "tests" / "conftest.py")
    (tmp_path / "tests" / "test_h.py").write_text(
        "from hypothesis import given, strategies as st\n\n"
        "@given(st.integers())\ndef test_h(x: int) -> None:\n    assert x < 100  # a failure Hypothesis stores\n")
    # pytest-benchmark (no dependency of this project, but present in some environments) keeps its own folder
    res = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:benchmark"], cwd=tmp_path, capture_output=True, text=True,
                         timeout=300, check=False)
    # Hypothesis names the stored example "Falsifying example" (before 6.16x) or "Failing test case"
    found = "Falsifying example" in res.stdout or "Failing test case" in res.stdout
    assert "1 failed" in res.stdout and found, res.stdout + res.stderr
    left = sorted(p.name for p in tmp_path.iterdir())
    assert left == ["pyproject.toml", "tests"], left
    assert sorted(p.name for p in (tmp_path / "tests").iterdir() if p.name != "__pycache__") == [
        "conftest.py", "test_h.py"]
