"""CanaryConfig: what the manager checks and what it does with what it finds (SGLang's server settings)."""

from __future__ import annotations

from dataclasses import dataclass

# The module, not its names: the contract imports VerifyBudget from this package, so whichever of the two is
# imported first, the other is complete when a CanaryConfig is built.
from kvcanary.constructors import config as config_contract
from kvcanary.constructors.server_strings import check_from_strings
from kvcanary.consts import DEFAULT_RING_CAPACITY, CanaryMode, RealKvHashMode
from kvcanary.extensions import Extensions
from kvcanary.guard.history import DEFAULT_GUARD_HISTORY
from kvcanary.guard.violation_policy import ViolationPolicy
from kvcanary.manager.budget import VerifyBudget


@dataclass(frozen=True, kw_only=True)
class CanaryConfig:
    """Settings of one :class:`~kvcanary.manager.CanaryManager`.

    ``mode`` NONE disables the canary (the engine attaches no manager); ``real_kv_mode`` chooses how much of
    layer 0's K/V bytes each TAIL/SWEEP record fingerprints; ``sweep_interval`` 0 turns the sweep off.
    ``enable_v`` runs the V-half endpoints too (SGLang's default is K only). ``health_warmup_steps`` and
    ``health_every`` drive the kernel-run-counter watchdog, ``stats_every`` the periodic stats line.
    ``num_forward_slots`` is the number of forwards per step that need their own plans (one per captured
    draft step). ``backend`` forces a kvcanary backend by name for every launch (None: automatic).
    ``verify_budget`` verifies at most that many entries per launch, rotating through the live set (None:
    every live entry, every forward; see :mod:`kvcanary.manager.budget`). ``extensions`` turns on the opt-in
    checks (:class:`kvcanary.Extensions`) for every per-forward plan, verify and write (None: none of them;
    the sweep never takes them). ``layer_rotation`` (1 to 4; 0: off) fingerprints every layer a pool group
    lists in ``PoolGroupSpec.layers``, that many layer buffers per forward, in rotation
    (:mod:`kvcanary.manager.rotation`). ``compile`` runs each forward's canary launches (after the batch is
    staged) as ``torch.compile(fullgraph=True, dynamic=True)`` graphs. ``graphs`` replays each forward's
    HEAD and TAIL from CUDA graphs the manager captures itself, one per batch bucket, even when the engine
    runs eagerly (:mod:`kvcanary.manager.graphs`); None (the default) turns them on for a CUDA pool unless
    ``compile`` is on, True requires a CUDA pool, False keeps every launch eager.

    ``on_violation`` (None: follow ``mode``) is the violation policy beside ``mode``: ``log`` and ``raise``
    are ``mode`` LOG and RAISE; ``isolate`` logs as LOG does and also hands the engine's adapter one decision
    per step (fail the requests that read a corrupt slot, quarantine its block; docs/policies.md). ``mode``
    stays SGLang's switch (NONE turns the canary off); set ``on_violation`` to a value other than ``mode``'s
    policy (NONE's is LOG) only with ``mode`` LOG, the default. :attr:`policy` is the policy in effect.
    ``guard_history`` is how many entries each of the isolate policy's in-memory records keeps (the manager's
    ``decisions``, an engine guard's decisions and failed requests), the newest; None keeps every one.
    Monitoring counts every decision and failure whatever the size (:mod:`kvcanary.guard.history`).
    """

    mode: CanaryMode = CanaryMode.LOG
    real_kv_mode: RealKvHashMode = RealKvHashMode.NONE
    sweep_interval: int = 0
    ring_capacity: int = DEFAULT_RING_CAPACITY
    enable_v: bool = False
    enable_verify_token: bool = False
    enable_write_input_assert: bool = False
    stats_every: int = 100
    health_warmup_steps: int = 100
    health_every: int = 100
    num_forward_slots: int = 1
    backend: str | None = None
    verify_budget: VerifyBudget | None = None
    extensions: Extensions | None = None
    layer_rotation: int = 0
    compile: bool = False
    graphs: bool | None = None
    on_violation: ViolationPolicy | None = None
    guard_history: int | None = DEFAULT_GUARD_HISTORY

    def __post_init__(self) -> None:
        config_contract.validate_canary_config(self)  # every rule: kvcanary/constructors/config.py (KVC-C codes)

    @property
    def policy(self) -> ViolationPolicy:
        """The violation policy in effect: ``on_violation``, or ``mode``'s (LOG or RAISE) when it is None."""
        if self.on_violation is not None:
            return self.on_violation
        return ViolationPolicy.RAISE if self.mode is CanaryMode.RAISE else ViolationPolicy.LOG

    @property
    def report_mode(self) -> CanaryMode:
        """What the reporter does with each report: RAISE under the raise policy, LOG otherwise."""
        return CanaryMode.RAISE if self.policy is ViolationPolicy.RAISE else CanaryMode.LOG

    @classmethod
    def from_strings(cls, *, mode: str = "log", real_data: str = "none", **kwargs: object) -> CanaryConfig:
        """Build from server-style strings (``--kv-canary``, ``--kv-canary-real-data``), case-insensitive; an
        unknown value gets SGLang's own ``ValueError`` text, with its code."""
        check_from_strings(mode=mode, real_data=real_data)  # the rules: kvcanary/constructors/server_strings.py
        return cls(mode=CanaryMode(mode.strip().lower()), real_kv_mode=RealKvHashMode[real_data.strip().upper()],
                   **kwargs)  # type: ignore[arg-type]
