"""The one priority table: every built-in backend declares exactly its row, and the docs give each reason."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from kvcanary.registry import REGISTRY, Op
from kvcanary_backends import priority

NOTES = Path(__file__).parents[2] / "benchmarks" / "results" / "priorities.md"  # a section of docs/benchmarks.md


@pytest.mark.parametrize("name", sorted(priority.PRIORITY))
def test_each_backend_declares_its_row_of_the_table(name: str) -> None:
    backend = REGISTRY.backends()[name]
    assert set(backend.ops) == set(Op)
    for op, support in backend.ops.items():
        assert dict(support.devices) == priority.devices(name, op), (name, op)


def test_cuda_ranks_above_triton_exactly_where_it_was_measured_ahead() -> None:
    ahead = {op for op in Op if priority.devices("cuda", op)["cuda"] > priority.devices("triton", op)["cuda"]}
    assert ahead == {Op.PLAN, Op.WRITE, Op.SCATTER, Op.VERIFY}


def test_the_cpu_default_is_torch_ref() -> None:
    for op in Op:
        ranked = sorted(priority.PRIORITY, key=lambda b: -max(priority.devices(b, op).get(d, -1) for d in ("cpu", "*")))
        assert ranked[0] == "torch_ref", op


def test_every_operation_has_a_documented_reason_that_matches_the_table() -> None:
    """Each operation has one row in the docs section, and the order it states is the table's on CUDA."""
    text = NOTES.read_text()
    assert "## Backend priorities" in text
    by_name = {op.value.split("_req")[0]: op for op in Op}  # the page says "scatter"
    stated: dict[Op, str] = {}
    for line in text.splitlines():
        cells = [c.strip() for c in line.strip("|").split("|")]
        if len(cells) != 3 or not re.fullmatch(r"\w+ \d+ > \w+ \d+", cells[1]):
            continue
        for name in cells[0].replace("(fused)", "").split(","):
            assert by_name[name.strip()] not in stated, name
            stated[by_name[name.strip()]] = cells[1]
    assert set(stated) == set(Op)
    for op, claim in stated.items():
        ranks = {b: priority.devices(b, op)["cuda"] for b in ("cuda", "triton")}
        first, second = sorted(ranks, key=lambda b: -ranks[b])
        assert claim == f"{first} {ranks[first]} > {second} {ranks[second]}", op
