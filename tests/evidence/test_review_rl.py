"""Review rL (session 13): evidence bundles read as hostile files, written under failure, and their attribution.

Each test states what a bundle should do and fails until it does (``xfail(strict=True)``: a fix turns it into
an XPASS, which fails, so the marker comes off with the fix). Bundles are the demo engine's genuine ones
(:mod:`tests.evidence.bundles`), copied into ``tmp_path`` and damaged there.
"""

from __future__ import annotations

import errno
import json
import os
import re
import resource
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch

from kvcanary.consts import FailReason
from kvcanary.demo.engine.faults import Fault
from kvcanary.evidence import Bundle, BundleError, BundleSink, read_bundle, replay, write_bundle
from kvcanary.evidence.attribution import BugClass, attribute
from kvcanary.evidence.demo_bundles import run_fault_bundle
from kvcanary.evidence.format import META_FILE, TENSORS_FILE
from kvcanary.guard.journal import JournalKind, Owner, OwnerKind, SlotJournal
from kvcanary.manager.manager import CanaryManager
from kvcanary.violations import Violation
from tests.evidence.bundles import bundle_path, edit_meta

Edit = Callable[[dict[str, Any]], None]


def _copy(tmp_path: Path, edit: Edit | None = None, fault: Fault = Fault.RADIX_UAF) -> Path:
    """A copy of a genuine bundle, its ``bundle.json`` changed by ``edit``."""
    dst = tmp_path / "b"
    shutil.copytree(bundle_path(fault), dst)
    if edit is not None:
        edit_meta(dst, edit)  # its digest stamped again: the edit meets the schema, not the damage check
    return dst


def _codes(meta: dict[str, Any]) -> None:
    """Row 0 now says it is an owner-check row; its fields (which the replay compares) still say verify_*."""
    meta["rows"][0]["codes"] = [int(FailReason.WRITE_SLOT_OWNER_MISMATCH)]
    meta["rows"][0]["fail_reasons"] = ["write_slot_owner"]


def _tag(meta: dict[str, Any]) -> None:
    """Row 0 now names another launch tag than its fields[0] (the kernel kind the replay compares)."""
    meta["rows"][0]["tag"] = "HEAD_V_SWA"


def _stored(meta: dict[str, Any]) -> None:
    """The report's stored record now equals the expected one; the tensor the replay reads still holds 104."""
    meta["records"][0]["stored"]["token"] = meta["records"][0]["expected"]["token"]


@pytest.mark.parametrize(("edit", "field"), [(_codes, "rows[0].codes"), (_tag, "rows[0].tag"),
                                             (_stored, "records[0].stored")], ids=["codes", "tag", "stored record"])
def test_a_report_field_that_contradicts_the_replayed_row_is_refused(edit: Edit, field: str, tmp_path: Path) -> None:
    path = _copy(tmp_path, edit)
    with pytest.raises(BundleError, match=re.escape(field) + " must be"):
        read_bundle(path)
    assert read_bundle(_copy(tmp_path / "clean")).meta["rows"]  # the genuine copy is read


def test_a_row_the_plan_leaves_out_is_not_reported_reproduced(tmp_path: Path) -> None:
    path = _copy(tmp_path, lambda m: m["replay"]["verify"].pop(1))  # 2 rows, 1 verify entry, no unreplayable
    with pytest.raises(BundleError, match=re.escape("rows[1] must be named exactly once") + ".*got none"):
        read_bundle(path)
    genuine = read_bundle(bundle_path(Fault.RADIX_UAF))
    assert len(genuine.meta["rows"]) == 2 and replay(genuine).complete
    meta = json.loads((path / META_FILE).read_text())  # a Bundle built in memory skips read_bundle's rules
    result = replay(Bundle(meta, dict(genuine.tensors)))
    assert len(result.expected) == 2 and len(result.missing) == 1, (result.expected, result.replayed)
    assert not result.ok and not result.complete


def test_a_row_named_twice_or_an_unreplayable_entry_naming_no_row_is_refused(tmp_path: Path) -> None:
    twice = _copy(tmp_path / "twice", lambda m: m["replay"]["unreplayable"].append("row 0: listed as well"))
    with pytest.raises(BundleError, match=re.escape("rows[0] must be named exactly once") + r".*verify\[0\]"):
        read_bundle(twice)
    loose = _copy(tmp_path / "loose", lambda m: m["replay"]["unreplayable"].append("no row named"))
    with pytest.raises(BundleError, match=re.escape("replay.unreplayable[0] must read 'row N: why'")):
        read_bundle(loose)


def _flip_tensor_byte(path: Path) -> None:
    data = bytearray((path / TENSORS_FILE).read_bytes())
    data[-1] ^= 0x01  # the last byte of the last tensor's data
    (path / TENSORS_FILE).write_bytes(bytes(data))


def _flip_bug_class(path: Path) -> None:
    meta = json.loads((path / META_FILE).read_text())
    meta["attribution"]["bug_class"] = BugClass.BYTE_CORRUPTION.value
    (path / META_FILE).write_text(json.dumps(meta))


@pytest.mark.parametrize("damage", [_flip_tensor_byte, _flip_bug_class], ids=["tensor byte", "bug class"])
def test_a_tampered_bundle_is_refused_as_damaged(damage: Callable[[Path], None], tmp_path: Path) -> None:
    path = _copy(tmp_path)
    damage(path)
    with pytest.raises(BundleError):
        read_bundle(path)


def _uaf_history(shares: int) -> tuple[SlotJournal, int]:
    """Block 71: request 1 writes it, the radix cache keeps it, ``shares`` requests share and release it (a hot
    prefix), then it is freed while the cache still holds it and handed to request 9: a use after free."""
    j, slot = SlotJournal(block_size=1), 71
    cache = Owner(OwnerKind.CACHE, "radix")
    j.record(1, JournalKind.ALLOCATED, [slot], Owner(OwnerKind.REQUEST, "1"), first_position=36, last_position=36)
    j.record(1, JournalKind.CACHED, [slot], cache)
    j.record(1, JournalKind.RELEASED, [slot], Owner(OwnerKind.REQUEST, "1"))
    step = 2
    for i in range(shares):
        j.record(step, JournalKind.SHARED, [slot], Owner(OwnerKind.REQUEST, f"r{i}"))
        j.record(step, JournalKind.RELEASED, [slot], Owner(OwnerKind.REQUEST, f"r{i}"))
        step += 1
    j.record(step, JournalKind.FREED, [slot])
    j.record(step + 1, JournalKind.ALLOCATED, [slot], Owner(OwnerKind.REQUEST, "9"), first_position=3,
             last_position=3)
    return j, step + 1


_CHAIN_ROW = Violation(kernel_kind=0, slot_idx=71, position=3, stored_token=5, expected_token=7,
                       stored_chain_hash=1, expected_aux=2,
                       fail_reason_bits=int(FailReason.VERIFY_CHAIN_HASH_MISMATCH | FailReason.VERIFY_TOKEN_MISMATCH))


@pytest.mark.parametrize("shares", [0, 40])
def test_a_use_after_free_is_named_whatever_the_journal_window(shares: int) -> None:
    journal, step = _uaf_history(shares)
    att = attribute([_CHAIN_ROW], journal.history(71), step=step, slot=71)
    assert att.bug_class is BugClass.USE_AFTER_FREE, att
    assert "cache:radix" in att.holders, att


def test_the_radix_uaf_report_names_the_request_whose_record_the_slot_holds() -> None:
    meta = read_bundle(bundle_path(Fault.RADIX_UAF)).meta
    stored = meta["records"][0]["stored"]
    holders = [o["request_id"] for o in meta["owners"]
               for t, p, s in zip(o["tokens"], o["positions"], o["slots"], strict=True)
               if s == meta["slot"] and p == stored["position"] and t == stored["token"]]
    assert len(holders) == 1, holders  # the one request whose table and tokens give the slot's record
    assert meta["attribution"]["writer"] == f"request:{holders[0]}", meta["attribution"]
    assert meta["attribution"]["written_positions"] == [stored["position"]] * 2, meta["attribution"]


def _disk_full(self: Path, *args: object, **kwargs: object) -> int:
    raise OSError(errno.ENOSPC, "No space left on device", str(self))


def test_a_failed_write_leaves_no_bundle_under_the_final_name(tmp_path: Path,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    bundle = read_bundle(bundle_path(Fault.RADIX_UAF))
    monkeypatch.setattr(Path, "write_text", _disk_full)  # the disk fills after the tensors file
    with pytest.raises(OSError):
        write_bundle(bundle, tmp_path / "b")
    monkeypatch.undo()
    assert not (tmp_path / "b").exists(), sorted(p.name for p in (tmp_path / "b").iterdir())


def test_a_failed_replace_keeps_the_old_bundle(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    old = read_bundle(bundle_path(Fault.RADIX_UAF))
    path = write_bundle(old, tmp_path / "b")
    newer = read_bundle(bundle_path(Fault.DOUBLE_ALLOC))  # another genuine bundle written over it
    assert newer.meta != old.meta
    monkeypatch.setattr(Path, "write_text", _disk_full)
    with pytest.raises(OSError):
        write_bundle(newer, path)
    monkeypatch.undo()
    kept = read_bundle(path)
    assert all(torch.equal(kept.tensors[k], old.tensors[k]) for k in old.tensors), "a mixed bundle is left"


def test_two_sinks_sharing_a_folder_never_claim_the_same_bundle(tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    twins: list[BundleSink] = []
    add_sink = CanaryManager.add_sink

    def add_with_twin(self: CanaryManager, sink: Any) -> None:
        add_sink(self, sink)
        if isinstance(sink, BundleSink) and not twins:  # a second rank's sink: same folder, same name
            twin = BundleSink(self, sink.out_dir, limits=sink.limits, name=sink.name, background=False)
            twins.append(twin)
            add_sink(self, twin)
            originals.append(sink)

    originals: list[BundleSink] = []
    monkeypatch.setattr(CanaryManager, "add_sink", add_with_twin)
    assert run_fault_bundle(Fault.RADIX_UAF, tmp_path) is not None
    assert twins and originals
    both = set(originals[0].written) & set(twins[0].written)
    assert not both and not any("exists" in e for e in twins[0].errors), sorted(p.name for p in both)


def test_a_huge_bundle_json_is_refused_before_it_is_read(tmp_path: Path) -> None:
    path = _copy(tmp_path)
    os.truncate(path / META_FILE, 6 << 30)  # sparse: what a tar with sparse members unpacks to

    def cap() -> None:  # a 4 GiB address space: the machine's memory, without taking this one's
        resource.setrlimit(resource.RLIMIT_AS, (4 << 30, 4 << 30))

    res = subprocess.run([sys.executable, "-m", "kvcanary", "inspect", str(path)], capture_output=True, text=True,
                         timeout=300, check=False, preexec_fn=cap,
                         env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    assert res.returncode == 2, res.stderr[-400:]
    assert len(res.stderr.strip().splitlines()) == 1 and META_FILE in res.stderr, res.stderr[-400:]
