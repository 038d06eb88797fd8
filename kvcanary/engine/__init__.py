"""A small but real serving engine for demos, tests and benchmarks, with fault injection.

:class:`Engine` serves requests on a tiny random transformer whose attention reads a paged KV pool; the
canary (:mod:`kvcanary.manager`) wraps every forward. :class:`FaultInjector` arms one bug class of BUGS.md.
"""

from kvcanary.engine.allocator import OutOfSlots, SlotAllocator
from kvcanary.engine.config import EngineConfig, ModelConfig, demo_engine_config
from kvcanary.engine.engine import Engine, StepReport
from kvcanary.engine.faults import DESCRIPTIONS, Fault, FaultFiring, FaultInjector
from kvcanary.engine.model import TinyTransformer
from kvcanary.engine.radix import RadixCache, TreeNode
from kvcanary.engine.request import ReqState, Request
from kvcanary.engine.workload import Arrival, Control, ControlKind, Workload, drive, shared_prefix_workload

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
    "SlotAllocator",
    "StepReport",
    "TinyTransformer",
    "TreeNode",
    "Workload",
    "demo_engine_config",
    "drive",
    "shared_prefix_workload",
]
