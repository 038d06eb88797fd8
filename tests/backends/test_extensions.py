"""The extension checks (ZERO_SLOT_IN_LIVE_RANGE, WRITE_SLOT_MISMATCH, WRITE_SLOT_OWNER_MISMATCH) on every
backend.

torch_ref's outputs are the golden vectors (``tests/golden/extensions_cases.json``), whose extension rows are
checked against the checks' definitions derived in plain Python (as are torch_ref's on fresh scenarios; the
owner check's by ``make_extensions_cases.owner_rows``); torch_ref, the Triton interpreter and the CUDA
backend's host emulation replay them; fresh random scenarios are compared across the backends each run;
hand-built cases pin the semantics (what fires, what stays silent); the existing golden vectors still pass
with every flag off.
"""

from __future__ import annotations

import functools
import json
import random
from collections.abc import Iterator
from typing import Any

import pytest
import torch

import kvcanary as kc
from kvcanary.extensions import Extensions
from kvcanary.registry import REGISTRY, Op, register_backend
from kvcanary.testing import calls
from kvcanary.testing.parity import check_call
from tests.backends import _extensions as X
from tests.backends.cuda import _emu
from tests.golden import loader as g
from tests.golden.make_extensions_cases import owner_rows
from tools.scenarios import GENERATORS

ON = Extensions(zero_slot_in_live_range=True, write_slot_mismatch=True)
ALL = X.ALL
OWN = Extensions(write_slot_owner_mismatch=True)
ZERO, WSLOT = int(kc.FailReason.ZERO_SLOT_IN_LIVE_RANGE), int(kc.FailReason.WRITE_SLOT_MISMATCH)
WOWN, OOB = int(kc.FailReason.WRITE_SLOT_OWNER_MISMATCH), int(kc.FailReason.INDEX_OUT_OF_RANGE)
BACKENDS = ["torch_ref", "triton", pytest.param("cuda_emu", marks=pytest.mark.skipif(
    _emu.compiler() is None, reason="no C++ compiler (g++) for the host emulation"))]
GOLDEN = json.loads((g.DIR / "extensions_cases.json").read_text())["cases"]


@pytest.fixture(scope="module", autouse=True)
def _emulated_backend() -> Iterator[None]:
    register_backend(_emu.BACKEND, replace=True)
    yield
    REGISTRY.unregister("cuda_emu")


def _ext(enc: dict[str, bool] | None) -> Extensions | None:
    return None if enc is None else Extensions(**enc)


def test_golden_vectors_report_what_the_definitions_say() -> None:
    """The stored outputs (made by torch_ref) hold exactly the extension rows the checks' definitions derive
    from each scenario in plain Python, so a replay compares every backend with vectors checked from outside."""
    for case in GOLDEN:
        assert case["outputs"]["total"] <= X.RING, case["name"]
        want = X.expected_extension_rows(case["scenario"], _ext(case["extensions"]))
        assert X.extension_rows(case["outputs"]) == want, case["name"]


@pytest.mark.parametrize("ext", [ON, Extensions(zero_slot_in_live_range=True), Extensions(write_slot_mismatch=True)],
                         ids=["both", "zero_slot", "write_slot"])
def test_torch_ref_extension_rows_follow_the_definitions_on_fresh_scenarios(ext: Extensions) -> None:
    for seed in random.Random().sample(range(10**6), 12):
        sc = X.make(seed)
        out = X.run(sc, "torch_ref", ext)
        assert out["total"] <= X.RING, seed
        assert X.extension_rows(out) == X.expected_extension_rows(sc, ext), seed


@pytest.mark.parametrize("backend", BACKENDS)
def test_golden_vectors_replay(backend: str) -> None:
    cases = GOLDEN if backend == "torch_ref" else GOLDEN[::3]  # the interpreters are slow: a third of them
    assert any(c["extensions"] for c in cases) and any(c["extensions"] is None for c in cases)
    for case in cases:
        got = X.run(case["scenario"], backend, _ext(case["extensions"]))
        assert got == case["outputs"], case["name"]


def test_golden_vectors_exercise_every_bit_and_off_never_reports_them() -> None:
    on = [c for c in GOLDEN if c["extensions"]]
    off = [c for c in GOLDEN if c["extensions"] is None]
    for bit in (ZERO, WSLOT, WOWN):
        assert sum(X.bits_count(c["outputs"], bit) for c in on) > 0, bit
    assert sum(X.bits_count(c["outputs"], ZERO | WSLOT | WOWN) for c in off) == 0


def _owner_part(out: dict[str, Any]) -> list[list[int]]:
    return sorted(r for r in out["rows"] if r[7] & WOWN)


def test_golden_owner_rows_are_the_rules() -> None:
    """The vectors' owner rows are what the plain-Python model of the rule derives, not torch_ref's word alone;
    every kind of holder (another request, free, read-only) and both groups appear."""
    owner_cases = [c for c in GOLDEN if c["extensions"] and c["extensions"].get("write_slot_owner_mismatch")]
    assert len(owner_cases) >= 8
    holders = set()
    for case in owner_cases:
        want = owner_rows(case["scenario"])
        assert _owner_part(case["outputs"]) == want, case["name"]
        holders |= {"row" if r[6] >= 0 else "free" if r[6] == -1 else "read-only" for r in want}
    assert holders == {"row", "free", "read-only"}
    assert {c["scenario"]["lut"] is None for c in owner_cases} == {True, False}


def test_fresh_owner_scenarios_follow_the_rule_on_torch_ref() -> None:
    for seed in random.Random().sample(range(10**6, 10**7), 6):
        sc = X.make_owner(seed)
        out = X.run(sc, "torch_ref", ALL)
        assert _owner_part(out) == owner_rows(sc), seed
        assert _owner_part(X.run(sc, "torch_ref", ON)) == [], seed  # the flag off: never reported
        owner_only = X.run(sc, "torch_ref", OWN)
        assert [r for r in owner_only["rows"] if r[7] & WSLOT] == [], seed
        assert _owner_part(owner_only) == owner_rows(sc), seed
        assert owner_only["canary_buf"] == X.run(sc, "torch_ref", None)["canary_buf"], seed  # records as without


@pytest.mark.parametrize("backend", ["triton", pytest.param("cuda_emu", marks=pytest.mark.skipif(
    _emu.compiler() is None, reason="no C++ compiler"))])
def test_fresh_random_scenarios_match_torch_ref(backend: str) -> None:
    for seed in random.Random().sample(range(10**6, 10**7), 2):
        sc = X.make(seed)
        for ext in (ON, None):
            assert X.run(sc, backend, ext) == X.run(sc, "torch_ref", ext), (seed, ext)
        sc = X.make_owner(seed)
        for ext in (ALL, OWN):
            assert X.run(sc, backend, ext) == X.run(sc, "torch_ref", ext), (seed, ext)


@pytest.mark.parametrize("backend", ["torch_ref", "triton", pytest.param("cuda_emu", marks=pytest.mark.skipif(
    _emu.compiler() is None, reason="no C++ compiler"))])
def test_every_flag_off_is_none_byte_for_byte(backend: str) -> None:
    """``Extensions()`` (every flag off) on each backend gives torch_ref's outputs without extensions."""
    for seed in random.Random().sample(range(10**6), 6 if backend == "torch_ref" else 2):
        sc = X.make(seed)
        assert X.run(sc, backend, Extensions()) == X.run(sc, "torch_ref", None), seed


@pytest.mark.parametrize("file", ["plan_cases", "verify_cases", "write_cases"])
def test_existing_golden_vectors_pass_with_every_flag_off(file: str, monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("launch_canary_plan_kernels", "launch_canary_verify_kernel", "launch_canary_write_kernel"):
        monkeypatch.setattr(g, name, functools.partial(getattr(g, name), extensions=Extensions()))
    runner = {"plan_cases": g.run_plan, "verify_cases": g.run_verify, "write_cases": g.run_write}[file]
    for case in g.load(file):
        got = runner(case, "cpu", "torch_ref")
        for name, want in g.expected(case).items():
            assert torch.equal(got[name], want), (case.name, name)


# -- hand-built semantics ----------------------------------------------------------------------------------
def _scenario(**over: Any) -> X.Scenario:
    """Request row 1: prompt of 6 at slots 11..16, then one new token at 17 (position 6)."""
    r2t = [[0] * X.COLS for _ in range(X.ROWS)]
    r2t[1][:7] = [11, 12, 13, 14, 15, 16, 17]
    steps = [{"rpi": [1], "prefix": [0], "extend": [6], "ids": [1, 2, 3, 4, 5, 6], "pos": list(range(6)),
              "loc": [11, 12, 13, 14, 15, 16]},
             {"rpi": [1, 0], "prefix": [6, 2], "extend": [1, 0], "ids": [7], "pos": [6], "loc": [17]}]
    sc: X.Scenario = {"seed": -1, "req_to_token": r2t, "lut": None, "window": 0, "offset": 0, "zeros": [],
                      "steps": steps}
    sc.update(over)
    return sc


def _rows(sc: X.Scenario, ext: Extensions | None = ON) -> list[list[int]]:
    rows: list[list[int]] = X.run(sc, "torch_ref", ext)["rows"]
    return rows


def test_clean_run_reports_nothing() -> None:
    assert _rows(_scenario()) == []


def test_zero_slot_inside_the_prefix_is_reported_with_its_position() -> None:
    sc = _scenario(zeros=[(1, 3)])
    assert [r for r in _rows(sc, None) if r[7] & ZERO] == []
    rows = [r for r in _rows(sc) if r[7] & ZERO]
    assert [(r[0], r[1], r[2], r[7]) for r in rows] == [(int(kc.CanaryLaunchTag.TAIL_K_FULL), 0, 3, ZERO)]


def test_padding_row_and_slot_zero_past_the_prefix_stay_silent() -> None:
    sc = _scenario()
    sc["req_to_token"][0][:3] = [0, 0, 0]  # the padding row is all zeros and has prefix 2 in step 2
    assert _rows(sc) == []


def test_evicted_swa_positions_translated_to_zero_stay_silent_but_a_null_block_fires() -> None:
    lut = list(range(X.NUM_SLOTS))
    lut[12] = 0  # position 1 evicted: translated to the padding slot on purpose
    evicted = _scenario(lut=lut, window=0)
    assert [r for r in _rows(evicted) if r[7] & ZERO] == []
    null_block = _scenario(lut=lut, window=3, zeros=[(1, 4)])  # window [3, 6): position 4 nulled
    assert [(r[1], r[2]) for r in _rows(null_block) if r[7] & ZERO] == [(0, 4)]


def test_misdirected_write_is_reported_and_still_written() -> None:
    sc = _scenario()
    sc["steps"][1]["loc"] = [40]  # a draft token written past the request's allocation
    out = X.run(sc, "torch_ref", ON)
    rows = [r for r in out["rows"] if r[7] & WSLOT]
    assert [(r[1], r[2], r[3], r[6]) for r in rows] == [(40, 6, 7, 17)]
    assert out["canary_buf"][40][:2] == [7, 6]  # the record is stored as without the extension
    assert out["canary_buf"] == X.run(sc, "torch_ref", None)["canary_buf"]


def test_padding_tokens_and_draft_layouts_are_not_reported() -> None:
    sc = _scenario(offset=1)  # an EAGLE draft pool: the slot still follows the position
    sc["steps"][1].update(extend=[2, 0], ids=[7, 8], pos=[6, 7], loc=[17, -1])  # the second token is padding
    assert _rows(sc) == []


@pytest.mark.parametrize("shape", [(0, 4), (3, 0)])
def test_write_slot_check_refuses_an_empty_table(shape: tuple[int, int]) -> None:
    """A table without rows or columns holds no slot: refused before any backend runs (row 0 always exists)."""
    with pytest.raises(kc.ContractError, match=r"req_to_token must have at least one row and one column"):
        kc.launch_canary_write_kernel(
            context=calls.context(), plan=calls.write_plan(),
            input_ids=torch.zeros(2, dtype=torch.int64), positions=torch.zeros(2, dtype=torch.int64),
            out_cache_loc=torch.zeros(2, dtype=torch.int64), enable_write_input_assert=False,
            expected_input_tokens=None, expected_input_positions=None, extensions=ON,
            req_pool_indices=torch.zeros(1, dtype=torch.int64), req_to_token=torch.zeros(shape, dtype=torch.int32))


def test_write_slot_check_needs_the_table() -> None:
    with pytest.raises(kc.ContractError, match="req_pool_indices and req_to_token"):
        kc.launch_canary_write_kernel(
            context=calls.context(), plan=calls.write_plan(),
            input_ids=torch.zeros(2, dtype=torch.int64), positions=torch.zeros(2, dtype=torch.int64),
            out_cache_loc=torch.zeros(2, dtype=torch.int64), enable_write_input_assert=False,
            expected_input_tokens=None, expected_input_positions=None, extensions=ON)


def test_a_non_bool_flag_is_a_contract_error() -> None:
    bad = Extensions(zero_slot_in_live_range=1)  # type: ignore[arg-type]
    with pytest.raises(kc.ContractError, match="zero_slot_in_live_range"):
        kc.launch_canary_verify_kernel(context=calls.context(), plan=calls.verify_plan(),
                                       check_verify_expected_token=False, extensions=bad)


# -- the write-time owner check, hand-built ----------------------------------------------------------------------
def _owned(**over: Any) -> X.Scenario:
    """:func:`_scenario` with owner maps: row 1 holds slots 11..17 in both steps, slot 40 is free."""
    sc = _scenario(**over)
    owner = [-1] * X.NUM_SLOTS
    for s in range(11, 18):
        owner[s] = 1
    sc["owner"] = [list(owner), list(owner)]
    return sc


def test_owner_check_is_silent_when_the_writer_holds_the_slot() -> None:
    sc = _owned()
    assert _rows(sc, ALL) == []
    sc["owner"][1][11:17] = [-2] * 6  # the prefill's slots handed to the prefix cache: read, not written
    assert _rows(sc, ALL) == []


@pytest.mark.parametrize("holder", [3, -1, -2, -7])
def test_owner_check_names_the_writer_and_the_holder(holder: int) -> None:
    """Another request's row (double allocation), free (-1: written after it was freed) or read-only (the
    prefix cache): one row at the write, the writer in expected_token, the holder in expected_aux."""
    sc = _owned()
    sc["owner"][1][17] = holder
    out = X.run(sc, "torch_ref", OWN)
    chain = X.run(_owned(), "torch_ref", None)["canary_buf"][17][2]  # the hash slot 17's record stores
    tag = int(kc.CanaryLaunchTag.TAIL_K_FULL)
    assert out["rows"] == [[tag, 17, 6, 7, 1, chain, holder, WOWN]]
    assert out["canary_buf"] == X.run(sc, "torch_ref", None)["canary_buf"]  # the record is still written


def test_owner_check_reports_a_misdirected_write_at_the_slot_written() -> None:
    sc = _owned()
    sc["steps"][1]["loc"] = [40]  # written past the allocation, into a free slot
    rows = [r for r in _rows(sc, ALL) if r[7] & WOWN]
    assert [(r[1], r[2], r[4], r[6]) for r in rows] == [(40, 6, 1, -1)]
    assert sorted(r[7] for r in _rows(sc, ALL)) == [WSLOT, WOWN]  # the write-slot check's row beside it


def test_owner_check_skips_padding_tokens_and_an_swa_group_uses_canary_slots() -> None:
    sc = _owned()
    sc["steps"][1].update(extend=[2, 0], ids=[7, 8], pos=[6, 7], loc=[17, -1])
    assert _rows(sc, OWN) == []
    lut = [0] + [(s * 7) % (X.NUM_SLOTS - 1) + 1 for s in range(X.NUM_SLOTS - 1)]  # one-to-one onto 1..95
    swa = _owned(lut=lut)
    owner = [-1] * X.NUM_SLOTS
    for s in range(11, 18):
        owner[lut[s]] = 1
    swa["owner"] = [list(owner), list(owner)]
    assert _rows(swa, OWN) == []
    swa["owner"][1][lut[17]] = 2
    assert [(r[0], r[1], r[4], r[6]) for r in _rows(swa, OWN)] == [
        (int(kc.CanaryLaunchTag.TAIL_K_SWA), lut[17], 1, 2)]


def test_owner_check_skips_the_padding_row_rows_past_the_batch_and_slots_past_the_buffer() -> None:
    """Direct write: request row 0 writes as pool row 0 (the padding row), row 1 as pool row 2, row 2 has no
    entry in req_pool_indices; every slot is free, and row 1's second token is past the buffer."""
    ctx = calls.context(num_slots=16, ring=8, sources=0)
    plan = calls.write_plan(cap=4)
    plan.write_offsets[:4] = torch.tensor([0, 2, 4, 6])
    plan.write_seed_slot_indices[:3] = -1
    plan.write_num_valid_reqs[0] = 3
    kc.launch_canary_write_kernel(
        context=ctx, plan=plan, input_ids=torch.arange(6), positions=torch.tensor([0, 1, 0, 1, 0, 1]),
        out_cache_loc=torch.tensor([1, 2, 3, 20, 5, 6]), enable_write_input_assert=False,
        expected_input_tokens=None, expected_input_positions=None, req_pool_indices=torch.tensor([0, 2]),
        slot_owner=torch.full((16,), -1, dtype=torch.int64), extensions=OWN, backend="torch_ref")
    rows = ctx.violation_ring[: int(ctx.violation_write_index[0])].tolist()
    assert sorted((r[1], r[4], r[6], r[7]) for r in rows) == [(3, 2, -1, WOWN), (20, 3, 1, OOB)]


def test_owner_check_needs_the_rows_and_the_map() -> None:
    kw: dict[str, Any] = dict(
        context=calls.context(), plan=calls.write_plan(), input_ids=torch.zeros(2, dtype=torch.int64),
        positions=torch.zeros(2, dtype=torch.int64), out_cache_loc=torch.zeros(2, dtype=torch.int64),
        enable_write_input_assert=False, expected_input_tokens=None, expected_input_positions=None, extensions=OWN)
    rpi = torch.zeros(1, dtype=torch.int64)
    slots = kw["context"].canary_buf.shape[0]
    with pytest.raises(kc.ContractError, match="req_pool_indices and slot_owner"):
        kc.launch_canary_write_kernel(**kw, req_pool_indices=rpi)
    with pytest.raises(kc.ContractError, match="req_pool_indices and slot_owner"):
        kc.launch_canary_write_kernel(**kw, slot_owner=torch.zeros(slots, dtype=torch.int64))
    with pytest.raises(kc.ContractError, match=rf"slot_owner must hold one entry per canary slot \({slots}\), got 3"):
        kc.launch_canary_write_kernel(**kw, req_pool_indices=rpi, slot_owner=torch.zeros(3, dtype=torch.int64))
    with pytest.raises(kc.ContractError, match=r"slot_owner must have dtype torch\.int64"):
        kc.launch_canary_write_kernel(**kw, req_pool_indices=rpi, slot_owner=torch.zeros(slots, dtype=torch.int32))


# -- hostile calls: the parity fuzzers' scenarios with every extension on ----------------------------------------
@pytest.mark.parametrize("backend", ["triton", pytest.param("cuda_emu", marks=pytest.mark.skipif(
    _emu.compiler() is None, reason="no C++ compiler"))])
@pytest.mark.parametrize("op", [Op.PLAN, Op.PLAN_ENTRIES, Op.VERIFY, Op.WRITE], ids=lambda o: o.value)
def test_hostile_calls_with_every_extension_on_match_torch_ref(backend: str, op: Op) -> None:
    seed = random.randrange(2**31)
    rng = random.Random(seed)
    for i in range(6):
        call = X.with_extensions(GENERATORS[op](rng, hostile=True), rng)
        assert check_call(call, "cpu", backend) == [], f"{op.value} call {i} of random.Random({seed})"
