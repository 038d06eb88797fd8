"""Replay a bundle: re-run its verify entries (and chain-position writes) on the CPU with torch_ref, from the
bundle alone, and compare the rows they produce with the bundle's rows as a multiset: every row but those its
``unreplayable`` entries name (``"row N: why"``), so a row no entry re-runs is missing, never left out.

The slots the bundle names are renumbered 1..n in small buffers (slot 0 stays the padding slot); each
buffer's real-KV source holds exactly the words the original fingerprint read (page size 1), so every check
computes what it computed in the engine; the rows' slot fields are mapped back before the comparison.
"""

from __future__ import annotations

import dataclasses
import os
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from kvcanary.consts import CANARY_SLOT_BYTES, VIOLATION_FIELDS, ZERO_SLOT_MARK, CanaryLaunchTag, RealKvHashMode
from kvcanary.context import VerifyOrWriteContext
from kvcanary.evidence.format import Bundle, read_bundle
from kvcanary.evidence.report import printable
from kvcanary.evidence.schema import unreplayable_row
from kvcanary.extensions import Extensions
from kvcanary.launch.verify import launch_canary_verify_kernel
from kvcanary.launch.write import launch_canary_write_kernel
from kvcanary.plans import VerifyPlan, WritePlan
from kvcanary.sources import RealKvSource

Row = tuple[int, ...]


@dataclass(frozen=True)
class ReplayResult:
    """The bundle's rows (all but those listed unreplayable), the replayed rows, and whether they are the same
    multiset."""

    expected: tuple[Row, ...]
    replayed: tuple[Row, ...]
    unreplayable: tuple[str, ...] = field(default=())
    """The bundle's reasons for the rows it could not replay (control characters escaped: they are printed)."""

    @property
    def missing(self) -> list[Row]:
        return list((Counter(self.expected) - Counter(self.replayed)).elements())

    @property
    def extra(self) -> list[Row]:
        return list((Counter(self.replayed) - Counter(self.expected)).elements())

    @property
    def ok(self) -> bool:
        """Every row the bundle holds the evidence for was reproduced, and nothing else was (at least one)."""
        return bool(self.expected) and Counter(self.expected) == Counter(self.replayed)

    @property
    def complete(self) -> bool:
        """``ok``, and the bundle held the evidence for every one of its rows."""
        return self.ok and not self.unreplayable


def _i64(values: list[int]) -> torch.Tensor:
    return torch.tensor(values, dtype=torch.int64)


def _one(value: int, dtype: torch.dtype) -> torch.Tensor:
    return torch.tensor([value], dtype=dtype)


class _TagWorld:
    """One launch tag's buffers, renumbered."""

    def __init__(self, bundle: Bundle, tag: str, info: dict[str, Any], mode: RealKvHashMode, ring: int) -> None:
        self.tag = CanaryLaunchTag[tag]
        slots: list[int] = [int(s) for s in info["slots"]]
        self.local = {s: i + 1 for i, s in enumerate(slots)}
        self.orig = {i: s for s, i in self.local.items()}
        n = len(slots) + 1
        recs = torch.zeros(n, 4, dtype=torch.int64)
        if slots:
            recs[1:] = bundle.tensors[f"records/{tag}"]
        self.buf = recs.view(torch.uint8).reshape(n, CANARY_SLOT_BYTES).clone()
        sources = []
        is_head = self.tag.name.startswith("HEAD")
        for i, nbytes in enumerate(info.get("source_bytes", [])):
            data = torch.zeros(n, nbytes, dtype=torch.uint8)
            if slots:
                data[1:] = bundle.tensors[f"kv/{tag}/{i}"]
            sources.append(RealKvSource(tensor=data, page_size=1, num_bytes_per_token=nbytes, read_bytes=nbytes))
        self.ring = torch.zeros(ring, VIOLATION_FIELDS, dtype=torch.int64)
        self.index = torch.zeros(1, dtype=torch.int32)
        self.ctx = VerifyOrWriteContext(
            canary_buf=self.buf, kernel_kind=self.tag, violation_ring=self.ring, violation_write_index=self.index,
            slot_run_counter=torch.zeros(1, dtype=torch.int64), kernel_run_counter=torch.zeros(1, dtype=torch.int64),
            real_kv_sources=() if is_head else tuple(sources), real_kv_hash_mode=mode,
            enable_chain_position_assert=torch.zeros(1, dtype=torch.int32))

    def map_in(self, slot: int) -> int:
        if slot <= 0 or slot == ZERO_SLOT_MARK:
            return slot
        return self.local[slot]

    def map_out(self, slot: int) -> int:
        return self.orig.get(slot, slot)

    def rows(self) -> list[Row]:
        n = min(int(self.index[0]), int(self.ring.shape[0]))
        return [tuple(int(x) for x in r) for r in self.ring[:n].tolist()]


def replay(bundle: Bundle | Path | str) -> ReplayResult:
    """Re-run the bundle's checks on torch_ref and compare their rows with the bundle's rows. ``bundle`` is a
    :class:`Bundle` or the folder ``kvcanary replay`` takes (read with :func:`read_bundle`); TypeError otherwise."""
    if isinstance(bundle, (str, os.PathLike)):
        bundle = read_bundle(Path(bundle))
    elif not isinstance(bundle, Bundle):
        raise TypeError(f"kv-canary: replay's bundle must be a Bundle (from read_bundle) or a bundle folder's path, "
                        f"got {type(bundle).__name__}")
    rp = bundle.meta["replay"]
    rows_meta = bundle.meta["rows"]
    mode = RealKvHashMode[rp["real_kv_mode"]]
    ext_meta = rp.get("extensions", {})
    ext = Extensions(zero_slot_in_live_range=bool(ext_meta.get("zero_slot_in_live_range")),
                     write_slot_mismatch=bool(ext_meta.get("write_slot_mismatch")))
    extensions = ext if (ext.zero_slot_in_live_range or ext.write_slot_mismatch) else None
    owner_on = bool(ext_meta.get("write_slot_owner_mismatch"))
    ring = 4 * (len(rows_meta) + 4)
    worlds: dict[str, _TagWorld] = {}

    def world(tag: str) -> _TagWorld:
        if tag not in worlds:
            info = rp["buffers"].get(tag, {"slots": [], "source_bytes": []})
            worlds[tag] = _TagWorld(bundle, tag, info, mode, ring)
        return worlds[tag]

    replayed: list[Row] = []
    by_tag: dict[str, list[dict[str, Any]]] = {}
    for e in rp["verify"]:
        by_tag.setdefault(e["tag"], []).append(e)
    for tag, entries in by_tag.items():
        w = world(tag)
        check = any(int(e["expected_token"]) != -1 for e in entries)
        plan = VerifyPlan(
            verify_slot_indices=_i64([w.map_in(int(e["slot"])) for e in entries]),
            verify_prev_slot_indices=_i64([w.map_in(int(e["prev_slot"])) for e in entries]),
            verify_expected_positions=_i64([int(e["expected_position"]) for e in entries]),
            verify_expected_tokens=_i64([int(e["expected_token"]) for e in entries]),
            verify_num_valid=_one(len(entries), torch.int32), enable=_one(1, torch.int32))
        launch_canary_verify_kernel(context=w.ctx, plan=plan, check_verify_expected_token=check,
                                    extensions=extensions, backend="torch_ref")
    for wr in rp["write"]:
        w = world(wr["tag"])
        w.ctx.enable_chain_position_assert.fill_(1 if wr["chain_assert"] else 0)
        want = wr.get("want_slot")
        loc = w.map_in(int(wr["slot"]))
        pos = int(wr["position"])
        r2t = rpi = slot_owner = None
        write_ext = extensions if extensions is not None and ext.write_slot_mismatch else None
        owner = wr.get("owner") if owner_on else None
        writer = int(owner["writer"]) if owner is not None else 1  # the writer's req_to_token row
        if write_ext is not None:
            r2t = torch.zeros((writer + 1, pos + 1), dtype=torch.int32)
            r2t[writer, pos] = loc if want is None else _want_local(w, int(want))
            rpi = _i64([writer])
        if owner is not None:  # the map's entry the write read; every other slot is the writer's
            slot_owner = torch.full((int(w.buf.shape[0]),), writer, dtype=torch.int64)
            slot_owner[loc] = int(owner["slot_owner"])
            rpi = _i64([writer])
            write_ext = dataclasses.replace(write_ext if write_ext is not None else Extensions(),
                                            write_slot_owner_mismatch=True)
        wplan = WritePlan(write_offsets=_i64([0, 1]), write_seed_slot_indices=_i64([w.map_in(int(wr["seed_slot"]))]),
                          write_num_valid_reqs=_one(1, torch.int32))
        launch_canary_write_kernel(
            context=w.ctx, plan=wplan, input_ids=_i64([int(wr["token"])]), positions=_i64([pos]),
            out_cache_loc=_i64([loc]), enable_write_input_assert=False, expected_input_tokens=None,
            expected_input_positions=None, req_pool_indices=rpi, req_to_token=r2t, full_to_swa_index_mapping=None,
            slot_owner=slot_owner, extensions=write_ext, backend="torch_ref")
    for w in worlds.values():
        for r in w.rows():
            out = list(r)
            out[1] = w.map_out(out[1])
            bits = out[7]
            if bits & 128:  # WRITE_SLOT_MISMATCH: expected_aux is the slot the table names
                out[6] = w.map_out(out[6])
            replayed.append(tuple(out))
    unreplayable = [str(u) for u in rp.get("unreplayable", ())]
    skipped = {unreplayable_row(u) for u in unreplayable}
    expected = tuple(tuple(int(x) for x in r["fields"]) for i, r in enumerate(rows_meta) if i not in skipped)
    return ReplayResult(expected, tuple(replayed), tuple(printable(u) for u in unreplayable))


def _want_local(w: _TagWorld, want: int) -> int:
    """A local number for a slot the table names but whose record the write never reads."""
    if want in w.local:
        return w.local[want]
    if want <= 0:
        return want
    n = len(w.local) + len(w.orig) + 1000
    w.orig[n] = want
    return n
