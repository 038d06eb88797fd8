"""The same batch object handed to the manager again, its tensors' values changed in place (what an engine that
stages each step into fixed buffers does, and what the transformers integration hands on a decode step):
``prepare`` skips the checks that object already passed, ``head`` keeps its bucket and staging parts, and every
device buffer, event and launch count ends byte-identical to fresh batches."""

from __future__ import annotations

import dataclasses
import warnings
from collections.abc import Callable

import pytest
import torch

from kvcanary.consts import RealKvHashMode
from kvcanary.manager import CanaryBatch, CanaryCapacities, CanaryConfig
from kvcanary.manager.graphs import STAGED_AFTER
from tests.manager.graph_parity import PhaseLog, device_buffers, differences, pad_eagerly
from tests.manager.reused_batches import ReusedBatches, same_as_fresh
from tests.manager.world import Req, World, make_world


def _decodes(w: World, *, flip_at: int = 3) -> None:
    """Three requests prefilled, then seven decode steps of all three (one batch shape), a K byte of a live slot
    flipped mid-way, then a decode of two."""
    a = Req(1, list(range(100, 130)), list(range(1, 6)))
    b = Req(2, list(range(200, 230)), list(range(6, 10)))
    c = Req(3, list(range(300, 330)), list(range(10, 13)))
    w.forward([(a, 0, 5), (b, 0, 4), (c, 0, 3)])
    w.step()
    for n in range(7):
        a.slots.append(20 + n)
        b.slots.append(30 + n)
        c.slots.append(40 + n)
        if n == flip_at:
            w.k[2, 0, 0] += 1.0  # a stray write into a live slot's K bytes
        w.forward([(a, 5 + n, 1), (b, 4 + n, 1), (c, 3 + n, 1)])
        w.step()
    a.slots.append(27)
    b.slots.append(37)
    w.forward([(a, 12, 1), (b, 11, 1)])
    w.step()


def _config() -> CanaryConfig:
    return CanaryConfig(real_kv_mode=RealKvHashMode.ALL, enable_v=True, enable_verify_token=True,
                        health_warmup_steps=2, health_every=1)


@pytest.mark.parametrize("padded", [False, True], ids=["eager", "bucketed"])
def test_a_reused_batch_leaves_every_buffer_as_fresh_batches_do(padded: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    fresh, reusing = make_world(config=_config()), make_world(config=_config())
    if padded:
        pad_eagerly(fresh.manager)
        pad_eagerly(reusing.manager)
    reuse = ReusedBatches(reusing)
    checks: list[CanaryBatch] = []
    validate: Callable[[CanaryBatch, torch.device], None] = CanaryBatch.validate

    def counted(self: CanaryBatch, device: torch.device) -> None:
        checks.append(self)
        validate(self, device)

    monkeypatch.setattr(CanaryBatch, "validate", counted)
    _decodes(reusing)
    assert reuse.reused == 6  # the second to seventh decode steps
    assert len(checks) == 3  # the prefill, the first decode batch (then reused), the last decode's
    checks.clear()
    _decodes(fresh)
    assert len(checks) == 9
    same_as_fresh(reusing, fresh)
    if padded:
        runner = reusing.manager._forwards[0]
        assert runner.graphs is not None and runner.graphs.padded_eager > 0


def test_a_reused_batch_stages_its_new_values_into_the_same_bucket() -> None:
    w = make_world(config=_config())
    pad_eagerly(w.manager)
    ReusedBatches(w)
    a = Req(1, list(range(100, 130)), [1, 2, 3])
    w.forward([(a, 0, 3)])
    w.step()
    staging = w.manager._forwards[0].staging
    seen = []
    for n in range(3):
        a.slots.append(20 + n)
        batch = w.forward([(a, 3 + n, 1)])
        w.step()
        v = staging.padded_views(1, 1)
        seen.append((batch, v.prefix_lens.tolist(), v.input_ids.tolist(), v.out_cache_loc.tolist()))
    assert seen[0][0] is seen[1][0] is seen[2][0]
    assert [s[1:] for s in seen] == [([3 + n], [a.tokens[3 + n]], [20 + n]) for n in range(3)]


def test_a_refused_batch_is_refused_again() -> None:
    caps = CanaryCapacities(verify_capacity=64, write_req_capacity=2, write_token_capacity=32, sweep_capacity=8,
                            expected_token_capacity=64)
    w = make_world(config=_config(), capacities=caps)
    a, b, c = (Req(r, [r] * 30, [r]) for r in (1, 2, 3))
    batch = w.build([(a, 0, 1), (b, 0, 1), (c, 0, 1)])
    for _ in range(2):  # a batch that failed a check is not remembered as accepted
        with pytest.raises(Exception, match="write_req_capacity"):
            w.manager.prepare(batch)
    no_expected = CanaryBatch(req_pool_indices=batch.req_pool_indices[:1], prefix_lens=batch.prefix_lens[:1],
                              extend_lens=batch.extend_lens[:1], input_ids=batch.input_ids[:1],
                              positions=batch.positions[:1], out_cache_loc=batch.out_cache_loc[:1])
    for _ in range(2):
        with pytest.raises(Exception, match="expected_tokens"):
            w.manager.prepare(no_expected)
    ok = w.build([(a, 0, 1)])
    w.manager.prepare(ok)
    w.manager.prepare(ok)  # accepted again without its checks: the same object
    w.manager.head(ok)
    w.manager.tail()


def test_a_reused_batch_runs_unpadded_once_the_graphs_are_off() -> None:
    w = make_world(config=_config())
    (graphs,) = pad_eagerly(w.manager)
    ReusedBatches(w)
    a = Req(1, list(range(100, 130)), [1, 2, 3])
    w.forward([(a, 0, 3)])
    w.step()
    batches = []
    for n in range(3):
        a.slots.append(20 + n)
        if n == 2:
            graphs.disable()  # what a failed capture does: every later forward runs unpadded
        batches.append(w.forward([(a, 3 + n, 1)]))
        w.step()
    assert batches[0] is batches[1] is batches[2]
    assert graphs.padded_eager == 6  # HEAD and TAIL of the prefill and the first two decodes, not the third's
    assert w.events() == []


def test_the_token_check_cannot_be_switched_on_under_an_accepted_batch() -> None:
    """The token check is fixed at attach (its expected-token pool is allocated there or never): switching it on
    later is refused by name, so a batch accepted without expected tokens stays valid for the manager it was
    accepted by."""
    w = make_world(config=dataclasses.replace(_config(), enable_verify_token=False))
    a = Req(1, [1] * 30, [1])
    full = w.build([(a, 0, 1)])
    bare = CanaryBatch(req_pool_indices=full.req_pool_indices, prefix_lens=full.prefix_lens,
                       extend_lens=full.extend_lens, input_ids=full.input_ids, positions=full.positions,
                       out_cache_loc=full.out_cache_loc)
    w.manager.prepare(bare)  # no expected tokens needed: accepted, and remembered
    assert w.manager.state.expected_tokens_pool is None
    with pytest.raises(ValueError, match=r"config\.enable_verify_token is fixed at attach"):
        w.manager.config = dataclasses.replace(w.manager.config, enable_verify_token=True)
    w.manager.prepare(bare)  # the same object, and the same rules


def _move(t: torch.Tensor, *, fill: int | None = None) -> None:
    """Point ``t`` (the same object) at new memory holding its values, or ``fill``."""
    new = t.clone() if fill is None else torch.full_like(t, fill)
    t.set_(new.untyped_storage(), 0, new.shape, new.stride())


class _Phases(PhaseLog):
    """:class:`PhaseLog` with the drops recorded too."""

    def drop(self, phase: str) -> None:
        self.runs.append(f"drop {phase}")
        super().drop(phase)


def test_a_kept_batch_runs_its_staged_head_once_reused_enough() -> None:
    """From its STAGED_AFTER-th reuse a kept batch's HEAD runs as one staged unit (its staging copy, then the
    bucket's launches: what the staged graph replays); a batch whose tensors moved gets a new one, a new batch
    drops it. The buffers end as fresh batches leave them (the parity test above runs the same path)."""
    w, fresh = make_world(config=_config()), make_world(config=_config())
    caps = w.manager.capacities
    g = w.manager._forwards[0].graphs = _Phases(rows_capacity=caps.write_req_capacity,
                                                tokens_capacity=caps.write_token_capacity)
    pad_eagerly(fresh.manager)
    reuse = ReusedBatches(w)
    a, a2 = Req(1, list(range(100, 130)), [1, 2, 3]), Req(1, list(range(100, 130)), [1, 2, 3])
    b, b2 = Req(2, list(range(200, 230)), [4, 5]), Req(2, list(range(200, 230)), [4, 5])
    for world, ra, rb in ((w, a, b), (fresh, a2, b2)):
        world.forward([(ra, 0, 3), (rb, 0, 2)])
        world.step()
    g.runs.clear()
    heads = []
    for n in range(6):
        for world, ra, rb in ((w, a, b), (fresh, a2, b2)):
            ra.slots.append(20 + n)
            rb.slots.append(30 + n)
            if n == 4 and world is w:  # the kept batch's token ids move to new memory (same values)
                assert reuse.kept is not None
                _move(reuse.kept.input_ids)
            world.forward([(ra, 3 + n, 1), (rb, 2 + n, 1)])
            world.step()
        heads.append([r for r in g.runs if not r.startswith("tail")])
        g.runs.clear()
    assert reuse.reused == 5
    staged = "head_staged"
    assert STAGED_AFTER == 2
    assert heads[:4] == [["head"], ["head"], [staged], [staged]]  # the first decode, then STAGED_AFTER - 1 reuses
    assert heads[4] == [f"drop {staged}", staged] and heads[5] == [staged]  # moved: a new staged unit
    a.slots.append(40)
    a2.slots.append(40)
    for world, ra in ((w, a), (fresh, a2)):
        world.forward([(ra, 9, 1)])
        world.step()
    assert g.runs[0] == f"drop {staged}" and "head" in g.runs  # a new batch: the staged unit is done with
    w.manager.flush()
    fresh.manager.flush()
    assert differences(device_buffers(w.manager), device_buffers(fresh.manager)) == []


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_a_kept_batch_replayed_from_its_staged_graph_equals_fresh_eager_batches() -> None:
    """On a GPU, with real graphs: a kept batch's forwards replay its staged HEAD graph (the staging copy inside
    it), one of its tensors moved to new memory mid-way (the graph made for the old address is not replayed),
    and every buffer and report ends as fresh batches run eagerly leave them."""
    graphed = make_world(config=dataclasses.replace(_config(), graphs=True), device="cuda")
    fresh = make_world(config=dataclasses.replace(_config(), graphs=False), device="cuda")
    reuse = ReusedBatches(graphed)
    a, a2 = Req(1, list(range(100, 130)), [1, 2, 3]), Req(1, list(range(100, 130)), [1, 2, 3])
    b, b2 = Req(2, list(range(200, 230)), [4, 5]), Req(2, list(range(200, 230)), [4, 5])
    for world, ra, rb in ((graphed, a, b), (fresh, a2, b2)):
        world.forward([(ra, 0, 3), (rb, 0, 2)])
        world.step()
    g = graphed.manager.graphs[0]
    assert g is not None
    for n in range(8):
        for world, ra, rb in ((graphed, a, b), (fresh, a2, b2)):
            ra.slots.append(20 + n)
            rb.slots.append(30 + n)
            if n == 5:
                world.k[2, 0, 0] += 1.0  # a stray write into a live slot's K bytes (a prompt slot of a)
            if n == 4 and world is graphed:  # the kept batch's ids move (the refill writes the new memory)
                assert reuse.kept is not None
                _move(reuse.kept.input_ids, fill=-5)
            world.forward([(ra, 3 + n, 1), (rb, 2 + n, 1)])
            world.step()
    assert reuse.reused == 7 and g.captures >= 4  # HEAD, TAIL, the staged HEAD, and again once moved
    graphed.manager.flush()
    fresh.manager.flush()
    torch.cuda.synchronize()
    assert fresh.manager.events, "the flip must show"
    assert differences(device_buffers(graphed.manager), device_buffers(fresh.manager)) == []
    assert [e.violation for e in graphed.manager.events] == [e.violation for e in fresh.manager.events]
    assert graphed.manager.health.issued == fresh.manager.health.issued


class _ResizedBatches(ReusedBatches):
    """Hands the first batch object at every forward, each tensor refilled in place and resized in place first
    where the new batch's shape differs (an engine whose staging buffers follow the batch's size)."""

    def reuse(self, fresh: CanaryBatch) -> CanaryBatch:
        kept = self.kept
        if kept is None:
            self.kept = fresh
            return fresh
        for dst, src in zip(self.refilled(kept), self.refilled(fresh), strict=True):
            if dst.shape != src.shape and dst.untyped_storage().resizable():
                dst.resize_(src.shape)
            elif dst.shape != src.shape:  # a storage the manager's host copy made fixed: new memory, same object
                new = torch.empty_like(src)
                dst.set_(new.untyped_storage(), 0, new.shape, new.stride())
            dst.copy_(src)
        self.reused += 1
        return kept


def _resized_run(w: World, flip: bool = True) -> None:
    """A prefill of two requests, four decodes of both (a K byte of a live slot flipped at the third), an extend
    of the second by two, two decodes of the first alone: each size change a resize of the one batch object."""
    a = Req(1, list(range(100, 130)), [1, 2, 3])
    b = Req(2, list(range(200, 230)), [4, 5])
    w.forward([(a, 0, 3), (b, 0, 2)])
    w.step()
    for n in range(4):
        a.slots.append(20 + n)
        b.slots.append(30 + n)
        if flip and n == 2:
            w.k[2, 0, 0] += 1.0
        w.forward([(a, 3 + n, 1), (b, 2 + n, 1)])
        w.step()
    b.slots += [34, 35]
    w.forward([(b, 6, 2)])
    w.step()
    for n in range(2):
        a.slots.append(24 + n)
        w.forward([(a, 7 + n, 1)])
        w.step()


@pytest.mark.parametrize("padded", [False, True], ids=["eager", "bucketed"])
def test_a_kept_batch_resized_in_place_is_staged_as_a_new_batch(padded: bool) -> None:
    """The one batch object, resized in place at every size change (also after its staged HEAD was made): each
    resize is a new batch (its checks, its bucket, the staged HEAD dropped), and every buffer, event and launch
    count ends as fresh batches leave them, without torch resizing the staging's slice."""
    w, fresh = make_world(config=_config()), make_world(config=_config())
    caps = w.manager.capacities
    g = _Phases(rows_capacity=caps.write_req_capacity, tokens_capacity=caps.write_token_capacity)
    if padded:
        w.manager._forwards[0].graphs = g
        pad_eagerly(fresh.manager)
    resized = _ResizedBatches(w)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # torch.cat resizing a staged slice warns
        _resized_run(w)
    _resized_run(fresh)
    assert resized.reused == 7
    same_as_fresh(w, fresh)
    if padded:
        heads = [r for r in g.runs if not r.startswith("tail")]
        staged = "head_staged"
        # prefill, decodes (a new size, then kept: staged from the STAGED_AFTER-th), the extend, the lone decodes
        assert heads == ["head", "head", "head", staged, staged, f"drop {staged}", "head", "head", "head"]


def test_a_kept_batch_grown_past_capacity_is_refused_as_a_fresh_one_is() -> None:
    caps = CanaryCapacities(verify_capacity=64, write_req_capacity=2, write_token_capacity=32, sweep_capacity=8,
                            expected_token_capacity=64)
    w = make_world(config=_config(), capacities=caps)
    pad_eagerly(w.manager)
    resized = _ResizedBatches(w)
    a, b, c = (Req(r, list(range(100 * r, 100 * r + 30)), [r * 4, r * 4 + 1]) for r in (1, 2, 3))
    w.forward([(a, 0, 1), (b, 0, 1)])
    w.step()
    kept = resized.kept
    assert kept is not None
    with pytest.raises(ValueError) as fresh_err:  # what a fresh batch of three rows gets
        w.manager.prepare(resized._build([(a, 1, 1), (b, 1, 1), (c, 0, 1)]))
    grown = w.build([(a, 1, 1), (b, 1, 1), (c, 0, 1)])
    assert grown is kept and grown.batch_size == 3
    with pytest.raises(ValueError) as kept_err:
        w.manager.prepare(grown)
    assert str(kept_err.value) == str(fresh_err.value) and "write_req_capacity" in str(kept_err.value)
    assert w.build([(a, 1, 1), (b, 1, 1)]) is kept  # back to the sizes it was accepted at: kept as before
    with w.manager.forward(kept):
        w.write_kv(kept.out_cache_loc.tolist())
    w.step()
    assert w.events() == []


def _kept_batch(expected_token_capacity: int) -> tuple[World, CanaryBatch]:
    """A world whose manager accepted one batch of two rows (60 expected tokens), prepared twice: kept."""
    caps = CanaryCapacities(verify_capacity=64, write_req_capacity=2, write_token_capacity=32, sweep_capacity=8,
                            expected_token_capacity=expected_token_capacity)
    w = make_world(config=_config(), capacities=caps)
    a, b = (Req(r, list(range(100 * r, 100 * r + 30)), [r * 4]) for r in (1, 2))
    batch = w.build([(a, 0, 1), (b, 0, 1)])
    w.manager.prepare(batch)
    w.manager.head(batch)
    w.manager.tail()
    w.manager.prepare(batch)  # kept: no checks
    w.manager.head(batch)
    w.manager.tail()
    return w, batch


def test_a_kept_batch_whose_snapshot_grew_in_place_past_capacity_is_refused() -> None:
    w, batch = _kept_batch(64)
    exp = batch.expected_tokens
    assert exp is not None and exp.flat.numel() == 60
    grown = torch.arange(70, dtype=torch.int64)
    exp.flat.set_(grown.untyped_storage(), 0, grown.shape, grown.stride())
    exp.lens.copy_(torch.tensor([35, 35]))
    for _ in range(2):  # refused, and not remembered as accepted
        with pytest.raises(ValueError, match="expected_token_capacity"):
            w.manager.prepare(batch)


def test_a_kept_batch_whose_snapshot_no_longer_adds_up_is_refused() -> None:
    w, batch = _kept_batch(128)
    exp = batch.expected_tokens
    assert exp is not None
    exp.lens.copy_(torch.tensor([30, 31]))  # the same shapes; lengths that no longer sum to flat's 60 ids
    with pytest.raises(RuntimeError, match=r"cumsum\(req_all_ids_lens\)=61 != req_all_ids_flat.numel\(\)=60"):
        w.manager.prepare(batch)
    grown = torch.arange(62, dtype=torch.int64)  # resized in place too: the snapshot's own rules run again
    exp.flat.set_(grown.untyped_storage(), 0, grown.shape, grown.stride())
    with pytest.raises(RuntimeError, match=r"cumsum\(req_all_ids_lens\)=61 != req_all_ids_flat.numel\(\)=62"):
        w.manager.prepare(batch)
    exp.lens.copy_(torch.tensor([-1, 63]))
    with pytest.raises(ValueError, match=r"ExpectedTokens\.lens must be >= 0"):
        w.manager.prepare(batch)


def test_a_kept_batch_resized_in_place_into_disagreeing_shapes_is_refused() -> None:
    w, batch = _kept_batch(128)
    _move(batch.input_ids, fill=7)
    batch.input_ids.resize_(3)  # three tokens, but two positions and two slots
    with pytest.raises(ValueError, match="positions"):
        w.manager.prepare(batch)
