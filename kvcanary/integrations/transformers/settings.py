"""The CanaryConfig of ``attach_canaries``: its string settings, checked by their contract, then the rest; and
the sizes of its request table, checked by theirs.

Kept apart from the session so that the settings can be built (and their error pages run) without
transformers installed.
"""

from __future__ import annotations

from dataclasses import dataclass

from kvcanary.constructors.attach import check_attach_config, validate_request_table_sizes
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


@dataclass(frozen=True)
class RequestTableSizes:
    """The sizes of the request table ``attach_canaries(max_requests=..., max_context_len=...)`` builds at the
    first step: ``max_requests`` rows (requests held at once) of ``max_context_len`` tokens each; positive ints,
    None for the engine's (twice its batch; the model's ``max_position_embeddings`` or the cache's slots,
    whichever is less). Checked on construction, so a bad size is refused at attach, not inside the first step
    of a run (the rules and their codes: kvcanary/constructors/attach.py)."""

    max_requests: int | None = None
    max_context_len: int | None = None

    def __post_init__(self) -> None:
        validate_request_table_sizes(self)
