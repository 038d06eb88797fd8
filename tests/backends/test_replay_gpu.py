"""Repeated launches on the GPU replay their prepared launch (cuda, Triton), and each equals a fresh launch.

Triton runs twice: its compiled variants launched through cuda.core (``direct``) and through Triton's own
compiled launcher; the direct run must launch that way (no variant refused).

The same write and verify calls (the very same tensors) are launched step after step, the tokens refilled in
place between steps, with a storage swapped in place half-way (an address change the launcher must see);
torch_ref runs the same sequence on the CPU. After every step the canary buffer, the counters and the ring
(as a multiset) must be equal, and the backend's packing must have run only when something changed.
"""

from __future__ import annotations

from collections.abc import Callable
from types import ModuleType
from typing import Any

import pytest
import torch

import kvcanary as kc
from kvcanary.registry import REGISTRY
from kvcanary.testing import builders
from kvcanary.testing.parity import compare_outputs
from tests.backends.triton._support import LAUNCH_PATHS, assert_path_taken, use_launch_path

pytestmark = pytest.mark.gpu
STEPS = 8
LENGTHS = [5, 3, 1, 7]


def _skip(backend: str) -> None:
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    b = REGISTRY.backends().get(backend)
    reasons = ["not registered"] if b is None else b.static_reasons(kc.Op.WRITE, torch.device("cuda"))
    if reasons:
        pytest.skip(f"{backend} unavailable: {'; '.join(map(str, reasons))}")


def _packers(backend: str) -> tuple[ModuleType, ModuleType, str]:
    """The backend's verify and write modules and the name of the function that packs a call there."""
    if backend == "cuda":
        from kvcanary_backends.cuda import verify, write

        return verify, write, "pack"
    from kvcanary_backends.triton import verify as tverify
    from kvcanary_backends.triton import write as twrite

    return tverify, twrite, "_launch_args"


class World:
    """One device's tensors for the whole sequence (static addresses, values refilled in place)."""

    def __init__(self, device: str, locs: torch.Tensor) -> None:
        self.ctx = builders.context(device, num_slots=128, ring=256)
        offs = builders.offsets_of(LENGTHS)
        n = offs[-1]
        counts = builders.int64_tensor(LENGTHS, device)
        self.positions = (torch.arange(n, device=device)
                          - torch.repeat_interleave(builders.int64_tensor(offs[:-1], device), counts))
        self.ids = torch.zeros(n, dtype=torch.int64, device=device)
        self.locs = locs.to(device)
        plan = builders.write_plan(offs, [-1] * len(LENGTHS), device=device)
        self.write = builders.write_kwargs(self.ctx, plan, self.ids, self.positions, self.locs)
        prevs = torch.cat([torch.tensor([-1]), locs[:-1]]).to(device)
        starts = set(offs[:-1])
        prevs[[i for i in range(n) if i in starts]] = -1
        self.vplan = builders.verify_plan(self.locs.clone(), prevs, self.positions.clone(), self.ids.clone())
        self.verify: dict[str, Any] = {"context": self.ctx, "plan": self.vplan, "check_verify_expected_token": True}

    def step(self, tokens: torch.Tensor, backend: str) -> None:
        self.ids.copy_(tokens)
        self.vplan.verify_expected_tokens.copy_(tokens)
        kc.launch_canary_write_kernel(**self.write, backend=backend)
        kc.launch_canary_verify_kernel(**self.verify, backend=backend)

    def outputs(self) -> dict[str, torch.Tensor]:
        return builders.context_outputs(self.write)


@pytest.mark.parametrize(("backend", "path"), [("cuda", None), *(("triton", p) for p in LAUNCH_PATHS)])
def test_repeated_launches_replay_and_equal_the_reference(backend: str, path: str | None,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    _skip(backend)
    direct = use_launch_path(path, monkeypatch) if path is not None else None
    packs: list[str] = []
    *mods, name = _packers(backend)

    def counted(inner: Callable[..., Any], module: str) -> Callable[..., Any]:
        def pack(call: Any, *args: Any, **kwargs: Any) -> Any:
            packs.append(module)
            return inner(call, *args, **kwargs)

        return pack

    for mod in mods:
        assert isinstance(mod, ModuleType)
        monkeypatch.setattr(mod, name, counted(getattr(mod, name), mod.__name__))
    g = torch.Generator().manual_seed(7)
    locs = torch.randperm(127, generator=g)[: sum(LENGTHS)] + 1
    gpu, cpu = World("cuda", locs), World("cpu", locs)
    for step in range(STEPS):
        if step == STEPS // 2:  # the same tensor object, a new storage: prepared again
            for w in (gpu, cpu):
                w.ctx.slot_run_counter.set_(w.ctx.slot_run_counter.clone().untyped_storage())
        tokens = torch.randint(0, 1000, (sum(LENGTHS),), generator=g)
        gpu.step(tokens.cuda(), backend)
        cpu.step(tokens, "torch_ref")
        torch.cuda.synchronize()
        problems = compare_outputs(gpu.outputs(), cpu.outputs(), base=0)
        assert not problems, f"step {step}: {problems}"
    # prepared at the first steps and after the swap, replayed otherwise (Triton packs twice more: a variant's
    # first launch goes through Triton, then the next call prepares)
    assert 0 < len(packs) <= 2 * (4 if backend == "cuda" else 6), packs
    if direct is not None:  # every launch after a variant's first went the selected way
        assert path is not None
        assert_path_taken(path, direct)
