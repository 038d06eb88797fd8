"""The one priority table, checked against what justifies it: the kernels the backends attach and the
head-to-head measurements (``benchmarks/results/bench_backends.json``, written by benchmarks/bench_backends.py),
and the docs section that states each reason (``benchmarks/results/priorities.md``)."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import pytest

from kvcanary.operation import Operation
from kvcanary.registry import REGISTRY, Op
from kvcanary_backends import priority

RESULTS = Path(__file__).parents[2] / "benchmarks" / "results"
NOTES = RESULTS / "priorities.md"  # a section of docs/benchmarks.md
TIE = 0.05
"""Device times within 5% of each other are a tie: the docs must then name what breaks it (the host's cost)."""


def _head_to_head() -> dict[str, dict[str, float]]:
    """operation name -> backend -> geometric mean of its CUDA-graph device times over the cases both cuda
    and triton ran (one head-to-head run of benchmarks/bench_backends.py)."""
    times: dict[tuple[str, str], dict[str, float]] = {}
    for row in json.loads((RESULTS / "bench_backends.json").read_text()):
        m = re.fullmatch(r"(\w+) (.*) \[(\w+), (\w+)\]", row["case"])
        assert m, row["case"]
        word, case, backend, _mode = m.groups()
        times.setdefault((word, case), {})[backend] = float(row["figure"])
    by_op: dict[str, dict[str, list[float]]] = {}
    for (word, _case), per in times.items():
        if "cuda" in per and "triton" in per:
            for backend, t in per.items():
                by_op.setdefault(word, {}).setdefault(backend, []).append(t)
    return {word: {b: math.exp(sum(map(math.log, ts)) / len(ts)) for b, ts in per.items()}
            for word, per in by_op.items()}


def _word(op: Operation) -> str:
    return op.value.split("_req")[0]  # results and docs say "scatter"


@pytest.mark.parametrize("name", sorted(priority.PRIORITY))
def test_each_backend_attaches_a_kernel_for_exactly_its_cells(name: str) -> None:
    """The kernels are declared in the backends' own modules; the table names the same operations."""
    backend = REGISTRY.backends()[name]
    backend.load_kernels()
    assert backend.load_error is None, backend.load_error
    attached = {op for op in Op if name in op.kernels}
    assert attached == {op for op in Op if priority.devices(name, op)}


def test_on_cuda_the_order_of_cuda_and_triton_follows_the_head_to_head_results() -> None:
    """Measured ahead by more than the tie band: ranked first. Within it: the faster one, or the slower one with
    the tie-breaker (the host's cost of issuing a launch) stated in the docs.
    Not measured head to head: triton (the older backend) stays first."""
    measured = _head_to_head()
    notes = NOTES.read_text()
    assert measured, "no head-to-head results"
    for op in Op:
        ranks = {b: priority.devices(b, op).get("cuda") for b in ("cuda", "triton")}
        if ranks["cuda"] is None:
            continue
        assert ranks["triton"] is not None
        times = measured.get(_word(op))
        if times is None:
            assert ranks["triton"] > ranks["cuda"], f"{op.value}: not measured head to head, yet cuda ranks first"
            continue
        ratio = times["cuda"] / times["triton"]
        if ratio < 1 - TIE:
            assert ranks["cuda"] > ranks["triton"], f"{op.value}: cuda measured {ratio:.3f}x triton's time"
        elif ratio > 1 + TIE:
            assert ranks["triton"] > ranks["cuda"], f"{op.value}: cuda measured {ratio:.3f}x triton's time"
        elif (ranks["cuda"] > ranks["triton"]) != (ratio < 1):  # a tie, and the slower one ranks first
            row = next(line for line in notes.splitlines() if line.startswith(f"| {_word(op)}"))
            assert "host" in row, f"{op.value}: a tie on the device ({ratio:.3f}) needs its tie-breaker stated"


def test_torch_ref_ranks_below_every_measured_kernel_on_cuda() -> None:
    """torch_ref ran in the same head-to-head; it was slower on every operation, and ranks last there."""
    for word, times in _head_to_head().items():
        if "torch_ref" in times:
            assert times["torch_ref"] > max(times["cuda"], times["triton"]), word
    for op in Op:
        ref = priority.devices("torch_ref", op)["*"]
        assert all(p > ref for b in ("cuda", "triton") for p in priority.devices(b, op).values()
                   if b == "cuda" or p != priority.devices("triton", op).get("cpu")), op


def test_the_cpu_default_is_torch_ref() -> None:
    """On the CPU only torch_ref runs natively (Triton interprets): it must outrank everything there."""
    for op in Op:
        ranks = {b: (rows.get("cpu") if "cpu" in rows else rows.get("*"))
                 for b in priority.PRIORITY for rows in [priority.devices(b, op)]}
        best = max((b for b in ranks if ranks[b] is not None), key=lambda b: ranks[b] or 0)
        assert best == "torch_ref", op


def test_every_operation_measured_has_a_documented_reason_that_matches_the_table() -> None:
    """Each operation cuda serves has one row in the docs section, and the order it states is the table's."""
    by_word = {_word(op): op for op in Op}
    stated: dict[Op, str] = {}
    for line in NOTES.read_text().splitlines():
        cells = [c.strip() for c in line.strip("|").split("|")]
        if len(cells) != 3 or not re.fullmatch(r"\w+ \d+ > \w+ \d+", cells[1]):
            continue
        for name in cells[0].replace("(fused)", "").split(","):
            assert by_word[name.strip()] not in stated, name
            stated[by_word[name.strip()]] = cells[1]
    assert set(stated) == {op for op in Op if priority.devices("cuda", op)}
    for op, claim in stated.items():
        ranks = {b: priority.devices(b, op)["cuda"] for b in ("cuda", "triton")}
        first, second = sorted(ranks, key=lambda b: -ranks[b])
        assert claim == f"{first} {ranks[first]} > {second} {ranks[second]}", op
