"""The cuda backend on a GPU, through the public launchers, against torch_ref on the CPU, byte for byte.

Golden vectors (pipelines and the quirks kvcanary keeps included), fresh random scenarios every run (realistic
and hostile; ``KVCANARY_FUZZ_SEED`` replays one, ``KVCANARY_FUZZ_COUNT`` scales them), larger calls (many
grid-stride rounds, long requests, long plan rows), contract errors, stream ordering, and no host sync.
Skipped cleanly without CUDA or cuda.core.
"""

from __future__ import annotations

import random
from collections.abc import Callable

import pytest
import torch

import kvcanary as kc
from kvcanary.registry import Op
from kvcanary.testing.builders import Call
from kvcanary.testing.parity import check_call, compare_outputs, run_call
from kvcanary_backends.cuda import preload
from tests.backends.cuda import _support
from tests.golden import loader as g
from tools.scenarios import GENERATORS, fuzz, large_plan_call, large_scatter_call

_SKIP = _support.cuda_skip_reason()
pytestmark = [pytest.mark.gpu, pytest.mark.skipif(_SKIP is not None, reason=f"cuda backend unavailable: {_SKIP}")]
DEV = "cuda"
BACKEND = "cuda"

CASES = _support.golden_cases()


@pytest.mark.parametrize(("file", "case"), CASES, ids=[c.name for _, c in CASES])
def test_golden_case(file: str, case: g.Case) -> None:
    assert _support.check_golden(case, DEV, BACKEND) == []


PIPELINES = g.load("pipeline_cases")


@pytest.mark.parametrize("case", PIPELINES, ids=[c.name for c in PIPELINES])
def test_golden_pipeline(case: g.Case) -> None:
    assert _support.check_pipeline(case, DEV, BACKEND) == []


ERRORS = _support.error_cases()


@pytest.mark.parametrize("case", ERRORS, ids=[c.name for c in ERRORS])
def test_contract_errors_raise_before_anything_runs(case: g.Case) -> None:
    run = {"plan": g.run_plan, "write": g.run_write, "verify": g.run_verify}[case.kind]
    with pytest.raises(kc.ContractError) as info:
        run(case, DEV, BACKEND)
    assert str(info.value).splitlines()[0] == case.outputs["error"]["message"]


def test_swa_slot_beyond_the_lut_matches_the_reference() -> None:
    """The reference raises here; kvcanary plans INVALID_SLOT on every backend."""
    case = next(c for c in g.load("plan_errors_and_quirks") if c.name == "plan_quirk_swa_lut_out_of_range_raises")
    got = {k: v.cpu() for k, v in g.run_plan(case, DEV, BACKEND).items()}
    want = g.run_plan(case, "cpu", "torch_ref")
    assert compare_outputs(got, want) == []


@pytest.mark.parametrize("hostile", [False, True], ids=["realistic", "hostile"])
@pytest.mark.parametrize("op", list(GENERATORS), ids=lambda o: o.value)
def test_random_scenarios(op: Op, hostile: bool) -> None:
    seed = _support.fuzz_seed()
    failures = fuzz(op, DEV, BACKEND, seed=seed, count=_support.fuzz_count(150), hostile=hostile)
    assert not failures, f"replay with KVCANARY_FUZZ_SEED={seed}\n" + "\n".join(failures[:20])


S = _support
MID_WARP = S.ROWS_ENDING_MID_WARP
LARGER: dict[str, Callable[[], Call]] = {  # built lazily: collection stays cheap without a GPU
    "verify 300k NONE": lambda: S.large_verify(11, chains=2000, length=150, sources=0, mode=0, check=True),
    "verify 120k PARTIAL x2": lambda: S.large_verify(12, chains=1000, length=120, sources=2, mode=1, check=False),
    "verify 50k ALL x4": lambda: S.large_verify(13, chains=500, length=100, sources=4, mode=2, check=True),
    "write 64 x 3000": lambda: S.large_write(14, requests=64, length=3000, sources=0, mode=0, assert_inputs=True),
    "write 48 x 2000 ALL x2": lambda: S.large_write(15, requests=48, length=2000, sources=2, mode=2,
                                                    assert_inputs=False),
    "write 300 x 40 PARTIAL": lambda: S.large_write(16, requests=300, length=40, sources=1, mode=1,
                                                    assert_inputs=True),
    "plan 256 x 4096": lambda: large_plan_call(17, bs=256, max_prefix=4096),
    "plan 256 x 2048 SWA+pool": lambda: large_plan_call(18, bs=256, max_prefix=2048, lut=True, pool=True, window=700),
    "plan 4096 x 64 pool": lambda: large_plan_call(19, bs=4096, max_prefix=64, pool=True),
    "plan 1000 x 1000": lambda: large_plan_call(23, bs=1000, max_prefix=1000),
    "plan 64 x 9000 past req_to_token": lambda: large_plan_call(20, bs=64, max_prefix=9000, pool=True, cols=8000,
                                                                stray_rows=True),
    "plan 64 x 9000 SWA+LUT": lambda: large_plan_call(21, bs=64, max_prefix=9000, lut=True, window=5000, cols=8500,
                                                      stray_rows=True),
    "plan rows ending mid-warp LUT+pool": lambda: large_plan_call(22, bs=len(MID_WARP), max_prefix=9000, lut=True,
                                                                  pool=True, prefixes=MID_WARP, slack=600),
    "scatter 512 x 4096": lambda: large_scatter_call(20, bs=512, rows=600, cols=4096),
    "scatter 3 x 40000": lambda: large_scatter_call(21, bs=3, rows=2, cols=40000),
}


@pytest.mark.slow
@pytest.mark.parametrize("name", list(LARGER))
def test_larger_calls(name: str) -> None:
    assert check_call(LARGER[name](), DEV, BACKEND) == []


def test_every_specialization_loads_and_reports_its_resources() -> None:
    from kvcanary_backends.cuda._specs import KEYS
    from kvcanary_backends.cuda._toolchain import loaded

    assert preload(DEV) == sum(len(k) for _, k in KEYS.values())
    kernels = loaded()
    assert kernels and all(k.max_blocks >= torch.cuda.get_device_properties(0).multi_processor_count for k in kernels)
    for k in kernels:
        print(f"{k.label}: {k.num_regs} registers, {k.local_bytes} B local, {k.max_blocks} resident blocks")


def test_launches_follow_the_current_stream_and_never_sync() -> None:
    """A write on a side stream right after the side stream fills its inputs; no torch op syncs either."""
    rng = random.Random(5)
    call = _support.large_write(rng.randrange(10**6), requests=8, length=300, sources=1, mode=1, assert_inputs=True)
    want = run_call(call, "cpu", "torch_ref")
    side = torch.cuda.Stream()  # type: ignore[no-untyped-call]
    kw = call.make(DEV)
    torch.cuda.synchronize()
    with torch.cuda.stream(side):
        ids = kw["input_ids"]
        saved = ids.clone()
        ids.fill_(-12345)  # a long queue of work on the side stream, then the real inputs
        for _ in range(20):
            ids.add_(0)
        ids.copy_(saved)
        torch.cuda.set_sync_debug_mode("error")
        try:
            kc.launch_canary_write_kernel(**kw, backend=BACKEND)
        finally:
            torch.cuda.set_sync_debug_mode("default")
    side.synchronize()
    got = {k: v.cpu() for k, v in call.outputs(kw).items()}
    assert compare_outputs(got, want, base=0) == []
