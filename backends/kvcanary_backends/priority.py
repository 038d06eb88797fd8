"""The priority of every built-in backend for every operation, per device type: one table.

Among the backends that can serve a launch, the registry picks the highest priority. torch_ref serves
anything anywhere (the CPU default); on CUDA devices Triton is the baseline and CUDA ranks above it where the
head-to-head benchmark measured it faster, or tied on the device and cheaper to issue on the host; Triton runs
on the CPU only through its interpreter (ranked last there, so tests force it). The measurement behind each
cell is in docs/benchmarks.md, "Backend priorities" (written in ``benchmarks/results/priorities.md``);
``tests/kvcanary/test_priority.py`` pins the table.
"""

from __future__ import annotations

from kvcanary.registry import Op

TABLE = """
backend    device   plan  plan_offsets  plan_entries  verify  write  scatter_req_token_ids
torch_ref  *          10            10            10      10     10                     10
triton     cuda       50            50            50      50     50                     50
triton     cpu         1             1             1       1      1                      1
cuda       cuda       60            40            40      60     60                     60
"""


def _parse(text: str) -> dict[str, dict[str, dict[Op, int]]]:
    """backend -> device type -> operation -> priority; the header names the operations (``Op`` values)."""
    header, *rows = (line.split() for line in text.strip().splitlines())
    columns = [Op(name) for name in header[2:]]
    out: dict[str, dict[str, dict[Op, int]]] = {}
    for backend, device, *cells in rows:
        out.setdefault(backend, {})[device] = dict(zip(columns, map(int, cells), strict=True))
    return out


PRIORITY = _parse(TABLE)


def devices(backend: str, op: Op) -> dict[str, int]:
    """``OpSupport.devices`` of ``backend``'s ``op``: device type -> priority."""
    return {device: ops[op] for device, ops in PRIORITY[backend].items()}
