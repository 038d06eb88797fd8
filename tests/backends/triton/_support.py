"""The device the Triton tests run on: ``cuda`` when there is one (compiled kernels), else ``cpu`` (the
interpreter). Their inputs come from ``tools.scenarios``, their checks from ``kvcanary.testing.parity``
(which also drops what torch_ref leaves unspecified for a parallel backend from write calls)."""

from __future__ import annotations

from typing import Any

import pytest
import torch


def device() -> torch.device:
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


LAUNCH_PATHS = ["direct", "triton-launcher"]
"""The two fast paths of ``_jit.Launcher`` for compiled variants: cuda.core (``direct``) or Triton's own."""


class DirectLaunches:
    """Counts the launches the direct path makes while a test selects it (``use_launch_path``)."""

    def __init__(self) -> None:
        self.count = 0


def use_launch_path(path: str, monkeypatch: pytest.MonkeyPatch) -> DirectLaunches:
    """Select ``path`` (one of :data:`LAUNCH_PATHS`) for the test; count the launches cuda.core made for the
    direct path (its launch function wrapped; prepared launches look it up when they are prepared, so select
    before launching: the registry's prepared launches are voided here, as a launch prepared by an earlier
    test replays for a call that repeats its types and addresses)."""
    from kvcanary.registry import REGISTRY
    from kvcanary_backends.triton import _direct, _jit

    REGISTRY.invalidate()
    monkeypatch.setattr(_jit.Launcher, "direct", path == "direct")
    seen = DirectLaunches()

    def counted(*args: Any) -> None:
        _direct.launch_function()(*args)
        seen.count += 1

    monkeypatch.setattr(_jit, "_launch_fn", lambda: counted)
    return seen


def assert_path_taken(path: str, seen: DirectLaunches) -> None:
    """The run launched the way ``path`` says: through cuda.core (no variant refused, the path never switched
    off) or never through it."""
    from kvcanary_backends.triton import _jit

    if path == "direct":
        assert not direct_refusals(), direct_refusals()
        assert _jit.Launcher.direct, "the direct path was switched off (cuda.core refused an argument)"
        assert seen.count > 0, "no launch went through cuda.core"
    else:
        assert seen.count == 0, f"{seen.count} launches went through cuda.core"


def direct_refusals() -> dict[str, dict[Any, str]]:
    """Why variants launched so far do not go through cuda.core, per kernel module (empty: all do)."""
    from kvcanary_backends.triton import fold, plan, plan_entries, plan_offsets, scatter, verify, write

    mods = (fold, plan, plan_entries, plan_offsets, scatter, verify, write)
    return {m.__name__: r for m in mods if (r := m._LAUNCH.direct_refusals())}
