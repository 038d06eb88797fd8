"""Engine integration: a manager that owns the canary buffers of a KV pool and runs the per-step lifecycle.

See :class:`CanaryManager` (docs/api/manager.md). The engine describes its pool with :class:`KvPoolSpec`,
each forward with :class:`CanaryBatch`, and its prefix cache with :class:`SweepEntries`.
"""

from kvcanary.manager.batch import CanaryBatch, ExpectedTokens
from kvcanary.manager.budget import VerifyBudget
from kvcanary.manager.buffers import CanaryBufferGroup, alloc_canary_buf, make_row_source
from kvcanary.manager.capacities import CanaryCapacities
from kvcanary.manager.config import CanaryConfig
from kvcanary.manager.endpoints import Endpoint, Half, Phase, launch_tag
from kvcanary.manager.manager import CanaryManager
from kvcanary.manager.pool import KvPoolSpec, PoolGroupSpec
from kvcanary.manager.pump import HostSnapshot
from kvcanary.manager.reporter import ViolationEvent
from kvcanary.manager.stats import StepStats
from kvcanary.manager.sweep import SweepEntries

__all__ = [
    "CanaryBatch",
    "CanaryBufferGroup",
    "CanaryCapacities",
    "CanaryConfig",
    "CanaryManager",
    "Endpoint",
    "ExpectedTokens",
    "Half",
    "HostSnapshot",
    "KvPoolSpec",
    "Phase",
    "PoolGroupSpec",
    "StepStats",
    "SweepEntries",
    "VerifyBudget",
    "ViolationEvent",
    "alloc_canary_buf",
    "launch_tag",
    "make_row_source",
]
