"""Every operation as a ``torch.library`` operator, ``torch.ops.kvcanary.<operation>``.

Each launcher registers its operator when its module is imported; :func:`operators` imports them all. The
schema is derived from the operation's contract (:mod:`kvcanary_contracts.torch_op`): structs flattened
into their tensors and scalars, the tensors the launch writes marked as mutated, ``backend`` last. While
``torch.compile`` traces a launcher, the launcher calls its operator; elsewhere it never does.
"""

from __future__ import annotations

import importlib

from kvcanary.launch._make import OPERATORS
from kvcanary.registry import Op
from kvcanary_contracts.torch_op import ContractOp

_MODULES = {
    Op.PLAN: "plan", Op.PLAN_OFFSETS: "plan_offsets", Op.PLAN_ENTRIES: "plan_entries", Op.WRITE: "write",
    Op.VERIFY: "verify", Op.SCATTER: "scatter",
}


def operators() -> dict[Op, ContractOp]:
    """The operator of every operation (registering those not registered yet), by operation."""
    for op, module in _MODULES.items():
        if op not in OPERATORS:
            importlib.import_module(f"kvcanary.launch.{module}")
    return {op: OPERATORS[op] for op in _MODULES}
