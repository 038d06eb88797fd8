"""The "Adding an operation" and "Adding a backend" pages: their code runs as written, in order, and leaves
nothing registered behind (each page ends by removing what it added)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch

import kvcanary as kc
from kvcanary.operation import operations

DOCS = Path(__file__).resolve().parents[2] / "docs" / "extending"


def python_blocks(page: Path) -> list[str]:
    return re.findall(r"^```python[^\n]*\n(.*?)^```", page.read_text(), flags=re.S | re.M)


@pytest.mark.parametrize("page", ["operation.md", "backend.md"])
def test_the_page_runs_and_cleans_up(page: str, capsys: pytest.CaptureFixture[str]) -> None:
    ops_before = list(operations())
    backends_before = set(kc.registered_backends())
    blocks = python_blocks(DOCS / page)
    assert len(blocks) >= 4
    ns: dict[str, object] = {"__name__": f"docs_extending_{page[:-3]}"}
    exec(compile("\n".join(blocks), str(DOCS / page), "exec", dont_inherit=True), ns)  # as pasted: no __future__
    out = capsys.readouterr().out
    if page == "operation.md":
        assert "count_live takes at most 4096 slots, got 5000" in out and "[MYL-C" in out
        assert "(*, counter: torch.Tensor, slots: torch.Tensor, backend: str | None = None) -> None" in out
        assert "live slots: [3]" in out  # the conformance kit built the call from the operation's builder
    else:
        assert "mine mine scatter_req_token_ids runs on cpu, not cuda" in out
    assert list(operations()) == ops_before
    assert set(kc.registered_backends()) == backends_before
    assert not hasattr(torch.ops.mylib, "count_live")
