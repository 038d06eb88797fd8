"""Layer rotation: every layer's real K and V bytes fingerprinted, a bounded number of layers per forward.

The per-forward fingerprint covers the sources an endpoint is given (layer 0's K or V). With
``CanaryConfig(layer_rotation=n)`` and a pool group that lists all its layer buffers
(``PoolGroupSpec.layers``: K0, V0, K1, V1, ...), the buffers are cut into ``G = ceil(len(layers) / n)`` sets of
at most ``n``; each set has its own canary buffer whose records fingerprint that set's buffers.

After each forward (TAIL), every set's records are written for the forward's new tokens (so each set's
fingerprints are current), and the forward's verify plan is verified against *one* set: set ``c mod G`` of a
device-side counter ``c`` that each forward which verifies advances (one whose plan overflowed verifies
nothing and keeps the turn). The other sets' verifies launch with ``enable = 0`` and
return at once, so the launch sequence never changes and a CUDA graph captures it once.

Bound: a byte flipped in any listed layer buffer of a slot that stays in every forward's verified range is
reported by a TAIL verify within ``G`` forwards of the flip (the forward in which its set's turn comes). Each
forward folds at most ``n`` layer buffers per verified entry (plus the new tokens' writes, which fold every
set: ``len(layers)`` buffers per new token). Rotation rows carry the group's ``TAIL_K`` tag with bit
VERIFY_REAL_KV_HASH_MISMATCH; a chain or position break that the TAIL verify reports is reported by the
rotation's verify too. Rotation launches count on their own counters, not on the tag's.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from kvcanary.constructors import config as config_contract
from kvcanary.consts import CanaryLaunchTag, RealKvHashMode
from kvcanary.context import VerifyOrWriteContext
from kvcanary.extensions import Extensions
from kvcanary.launch.verify import launch_canary_verify_kernel
from kvcanary.launch.write import launch_canary_write_kernel
from kvcanary.manager.buffers import alloc_canary_buf, make_row_source
from kvcanary.manager.state import CanaryDeviceState
from kvcanary.plans import VerifyPlan, WritePlan
from kvcanary.sources import RealKvSource


def rotation_sets(num_buffers: int, per_step: int) -> int:
    """``G``: how many forwards one full rotation over ``num_buffers`` layer buffers takes."""
    return -(-num_buffers // per_step)


@dataclass(frozen=True)
class _Set:
    context: VerifyOrWriteContext
    enable: torch.Tensor  # int32 [1]: this set's verify runs in this forward


class LayerRotation:
    """The rotation of one pool group (see the module docstring)."""

    def __init__(self, *, layers: tuple[torch.Tensor, ...], per_step: int, mode: RealKvHashMode,
                 tag: CanaryLaunchTag, state: CanaryDeviceState, name: str) -> None:
        # CanaryConfig's own rules (KVC-C codes): at most MAX_REAL_KV_SOURCES buffers per forward, and a
        # real-KV mode to fingerprint them with
        rules = config_contract.CanaryConfigContract
        rules.rule_checker("layer_rotation_at_most_sources")(layer_rotation=per_step)
        rules.rule_checker("layer_rotation_needs_real_kv")(layer_rotation=per_step, real_kv_mode=mode)
        assert per_step >= 1, "a rotation folds at least one buffer per forward (0 builds none)"
        sources: list[RealKvSource] = []
        for i, buf in enumerate(layers):
            sources += make_row_source(buf, mode, name=f"{name} layers[{i}]")
        dev = layers[0].device
        num_slots = int(layers[0].shape[0])
        self.num_sets = rotation_sets(len(sources), per_step)
        self.counter = torch.zeros(1, dtype=torch.int64, device=dev)
        """Forwards that verified so far (device): set ``counter mod num_sets`` verifies in the next one."""
        self.sets = [
            _Set(VerifyOrWriteContext(
                canary_buf=alloc_canary_buf(num_slots, dev), kernel_kind=tag,
                violation_ring=state.log.violation_ring, violation_write_index=state.log.violation_write_index,
                slot_run_counter=torch.zeros(1, dtype=torch.int64, device=dev),
                kernel_run_counter=torch.zeros(1, dtype=torch.int64, device=dev),
                real_kv_sources=tuple(sources[g * per_step:(g + 1) * per_step]), real_kv_hash_mode=mode,
                enable_chain_position_assert=state.enable_chain_position_assert),
                torch.zeros(1, dtype=torch.int32, device=dev))
            for g in range(self.num_sets)
        ]
        self._ids = torch.arange(self.num_sets, dtype=torch.int64, device=dev)
        self._enables = torch.zeros(self.num_sets, dtype=torch.int32, device=dev)

    def buffers(self) -> list[torch.Tensor]:
        """Each set's canary buffer (a KV transfer of a slot carries them along)."""
        return [s.context.canary_buf for s in self.sets]

    def tail(self, plan: VerifyPlan, write: WritePlan, *, input_ids: torch.Tensor, positions: torch.Tensor,
             out_cache_loc: torch.Tensor, backend: str | None, extensions: Extensions | None = None) -> None:
        """After the forward: verify the plan against this forward's set, then write every set's records for
        the new tokens. Device work only (capturable). ``extensions`` are the manager's: the plan was built
        with them, so its verify must read it with them (a zero-slot mark is an entry, not a slot)."""
        turn = torch.remainder(self.counter, self.num_sets)
        torch.mul((self._ids == turn).to(torch.int32), plan.enable, out=self._enables)
        for g, s in enumerate(self.sets):
            s.enable.copy_(self._enables[g : g + 1])
            view = VerifyPlan(verify_slot_indices=plan.verify_slot_indices,
                              verify_expected_tokens=plan.verify_expected_tokens,
                              verify_expected_positions=plan.verify_expected_positions,
                              verify_prev_slot_indices=plan.verify_prev_slot_indices,
                              verify_num_valid=plan.verify_num_valid, enable=s.enable)
            launch_canary_verify_kernel(context=s.context, plan=view, check_verify_expected_token=False,
                                        extensions=extensions, backend=backend)
        for s in self.sets:
            launch_canary_write_kernel(context=s.context, plan=write, input_ids=input_ids, positions=positions,
                                       out_cache_loc=out_cache_loc, enable_write_input_assert=False,
                                       expected_input_tokens=None, expected_input_positions=None, backend=backend)
        self.counter.add_(plan.enable)  # a forward that verified nothing (its plan overflowed) keeps the turn
