"""Endpoints: one launch tag = one (phase, half, group) with its VerifyOrWriteContext.

Per group up to six: {HEAD, TAIL, SWEEP} x {K, V}. HEAD has no real-KV sources (it runs before the forward
writes the KV); TAIL and SWEEP carry the group's sources; SWEEP reuses the TAIL buffer.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

import torch

from kvcanary.consts import CanaryLaunchTag, PoolKind, RealKvHashMode
from kvcanary.context import VerifyOrWriteContext
from kvcanary.manager.buffers import CanaryBufferGroup
from kvcanary.manager.state import CanaryDeviceState
from kvcanary.sources import RealKvSource


class Phase(str, Enum):
    HEAD = "head"
    TAIL = "tail"
    SWEEP = "sweep"


class Half(str, Enum):
    K = "k"
    V = "v"


def launch_tag(phase: Phase, half: Half, kind: PoolKind) -> CanaryLaunchTag:
    """``HEAD_K_FULL`` ... ``SWEEP_V_SWA``."""
    return CanaryLaunchTag[f"{phase.name}_{half.name}_{kind.name}"]


@dataclass(frozen=True)
class Endpoint:
    phase: Phase
    half: Half
    kind: PoolKind
    context: VerifyOrWriteContext

    @property
    def tag(self) -> CanaryLaunchTag:
        return self.context.kernel_kind


def build_endpoints(group: CanaryBufferGroup, state: CanaryDeviceState, mode: RealKvHashMode,
                    *, sweep: bool) -> list[Endpoint]:
    """The group's endpoints, K before V, HEAD before TAIL before SWEEP."""
    out: list[Endpoint] = []
    halves: list[tuple[Half, torch.Tensor, torch.Tensor, tuple[RealKvSource, ...]]] = []
    halves.append((Half.K, group.k_head, group.k_tail, group.real_kv_sources_k))
    if group.v_head is not None and group.v_tail is not None:
        halves.append((Half.V, group.v_head, group.v_tail, group.real_kv_sources_v))
    phases = [Phase.HEAD, Phase.TAIL] + ([Phase.SWEEP] if sweep else [])
    for phase in phases:
        for half, head_buf, tail_buf, sources in halves:
            tag = launch_tag(phase, half, group.kind)
            ctx = VerifyOrWriteContext(
                canary_buf=head_buf if phase is Phase.HEAD else tail_buf,
                kernel_kind=tag,
                violation_ring=state.log.violation_ring,
                violation_write_index=state.log.violation_write_index,
                slot_run_counter=state.slot_run_counter(tag),
                kernel_run_counter=state.kernel_run_counter(tag),
                real_kv_sources=() if phase is Phase.HEAD else sources,
                real_kv_hash_mode=mode,
                enable_chain_position_assert=state.enable_chain_position_assert,
            )
            out.append(Endpoint(phase, half, group.kind, ctx))
    return out
