"""The priority of every built-in backend for every operation, per device type: one table.

Among the backends that can serve a launch, the registry picks the highest priority. torch_ref serves
anything anywhere (the CPU default); on CUDA devices Triton is the baseline and CUDA ranks above it where the
head-to-head benchmark measured it faster, or tied on the device and cheaper to issue on the host; Triton runs
on the CPU only through its interpreter (ranked last there, so tests force it). The measurement behind each
cell is in docs/benchmarks.md, "Backend priorities" (written in ``benchmarks/results/priorities.md``);
``tests/kvcanary/test_priority.py`` checks the table against the head-to-head results
(``benchmarks/results/bench_backends.json``). A ``-`` cell: the backend has no kernel for that operation.

A kernel takes its backend's row by default (``@WRITE.kernel("triton")``); the columns name operations.
"""

from __future__ import annotations

from kvcanary.operation import Operation

TABLE = """
backend    device   plan  plan_offsets  plan_entries  verify  write  scatter_req_token_ids  fold  verify_budget
torch_ref  *          10            10            10      10     10                     10    10             10
triton     cuda       50            50            50      50     50                     50    50             50
triton     cpu         1             1             1       1      1                      1     1              1
cuda       cuda       60            40            40      60     60                     60     -             40
"""


def _parse(text: str) -> dict[str, dict[str, dict[str, int]]]:
    """backend -> device type -> operation name -> priority (``-`` cells left out)."""
    header, *rows = (line.split() for line in text.strip().splitlines())
    out: dict[str, dict[str, dict[str, int]]] = {}
    for backend, device, *cells in rows:
        out.setdefault(backend, {})[device] = {
            name: int(cell) for name, cell in zip(header[2:], cells, strict=True) if cell != "-"}
    return out


PRIORITY = _parse(TABLE)


def devices(backend: str, op: Operation | str) -> dict[str, int]:
    """``OpSupport.devices`` of ``backend``'s ``op``: device type -> priority (empty: no cell)."""
    name = op if isinstance(op, str) else op.name
    return {device: ops[name] for device, ops in PRIORITY.get(backend, {}).items() if name in ops}
