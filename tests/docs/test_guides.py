"""The hand-written guides' code runs, and the error codes they quote still mean what they say."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from kvcanary import codes

DOCS = Path(__file__).resolve().parents[2] / "docs"
RUNNABLE = ["quickstart.md", "integration.md"]
HAND_WRITTEN = ["index.md", "quickstart.md", "concepts.md", "integration.md", "cli.md", "compatibility.md",
                "compile.md", "graphs.md"]


def python_blocks(page: str) -> list[str]:
    return re.findall(r"^```python[^\n]*\n(.*?)^```", (DOCS / page).read_text(), flags=re.S | re.M)


@pytest.mark.parametrize("page", RUNNABLE)
def test_guide_code_runs(page: str, capsys: pytest.CaptureFixture[str]) -> None:
    blocks = python_blocks(page)
    assert blocks
    ns: dict[str, object] = {"__name__": f"docs_{page[:-3]}"}
    exec(compile("\n".join(blocks), str(DOCS / page), "exec"), ns)
    out = capsys.readouterr().out
    if page == "quickstart.md":
        assert "clean: 0 violations" in out and "fail_reason=verify_real_kv_hash slot_idx=3" in out
        assert "must have dtype torch.int64, got torch.int32" in out
    else:
        assert "launch_tag=SWEEP_K_FULL fail_reason=verify_real_kv_hash slot_idx=3" in out


def test_readme_code_is_python_that_pastes() -> None:
    """The README's snippets are complete calls (no ``...`` standing for arguments: a SyntaxError pasted)."""
    readme = (DOCS.parent / "README.md").read_text()
    blocks = re.findall(r"^```python[^\n]*\n(.*?)^```", readme, flags=re.S | re.M)
    assert blocks
    for block in blocks:
        compile(block, "README.md", "exec")
        assert "..." not in block


@pytest.mark.parametrize("page", HAND_WRITTEN)
def test_quoted_codes_exist_and_match(page: str) -> None:
    text = (DOCS / page).read_text()
    by_code = codes.by_code()
    for code, launcher, summary in re.findall(r"\[(KVC-[A-Z]\d{3})\] ([\w.]+): (.+?)\. Run `kvcanary explain", text):
        check = by_code.get(code)
        assert check is not None, f"{page} quotes {code}, which does not exist"
        assert (check.contract, check.summary) == (launcher, summary), f"{page}: {code} is now {check.summary}"
    for code in re.findall(r"KVC-[A-Z]\d{3}", text):
        assert code in by_code, f"{page} quotes {code}, which does not exist"
