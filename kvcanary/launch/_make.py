"""How a contract becomes a public launcher: the contract's checks, then dispatch through the registry.

Every launcher takes exactly its contract's fields as keyword arguments, plus ``backend=None`` to force a
backend. Its typed overloads live in the generated stub beside each module (``python -m kvcanary.launch``
rewrites them; a test fails when they drift from the contracts).
"""

from __future__ import annotations

from kvcanary.registry import REGISTRY, Op
from kvcanary_contracts import Contract
from kvcanary_contracts.launcher import Extra, Launcher, build_launcher
from kvcanary_contracts.torch_op import ContractOp

EXTRAS = {"backend": Extra(None, "str | None", "str?")}
NAMESPACE = "kvcanary"
"""The ``torch.library`` namespace of the operators: ``torch.ops.kvcanary.<operation>``."""
CONTRACTS: dict[Op, type[Contract]] = {}
"""The contract of every operation: what its launcher takes and what each backend's implementation receives."""
OPERATORS: dict[Op, ContractOp] = {}
"""The ``torch.library`` operator of every operation whose launcher has been imported."""


def launcher(contract: type[Contract], op: Op, module: str, doc: str) -> Launcher:
    """The public launcher of ``contract``, dispatching ``op``; ``module`` is where it is exported from."""
    if CONTRACTS.setdefault(op, contract) is not contract:
        raise ValueError(f"operation {op.value!r} already has the contract {CONTRACTS[op].__name__}")
    fn = build_launcher(contract, dispatch=REGISTRY.runner(op), extras=EXTRAS, doc=doc, module=module,
                        operator=f"{NAMESPACE}::{op.value}")
    OPERATORS[op] = fn.__kvc_operator__  # type: ignore[attr-defined]
    return fn
