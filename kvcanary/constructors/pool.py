"""Contracts of ``PoolGroupSpec(...)`` and ``KvPoolSpec(...)``: the engine's description of its KV pool.

A group's buffers are views of the live pool, one row per slot (slot 0 is padding); an SWA group also has its
window and the full→SWA table. The pool has one FULL group, then optionally one SWA group, whose table covers
every full slot.
"""

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from typing import Annotated, Any, ClassVar

import torch
from pydantic import Field

from kvcanary.constructors._settings import validator
from kvcanary.consts import PoolKind
from kvcanary.errors import FAMILY
from kvcanary_contracts import Contract, ContractInfo, ContractTypeError, Relation, RequiredWhen, ScalarArg, TensorArg
from kvcanary_contracts.mutations import Resize

_TYPE = {"type": ContractTypeError}
_GROUP = {"group": "kind.name"}  # "PoolGroupSpec(FULL)" / "PoolGroupSpec(SWA)" in the messages


@dataclass(frozen=True)
class _Helper:
    """A function a rule calls, shown in the catalog ("Here `name` = ...") by what it returns."""

    fn: Callable[..., object]
    returns: str

    def __call__(self, *args: Any, **kwargs: Any) -> object:
        return self.fn(*args, **kwargs)

    def __repr__(self) -> str:
        return self.returns


def first_bad_layer(layers: Any, k_layer0: torch.Tensor) -> int:
    """The index of the first entry of ``layers`` that is not a ``[num_slots, ...]`` buffer on k_layer0's
    device with k_layer0's slots, or -1."""
    for i, buf in enumerate(layers):
        if (not isinstance(buf, torch.Tensor) or buf.ndim < 1 or buf.shape[0] != k_layer0.shape[0]
                or buf.device != k_layer0.device):
            return i
    return -1


def group_kinds(groups: Any) -> tuple[str, ...]:
    """The kind names of ``groups`` (``"?"`` for an entry that is not a group)."""
    return tuple(getattr(getattr(g, "kind", None), "name", "?") for g in groups)


class PoolGroupSpecContract(Contract):
    """``PoolGroupSpec(kind=..., k_layer0=..., v_layer0=..., swa_window_size=..., full_to_swa_index_mapping=...,
    layers=...)``."""

    contract: ClassVar[ContractInfo] = FAMILY.contract(
        "PoolGroupSpec", "K", "One group of the KV pool: its layer-0 buffers, and for SWA its window and table.",
        device_key="k_layer0",
        constants={"first_bad_layer": _Helper(first_bad_layer, "the index of the first entry of `layers` that is "
                                              "not a [num_slots, ...] buffer like k_layer0 (-1: none)")},
        rules=(
            RequiredWhen(
                when="kind.name == 'SWA'", fields=("full_to_swa_index_mapping",), values=_GROUP,
                message="PoolGroupSpec({group}).full_to_swa_index_mapping is required for an SWA group",
                why="An SWA group's canary index is its SWA-pool slot: without the table no full slot can be "
                "translated to it.",
                fix="Pass the engine's full→SWA slot table (int64, one entry per full slot, 0 = none)."),
            Relation(
                name="swa_window_positive", require="swa_window_size > 0", when="kind.name == 'SWA'",
                values=_GROUP,
                message="PoolGroupSpec({group}).swa_window_size must be positive for an SWA group, "
                "got {swa_window_size}",
                why="Only the window's tokens are kept in an SWA pool; a window of no tokens keeps none.",
                fix="Pass the model's sliding-window size."),
            Relation(
                name="full_group_has_no_window",
                require="kind.name == 'SWA' or (swa_window_size == 0 and full_to_swa_index_mapping is None)",
                over=("kind", "swa_window_size", "full_to_swa_index_mapping"), values=_GROUP,
                message="PoolGroupSpec({group}) must have swa_window_size=0 and no full_to_swa_index_mapping",
                why="A FULL group's canary index is the KV slot itself: a window or a table would be ignored, "
                "which hides a wiring mistake.",
                fix="Describe a sliding-window group as kind=PoolKind.SWA, or drop the window and the table.",
                breaks={"swa_window_size": 16}),
            Relation(
                name="k_layer0_has_slots", require="k_layer0.shape[0] >= 2", values={**_GROUP, "shape":
                                                                                      "tuple(k_layer0.shape)"},
                message="PoolGroupSpec({group}).k_layer0 must have at least 2 slots (slot 0 is padding), "
                "got shape {shape}",
                why="Slot 0 is the padding slot engines point unused entries at; a pool needs a real slot beside "
                "it.",
                fix="Pass the whole pool buffer (one row per slot, padding slot included).",
                breaks={"k_layer0": Resize(0, 1), "v_layer0": Resize(0, 1)}),
            Relation(
                name="v_layer0_slots", require="v_layer0.shape[0] == k_layer0.shape[0]", when="v_layer0 is not None",
                values={**_GROUP, "k_slots": "k_layer0.shape[0]", "v_slots": "v_layer0.shape[0]"},
                message="PoolGroupSpec({group}).v_layer0 must have as many slots as k_layer0 ({k_slots}), "
                "got {v_slots}",
                why="Slot s of the group is row s of both halves; a V buffer of other rows describes another pool.",
                fix="Pass layer 0's V buffer of the same group (None for a group without V, such as MLA).",
                breaks={"v_layer0": Resize(0, 3)}),
            Relation(
                name="layers_match_k_layer0", require="first_bad_layer(layers, k_layer0) < 0",
                over=("layers", "k_layer0"),
                values={**_GROUP, "i": "first_bad_layer(layers, k_layer0)", "device": "k_layer0.device",
                        "slots": "k_layer0.shape[0]", "shape": "tuple(layers[first_bad_layer(layers, k_layer0)].shape)",
                        "got": "layers[first_bad_layer(layers, k_layer0)].device"},
                message="PoolGroupSpec({group}).layers[{i}] must be a [num_slots, ...] buffer on {device} with "
                "{slots} slots, got shape {shape} on {got}",
                why="Layer rotation folds row s of each listed buffer into slot s's fingerprint: every buffer must "
                "have the group's slots, on its device.",
                fix="List every layer's K and V buffers of this group (K0, V0, K1, V1, ...), or none.",
                breaks={"layers": "(k_layer0[:1],)"}),
        ),
    )

    kind: Annotated[PoolKind, ScalarArg(PoolKind, label="PoolGroupSpec.kind", errors=_TYPE)] = Field(
        description="FULL (canary index = KV slot) or SWA (canary index = SWA-pool slot).")
    k_layer0: Annotated[torch.Tensor, TensorArg(min_rank=1, contiguous=False, label="PoolGroupSpec.k_layer0")] = Field(
        description="Layer 0's K buffer of the group, a [num_slots, ...] view of the live pool.")
    v_layer0: Annotated[torch.Tensor | None, TensorArg(min_rank=1, contiguous=False, label="PoolGroupSpec.v_layer0")
                        ] = Field(description="Layer 0's V buffer (None: the group has no V half, as in MLA).")
    swa_window_size: Annotated[int, ScalarArg(int, label="PoolGroupSpec.swa_window_size")] = Field(
        description="Tokens of the sliding window (SWA groups; 0 for FULL).")
    full_to_swa_index_mapping: Annotated[
        torch.Tensor | None,
        TensorArg(dtype=torch.int64, shape=(">= 1",), label="PoolGroupSpec.full_to_swa_index_mapping"),
    ] = Field(description="The full→SWA slot table of an SWA group (int64, one entry per full slot, 0 = none).")
    layers: Annotated[tuple[Any, ...], ScalarArg(tuple, label="PoolGroupSpec.layers", errors=_TYPE)] = Field(
        description="Every layer's K and V buffers of the group, for layer rotation (empty: none).")


class KvPoolSpecContract(Contract):
    """``KvPoolSpec(groups=..., req_to_token=..., kv_token_id_vs_position_offset=...)``."""

    contract: ClassVar[ContractInfo] = FAMILY.contract(
        "KvPoolSpec", "K", "The pool a manager protects: its groups, req_to_token and the token offset.",
        constants={"group_kinds": _Helper(group_kinds, "the kind names of `groups`, in order"),
                   "replace": _Helper(dataclasses.replace, "`dataclasses.replace`")},
        rules=(
            Relation(
                name="groups_full_then_swa", require="group_kinds(groups) in (('FULL',), ('FULL', 'SWA'))",
                over=("groups",), values={"kinds": "group_kinds(groups)"},
                message="KvPoolSpec.groups must be (FULL,) or (FULL, SWA), got {kinds}",
                why="The manager keeps one canary buffer per group: the full pool's, and a sliding-window pool's "
                "when the model has one.",
                fix="Pass the FULL group first, then the SWA group if there is one.",
                breaks={"groups": "()"}),
            Relation(
                name="kv_token_id_vs_position_offset_target_or_draft",
                require="kv_token_id_vs_position_offset in (0, 1)",
                message="KvPoolSpec.kv_token_id_vs_position_offset must be 0 (target) or 1 (draft), "
                "got {kv_token_id_vs_position_offset}",
                why="A target pool's slot p holds the KV of the token at p; a speculative draft pool's, of the token "
                "at p + 1. No other layout exists.",
                fix="Pass 0 for the target model's pool, 1 for an EAGLE-style draft pool."),
            Relation(
                name="swa_table_covers_full_slots",
                require="len(groups) < 2 or groups[1].full_to_swa_index_mapping.shape[0] >= groups[0].num_slots",
                over=("groups",),
                values={"slots": "groups[0].num_slots", "length": "groups[1].full_to_swa_index_mapping.shape[0]"},
                message="KvPoolSpec.groups[1].full_to_swa_index_mapping must cover every full slot ({slots}), "
                "got length {length}",
                why="Every full slot a request writes is translated through the table; a shorter table leaves "
                "slots without an SWA index.",
                fix="Pass the engine's whole table (one entry per full slot).",
                breaks={"groups": "(groups[0], replace(groups[1], full_to_swa_index_mapping="
                        "groups[1].full_to_swa_index_mapping[:1]))"}),
            Relation(
                name="req_to_token_on_pool_device", require="req_to_token.device == groups[0].k_layer0.device",
                over=("req_to_token", "groups"),
                values={"device": "groups[0].k_layer0.device", "got": "req_to_token.device"},
                message="KvPoolSpec.req_to_token must be on the pool's device {device}, got {got}",
                why="The plan kernels read req_to_token beside the pool's canary buffers, on one device.",
                fix="Pass the engine's req_to_token, which lives with the pool.",
                breaks={"req_to_token": "req_to_token.to('meta')"}),
        ),
    )

    groups: Annotated[tuple[Any, ...], ScalarArg(tuple, label="KvPoolSpec.groups", errors=_TYPE)] = Field(
        description="The pool's groups: FULL, then optionally SWA.")
    req_to_token: Annotated[torch.Tensor, TensorArg(
        dtype=torch.int32, shape=("*", "*"), same_device=False, label="KvPoolSpec.req_to_token", messages={
            "dtype": "{name} must be a contiguous 2-D int32 tensor, got dtype {actual}",
            "rank": "{name} must be a contiguous 2-D int32 tensor, got shape {shape}",
            "contiguous": "{name} must be a contiguous 2-D int32 tensor, got strides {stride}"})] = Field(
        description="Each request row's KV slot per position (row 0 is padding).")
    kv_token_id_vs_position_offset: Annotated[int, ScalarArg(int, label="KvPoolSpec.kv_token_id_vs_position_offset")
                                              ] = Field(description="0 for a target pool, 1 for a draft pool.")


validate_pool_group = validator(PoolGroupSpecContract)
validate_kv_pool = validator(KvPoolSpecContract)
