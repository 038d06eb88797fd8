"""Hostile arguments: every rule of every contract rejects its violations before anything changes.

- Property: for every check of every contract (drawn), a violation generated from a randomly sized valid call
  (the counterexample engine of ``tools.counterexamples`` breaks exactly that check) raises that
  check's code through the real launcher, and every tensor of the call is byte-identical afterwards.
- The same for every code, once, from the catalog's example calls (deterministic).
- The fuzzer's reproducers: zero-size tensors, ints outside int64 and bools, aliased outputs, meta tensors.
- What is accepted on purpose, and what it does: a full→SWA table with ``swa_window_size=0``, valid lengths
  without a pool, reads sharing memory, disjoint views of one buffer.
"""

from __future__ import annotations

import dataclasses
import types
from collections.abc import Callable
from typing import Any

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import kvcanary as kc
from kvcanary import codes
from kvcanary.registry import use_backend
from kvcanary.testing import calls
from kvcanary.valid_calls import EXAMPLES
from kvcanary_contracts import Check, Contract
from kvcanary_contracts.examples import ExampleSet, Variant, unchecked
from tools.counterexamples import NoCounterexample, counterexample

Call = dict[str, Any]
LAUNCHERS: dict[str, Callable[..., None]] = {
    "launch_canary_verify_kernel": kc.launch_canary_verify_kernel,
    "launch_canary_write_kernel": kc.launch_canary_write_kernel,
    "launch_canary_plan_kernels": kc.launch_canary_plan_kernels,
    "launch_plan_offsets_kernel": kc.launch_plan_offsets_kernel,
    "launch_plan_entries_kernel": kc.launch_plan_entries_kernel,
    "launch_scatter_req_token_ids_kernel": kc.launch_scatter_req_token_ids_kernel,
}
CONTRACTS: dict[str, type[Contract]] = {c.contract.name: c for c in codes.contracts()}
CHECKS: list[Check] = codes.checks()


# -- snapshots ----------------------------------------------------------------------------------------------
def tensors(obj: Any) -> list[torch.Tensor]:
    """Every tensor reachable from a call (dicts, tuples, dataclasses, unchecked objects), meta ones excluded."""
    out: list[torch.Tensor] = []
    if isinstance(obj, torch.Tensor):
        if obj.device.type != "meta":
            out.append(obj)
    elif isinstance(obj, dict):
        for v in obj.values():
            out += tensors(v)
    elif isinstance(obj, (tuple, list)):
        for v in obj:
            out += tensors(v)
    elif dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        for f in dataclasses.fields(obj):
            out += tensors(getattr(obj, f.name, None))
    elif isinstance(obj, types.SimpleNamespace):
        for v in vars(obj).values():
            out += tensors(v)
    return out


def storage_bytes(t: torch.Tensor) -> torch.Tensor:
    """A copy of every byte of ``t``'s storage (so a write anywhere near the tensor shows)."""
    return torch.empty(0, dtype=torch.uint8, device=t.device).set_(t.untyped_storage()).clone()


def snapshot(call: Call) -> list[tuple[torch.Tensor, torch.Tensor]]:
    return [(t, storage_bytes(t)) for t in tensors(call)]


def unchanged(snap: list[tuple[torch.Tensor, torch.Tensor]]) -> bool:
    return all(torch.equal(storage_bytes(t), b) for t, b in snap)


def run_through(contract: str, call: Call) -> None:
    """The public launcher on torch_ref (a constructor's contract: its checker, which is what it runs)."""
    if contract in LAUNCHERS:
        with use_backend("torch_ref"):
            LAUNCHERS[contract](**call)
    else:
        CONTRACTS[contract].checker()(**call)


def assert_rejected(contract: str, call: Call, code: str) -> None:
    snap = snapshot(call)
    with pytest.raises(kc.ContractError) as info:
        run_through(contract, call)
    assert info.value.code == code, (info.value.code, str(info.value))
    assert unchanged(snap), f"{contract}: a tensor changed although {code} was raised"


# -- randomly sized valid calls --------------------------------------------------------------------------------
@st.composite
def valid_calls(draw: st.DrawFn, contract: str) -> list[Variant]:
    """Valid calls of ``contract`` with drawn sizes (``kvcanary.testing.calls``), as counterexample variants."""
    def ctx() -> kc.VerifyOrWriteContext:
        return calls.context(num_slots=n, ring=ring, sources=nsrc, mode=mode)

    n, ring, nsrc = draw(st.integers(1, 40)), draw(st.integers(1, 16)), draw(st.integers(0, 4))
    mode = draw(st.sampled_from(list(kc.RealKvHashMode)))
    bs = draw(st.integers(0, 4))
    if contract == "launch_canary_verify_kernel":
        cap = draw(st.integers(1, 12))
        check = draw(st.booleans())
        return [Variant("drawn", lambda: {"context": ctx(), "plan": calls.verify_plan(cap=cap),
                                          "check_verify_expected_token": check})]
    if contract == "launch_canary_write_kernel":
        tokens, on = draw(st.integers(0, 9)), draw(st.booleans())
        return [Variant("drawn", lambda: {**calls.write(assert_inputs=on, tokens=tokens), "context": ctx()})]
    if contract == "launch_canary_plan_kernels":
        swa, pool = draw(st.sampled_from([0, 3])), draw(st.booleans())
        return [Variant("drawn", lambda: calls.plan(bs=bs, swa=swa, pool=pool))]
    if contract == "launch_plan_offsets_kernel":
        cap = draw(st.integers(4, 8))
        return [Variant("drawn", lambda: calls.plan_offsets(bs=bs, cap=cap))]
    if contract == "launch_plan_entries_kernel":
        cap, pool = draw(st.integers(1, 12)), draw(st.booleans())
        return [Variant("drawn", lambda: calls.plan_entries(bs=bs, cap=cap, pool=pool))]
    if contract == "launch_scatter_req_token_ids_kernel":
        return [Variant("drawn", lambda: calls.scatter(bs=bs))]
    return []


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(CHECKS), st.data())
def test_a_generated_violation_of_any_rule_raises_its_code_and_changes_nothing(check: Check, data: st.DataObject
                                                                               ) -> None:
    examples = EXAMPLES[check.contract]
    drawn = data.draw(valid_calls(check.contract))
    # the drawn call first; the catalog's variants where it cannot break the rule (an SWA-only rule, ...)
    mixed = ExampleSet(examples.callee, (*drawn, *examples.variants), examples.extra)
    ce = counterexample(CONTRACTS[check.contract], mixed, check)
    assert_rejected(check.contract, ce.failing, check.code)


@pytest.mark.parametrize("code", sorted(codes.by_code()))
def test_every_codes_example_changes_nothing(code: str) -> None:
    check = codes.by_code()[code]
    try:
        ce = counterexample(CONTRACTS[check.contract], EXAMPLES[check.contract], check)
    except NoCounterexample as exc:  # pragma: no cover - the catalog tests fail first
        raise AssertionError(str(exc)) from exc
    assert_rejected(check.contract, ce.failing, code)


def code_of(contract: str, slug: str) -> str:
    return next(c.code for c in CHECKS if c.contract == contract and c.slug == slug)


Builder = Callable[[], Call]
V, W, P = "launch_canary_verify_kernel", "launch_canary_write_kernel", "launch_canary_plan_kernels"
OFS, E, S = "launch_plan_offsets_kernel", "launch_plan_entries_kernel", "launch_scatter_req_token_ids_kernel"
PLAN_BUILDS: dict[str, Builder] = {P: calls.plan, OFS: calls.plan_offsets, E: calls.plan_entries}


def active_verify() -> Call:
    """A verify call with one active entry (so a launch past the contract would touch the counters): slot 3,
    no predecessor and no token check, planned at position 1 where the zero record holds 0 (one violation)."""
    kw = calls.verify()
    plan = kw["plan"]
    plan.verify_num_valid.fill_(1)
    plan.enable.fill_(1)
    plan.verify_slot_indices[0] = 3
    plan.verify_prev_slot_indices[0] = 0
    plan.verify_expected_positions[0] = 1
    plan.verify_expected_tokens[0] = -1
    return kw


def with_context(kw: Call, **changes: Any) -> Call:
    return {**kw, "context": unchecked(kc.VerifyOrWriteContext, **{**vars_of(kw["context"]), **changes})}


def vars_of(obj: Any) -> dict[str, Any]:
    return {f.name: getattr(obj, f.name) for f in dataclasses.fields(obj)}


def source(rows: int) -> kc.RealKvSource:
    t = torch.zeros(rows, 64, dtype=torch.uint8)
    src: kc.RealKvSource = unchecked(kc.RealKvSource, tensor=t, page_size=1, num_bytes_per_token=64, read_bytes=64)
    return src


# -- zero-size tensors ----------------------------------------------------------------------------------------
def test_an_empty_canary_buffer_is_rejected_before_the_counters_move() -> None:
    kw = with_context(active_verify(), canary_buf=torch.zeros(0, 32, dtype=torch.uint8))
    assert_rejected(V, kw, code_of(V, "context:canary_buf_has_slots"))
    kw = with_context(calls.write(tokens=2), canary_buf=torch.zeros(0, 32, dtype=torch.uint8))
    assert_rejected(W, kw, code_of(W, "context:canary_buf_has_slots"))


@pytest.mark.parametrize("mode", [kc.RealKvHashMode.PARTIAL, kc.RealKvHashMode.ALL, kc.RealKvHashMode.NONE])
def test_a_source_without_rows_is_rejected_in_every_mode(mode: kc.RealKvHashMode) -> None:
    kw = with_context(active_verify(), real_kv_sources=(source(0),), real_kv_hash_mode=mode)
    assert_rejected(V, kw, code_of(V, "real_kv_sources[]:has_rows"))
    with pytest.raises(kc.ContractError) as info:
        kc.RealKvSource(tensor=torch.zeros(0, 64, dtype=torch.uint8), page_size=1, num_bytes_per_token=64,
                        read_bytes=64)
    assert info.value.code == code_of("RealKvSource", "has_rows")


@pytest.mark.parametrize("shape", [(2, 0), (0, 8), (0, 0)])
@pytest.mark.parametrize("launch", [P, OFS, E])
def test_an_empty_req_to_token_is_rejected(shape: tuple[int, int], launch: str) -> None:
    build = PLAN_BUILDS[launch]
    kw = build()
    kw["req_pool_indices"].fill_(1)
    kw["prefix_lens"].fill_(2)
    kw["req_to_token"] = torch.zeros(shape, dtype=torch.int32)
    assert_rejected(launch, kw, code_of(launch, "req_to_token_not_empty"))


@pytest.mark.parametrize("shape", [(0, 0), (0, 8), (4, 0)])
def test_an_empty_token_pool_is_rejected_before_the_write_plan_is_written(shape: tuple[int, int]) -> None:
    kw = calls.plan(pool=True)
    kw["req_pool_indices"].fill_(1)
    kw["req_to_verify_expected_tokens"] = torch.zeros(shape, dtype=torch.int32)
    assert_rejected(P, kw, code_of(P, "pool_not_empty"))
    kw = calls.plan_entries(pool=True)
    kw["req_to_verify_expected_tokens"] = torch.zeros(shape, dtype=torch.int32)
    assert_rejected(E, kw, code_of(E, "pool_not_empty"))
    kw = calls.scatter()
    kw["pool_out"] = torch.zeros(shape, dtype=torch.int32)
    assert_rejected(S, kw, code_of(S, "pool_out_not_empty"))


def _fill(obj: Any, value: int = -7) -> None:
    """Every tensor of ``obj`` set to ``value``, so that anything a launch writes shows."""
    for t in tensors(obj):
        t.fill_(value)


def test_empty_batches_tokens_rings_and_plans_are_fine() -> None:
    """Zero-length batch, token and capacity dimensions are legal and do what the definitions say of no rows: a
    plan of no entries and no write requests, no entry, record or pool cell written, and a verify violation
    counted but not stored when the ring has no rows (every backend handles them)."""
    with use_backend("torch_ref"):
        kw = calls.plan(bs=0)
        vp, wp = kw["verify_plan_out"], kw["write_plan_out"]
        _fill((vp, wp))
        kc.launch_canary_plan_kernels(**kw)
        assert vp.verify_num_valid.tolist() == [0] and vp.enable.tolist() == [1]
        assert wp.write_num_valid_reqs.tolist() == [0] and wp.write_offsets.tolist() == [0] * wp.write_offsets.numel()
        assert all(t.eq(-7).all() for t in (vp.verify_slot_indices, vp.verify_expected_tokens,
                                            vp.verify_expected_positions, vp.verify_prev_slot_indices,
                                            wp.write_seed_slot_indices)), "an entry was written for no request"

        kw = calls.plan_offsets(bs=0)
        outs = {k: v for k, v in kw.items() if k.startswith("out_")}
        _fill(outs)
        kc.launch_plan_offsets_kernel(**kw)
        assert [outs[k].tolist() for k in ("out_verify_num_valid", "out_verify_enable", "out_write_num_valid_reqs")
                ] == [[0], [1], [0]]
        assert outs["out_write_offsets"][0] == 0 and outs["out_write_seed_slot_indices"].eq(-7).all()

        for kw in (calls.plan_entries(bs=0, cap=0),
                   {**calls.scatter(bs=0), "flat_in": torch.zeros(0, dtype=torch.int64)}):
            _fill(kw, 5)
            snap = snapshot(kw)
            launch = kc.launch_plan_entries_kernel if "verify_enable" in kw else kc.launch_scatter_req_token_ids_kernel
            launch(**kw)
            assert unchanged(snap), launch.__name__

        kw = calls.write(tokens=0)
        ctx = kw["context"]
        snap = snapshot({k: v for k, v in vars_of(ctx).items() if k != "kernel_run_counter"})
        kc.launch_canary_write_kernel(**kw)
        assert unchanged(snap) and ctx.kernel_run_counter.tolist() == [1]

        stored, empty = active_verify(), with_context(active_verify(),
                                                      violation_ring=torch.zeros(0, 8, dtype=torch.int64))
        kc.launch_canary_verify_kernel(**stored)
        kc.launch_canary_verify_kernel(**empty)
        assert stored["context"].violation_write_index.tolist() == [1], "the example entry is a violation"
        assert empty["context"].violation_write_index.tolist() == [1], "counted even with no row to store it in"
        assert empty["context"].kernel_run_counter.tolist() == [1] and empty["context"].slot_run_counter.tolist() == [1]


# -- ints outside int64, bools where ints are meant ------------------------------------------------------------
@pytest.mark.parametrize(("launch", "name", "value"), [
    (P, "verify_capacity", 2**63), (OFS, "verify_capacity", 2**63), (P, "swa_window_size", 2**64),
    (E, "swa_window_size", 2**64), (OFS, "swa_window_size", -(2**63) - 1),
    (P, "kv_token_id_vs_position_offset", 2**64), (E, "kv_token_id_vs_position_offset", -(2**64)),
])
def test_ints_outside_int64_are_rejected(launch: str, name: str, value: int) -> None:
    build = PLAN_BUILDS[launch]
    assert_rejected(launch, {**build(), name: value}, code_of(launch, f"{name}:int64"))


@pytest.mark.parametrize("kind", [2**64, -(2**63) - 1, 2**63])
def test_a_launch_tag_outside_int64_is_rejected_before_kernel_run_counter_moves(kind: int) -> None:
    assert_rejected(V, with_context(active_verify(), kernel_kind=kind), code_of(V, "kernel_kind:int64"))
    assert_rejected(W, with_context(calls.write(tokens=3), kernel_kind=kind), code_of(W, "kernel_kind:int64"))


@pytest.mark.parametrize(("launch", "name"), [(P, "swa_window_size"), (OFS, "swa_window_size"),
                                              (E, "swa_window_size"), (P, "kv_token_id_vs_position_offset"),
                                              (OFS, "verify_capacity")])
def test_bools_where_ints_are_meant_are_rejected(launch: str, name: str) -> None:
    build = PLAN_BUILDS[launch]
    assert_rejected(launch, {**build(), name: True}, code_of(launch, f"{name}:not_bool"))


def test_a_bool_hash_mode_is_rejected_not_read_as_partial() -> None:
    kw = with_context(active_verify(), real_kv_hash_mode=True)
    assert_rejected(V, kw, code_of(V, "real_kv_hash_mode:not_bool"))
    assert_rejected(V, with_context(active_verify(), kernel_kind=False), code_of(V, "kernel_kind:not_bool"))


def _after(launch: Callable[..., None], kw: Call) -> list[list[Any]]:
    """Every tensor of the call after the launch, as lists."""
    with use_backend("torch_ref"):
        launch(**kw)
    return [t.tolist() for t in tensors(kw)]


def test_int_enums_and_plain_ints_at_the_limits_pass() -> None:
    """Ints at the ends of int64 pass the contracts and mean what they say: the launch tag is copied into the
    violation row, a capacity no batch reaches plans like any other that fits, and the token offset is unused
    without a token pool."""
    kw = with_context(active_verify(), kernel_kind=2**63 - 1)
    _after(kc.launch_canary_verify_kernel, kw)
    assert kw["context"].violation_write_index.tolist() == [1]
    assert kw["context"].violation_ring[0, 0].item() == 2**63 - 1

    def offsets(cap: int) -> list[list[Any]]:
        kw = calls.plan_offsets()
        kw["req_pool_indices"].fill_(1)
        kw["prefix_lens"].copy_(torch.tensor([2, 3, 1]))
        return _after(kc.launch_plan_offsets_kernel, {**kw, "verify_capacity": cap})

    assert offsets(2**63 - 1) == offsets(6) != offsets(5)  # 6 entries fit in 6, not in 5 (an overflow)

    def plan(offset: int) -> list[list[Any]]:
        kw = calls.plan()
        _fill((kw["verify_plan_out"], kw["write_plan_out"]))  # allocated empty: entries past the plan's stay -7
        kw["prefix_lens"].fill_(2)
        kw["req_pool_indices"].fill_(1)
        kw["req_to_token"].copy_(torch.arange(32, dtype=torch.int32).view(4, 8))
        return _after(kc.launch_canary_plan_kernels, {**kw, "kv_token_id_vs_position_offset": offset})

    assert plan(-(2**63)) == plan(0)


# -- aliasing ---------------------------------------------------------------------------------------------------
def aliasing(launch: str) -> str:
    return code_of(launch, "aliasing")


def test_aliased_plan_outputs_are_rejected() -> None:
    kw = calls.plan()
    vp = kw["verify_plan_out"]
    kw["verify_plan_out"] = dataclasses.replace(vp, enable=vp.verify_num_valid)
    assert_rejected(P, kw, aliasing(P))
    kw = calls.plan(bs=4)  # an output that is an input (4 rows: the write plan's capacity)
    kw["write_plan_out"] = dataclasses.replace(kw["write_plan_out"], write_seed_slot_indices=kw["prefix_lens"])
    assert_rejected(P, kw, aliasing(P))
    kw = calls.plan()  # the scratch overlapping the write offsets (a partial overlap of one buffer)
    buf = torch.zeros(8000, dtype=torch.int64)
    vp, wp = kw["verify_plan_out"], kw["write_plan_out"]
    kw["verify_plan_out"] = dataclasses.replace(vp, verify_offsets_scratch=buf[:4097])
    kw["write_plan_out"] = dataclasses.replace(wp, write_offsets=buf[4096:4101])
    assert_rejected(P, kw, aliasing(P))


def test_a_ring_viewing_the_canary_buffer_and_shared_counters_are_rejected() -> None:
    kw = active_verify()
    buf = kw["context"].canary_buf
    assert_rejected(V, with_context(kw, violation_ring=buf.view(torch.int64).view(-1)[:64].view(8, 8)), aliasing(V))
    ctx = kw["context"]
    assert_rejected(V, with_context(kw, kernel_run_counter=ctx.slot_run_counter), aliasing(V))
    kw = calls.write(tokens=2)
    assert_rejected(W, with_context(kw, slot_run_counter=kw["context"].kernel_run_counter), aliasing(W))


def test_a_real_kv_source_that_is_the_canary_buffer_is_rejected_by_write_only() -> None:
    """write writes canary_buf, so a source reading it is rejected; verify only reads both, which is legal."""
    kw = calls.write(tokens=2)
    buf = kw["context"].canary_buf  # 16 slots x 32 bytes: a source of 16 rows of 32 bytes
    src = kc.RealKvSource(tensor=buf, page_size=1, num_bytes_per_token=32, read_bytes=32)
    assert_rejected(W, with_context(kw, real_kv_sources=(src,)), aliasing(W))
    kw = active_verify()
    src = kc.RealKvSource(tensor=kw["context"].canary_buf, page_size=1, num_bytes_per_token=32, read_bytes=32)
    with use_backend("torch_ref"):
        kc.launch_canary_verify_kernel(**with_context(kw, real_kv_sources=(src,)))


def test_stage_outputs_viewing_their_inputs_are_rejected() -> None:
    kw = calls.plan_offsets()
    kw["out_write_seed_slot_indices"] = kw["extend_seq_lens"].clone()[:3]
    kw["out_write_offsets"] = torch.zeros(4, dtype=torch.int64)
    kw["prefix_lens"] = kw["out_write_offsets"][:3]
    assert_rejected(OFS, kw, aliasing(OFS))
    kw = calls.plan_entries()
    kw["out_verify_prev_slot_indices"] = kw["verify_offsets_scratch"][:8]
    assert_rejected(E, kw, aliasing(E))
    kw = calls.scatter()  # pool_out viewing flat_in
    kw["flat_in"] = torch.zeros(12, dtype=torch.int64)
    kw["pool_out"] = kw["flat_in"].view(torch.int32).view(3, 8)
    assert_rejected(S, kw, aliasing(S))


def test_disjoint_views_of_one_buffer_and_shared_reads_are_fine() -> None:
    """Byte ranges, not storages: counters side by side in one tensor pass, and two read-only arguments may be
    the same tensor (the oracle's tokens are the input ids)."""
    kw = active_verify()
    counters = torch.zeros(2, dtype=torch.int64)
    with use_backend("torch_ref"):
        kc.launch_canary_verify_kernel(**with_context(kw, slot_run_counter=counters[0:1],
                                                      kernel_run_counter=counters[1:2]))
        kw = calls.write(assert_inputs=True, tokens=3)
        kc.launch_canary_write_kernel(**{**kw, "expected_input_tokens": kw["input_ids"],
                                         "expected_input_positions": kw["positions"]})
    assert counters.tolist() == [1, 1]


def test_the_aliasing_message_names_both_arguments() -> None:
    kw = calls.plan()
    vp = kw["verify_plan_out"]
    kw["verify_plan_out"] = dataclasses.replace(vp, enable=vp.verify_num_valid)
    with pytest.raises(kc.ContractError) as info:
        kc.launch_canary_plan_kernels(**kw)
    msg = info.value.message
    assert "verify_plan_out.verify_num_valid" in msg and "verify_plan_out.enable" in msg and "both" in msg


# -- meta tensors ---------------------------------------------------------------------------------------------
def on_meta(obj: Any) -> Any:
    if isinstance(obj, torch.Tensor):
        return torch.empty(obj.shape, dtype=obj.dtype, device="meta")
    if isinstance(obj, dict):
        return {k: on_meta(v) for k, v in obj.items()}
    if isinstance(obj, tuple):
        return tuple(on_meta(v) for v in obj)
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return unchecked(type(obj), **{k: on_meta(v) for k, v in vars_of(obj).items()})
    return obj


META_KEY = {V: "canary_buf", W: "canary_buf", P: "verify_plan_out.verify_slot_indices",
            OFS: "out_verify_offsets_scratch", E: "verify_offsets_scratch", S: "pool_out"}


@pytest.mark.parametrize("launch", sorted(LAUNCHERS))
def test_a_launch_on_meta_tensors_is_a_clear_contract_error(launch: str) -> None:
    builds: dict[str, Builder] = {
        V: active_verify, W: lambda: calls.write(assert_inputs=True), P: lambda: calls.plan(swa=2, pool=True),
        OFS: calls.plan_offsets, E: lambda: calls.plan_entries(pool=True), S: calls.scatter}
    build = builds[launch]
    with pytest.raises(kc.ContractError) as info:
        LAUNCHERS[launch](**on_meta(build()))
    assert info.value.code == code_of(launch, f"{META_KEY[launch]}:not_meta")
    assert "meta device" in info.value.message


# -- accepted on purpose ------------------------------------------------------------------------------------------
def _plan_outputs(kw: Call) -> list[list[int]]:
    vp = kw["verify_plan_out"]
    n = int(vp.verify_num_valid[0])
    return [vp.verify_slot_indices[:n].tolist(), vp.verify_prev_slot_indices[:n].tolist(),
            vp.verify_expected_tokens[:n].tolist(), [int(vp.enable[0]), n]]


def _real_plan(**over: Any) -> Call:
    kw = calls.plan(bs=2)
    kw["req_pool_indices"] = torch.tensor([1, 2])
    kw["prefix_lens"] = torch.tensor([3, 2])
    kw["req_to_token"] = torch.arange(32, dtype=torch.int32).view(4, 8)
    kw.update(over)
    return kw


def test_a_lut_with_window_zero_translates_every_slot_of_the_whole_prefix() -> None:
    """Accepted (SGLang accepts it): swa_window_size only limits the verified range; the table, when given,
    translates every slot read, so window 0 verifies the whole prefix through it."""
    lut = torch.arange(100, 140, dtype=torch.int64)
    kw = _real_plan(full_to_swa_index_mapping=lut)
    with use_backend("torch_ref"):
        kc.launch_canary_plan_kernels(**kw)
    slots, prevs, _, (enable, n) = _plan_outputs(kw)
    assert (enable, n) == (1, 5)
    assert slots == [108, 109, 110, 116, 117] and prevs == [-1, 108, 109, -1, 116]


def test_valid_lens_without_a_pool_are_ignored() -> None:
    """Accepted (SGLang accepts it): without a pool nothing reads valid lengths; the plan is the one without."""
    a, b = _real_plan(), _real_plan(req_to_verify_expected_tokens_valid_lens=torch.tensor([-5, 2**62]))
    with use_backend("torch_ref"):
        kc.launch_canary_plan_kernels(**a)
        kc.launch_canary_plan_kernels(**b)
    assert _plan_outputs(a) == _plan_outputs(b)
    assert _plan_outputs(b)[2] == [-1] * 5
