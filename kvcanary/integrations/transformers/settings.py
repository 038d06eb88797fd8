"""The CanaryConfig of ``attach_canaries``: its string settings, checked by their contract, then the rest.

Kept apart from the session so that the settings can be built (and their error pages run) without
transformers installed.
"""

from __future__ import annotations

from kvcanary.constructors.attach import check_attach_config
from kvcanary.guard.violation_policy import ViolationPolicy
from kvcanary.manager import CanaryConfig


def attach_config(*, mode: str = "log", real_kv: str = "partial", on_violation: ViolationPolicy | None = None,
                  **settings: object) -> CanaryConfig:
    """The CanaryConfig ``attach_canaries(mode=..., real_kv=..., on_violation=..., ...)`` runs with.

    ``mode``: log or raise; ``real_kv``: partial or all; ``on_violation`` (None: ``mode``'s): the policy
    ``attach_canaries`` read with :meth:`ViolationPolicy.parse`. ``settings`` are further CanaryConfig fields.
    A bad value raises its rule's ContractError (the rules: kvcanary/constructors/attach.py).
    """
    check_attach_config(mode=mode, real_kv=real_kv, on_violation=on_violation)
    return CanaryConfig.from_strings(mode="log" if on_violation is not None else mode, real_data=real_kv,
                                     on_violation=on_violation, **settings)
