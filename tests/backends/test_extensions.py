"""The extension checks (ZERO_SLOT_IN_LIVE_RANGE, WRITE_SLOT_MISMATCH) on every backend.

torch_ref's outputs are the golden vectors (``tests/golden/extensions_cases.json``), whose extension rows are
checked against the checks' definitions derived in plain Python (as are torch_ref's on fresh scenarios); torch_ref,
the Triton interpreter and the CUDA backend's host emulation replay them; fresh random scenarios are
compared across the backends each run; hand-built cases pin the semantics (what fires, what stays silent);
the existing golden vectors still pass with every flag off.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import random
from collections.abc import Iterator
from typing import Any

import pytest
import torch

import kvcanary as kc
from kvcanary.consts import ZERO_SLOT_MARK
from kvcanary.extensions import Extensions
from kvcanary.registry import REGISTRY, Op, register_backend
from kvcanary.testing import calls
from kvcanary.testing.parity import check_call
from tests.backends import _extensions as X
from tests.backends.cuda import _emu
from tests.golden import loader as g
from tools.scenarios import GENERATORS

ON = Extensions(zero_slot_in_live_range=True, write_slot_mismatch=True)
ZERO, WSLOT = int(kc.FailReason.ZERO_SLOT_IN_LIVE_RANGE), int(kc.FailReason.WRITE_SLOT_MISMATCH)
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


def test_golden_vectors_exercise_both_bits_and_off_never_reports_them() -> None:
    on = [c for c in GOLDEN if c["extensions"]]
    off = [c for c in GOLDEN if c["extensions"] is None]
    assert sum(X.bits_count(c["outputs"], ZERO) for c in on) > 0
    assert sum(X.bits_count(c["outputs"], WSLOT) for c in on) > 0
    assert sum(X.bits_count(c["outputs"], ZERO | WSLOT) for c in off) == 0


@pytest.mark.parametrize("backend", ["triton", pytest.param("cuda_emu", marks=pytest.mark.skipif(
    _emu.compiler() is None, reason="no C++ compiler"))])
def test_fresh_random_scenarios_match_torch_ref(backend: str) -> None:
    for seed in random.Random().sample(range(10**6, 10**7), 2):
        sc = X.make(seed)
        for ext in (ON, None):
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


# -- hostile calls: the parity fuzzers' scenarios with every extension on ----------------------------------------
def _with_extensions(call: Any, rng: random.Random) -> Any:
    """``call`` with ``extensions=ON``; a write also gets random (hostile) tables, a verify a few marked slots."""
    seed = rng.getrandbits(32)
    make = call.make

    def made(device: Any) -> dict[str, Any]:
        kw = dict(make(device))
        r = random.Random(seed)
        kw["extensions"] = ON
        if call.op == Op.WRITE:
            rows, cols = r.randint(1, 6), r.randint(1, 24)
            hi = kw["context"].canary_buf.shape[0] + 3
            r2t = [r.choice([0, r.randint(-3, hi)]) for _ in range(rows * cols)]
            kw["req_to_token"] = torch.tensor(r2t, dtype=torch.int32, device=device).reshape(rows, cols)
            kw["req_pool_indices"] = torch.tensor([r.randint(-1, rows) for _ in range(r.randint(0, 6))],
                                                  dtype=torch.int64, device=device)
            if r.random() < 0.5:
                kw["full_to_swa_index_mapping"] = torch.tensor(
                    [r.randint(-2, hi) for _ in range(r.randint(1, hi))], dtype=torch.int64, device=device)
        if call.op == Op.VERIFY:
            slots = kw["plan"].verify_slot_indices
            for _ in range(r.randint(0, 3)):
                if slots.shape[0]:
                    slots[r.randrange(slots.shape[0])] = ZERO_SLOT_MARK
        return kw

    return dataclasses.replace(call, make=made)


@pytest.mark.parametrize("backend", ["triton", pytest.param("cuda_emu", marks=pytest.mark.skipif(
    _emu.compiler() is None, reason="no C++ compiler"))])
@pytest.mark.parametrize("op", [Op.PLAN, Op.PLAN_ENTRIES, Op.VERIFY, Op.WRITE], ids=lambda o: o.value)
def test_hostile_calls_with_every_extension_on_match_torch_ref(backend: str, op: Op) -> None:
    seed = random.randrange(2**31)
    rng = random.Random(seed)
    for i in range(6):
        call = _with_extensions(GENERATORS[op](rng, hostile=True), rng)
        assert check_call(call, "cpu", backend) == [], f"{op.value} call {i} of random.Random({seed})"
