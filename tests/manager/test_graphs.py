"""``CanaryConfig(graphs=...)``: the manager's HEAD and TAIL padded to a bucket and replayed from its own CUDA
graphs. On the CPU the bucketed path runs its padded launches eagerly (what a graph replays) and must leave
every device buffer byte-identical to the unpadded launches; the capture itself is checked on a GPU
(``tests/manager/test_gpu_graphs.py``)."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch

from benchmarks.bench_manager_graphs import OpCount, StubbedReplays
from kvcanary.consts import FailReason, RealKvHashMode
from kvcanary.extensions import Extensions
from kvcanary.manager import CanaryBatch, CanaryConfig, VerifyBudget
from kvcanary.manager.capacities import CanaryCapacities
from kvcanary.manager.graphs import (
    MAX_GRAPHS_PER_PHASE,
    Bucket,
    ForwardGraphs,
    bucket_for,
    bucket_ladder,
    graphs_wanted,
)
from kvcanary.manager.staging import StepStaging
from kvcanary_contracts import ContractError, ContractTypeError
from tests.manager.graph_parity import device_buffers, differences, pad_eagerly, workload
from tests.manager.test_rotation import layered_world
from tests.manager.world import Req, World, make_world

RKV = int(FailReason.VERIFY_REAL_KV_HASH_MISMATCH)


def test_the_bucket_ladder_is_powers_of_two_then_the_capacity() -> None:
    assert bucket_ladder(1) == (1,)
    assert bucket_ladder(8) == (1, 2, 4, 8)
    assert bucket_ladder(20) == (1, 2, 4, 8, 16, 20)
    assert [bucket_for(n, bucket_ladder(20)) for n in (0, 1, 3, 9, 17, 20, 21)] == [None, 1, 4, 16, 20, 20, None]
    with pytest.raises(ValueError, match="capacity >= 1"):
        bucket_ladder(0)


def test_graphs_default_to_cuda_pools_without_compile() -> None:
    cpu, cuda = torch.device("cpu"), torch.device("cuda", 0)
    assert not graphs_wanted(None, device=cpu, compile=False)
    assert graphs_wanted(None, device=cuda, compile=False)
    assert not graphs_wanted(None, device=cuda, compile=True)
    assert not graphs_wanted(False, device=cuda, compile=False)
    assert graphs_wanted(True, device=cuda, compile=False)


def test_config_rules_name_the_setting() -> None:
    assert CanaryConfig().graphs is None
    with pytest.raises(ContractError, match=r"CanaryConfig\.graphs=True conflicts with compile=True"):
        CanaryConfig(graphs=True, compile=True)
    with pytest.raises(ContractTypeError, match=r"CanaryConfig\.graphs must be bool or None"):
        CanaryConfig(graphs=1)  # type: ignore[arg-type]
    assert CanaryConfig(graphs=False, compile=True).compile


def test_graphs_true_on_a_cpu_pool_is_refused_before_anything_is_allocated() -> None:
    with pytest.raises(ContractError, match=r"CanaryConfig\.graphs=True needs a CUDA pool") as info:
        make_world(config=CanaryConfig(graphs=True))
    assert info.value.check.slug == "graphs_need_cuda_pool"  # the manager's contract, before any allocation


def test_a_cpu_manager_runs_unpadded_by_default() -> None:
    w = make_world()
    assert w.manager.graphs == [None]


def test_the_bucket_key_carries_the_budget_stride_and_stops_at_the_largest_bucket() -> None:
    g = ForwardGraphs(rows_capacity=8, tokens_capacity=32, capture=False, strict=True)
    assert g.bucket(3, 5) == Bucket(4, 8, 0)
    assert g.bucket(3, 5, stride=7) == Bucket(4, 8, 7)
    assert g.bucket(0, 0) is None and g.bucket(9, 9) is None and g.bucket(2, 33) is None
    g.disable()
    assert g.bucket(3, 5) is None


def _staging(write_input_assert: bool) -> StepStaging:
    caps = CanaryCapacities.from_engine(pool_slot_count=64, max_batch_size=8, req_rows=6,
                                        max_tokens_per_forward=32, max_context_len=32)
    return StepStaging(caps, torch.device("cpu"), swa_lut=None, swa_num_slots=0, write_input_assert=write_input_assert)


def test_padded_staging_is_one_copy_with_neutral_padding() -> None:
    s = _staging(write_input_assert=True)
    i32 = torch.int32
    batch = CanaryBatch(req_pool_indices=torch.tensor([3, 5], dtype=i32), prefix_lens=torch.tensor([7, 0]),
                        extend_lens=torch.tensor([1, 2]), input_ids=torch.tensor([11, 12, 13], dtype=i32),
                        positions=torch.tensor([7, 0, 1]), out_cache_loc=torch.tensor([9, 10, 11], dtype=i32),
                        expected_input_tokens=torch.tensor([11, 12, 13]),
                        expected_input_positions=torch.tensor([7, 0, 1]))
    s.packed.fill_(99)  # whatever an earlier forward left
    v = s.load_padded(batch, 4, 4)
    assert v.req_pool_indices.tolist() == [3, 5, 0, 0]
    assert v.prefix_lens.tolist() == [7, 0, 0, 0] and v.extend_lens.tolist() == [1, 2, 0, 0]
    assert v.input_ids.tolist() == [11, 12, 13, 0] and v.positions.tolist() == [7, 0, 1, 0]
    assert v.out_cache_loc.tolist() == [9, 10, 11, -1]
    assert v.expected_input_tokens is not None and v.expected_input_tokens.tolist() == [11, 12, 13, 0]
    assert v.expected_input_positions is not None and v.expected_input_positions.tolist() == [7, 0, 1, 0]
    assert all(t.dtype == torch.int64 and t.is_contiguous() for t in (v.req_pool_indices, v.input_ids))
    # the bucket's views are fixed: the next forward of the bucket lands at the same addresses
    again = s.padded_views(4, 4)
    assert again.out_cache_loc.data_ptr() == v.out_cache_loc.data_ptr()
    with pytest.raises(ValueError, match="does not fit the bucket of 2 rows"):
        s.load_padded(batch, 2, 1)
    missing = CanaryBatch(req_pool_indices=batch.req_pool_indices, prefix_lens=batch.prefix_lens,
                          extend_lens=batch.extend_lens, input_ids=batch.input_ids, positions=batch.positions,
                          out_cache_loc=batch.out_cache_loc)
    with pytest.raises(Exception, match="expected_input_tokens"):
        s.load_padded(missing, 4, 4)


def _pair(make: object, **pad: int) -> tuple[World, World]:
    assert callable(make)
    eager, padded = make(), make()
    graphs = pad_eagerly(padded.manager, **pad)
    workload(eager)
    workload(padded)
    eager.manager.flush()
    padded.manager.flush()
    assert sum(g.padded_eager for g in graphs) > 0, "the bucketed path never ran"
    return eager, padded


def _assert_identical(eager: World, padded: World) -> None:
    want, got = device_buffers(eager.manager), device_buffers(padded.manager)
    assert differences(got, want) == []
    assert [e.violation for e in padded.manager.events] == [e.violation for e in eager.manager.events]
    assert padded.manager.health.issued == eager.manager.health.issued


def _config(**kw: object) -> CanaryConfig:
    base: dict[str, object] = dict(real_kv_mode=RealKvHashMode.ALL, enable_v=True, enable_verify_token=True,
                                   health_warmup_steps=3, health_every=1)
    base.update(kw)
    return CanaryConfig(**base)  # type: ignore[arg-type]


@pytest.mark.parametrize("name", ["full", "partial_k_only", "budget", "extensions", "owner_check", "swa_offset"])
def test_padded_buckets_leave_every_buffer_byte_identical(name: str) -> None:
    configs = {
        "full": lambda: make_world(config=_config()),
        "partial_k_only": lambda: make_world(config=_config(real_kv_mode=RealKvHashMode.PARTIAL, enable_v=False,
                                                            enable_verify_token=False)),
        "budget": lambda: make_world(config=_config(verify_budget=VerifyBudget(max_entries=12, newest_per_request=1))),
        "extensions": lambda: make_world(config=_config(
            extensions=Extensions(zero_slot_in_live_range=True, write_slot_mismatch=True))),
        "owner_check": lambda: make_world(config=_config(extensions=Extensions(write_slot_owner_mismatch=True))),
        "swa_offset": lambda: make_world(swa_window=4, offset=1),
    }
    eager, padded = _pair(configs[name])
    if name == "full":
        assert any(e.violation.fail_reason_bits & RKV for e in eager.manager.events), "the flip must show"
    _assert_identical(eager, padded)


def test_layer_rotation_with_a_budget_is_identical_when_padded() -> None:
    def make() -> World:
        return layered_world(3, 2, budget=VerifyBudget(max_entries=10, newest_per_request=1))
    eager, padded = _pair(make)
    _assert_identical(eager, padded)


def test_forwards_past_the_largest_bucket_fall_back_to_the_unpadded_launches() -> None:
    eager, padded = _pair(lambda: make_world(config=_config()), rows_capacity=2, tokens_capacity=4)
    _assert_identical(eager, padded)


def test_around_its_replays_a_forward_dispatches_only_the_staging_copy() -> None:
    """The host work of a replayed forward: HEAD stages the batch with one operator (the padded copy into the
    bucket's fixed buffer), TAIL none; the bucket's views, padding and launches are made at its first use only.
    Replays are stubbed (no CUDA graphs here): what the graph runs is not dispatched on the host anyway."""
    w = make_world(config=_config(real_kv_mode=RealKvHashMode.PARTIAL, enable_verify_token=False,
                                  health_warmup_steps=10**9))
    caps = w.manager.capacities
    graphs = StubbedReplays(rows_capacity=caps.write_req_capacity, tokens_capacity=caps.write_token_capacity)
    w.manager._forwards[0].graphs = graphs
    a, b, c = Req(1, list(range(100, 130)), [1, 2, 3]), Req(2, list(range(200, 230)), [4, 5]), Req(3, [7] * 30, [6])
    batches = [w.build([(a, 2, 1), (b, 1, 1), (c, 0, 1)]), w.build([(a, 2, 1), (b, 1, 1)], pad_rows=1),
               w.build([(a, 2, 1)], pad_rows=2)]  # three forwards of one bucket (4 rows, 4 tokens)
    for batch in batches:
        w.manager.prepare(batch)
        w.manager.head(batch)
        w.manager.tail()
    assert graphs.padded_eager == 2 and graphs.replays == 4
    for batch in batches:
        head, tail = OpCount(), OpCount()
        with head:
            w.manager.prepare(batch)
            w.manager.head(batch)
        with tail:
            w.manager.tail()
        assert head.ops == {"aten.cat.out": 1} and tail.ops == {}
    views = w.manager._forwards[0].staging.padded_views(4, 4)
    assert views is w.manager._forwards[0].staging.padded_views(4, 4)


class _Replay:
    """A captured graph's stand-in: its replay runs the launches it was captured from."""

    def __init__(self, launches: Callable[[], None]) -> None:
        self.replay = launches


class _FakeCaptures(ForwardGraphs):
    """Graphs whose capture keeps the launches (what a CPU can run in place of a CUDA graph)."""

    def _capture(self, phase: str, bucket: Bucket, launches: Callable[[], None]) -> None:
        self._graphs[(phase, bucket)] = _Replay(launches)  # type: ignore[assignment]
        self.captures += 1


def test_a_phases_variants_share_its_graph_cap() -> None:
    """``tail/0`` and ``tail/1`` (and ``head_staged/<buffer>/<n>``) count against one cap per base phase."""
    g = _FakeCaptures(rows_capacity=1 << 10, tokens_capacity=1, capture=True, strict=True)
    runs: list[str] = []
    for i in range(MAX_GRAPHS_PER_PHASE):
        for phase in ("tail/0", "tail/1", "head"):
            g.run(phase, Bucket(i + 1, 1), lambda p=phase: runs.append(p))  # type: ignore[misc]
    assert g.count("tail/0") == g.count("tail") == MAX_GRAPHS_PER_PHASE
    assert g.count("head") == MAX_GRAPHS_PER_PHASE and g.count("head_staged/0/3") == 0
    assert g.captures == 2 * MAX_GRAPHS_PER_PHASE
    assert len(runs) == 3 * MAX_GRAPHS_PER_PHASE  # every first use ran its launches, captured or not


def test_graphs_dropped_during_an_engine_capture_live_until_the_capture_ends(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Destroying a CUDA graph while the engine captures its own invalidates the engine's capture: a graph
    dropped then (the fold's TAIL graphs, when the engine's forward turns the fold off) is kept, and destroyed at
    the next drop or replay outside a capture."""
    capturing = [False]
    monkeypatch.setattr(torch._C, "_cuda_isCurrentStreamCapturing", lambda: capturing[0])
    g = _FakeCaptures(rows_capacity=4, tokens_capacity=1, capture=True, strict=True)
    for phase in ("tail/0", "tail/1", "head"):
        g.run(phase, Bucket(1, 1), lambda: None)
    kept = [g._graphs[(p, Bucket(1, 1))] for p in ("tail/0", "tail/1")]
    capturing[0] = True
    g.drop("tail/0")
    g.drop("tail/1")
    assert g.count("tail") == 0 and g.retired == kept  # gone from use, not destroyed
    capturing[0] = False
    g.run("head", Bucket(1, 1), lambda: None)  # a replay outside the capture
    assert g.retired == []
    capturing[0] = True
    g.disable()
    assert len(g.retired) == 1 and not g.enabled
    capturing[0] = False
    g.drop("head")
    assert g.retired == []


def test_the_step_end_destroys_graphs_dropped_during_a_capture(monkeypatch: pytest.MonkeyPatch) -> None:
    """An engine that only replays its own graph after capturing the manager's launches never drops or replays a
    manager graph again: the step's end (no capture in progress) destroys what was dropped during the capture."""
    w = make_world()
    g = _FakeCaptures(rows_capacity=4, tokens_capacity=1, capture=True, strict=True)
    w.manager._forwards[0].graphs = g
    capturing = [False]
    monkeypatch.setattr(torch._C, "_cuda_isCurrentStreamCapturing", lambda: capturing[0])
    g.run("tail/0", Bucket(1, 1), lambda: None)
    capturing[0] = True
    g.drop("tail/0")
    assert len(g.retired) == 1
    capturing[0] = False
    w.manager.end_step()
    assert g.retired == []
