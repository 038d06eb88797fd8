"""A small but real serving engine for the demo, the tests and the benchmarks, with fault injection.

It is not part of kvcanary's API: it exists to show the canary at work. :class:`Engine` serves requests on
a tiny random transformer whose attention reads a paged KV pool; the canary (:mod:`kvcanary.manager`) wraps
every forward. :class:`FaultInjector` arms one of the KV-cache bug classes listed by :class:`Fault` (a
radix use-after-free, a double allocation, a stale sliding-window translation, ...).
"""

from typing import TYPE_CHECKING

if TYPE_CHECKING:  # imported on first use (kvcanary._lazy): `kvcanary demo --help` needs only Fault
    from kvcanary.demo.engine.allocator import OutOfSlots, SlotAllocator
    from kvcanary.demo.engine.config import EngineConfig, ModelConfig, demo_engine_config
    from kvcanary.demo.engine.engine import Engine
    from kvcanary.demo.engine.faults import DESCRIPTIONS, Fault, FaultFiring, FaultInjector
    from kvcanary.demo.engine.model import TinyTransformer
    from kvcanary.demo.engine.radix import RadixCache, TreeNode
    from kvcanary.demo.engine.requests import ReqState, Request, RequestTable
    from kvcanary.demo.engine.step_report import StepReport
    from kvcanary.demo.engine.workload import Arrival, Control, ControlKind, Workload, drive, shared_prefix_workload

__all__ = [
    "DESCRIPTIONS",
    "Arrival",
    "Control",
    "ControlKind",
    "Engine",
    "EngineConfig",
    "Fault",
    "FaultFiring",
    "FaultInjector",
    "ModelConfig",
    "OutOfSlots",
    "RadixCache",
    "ReqState",
    "Request",
    "RequestTable",
    "SlotAllocator",
    "StepReport",
    "TinyTransformer",
    "TreeNode",
    "Workload",
    "demo_engine_config",
    "drive",
    "shared_prefix_workload",
]

if not TYPE_CHECKING:
    from kvcanary._lazy import attach

    __getattr__, __dir__ = attach(__name__, globals(), __all__)
    del attach
