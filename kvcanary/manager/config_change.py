"""Which of a manager's settings may change after attach: ``manager.config = new`` checks the new config here.

Most settings size or build something at attach (buffers, endpoints, plans, graphs, the watchdog, the guard's
records): a new value would be ignored, or fail a later call deep inside (the token check with no expected-token
pool, a forward slot with no plans). Those are refused by name. Two are read at every step and may change:
``stats_every`` (the stats line's period) and the violation policy (``mode`` / ``on_violation``) between ``log``
and ``isolate``, which only the step's guard reads; the reporter raises or not as attached, so a change to or from
``raise`` is refused, and so is ``mode`` NONE (no manager runs with the canary off).
"""

from __future__ import annotations

import dataclasses

from kvcanary.consts import CanaryMode
from kvcanary.manager.config import CanaryConfig

PER_STEP = frozenset({"stats_every", "mode", "on_violation"})
"""The settings read at every step (the policy's two only between log and isolate: :func:`check_config_change`)."""

FIXED_AT_ATTACH = tuple(f.name for f in dataclasses.fields(CanaryConfig) if f.name not in PER_STEP)
"""Every other setting: what it sized or built at attach stays as it was."""


def check_config_change(old: CanaryConfig, new: object) -> None:
    """Refuse ``new`` as the config of a manager attached with ``old``: a TypeError when it is no CanaryConfig, a
    ValueError naming the first setting fixed at attach that differs, or a policy change the reporter cannot
    follow (to or from ``raise``, or ``mode`` NONE)."""
    if not isinstance(new, CanaryConfig):
        raise TypeError(f"kv-canary: config must be a CanaryConfig, got {type(new).__name__}")
    for name in FIXED_AT_ATTACH:
        before, after = getattr(old, name), getattr(new, name)
        if after != before:
            raise ValueError(f"kv-canary: config.{name} is fixed at attach ({before!r}; the manager's buffers, "
                             f"plans and checks were built with it), got {after!r}; attach a new manager for "
                             f"another {name} (only stats_every and the policy between log and isolate change "
                             f"after attach)")
    if new.mode is CanaryMode.NONE:
        raise ValueError("kv-canary: config.mode is NONE (canary disabled): an attached manager keeps LOG or RAISE; "
                         "stop calling the manager instead")
    if new.report_mode is not old.report_mode:
        raise ValueError(f"kv-canary: config.on_violation / config.mode: the raise policy is fixed at attach (the "
                         f"reporter {'raises' if old.report_mode is CanaryMode.RAISE else 'logs'}), got policy "
                         f"{new.policy.value!r} from policy {old.policy.value!r}; only log and isolate switch "
                         f"after attach (attach a new manager for raise)")
