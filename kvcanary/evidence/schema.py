"""What ``bundle.json`` must hold: one pydantic model of every field ``inspect`` and ``replay`` read, and the
rules that tie fields to each other and to the tensors file (a verify entry's row is a row of ``rows``, a slot
it names is in its buffer, a tensor's shape is what its buffer says).

What the report prints beside a row (its tag, codes and reasons, the record the check read, what it expected)
are copies of what the replay checks (the row's ``fields``, the buffer's record): a rule ties each copy to its
source, so a bundle cannot say one thing and replay another. Every row is named exactly once: by a verify
entry, by a write entry, or by an ``unreplayable`` entry ``"row N: why"``; a row none names is refused, so a
replay that reproduces the rows named has reproduced every row not listed unreplayable.

:func:`bundle_problem` answers with one line naming the field and the rule, or None. ``read_bundle`` calls it
before a report or a replay touches the bundle, ``write_bundle`` before it writes anything, so a bundle that
one writes the other reads, and a damaged or hostile one is refused before anything is allocated or run.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Annotated, Any

import torch
from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationError
from pydantic_core import PydanticCustomError

from kvcanary.consts import (
    VIOLATION_FIELDS,
    ZERO_SLOT_MARK,
    CanaryLaunchTag,
    FailReason,
    PoolKind,
    RealKvHashMode,
)
from kvcanary.evidence.attribution import BugClass
from kvcanary.guard.journal_events import JournalKind

MAX_SOURCE_BYTES = 1 << 20
"""The most bytes one real-KV source's strip of one slot may hold in a bundle (a replay allocates them)."""
MAX_TABLE_ENTRIES = 1 << 24
"""The most ``req_to_token`` entries a write-slot row's replay builds: (writer row + 1) x (position + 1)."""
ROLES = ("writer", "holder", "reader", "journal")
_UNREPLAYABLE = re.compile(r"row (0|[1-9][0-9]{0,18}): ")
"""What an ``unreplayable`` entry starts with: the index of the row it explains."""


def unreplayable_row(entry: str) -> int | None:
    """The row index an ``unreplayable`` entry (``"row N: why"``) names; None when it names none."""
    m = _UNREPLAYABLE.match(entry)
    return int(m.group(1)) if m else None


def _one_of(names: tuple[str, ...], what: str) -> AfterValidator:
    def check(value: str) -> str:
        if value not in names:
            raise PydanticCustomError("bundle_rule", "must be {what} ({names})", {"what": what, "names": shown})
        return value
    shown = ", ".join(names) if len(names) <= 8 else f"{names[0]}, {names[1]}, ... {names[-1]}"
    return AfterValidator(check)


Int64 = Annotated[int, Field(ge=-(1 << 63), le=(1 << 63) - 1)]
Count = Annotated[int, Field(ge=0, le=(1 << 63) - 1)]
Tag = Annotated[str, _one_of(tuple(t.name for t in CanaryLaunchTag), "a launch tag")]
SourceBytes = Annotated[int, Field(ge=8, le=MAX_SOURCE_BYTES, multiple_of=8)]


class _Model(BaseModel):
    model_config = ConfigDict(strict=True, extra="ignore", frozen=True)


class Row(_Model):
    ring_index: Int64
    tag: Tag
    fields: Annotated[list[Int64], Field(min_length=VIOLATION_FIELDS, max_length=VIOLATION_FIELDS)]
    fail_reasons: list[str]
    codes: list[Int64]
    step_recorded: Int64
    step_pumped: Int64
    message: str


class Record(_Model):
    token: Int64
    position: Int64
    prev_hash: str
    real_kv_hash: str


class OwnerCheck(_Model):
    writer: Int64
    holder: Int64
    slot_owner_at_capture: Int64 | None = None


class Expected(_Model):
    token: Int64 | None = None
    position: Int64 | None = None
    prev_hash: str | None = None
    owner: OwnerCheck | None = None


class Neighbour(_Model):
    slot: Int64
    record: Record | None = None
    anchor: bool = False


class RecordEntry(_Model):
    tag: Tag
    slot: Int64
    stored: Record | None = None
    expected: Expected | None = None
    neighbour: Neighbour | None = None


class Owner(_Model):
    role: Annotated[str, _one_of(ROLES, "a role")]
    request_id: str
    tokens: list[Int64]
    positions: list[Int64]
    slots: list[Int64]
    block_size: Int64 = 1
    block_table: list[Int64]
    live: bool


class JournalEntry(_Model):
    step: Int64
    kind: Annotated[str, _one_of(tuple(k.value for k in JournalKind), "a journal event kind")]
    block: Int64
    owner: str | None
    first_position: Int64 | None
    last_position: Int64 | None
    carried: bool = False  # older bundles' journal entries have none


class Attribution(_Model):
    bug_class: Annotated[str, _one_of(tuple(b.value for b in BugClass), "a bug class")]
    reason: str
    writer: str | None = None
    write_step: Int64 | None = None
    written_positions: Annotated[list[Int64], Field(min_length=2, max_length=2)] | None = None
    holders: list[str]
    intended_slot: Int64 | None = None
    actual_slot: Int64 | None = None
    anomaly_step: Int64 | None = None
    notes: list[str] = []


class ReplayExtensions(_Model):
    zero_slot_in_live_range: bool = False
    write_slot_mismatch: bool = False
    write_slot_owner_mismatch: bool = False


class VerifyEntry(_Model):
    tag: Tag
    slot: Int64
    prev_slot: Int64
    expected_position: Int64
    expected_token: Int64
    row: Count


class WriteOwner(_Model):
    writer: Count
    slot_owner: Int64


class WriteEntry(_Model):
    tag: Tag
    seed_slot: Int64
    slot: Int64
    token: Int64
    position: Int64
    chain_assert: bool
    want_slot: Int64 | None = None
    owner: WriteOwner | None = None  # version 1 bundles have none
    rows: list[Count]


class Buffer(_Model):
    slots: Annotated[list[Int64], Field(min_length=1)]
    source_bytes: list[SourceBytes]


class Replay(_Model):
    backend: Annotated[str, _one_of(("torch_ref",), "a replay backend")]
    real_kv_mode: Annotated[str, _one_of(tuple(m.name for m in RealKvHashMode), "a real-KV mode")]
    extensions: ReplayExtensions = ReplayExtensions()
    verify: list[VerifyEntry]
    write: list[WriteEntry]
    buffers: dict[Tag, Buffer]
    unreplayable: list[str] = []


class BundleMeta(_Model):
    """``bundle.json``: every field a report or a replay reads (other keys are kept and not read)."""

    created: str
    kvcanary_version: str
    torch_version: str = "?"
    engine: str
    slot: Int64
    group: Annotated[str, _one_of(tuple(k.name for k in PoolKind), "a pool group")]
    full_slots: list[Int64]
    block_size: Int64
    step_recorded: Int64
    step_pumped: Int64
    rows: list[Row]
    records: list[RecordEntry]
    owners: list[Owner]
    readers: list[str]
    journal: list[JournalEntry]
    attribution: Attribution
    replay: Replay


def _field(loc: tuple[int | str, ...]) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        elif part == "[key]":
            out += " key"
        else:
            out += ("." if out else "") + (part if part.isidentifier() else repr(part))
    return out or "bundle.json"


def _got(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


_RULES = {"missing": "is missing", "int_type": "must be an integer", "string_type": "must be a string",
          "bool_type": "must be true or false", "list_type": "must be a list", "dict_type": "must be an object",
          "model_type": "must be an object"}


_LENGTHS: dict[str | int, tuple[int, int | None]] = {
    "fields": (VIOLATION_FIELDS, VIOLATION_FIELDS), "written_positions": (2, 2), "slots": (1, None)}


def _rule(err: Any) -> str:
    kind, ctx = err["type"], err.get("ctx", {})
    if kind in _RULES:
        return _RULES[kind]
    if kind == "greater_than_equal":
        return f"must be >= {ctx['ge']}"
    if kind == "less_than_equal":
        return f"must be <= {ctx['le']}"
    if kind == "multiple_of":
        return f"must be a multiple of {ctx['multiple_of']}"
    if kind in ("too_short", "too_long"):
        lo, hi = _LENGTHS.get(err["loc"][-1], (None, None))
        if lo is None:
            return str(err["msg"])
        return f"must hold {lo} entries" if lo == hi else f"must hold at least {lo} entr{'y' if lo == 1 else 'ies'}"
    return str(err["msg"])


def _in_buffer(slot: int, buffer: Buffer | None) -> bool:
    """The replay's renumbering: slots <= 0 (the padding slot, the anchor) and the zero-slot mark stay as they
    are; any other slot must be one of the buffer's."""
    return slot <= 0 or slot == ZERO_SLOT_MARK or (buffer is not None and slot in buffer.slots)


def _hex(x: int) -> str:
    """An int64 field as ``bundle.json`` writes a hash (unsigned, 16 hex digits)."""
    return f"{x & ((1 << 64) - 1):#018x}"


def _row_copies(meta: BundleMeta) -> Iterator[str]:
    """Each row's tag, codes and reasons are what its ``fields`` say; its record entry names its tag and slot
    and expects what the row expected (the report prints these copies; the replay reads ``fields``)."""
    if len(meta.records) != len(meta.rows):
        yield f"records must hold one entry per row ({len(meta.rows)}), got {len(meta.records)}"
    every = sum(int(b) for b in FailReason)
    for i, r in enumerate(meta.rows):
        kind, bits = r.fields[0], r.fields[7]
        if CanaryLaunchTag[r.tag].value != kind:
            yield f"rows[{i}].tag must be the launch tag of rows[{i}].fields[0] ({kind}), got {r.tag!r}"
        codes = [int(b) for b in FailReason if b & bits]
        if r.codes != codes:
            yield f"rows[{i}].codes must be the bits of rows[{i}].fields[7] ({bits}: {codes}), got {_got(r.codes)}"
        labels = FailReason(bits & every).labels()
        if r.fail_reasons != labels:
            yield (f"rows[{i}].fail_reasons must name the bits of rows[{i}].fields[7] ({labels}), "
                   f"got {_got(r.fail_reasons)}")
        if i >= len(meta.records):
            continue
        rec = meta.records[i]
        if rec.tag != r.tag or rec.slot != r.fields[1]:
            yield (f"records[{i}] must name rows[{i}]'s tag and slot ({r.tag} slot {r.fields[1]}), got {rec.tag} "
                   f"slot {rec.slot}")
        exp = rec.expected
        if exp is not None and exp.token is not None and exp.token != r.fields[4]:
            yield f"records[{i}].expected.token must be rows[{i}].fields[4] ({r.fields[4]}), got {exp.token}"
        if exp is not None and exp.prev_hash is not None and exp.prev_hash != _hex(r.fields[6]):
            yield (f"records[{i}].expected.prev_hash must be rows[{i}].fields[6] ({_hex(r.fields[6])}), got "
                   f"{_got(exp.prev_hash)}")


def _verify_copies(meta: BundleMeta, tensors: dict[str, torch.Tensor] | None) -> Iterator[str]:
    """A verified row's record entry shows the record the replay reads: the token, position and link the row
    says the check read, and (tensors given) the buffer's record of the slot, fingerprint included; its
    expected position is the one the verify entry checks."""
    rp = meta.replay
    for v in rp.verify:
        if v.row >= len(meta.rows) or v.row >= len(meta.records) or v.slot == ZERO_SLOT_MARK or v.slot <= 0:
            continue
        fields, rec, at = meta.rows[v.row].fields, meta.records[v.row], f"records[{v.row}]"
        if rec.expected is not None and rec.expected.position not in (None, v.expected_position):
            yield (f"{at}.expected.position must be the position replay.verify checks ({v.expected_position}), "
                   f"got {rec.expected.position}")
        st = rec.stored
        read = (fields[3], fields[2], _hex(fields[5]))
        if st is None or (st.token, st.position, st.prev_hash) != read:
            got = "none" if st is None else f"{(st.token, st.position, st.prev_hash)}"
            yield (f"{at}.stored must be the record rows[{v.row}] says the check read (token, position, "
                   f"prev_hash {read}), got {got}")
            continue
        buf = rp.buffers.get(v.tag)
        t = tensors.get(f"records/{v.tag}") if tensors is not None else None
        if tensors is None or buf is None or t is None or v.slot not in buf.slots or t.dtype != torch.int64 \
                or tuple(t.shape) != (len(buf.slots), 4):
            continue  # no tensors to compare with, or a shape rule below refuses them
        token, position, link, fp = (int(x) for x in t[buf.slots.index(v.slot)].tolist())
        have = (token, position, _hex(link), _hex(fp))
        if (st.token, st.position, st.prev_hash, st.real_kv_hash) != have:
            yield (f"{at}.stored must be the record the replay reads (records/{v.tag} of slot {v.slot}: {have}), "
                   f"got {(st.token, st.position, st.prev_hash, st.real_kv_hash)}")


def _coverage(meta: BundleMeta) -> Iterator[str]:
    """Every row is named exactly once, by a verify entry, a write entry or an ``unreplayable`` entry."""
    rp, n_rows = meta.replay, len(meta.rows)
    named: dict[int, list[str]] = {}
    for i, v in enumerate(rp.verify):
        named.setdefault(v.row, []).append(f"replay.verify[{i}]")
    for i, w in enumerate(rp.write):
        for j, r in enumerate(w.rows):
            named.setdefault(r, []).append(f"replay.write[{i}].rows[{j}]")
    for i, u in enumerate(rp.unreplayable):
        row = unreplayable_row(u)
        if row is None or row >= n_rows:
            yield (f"replay.unreplayable[{i}] must read 'row N: why' with N an index into rows "
                   f"(0..{n_rows - 1}), got {_got(u)}")
            continue
        named.setdefault(row, []).append(f"replay.unreplayable[{i}]")
    for row in range(n_rows):
        by = named.get(row, [])
        if len(by) != 1:
            yield (f"rows[{row}] must be named exactly once (by replay.verify, replay.write or "
                   f"replay.unreplayable), got {', '.join(by) if by else 'none'}")


def _cross(meta: BundleMeta, tensors: dict[str, torch.Tensor] | None) -> Iterator[str]:
    """The rules between fields (and against the tensors, when given): each as 'field rule, got value'."""
    rp, n_rows = meta.replay, len(meta.rows)
    for i, o in enumerate(meta.owners):
        if len(o.slots) != len(o.positions):
            yield f"owners[{i}].slots must hold one entry per position ({len(o.positions)}), got {len(o.slots)}"
    yield from _row_copies(meta)
    for i, v in enumerate(rp.verify):
        if v.row >= n_rows:
            yield f"replay.verify[{i}].row must be an index into rows (0..{n_rows - 1}), got {v.row}"
        buf = rp.buffers.get(v.tag)
        for name, slot in (("slot", v.slot), ("prev_slot", v.prev_slot)):
            if not _in_buffer(slot, buf):
                yield f"replay.verify[{i}].{name} must be <= 0 or one of replay.buffers.{v.tag}.slots, got {slot}"
    for i, w in enumerate(rp.write):
        for j, r in enumerate(w.rows):
            if r >= n_rows:
                yield f"replay.write[{i}].rows[{j}] must be an index into rows (0..{n_rows - 1}), got {r}"
        buf = rp.buffers.get(w.tag)
        for name, slot in (("slot", w.slot), ("seed_slot", w.seed_slot)):
            if not _in_buffer(slot, buf):
                yield f"replay.write[{i}].{name} must be <= 0 or one of replay.buffers.{w.tag}.slots, got {slot}"
        if rp.extensions.write_slot_mismatch:
            writer = w.owner.writer if w.owner is not None and rp.extensions.write_slot_owner_mismatch else 1
            if w.position < 0 or (writer + 1) * (w.position + 1) > MAX_TABLE_ENTRIES:
                yield (f"replay.write[{i}].position must be >= 0 with (writer row + 1) x (position + 1) <= "
                       f"{MAX_TABLE_ENTRIES} (the replay's req_to_token), got {w.position} (writer row {writer})")
    yield from _coverage(meta)
    yield from _verify_copies(meta, tensors)
    if tensors is None:
        return
    for tag, buf in rp.buffers.items():
        n = len(buf.slots)
        want = [(f"records/{tag}", torch.int64, 4)] + [(f"kv/{tag}/{i}", torch.uint8, nb)
                                                         for i, nb in enumerate(buf.source_bytes)]
        for name, dtype, cols in want:
            t = tensors.get(name)
            if t is None or t.dtype != dtype or tuple(t.shape) != (n, cols):
                got = "none" if t is None else f"{str(t.dtype).removeprefix('torch.')} {list(t.shape)}"
                field = "slots" if name.startswith("records/") else "source_bytes"
                yield (f"replay.buffers.{tag}.{field} must match the tensor {name} "
                       f"({str(dtype).removeprefix('torch.')} [{n}, {cols}]), got {got}")


def bundle_problem(meta: dict[str, Any], tensors: dict[str, torch.Tensor] | None = None) -> str | None:
    """The first rule ``meta`` (a decoded ``bundle.json``, format and version already checked) breaks, as
    'field rule, got value'; None when a report and a replay can read it. ``tensors``: check them too."""
    try:
        model = BundleMeta.model_validate(meta)
    except ValidationError as exc:
        err = exc.errors()[0]
        got = "" if err["type"] == "missing" else f", got {_got(err['input'])}"
        return f"{_field(err['loc'])} {_rule(err)}{got}"
    return next(_cross(model, tensors), None)
