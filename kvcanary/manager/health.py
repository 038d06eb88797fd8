"""The watchdog: a canary that silently stops running must fail loudly (SGLang's message, word for word)."""

from __future__ import annotations

from kvcanary.consts import CanaryLaunchTag
from kvcanary.manager.pump import HostSnapshot


class HealthChecker:
    """After ``warmup`` steps and every ``every`` steps, every active tag's kernel_run_counter must be > 0.

    It reads the pump's (delayed) snapshot, so it costs no device sync."""

    def __init__(self, active_tags: list[CanaryLaunchTag], *, warmup: int, every: int) -> None:
        self.active_tags = list(active_tags)
        self.warmup = warmup
        self.every = every
        self.checks = 0

    def due(self, step: int) -> bool:
        return step >= self.warmup and (step - self.warmup) % self.every == 0

    def check(self, snap: HostSnapshot, step: int) -> None:
        self.checks += 1
        dead = [t for t in self.active_tags if snap.kernel_run_counters[int(t)] == 0]
        if dead:
            names = ", ".join(t.name for t in dead)
            raise RuntimeError(f"kv-canary: kernel_run_counter is zero after warmup for tags=[{names}] at step={step}; "
                               "canary path is not executing")
