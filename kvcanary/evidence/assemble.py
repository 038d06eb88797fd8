"""Turn what :class:`~kvcanary.evidence.capture.BundleSink` copied into a bundle: the decoded rows, the
records (stored, expected, the chain neighbour), the owners, the journal, the attribution and the replay
plan (the verify entries and writes that reproduce the rows, with the records and KV words they read).

The replay plan is rebuilt from the rows and the captured records: a verify entry's predecessor is the
record whose chain link equals the row's expected hash (or the anchor), its expected position is the row's
stored position unless the position check failed (then the predecessor's position + 1); a chain-position
write row's seed is the record whose link equals the hash the write started from.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

import kvcanary
from kvcanary.consts import INVALID_SLOT, ZERO_SLOT_MARK, CanaryLaunchTag, FailReason, PoolKind, RealKvHashMode
from kvcanary.evidence.attribution import attribute
from kvcanary.evidence.describe import RequestView
from kvcanary.evidence.format import Bundle
from kvcanary.evidence.hashes import ANCHOR_I64
from kvcanary.guard.journal import JournalEvent
from kvcanary.hashing import real_kv_hash, record_hash, to_int64
from kvcanary.manager.reporter import ViolationEvent
from kvcanary.violations import Violation

_WRITE_BITS = int(FailReason.WRITE_POSITION_MISMATCH | FailReason.WRITE_TOKEN_MISMATCH
                  | FailReason.WRITE_SLOT_MISMATCH | FailReason.WRITE_SLOT_OWNER_MISMATCH)
_OWNER = int(FailReason.WRITE_SLOT_OWNER_MISMATCH)
_CHAIN = int(FailReason.VERIFY_CHAIN_HASH_MISMATCH)
_POS = int(FailReason.VERIFY_POSITION_MISMATCH)


@dataclass(frozen=True)
class SourceCapture:
    """One real-KV source's words for the slot (``None``: the slot's strip lies outside the source)."""

    nbytes: int
    words: torch.Tensor | None


@dataclass(frozen=True)
class RowCapture:
    event: ViolationEvent
    record: torch.Tensor | None
    link: torch.Tensor | None
    link_idx: torch.Tensor | None
    link_found: torch.Tensor | None
    sources: tuple[SourceCapture, ...]
    error: str | None
    slot_owner: torch.Tensor | None = None
    """The owner map's entry for the slot when the row was read back (a device copy; owner-check rows of a
    manager that keeps the map, else None)."""


@dataclass(frozen=True)
class Captured:
    kind: PoolKind
    slot: int
    rows: tuple[RowCapture, ...]
    history: tuple[JournalEvent, ...]
    views: dict[str, RequestView]
    readers: tuple[str, ...]
    full_slots: tuple[int, ...]
    """The full-pool slots the journal history was looked up at (the slot itself for a full-pool slot; for a
    sliding-window slot, those the translation table mapped to it), resolved on the step's thread."""
    engine: str
    block_size: int
    real_kv_mode: RealKvHashMode
    created: str
    peers: tuple[tuple[int, int, int, int, int], ...] = ()
    """The read-back's rows: (kernel kind, slot, token, position, prev_hash) of the record each check read (a
    verify row) or stored (a write row)."""


def row_fields(v: Violation) -> list[int]:
    """The ring row's eight int64 fields, as the device wrote them."""
    return [v.kernel_kind, v.slot_idx, v.position, v.stored_token, v.expected_token, to_int64(v.stored_chain_hash),
            to_int64(v.expected_aux), v.fail_reason_bits]


def _hex(x: int) -> str:
    return f"{x & ((1 << 64) - 1):#018x}"


def _record_json(r: list[int] | None) -> dict[str, Any] | None:
    if r is None:
        return None
    return {"token": r[0], "position": r[1], "prev_hash": _hex(r[2]), "real_kv_hash": _hex(r[3])}


def journal_json(history: tuple[JournalEvent, ...] | list[JournalEvent]) -> list[dict[str, Any]]:
    """The journal entries of ``bundle.json`` (``carried``: the block's state when a truncated window opens)."""
    return [{"step": e.step, "kind": e.kind.value, "block": e.block, "owner": str(e.owner) if e.owner else None,
             "first_position": e.first_position, "last_position": e.last_position, "carried": e.carried}
            for e in history]


class _Buffers:
    """Per tag: the slots whose records (and KV words) the replay needs, in first-use order."""

    def __init__(self) -> None:
        self.slots: dict[str, dict[int, list[int]]] = {}
        self.kv: dict[str, dict[int, list[torch.Tensor | None]]] = {}
        self.kv_bytes: dict[str, list[int]] = {}

    def holds_other(self, tag: str, slot: int, record: list[int]) -> bool:
        """Whether the buffer already holds another record for ``slot`` (one record per slot: a row whose check
        read a different one cannot be replayed from it)."""
        held = self.slots.get(tag, {}).get(slot)
        return held is not None and held != record

    def add(self, tag: str, slot: int, record: list[int], kv: tuple[SourceCapture, ...] | None = None) -> None:
        recs = self.slots.setdefault(tag, {})
        if slot not in recs:
            recs[slot] = record
        if kv is not None:
            self.kv.setdefault(tag, {})[slot] = [s.words for s in kv]
            self.kv_bytes[tag] = [s.nbytes for s in kv]

    def tensors(self) -> tuple[dict[str, Any], dict[str, torch.Tensor]]:
        meta: dict[str, Any] = {}
        out: dict[str, torch.Tensor] = {}
        for tag, recs in self.slots.items():
            slots = list(recs)
            out[f"records/{tag}"] = torch.tensor([recs[s] for s in slots], dtype=torch.int64).reshape(-1, 4)
            nbytes = self.kv_bytes.get(tag, [])
            kv = self.kv.get(tag, {})
            for i, nb in enumerate(nbytes):
                rows = []
                for s in slots:
                    words = kv.get(s, [None] * len(nbytes))[i]
                    w = words.cpu() if words is not None else torch.zeros(nb // 8, dtype=torch.int64)
                    rows.append(w.view(torch.uint8))
                out[f"kv/{tag}/{i}"] = torch.stack(rows) if rows else torch.zeros(0, nb, dtype=torch.uint8)
            meta[tag] = {"slots": slots, "source_bytes": nbytes}
        return meta, out


def _host(t: torch.Tensor | None) -> list[int] | None:
    return [int(x) for x in t.cpu().tolist()] if t is not None else None


def _peer_link(peers: tuple[tuple[int, int, int, int, int], ...], kind: int,
               target: int) -> tuple[int, int, int, int, int] | None:
    """The verify row (same launch tag) whose record links to ``target``, if any."""
    want = target & ((1 << 64) - 1)
    for p in peers:
        if p[0] == kind and p[1] > 0 and record_hash(p[4], p[2], p[3]) == want:
            return p
    return None


def _record_at_check(v: Violation, fields: list[int], now: list[int], sources: tuple[SourceCapture, ...], tag: str,
                     mode: RealKvHashMode) -> tuple[list[int] | None, str | None]:
    """The record the check read. The row carries its token, position and prev_hash; when the record now
    holds the same three, it is that record. When the slot was rewritten after the check (the same forward's
    write, a later step), the record is rebuilt from the row, with the fingerprint the check must have seen
    where the row proves it (no fingerprint mismatch: it equals the KV bytes' fold, 0 for a HEAD buffer,
    which has no sources); a rewritten slot whose fingerprint mismatched cannot be rebuilt."""
    at_check = [v.stored_token, v.position, fields[5]]
    if now[:3] == at_check:
        return now, None
    if v.fail_reason_bits & FailReason.VERIFY_REAL_KV_HASH_MISMATCH:
        return None, "the slot was rewritten after the check and its fingerprint mismatched: the stored one is gone"
    if tag.startswith("HEAD") or mode is RealKvHashMode.NONE or not sources:
        return [*at_check, 0], None
    if any(s.words is None for s in sources):
        return None, "the slot's KV strip lies outside a source"
    strips = [bytes(s.words.cpu().view(torch.uint8).tolist()) for s in sources if s.words is not None]
    return [*at_check, to_int64(real_kv_hash(strips, mode))], None


def assemble(cap: Captured) -> Bundle:
    """Build the bundle of one slot from its capture (runs on the writer thread): from the capture only,
    never the live journal (its history was taken on the step's thread)."""
    rows_json: list[dict[str, Any]] = []
    records_json: list[dict[str, Any]] = []
    verify: list[dict[str, Any]] = []
    writes: dict[tuple[Any, ...], dict[str, Any]] = {}
    unreplayable: list[str] = []
    bufs = _Buffers()
    uses_zero = uses_wslot = uses_owner = False
    for i, rc in enumerate(cap.rows):
        v = rc.event.violation
        fields = row_fields(v)
        rows_json.append({"ring_index": rc.event.ring_index, "tag": v.tag_name, "fields": fields,
                          "fail_reasons": v.reason_labels,
                          "codes": [int(b) for b in FailReason if b & v.fail_reason_bits],
                          "step_recorded": rc.event.step_recorded, "step_pumped": rc.event.step_pumped,
                          "message": rc.event.message})
        record = _host(rc.record)
        link = _host(rc.link)
        found = bool(rc.link_found.cpu()) if rc.link_found is not None else False
        link_slot = int(rc.link_idx.cpu()) if rc.link_idx is not None and found else None
        tag = v.tag_name
        bits = v.fail_reason_bits
        is_write = bool(bits & _WRITE_BITS)
        anchor_target = (fields[5] if is_write else fields[6]) == ANCHOR_I64
        prev: int | None
        if anchor_target:
            prev = -1
        elif found:
            prev = link_slot
        elif (peer := _peer_link(cap.peers, v.kernel_kind, fields[5] if is_write else fields[6])) is not None:
            # the predecessor was rewritten after the check; its own row in the same read-back holds the
            # record the check hashed
            prev, link_slot, link = peer[1], peer[1], [peer[2], peer[3], to_int64(peer[4]), 0]
        elif not is_write and not bits & _CHAIN:
            prev = 0  # no chain check needed to reproduce the row: its predecessor's record is not known
        else:
            prev = None
        token_known = v.expected_token != -1 and not bits & _OWNER  # an owner row's expected_token is the writer
        expected: dict[str, Any] = {"token": v.expected_token if token_known else None,
                                    "prev_hash": _hex(fields[6]) if not is_write else None}
        neighbour = ({"slot": link_slot, "record": _record_json(link)} if link_slot is not None else
                     ({"slot": -1, "record": None, "anchor": True} if prev == -1 else None))
        if rc.error is not None:
            unreplayable.append(f"row {i}: {rc.error}")
        elif bits & FailReason.INDEX_OUT_OF_RANGE:
            unreplayable.append(f"row {i}: an INDEX_OUT_OF_RANGE row names no record to replay")
        elif bits == int(FailReason.ZERO_SLOT_IN_LIVE_RANGE):
            uses_zero = True
            verify.append({"tag": tag, "slot": ZERO_SLOT_MARK, "prev_slot": 0, "expected_position": v.position,
                           "expected_token": v.expected_token, "row": i})
            expected["position"] = v.position
        elif record is None:
            unreplayable.append(f"row {i}: slot {v.slot_idx} lies outside the {tag} buffer")
        elif is_write:
            chain_row = bool(bits & FailReason.WRITE_POSITION_MISMATCH) and v.stored_token == v.expected_token
            if bits & FailReason.WRITE_TOKEN_MISMATCH or (bits & FailReason.WRITE_POSITION_MISMATCH
                                                           and not chain_row):
                unreplayable.append(f"row {i}: write-input assert rows need the oracle's expected tensors")
            elif prev is None:
                unreplayable.append(f"row {i}: the seed record the write chained from has changed since")
            else:
                want = fields[6] if bits & FailReason.WRITE_SLOT_MISMATCH else None
                uses_wslot = uses_wslot or want is not None
                key = (tag, v.slot_idx, v.position, v.stored_token, fields[5], prev)
                w = writes.setdefault(key, {"tag": tag, "seed_slot": prev, "slot": v.slot_idx,
                                            "token": v.stored_token, "position": v.position,
                                            "chain_assert": False, "want_slot": None, "owner": None, "rows": []})
                w["rows"].append(i)
                w["chain_assert"] = w["chain_assert"] or chain_row
                if want is not None:
                    w["want_slot"] = want
                if bits & _OWNER:  # what the owner check read: the writer's row and the map's entry for the slot
                    uses_owner = True
                    w["owner"] = {"writer": v.expected_token, "slot_owner": fields[6]}
                    now = int(rc.slot_owner.cpu()) if rc.slot_owner is not None else None
                    expected["owner"] = {"writer": v.expected_token, "holder": fields[6],
                                         "slot_owner_at_capture": now}
                if cap.kind is PoolKind.SWA and want is not None:
                    unreplayable.append(f"row {i}: a sliding-window write-slot row needs the translation table")
                bufs.add(tag, v.slot_idx, record)
                if prev > 0 and link is not None:
                    bufs.add(tag, prev, link)
                expected["position"] = (link[1] + 1) if link is not None and prev > 0 else (0 if prev == -1 else None)
        else:
            checked, why = _record_at_check(v, fields, record, rc.sources, tag, cap.real_kv_mode)
            if why is not None:
                unreplayable.append(f"row {i}: {why}")
            elif prev is None:
                unreplayable.append(f"row {i}: the predecessor record the check hashed has changed since")
            else:
                assert checked is not None
                record = checked
                exp_pos: int | None = v.position
                if bits & _POS:
                    exp_pos = 0 if prev == -1 else (link[1] + 1 if link is not None and prev > 0 else None)
                if exp_pos is None:
                    unreplayable.append(f"row {i}: the expected position is not known")
                elif bufs.holds_other(tag, v.slot_idx, record):
                    unreplayable.append(f"row {i}: the slot's record changed between this row's check and an "
                                        "earlier row's (a replay buffer holds one record per slot)")
                else:
                    verify.append({"tag": tag, "slot": v.slot_idx, "prev_slot": prev, "expected_position": exp_pos,
                                   "expected_token": v.expected_token, "row": i})
                    bufs.add(tag, v.slot_idx, record, rc.sources)
                    if prev > 0 and link is not None:
                        bufs.add(tag, prev, link)
                expected["position"] = exp_pos
        records_json.append({"tag": tag, "slot": v.slot_idx, "stored": _record_json(record), "expected": expected,
                             "neighbour": neighbour})
    buf_meta, tensors = bufs.tensors()
    # attribution over the journal (full-slot space)
    full_slots = list(cap.full_slots)
    history = list(cap.history)
    tables = {rid: dict(zip(view.positions, view.slots, strict=True)) for rid, view in cap.views.items()}
    violations = [rc.event.violation for rc in cap.rows]
    step = min(rc.event.step_recorded for rc in cap.rows)
    att = attribute(violations, history, step=step, slot=cap.slot, swa=cap.kind is PoolKind.SWA,
                    writer_slot_at=tables, block_size=max(1, cap.block_size))
    owner_ids = {o.split(":", 1)[1] for o in (att.writer, *att.holders) if o and o.startswith("request:")}
    owners = []
    for rid, view in cap.views.items():
        role = ("writer" if att.writer == f"request:{rid}" else
                "holder" if rid in owner_ids else "reader" if rid in cap.readers else "journal")
        owners.append({"role": role, **view.to_json()})
    meta: dict[str, Any] = {
        "created": cap.created,
        "kvcanary_version": kvcanary.__version__,
        "torch_version": torch.__version__,
        "engine": cap.engine,
        "slot": cap.slot,
        "group": cap.kind.name,
        "full_slots": full_slots,
        "block_size": cap.block_size,
        "step_recorded": step,
        "step_pumped": min(rc.event.step_pumped for rc in cap.rows),
        "rows": rows_json,
        "records": records_json,
        "owners": owners,
        "readers": list(cap.readers),
        "journal": journal_json(history),
        "attribution": att.to_json(),
        "replay": {
            "backend": "torch_ref",
            "real_kv_mode": cap.real_kv_mode.name,
            "extensions": {"zero_slot_in_live_range": uses_zero, "write_slot_mismatch": uses_wslot,
                           "write_slot_owner_mismatch": uses_owner},
            "verify": verify,
            "write": list(writes.values()),
            "buffers": buf_meta,
            "unreplayable": unreplayable,
        },
    }
    return Bundle(meta, tensors)


def tag_of(name: str) -> CanaryLaunchTag:
    return CanaryLaunchTag[name]


__all__ = ["INVALID_SLOT", "Captured", "RowCapture", "SourceCapture", "assemble", "journal_json", "row_fields",
           "tag_of"]
