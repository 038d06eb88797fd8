"""docs/transformers.md: its code runs as printed, and what it says about the engine holds."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from kvcanary.integrations.transformers.fault_kinds import TfFault
from kvcanary.integrations.transformers.version import SUPPORTED_RANGE

PAGE = Path(__file__).parents[3] / "docs" / "transformers.md"


def test_page_code_runs(capsys: pytest.CaptureFixture[str]) -> None:
    blocks = re.findall(r"^```python[^\n]*\n(.*?)^```", PAGE.read_text(), flags=re.S | re.M)
    assert blocks
    exec(compile("\n".join(blocks), str(PAGE), "exec"), {"__name__": "docs_transformers"})
    out = capsys.readouterr().out
    assert re.search(r"\d+ steps, 0 violations, [1-9]\d* prefix-shared admissions", out), out


def test_page_states_the_tested_range_and_every_fault() -> None:
    text = PAGE.read_text()
    assert text.count(SUPPORTED_RANGE) >= 2
    rows = [line for line in text.splitlines() if re.match(r"\| .* \| `(HEAD|TAIL)_K_(FULL|SWA)`", line)]
    assert len(rows) == len(TfFault)
