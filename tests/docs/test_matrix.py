"""The support matrix is generated from whatever the registry holds, even a broken backend."""

from __future__ import annotations

from collections.abc import Sequence

import torch

from kvcanary.registry import REGISTRY, Backend, Op, OpSupport, Reason, ReasonKind, register_backend
from tools.docsgen.matrix import matrix_markdown


class _Odd(Backend):
    def availability(self) -> Sequence[Reason]:
        raise RuntimeError("probe crashed")


class _Gpu(Backend):
    def device_reasons(self, op: Op, device: torch.device) -> Sequence[Reason]:
        return [Reason(ReasonKind.CAPABILITY, "needs sm_90", hint="use torch_ref")]


def test_matrix_lists_every_backend_and_operation() -> None:
    md = matrix_markdown()
    for name in REGISTRY.backends():
        assert f"| `{name}` |" in md
    for op in Op:
        assert f"### `{op.value}`" in md


def test_matrix_shows_declarations_and_reasons() -> None:
    odd = _Odd("zz_odd", "a backend whose probe raises", {})
    gpu = _Gpu("zz_gpu", "a GPU-only backend", {
        Op.VERIFY: OpSupport("x:y", {"cuda": 50}, capture_safe=True, notes="fast | path"),
    })
    register_backend(odd)
    register_backend(gpu)
    try:
        md = matrix_markdown()
    finally:
        REGISTRY.unregister("zz_odd")
        REGISTRY.unregister("zz_gpu")
    assert "error: RuntimeError: probe crashed" in md
    assert "| `zz_gpu` | cuda (50) | yes | no | - | fast \\| path |" in md
    assert "[capability] needs sm_90 (hint: use torch_ref)" in md
    assert "[device] zz_gpu verify runs on cuda, not cpu" in md
