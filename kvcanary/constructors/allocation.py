"""Contracts of the allocators: capacities must be positive (SGLang's messages).

The three allocators take one capacity each and share one rule, so their contracts come from one factory.
"""

import sys
import types
from typing import Annotated, ClassVar

from pydantic import Field

from kvcanary.errors import FAMILY
from kvcanary_contracts import Checker, Contract, ContractInfo, Relation, ScalarArg

_FIX = "Size it from the engine's capacities (see `CanaryCapacities`); it must hold at least one entry."


def _allocate(owner: str, capacity: str, summary: str, field_doc: str, why: str, fix: str = _FIX) -> type[Contract]:
    """The contract of ``owner.allocate(<capacity>=..., device=...)``: the capacity must be positive."""
    frame = sys._getframe(1)
    origin = f"{frame.f_globals['__name__']}:{frame.f_lineno}"
    rule = Relation(name=f"{capacity}_positive", require=f"{capacity} > 0",
                    message=f"{owner} {capacity} must be positive, got {{{capacity}}}", why=why, fix=fix,
                    origin=origin)
    namespace = {
        "__module__": __name__,
        "__doc__": f"``{owner}.allocate({capacity}=..., device=...)``.",
        "__annotations__": {"contract": ClassVar[ContractInfo], capacity: Annotated[int, ScalarArg(int)]},
        "contract": FAMILY.contract(f"{owner}.allocate", "A", summary, rules=(rule,), origin=origin),
        capacity: Field(description=field_doc),
    }
    return types.new_class(f"{owner}Allocate", (Contract,), exec_body=lambda ns: ns.update(namespace))


VerifyPlanAllocate = _allocate(
    "VerifyPlan", "verify_capacity", "Allocate a verify plan able to hold verify_capacity entries.",
    "Entries the plan can hold.",
    "A plan with no room cannot describe any verify entry; the plan kernel would always overflow.")
WritePlanAllocate = _allocate(
    "WritePlan", "write_req_capacity", "Allocate a write plan able to describe write_req_capacity request rows.",
    "Request rows the plan can hold.", "A write plan with no rows cannot describe any request.")
ViolationLogAllocate = _allocate(
    "ViolationLog", "ring_capacity", "Allocate the device-side violation ring and its write index.",
    "Rows of the violation ring.",
    "The ring keeps the first ring_capacity violations; with no rows nothing could be reported.",
    fix="Use the default (1024) or any positive size.")

check_verify_plan_allocate: Checker = VerifyPlanAllocate.checker()
check_write_plan_allocate: Checker = WritePlanAllocate.checker()
check_violation_log_allocate: Checker = ViolationLogAllocate.checker()
