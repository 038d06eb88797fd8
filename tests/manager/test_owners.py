"""The manager's device owner map: the write-time owner check through CanaryConfig, fed by the batches and
by the journal's events."""

from __future__ import annotations

from kvcanary.consts import FailReason, PoolKind, RealKvHashMode
from kvcanary.extensions import Extensions
from kvcanary.guard import JournalKind, Owner, OwnerKind
from kvcanary.manager import CanaryConfig
from kvcanary.manager.owners import SLOT_READ_ONLY
from tests.manager.world import Req, World, make_world

OWN = int(FailReason.WRITE_SLOT_OWNER_MISMATCH)
ROW_A, ROW_B, ROW_C = 1, 2, 3


def _world(*, ext: Extensions | None = None, swa_window: int = 0, compile: bool = False) -> World:
    cfg = CanaryConfig(real_kv_mode=RealKvHashMode.ALL, enable_v=True, enable_verify_token=True,
                       health_warmup_steps=3, health_every=1, compile=compile,
                       extensions=ext if ext is not None else Extensions(write_slot_owner_mismatch=True))
    return make_world(config=cfg, swa_window=swa_window)


def _owner_rows(w: World) -> list[tuple[str, int, int, int]]:
    """(tag, slot, writer, holder) of every owner row."""
    w.manager.flush()
    out = []
    for e in w.manager.events:
        if e.violation.fail_reason_bits & OWN:
            owners = e.violation.owners
            assert owners is not None
            out.append((e.violation.tag_name, e.violation.slot_idx, *owners))
    return out


def _owner(w: World, slot: int, kind: PoolKind = PoolKind.FULL) -> int:
    assert w.manager.owners is not None
    return int(w.manager.owners.slot_owner(kind)[slot])


def test_config_takes_the_owner_check_and_the_manager_keeps_a_map() -> None:
    w = _world()
    assert w.manager.owners is not None
    assert w.manager.owners.slot_owner(PoolKind.FULL).shape == (w.k.shape[0],)
    assert make_world().manager.owners is None  # off: no map, nothing claimed


def test_clean_run_with_prefix_share_is_silent_and_claims_first_writers() -> None:
    w = _world()
    a = Req(ROW_A, list(range(100, 110)), slots=[5, 6, 7, 8, 9, 10])
    w.forward([(a, 0, 4)], pad_rows=2)
    w.step()
    # B shares A's first 4 slots (a prefix hit: read, never written) and writes its own
    b = Req(ROW_B, [*list(range(100, 106)), 7, 7], slots=[5, 6, 7, 8, 20, 21])
    w.forward([(a, 4, 2), (b, 4, 2)], pad_rows=1)
    w.step()
    w.forward([(b, 6, 0)])
    w.step()
    assert _owner_rows(w) == []
    assert [_owner(w, s) for s in (5, 8, 9, 10, 20, 21)] == [ROW_A, ROW_A, ROW_A, ROW_A, ROW_B, ROW_B]
    assert _owner(w, 0) == -1  # padding rows claim nothing


def test_double_allocation_fires_at_the_second_owners_write_naming_both() -> None:
    w = _world()
    a = Req(ROW_A, list(range(100, 110)), slots=[5, 6, 7, 8])
    w.forward([(a, 0, 3)])
    w.step()
    b = Req(ROW_B, list(range(200, 210)), slots=[30, 7])  # slot 7 handed to B while A holds it
    w.forward([(b, 0, 2)])
    w.step()
    rows = _owner_rows(w)
    assert rows and {r[1:] for r in rows} == {(7, ROW_B, ROW_A)}
    assert {r[0] for r in rows} >= {"HEAD_K_FULL", "TAIL_K_FULL"}


def test_two_rows_writing_one_free_slot_in_one_forward() -> None:
    w = _world()
    a = Req(ROW_A, list(range(100, 110)), slots=[12, 13])
    b = Req(ROW_B, list(range(200, 210)), slots=[14, 13])
    w.forward([(a, 0, 2), (b, 0, 2)])
    w.step()
    assert {r[1:] for r in _owner_rows(w)} == {(13, ROW_A, ROW_B)}  # the larger row claims it


def test_freed_slot_is_claimed_again_and_a_cached_one_is_read_only() -> None:
    w = _world()
    m = w.manager
    a = Req(ROW_A, list(range(100, 110)), slots=[5, 6, 7])
    w.forward([(a, 0, 3)])
    w.step()
    owner_a = Owner(OwnerKind.REQUEST, "a")
    m.journal.record(m.step, JournalKind.ALLOCATED, [5, 6, 7], owner_a)
    m.journal.record(m.step, JournalKind.CACHED, [5, 6], Owner(OwnerKind.CACHE, "radix"))
    m.journal.record(m.step, JournalKind.RELEASED, [5, 6, 7], owner_a)  # 7 has no holder left: free
    c = Req(ROW_C, list(range(300, 310)), slots=[7, 40])
    w.forward([(c, 0, 2)])  # prepare applies the queued changes, then C claims the freed slot 7
    w.step()
    assert _owner_rows(w) == []
    assert (_owner(w, 5), _owner(w, 6), _owner(w, 7)) == (SLOT_READ_ONLY, SLOT_READ_ONLY, ROW_C)
    # a write into the cached slot fires with the read-only holder
    d = Req(ROW_B, list(range(400, 410)), slots=[41, 6])
    w.forward([(d, 0, 2)])
    w.step()
    assert {r[1:] for r in _owner_rows(w)} == {(6, ROW_B, SLOT_READ_ONLY)}
    # evicted from the cache and freed: free again
    m.journal.record(m.step, JournalKind.RELEASED, [5, 6], Owner(OwnerKind.CACHE, "radix"))
    m.journal.record(m.step, JournalKind.FREED, [5])
    assert m.owners is not None
    m.owners.apply_pending()
    assert (_owner(w, 5), _owner(w, 6)) == (-1, -1)


def test_journal_with_blocks_frees_every_slot_of_the_block() -> None:
    w = _world()
    m = w.manager
    m.set_adapter(None, block_size=4)
    assert m.owners is not None
    m.owners.set_slots(range(8, 12), ROW_A)
    m.owners.apply_pending()
    m.journal.record(0, JournalKind.FREED, [2])
    m.owners.apply_pending()
    assert [_owner(w, s) for s in range(7, 13)] == [-1, -1, -1, -1, -1, -1]


def test_swa_group_has_its_own_map() -> None:
    w = _world(swa_window=4)
    a = Req(ROW_A, list(range(100, 110)), slots=[5, 6, 7])
    w.forward([(a, 0, 3)])
    w.step()
    assert w.lut is not None
    assert _owner_rows(w) == []
    assert w.manager.owners is not None
    swa = w.manager.owners.slot_owner(PoolKind.SWA)
    claimed = {int(s) for s in (swa == ROW_A).nonzero().flatten()}
    assert claimed == {int(w.lut[s]) for s in (5, 6, 7)}  # SWA slot numbers, not full ones
    assert int((swa != -1).sum()) == 3
