"""What ``bundle.json`` must hold: one pydantic model of every field ``inspect`` and ``replay`` read, and the
rules that tie fields to each other and to the tensors file (a verify entry's row is a row of ``rows``, a slot
it names is in its buffer, a tensor's shape is what its buffer says).

:func:`bundle_problem` answers with one line naming the field and the rule, or None. ``read_bundle`` calls it
before a report or a replay touches the bundle, ``write_bundle`` before it writes anything, so a bundle that
one writes the other reads, and a damaged or hostile one is refused before anything is allocated or run.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Annotated, Any

import torch
from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationError
from pydantic_core import PydanticCustomError

from kvcanary.consts import VIOLATION_FIELDS, ZERO_SLOT_MARK, CanaryLaunchTag, PoolKind, RealKvHashMode
from kvcanary.evidence.attribution import BugClass
from kvcanary.guard.journal_events import JournalKind

MAX_SOURCE_BYTES = 1 << 20
"""The most bytes one real-KV source's strip of one slot may hold in a bundle (a replay allocates them)."""
MAX_TABLE_ENTRIES = 1 << 24
"""The most ``req_to_token`` entries a write-slot row's replay builds: (writer row + 1) x (position + 1)."""
ROLES = ("writer", "holder", "reader", "journal")


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


def _cross(meta: BundleMeta, tensors: dict[str, torch.Tensor] | None) -> Iterator[str]:
    """The rules between fields (and against the tensors, when given): each as 'field rule, got value'."""
    rp, n_rows = meta.replay, len(meta.rows)
    for i, o in enumerate(meta.owners):
        if len(o.slots) != len(o.positions):
            yield f"owners[{i}].slots must hold one entry per position ({len(o.positions)}), got {len(o.slots)}"
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
