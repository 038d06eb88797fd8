"""The one priority table: every built-in backend declares exactly its row, and the docs give each reason."""

from __future__ import annotations

from pathlib import Path

import pytest

from kvcanary.backends import priority
from kvcanary.registry import REGISTRY, Op

NOTES = Path(__file__).parents[2] / "benchmarks" / "results" / "priorities.md"  # a section of docs/benchmarks.md


@pytest.mark.parametrize("name", sorted(priority.PRIORITY))
def test_each_backend_declares_its_row_of_the_table(name: str) -> None:
    backend = REGISTRY.backends()[name]
    assert set(backend.ops) == set(Op)
    for op, support in backend.ops.items():
        assert dict(support.devices) == priority.devices(name, op), (name, op)


def test_cuda_ranks_above_triton_exactly_where_it_was_measured_faster() -> None:
    ahead = {op for op in Op if priority.devices("cuda", op)["cuda"] > priority.devices("triton", op)["cuda"]}
    assert ahead == {Op.PLAN, Op.WRITE, Op.SCATTER}


def test_the_cpu_default_is_torch_ref() -> None:
    for op in Op:
        ranked = sorted(priority.PRIORITY, key=lambda b: -max(priority.devices(b, op).get(d, -1) for d in ("cpu", "*")))
        assert ranked[0] == "torch_ref", op


def test_every_operation_has_a_documented_reason() -> None:
    text = NOTES.read_text()
    assert "## Backend priorities" in text
    for op in Op:
        assert op.value.split("_req")[0] in text, op
