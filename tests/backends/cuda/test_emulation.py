"""The cuda backend's kernel sources run on the CPU (host emulation) against torch_ref: CI parity without a GPU.

The emulation runs the very kernel code (every CUDA thread a host thread, barriers and warp shuffles
emulated, a 3-block "GPU" so grid-stride loops take several rounds) through the backend's own packing and
launch shapes; only the memory system and the timing are the CPU's.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest

from kvcanary.registry import REGISTRY, Op, register_backend
from kvcanary.testing.builders import Call
from kvcanary.testing.parity import check_call
from tests.backends.cuda import _emu, _support
from tests.golden import loader as g
from tools.scenarios import GENERATORS, fuzz, large_plan_call, large_scatter_call, large_write_call

pytestmark = pytest.mark.skipif(_emu.compiler() is None, reason="no C++ compiler (g++) for the host emulation")
EMU = "cuda_emu"


@pytest.fixture(scope="module", autouse=True)
def _emulated_backend() -> Iterator[None]:
    register_backend(_emu.BACKEND, replace=True)
    yield
    REGISTRY.unregister(EMU)


CASES = _support.golden_cases()


@pytest.mark.parametrize(("file", "case"), CASES, ids=[c.name for _, c in CASES])
def test_golden_case(file: str, case: g.Case) -> None:
    assert _support.check_golden(case, "cpu", EMU) == []


PIPELINES = g.load("pipeline_cases")


@pytest.mark.parametrize("case", PIPELINES, ids=[c.name for c in PIPELINES])
def test_golden_pipeline(case: g.Case) -> None:
    assert _support.check_pipeline(case, "cpu", EMU) == []


@pytest.mark.parametrize("hostile", [False, True], ids=["realistic", "hostile"])
@pytest.mark.parametrize("op", list(GENERATORS), ids=lambda o: o.value)
def test_random_scenarios(op: Op, hostile: bool) -> None:
    seed = _support.fuzz_seed()
    failures = fuzz(op, "cpu", EMU, seed=seed, count=_support.fuzz_count(25), hostile=hostile)
    assert not failures, f"replay with KVCANARY_FUZZ_SEED={seed}\n" + "\n".join(failures)


@pytest.mark.parametrize(("op", "seed", "count"), [(Op.VERIFY, 3139321740, 4)], ids=["verify-ring-overflow"])
def test_recorded_seeds(op: Op, seed: int, count: int) -> None:
    """Seeds that once failed: a verify whose rows overflowed the ring with the scenario predicting none."""
    assert fuzz(op, "cpu", EMU, seed=seed, count=count, hostile=False) == []


S = _support
MID_WARP = S.ROWS_ENDING_MID_WARP
LARGER: dict[str, Callable[[], Call]] = {
    "verify PARTIAL x2": lambda: S.large_verify(1, chains=40, length=60, sources=2, mode=1, check=True),
    "verify ALL x4": lambda: S.large_verify(2, chains=24, length=50, sources=4, mode=2, check=False),
    "write ALL x2 assert": lambda: S.large_write(3, requests=6, length=200, sources=2, mode=2, assert_inputs=True),
    "write NONE": lambda: S.large_write(4, requests=5, length=150, sources=0, mode=0, assert_inputs=False),
    # decode-shaped folds: the slot at the guessed flat index r is request r's (every guess right), then requests
    # of 0 or 1 tokens (guesses wrong from the first empty request on, some past the token count)
    "write decode PARTIAL x2": lambda: large_write_call(16, requests=9, length=1, sources=2, mode=1),
    "write 0-1 tokens PARTIAL x2": lambda: S.large_write(17, requests=40, length=1, sources=2, mode=1,
                                                         assert_inputs=False),
    "plan LUT+pool": lambda: large_plan_call(5, bs=40, max_prefix=300, lut=True, pool=True),
    "plan SWA+pool": lambda: large_plan_call(6, bs=30, max_prefix=200, pool=True, window=50),
    # rows of several whole tiles (the tile path without per-entry checks, for tiles of up to 4096 entries)
    # beside rows running past req_to_token
    "plan long rows": lambda: large_plan_call(8, bs=6, max_prefix=10000, cols=9000, stray_rows=True),
    "plan long rows SWA+LUT+pool": lambda: large_plan_call(9, bs=6, max_prefix=10000, lut=True, pool=True,
                                                           window=8500, cols=9800, stray_rows=True),
    "plan rows ending mid-warp": lambda: large_plan_call(12, bs=len(MID_WARP), max_prefix=9000, prefixes=MID_WARP,
                                                         slack=600),
    "plan rows ending mid-warp LUT+pool": lambda: large_plan_call(13, bs=len(MID_WARP), max_prefix=9000, lut=True,
                                                                  pool=True, prefixes=MID_WARP, slack=600),
    # several rows per scanning thread (bs > the 256 threads of a block)
    "plan 700 rows pool": lambda: large_plan_call(14, bs=700, max_prefix=40, pool=True),
    "plan 1024 rows SWA+LUT": lambda: large_plan_call(15, bs=1024, max_prefix=30, lut=True, window=9),
    "scatter": lambda: large_scatter_call(7, bs=30, rows=20, cols=500),
}


@pytest.mark.parametrize("name", list(LARGER))
def test_larger_calls(name: str) -> None:
    assert check_call(LARGER[name](), "cpu", EMU) == []


@pytest.mark.parametrize("blocks", [2, 5, 17])
def test_plan_tile_shares_cover_every_tile_for_any_grid(blocks: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each entry block of the plan takes a contiguous share of the tiles, its first row found by the scan and
    later rows by a search from there: any grid size covers every tile once (rows without entries between
    rows of many tiles, rows past req_to_token and the pool)."""
    monkeypatch.setattr(_emu, "MAX_BLOCKS", blocks)
    for call in (large_plan_call(10, bs=50, max_prefix=9000, pool=True, cols=8800, stray_rows=True),
                 large_plan_call(11, bs=40, max_prefix=300, lut=True)):
        assert check_call(call, "cpu", EMU) == []


@pytest.mark.parametrize("blocks", [1, 2, 3])
def test_scatter_shares_of_several_rounds_cover_every_column(blocks: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """With fewer blocks per request than its columns need (a large batch), each block takes several rounds
    of loads, the next round's issued after the stores of the last: every column still written once, by the
    last request naming its row that covers it."""
    from kvcanary_backends.cuda import scatter

    monkeypatch.setattr(scatter, "split", lambda bs, cols, num_tokens: blocks)
    assert check_call(large_scatter_call(16, bs=12, rows=5, cols=2900), "cpu", EMU) == []


def test_decode_steps_of_the_graph_test_match_the_reference() -> None:
    """The 100-step decode script of test_gpu_graph (scatter, plan, HEAD and TAIL verify/write; faults) runs
    eagerly on the emulated kernels exactly as on torch_ref (the GPU test adds graph capture and replay)."""
    from tests.backends.cuda import test_gpu_graph as t

    seed = _support.fuzz_seed()
    ref_world = t.World("cpu", t.make_script(seed))
    ref_world.prefill_eagerly("torch_ref")
    ref = t._run(ref_world, "torch_ref", None)
    emu_world = t.World("cpu", t.make_script(seed))
    emu_world.prefill_eagerly(EMU)
    emu = t._run(emu_world, EMU, None)
    assert int(ref[-1]["violation_write_index"][0]) > 0
    assert t._compare(emu, ref) == [], f"KVCANARY_FUZZ_SEED={seed}"


_ASAN_SCRIPT = """
from kvcanary.registry import Op, register_backend
from tests.golden import loader as g
from tools.scenarios import fuzz
from tools.scenarios import GENERATORS
from tests.backends.cuda import _emu, _support as s
register_backend(_emu.BACKEND, replace=True)
bad = [p for _, c in s.golden_cases() for p in s.check_golden(c, "cpu", "cuda_emu")]
bad += [p for c in g.load("pipeline_cases") for p in s.check_pipeline(c, "cpu", "cuda_emu")]
seed = %d
for op in GENERATORS:
    bad += fuzz(op, "cpu", "cuda_emu", seed=seed, count=12, hostile=True)
import random
from kvcanary.testing.parity import check_call
from tests.backends.test_extensions import _with_extensions
rng = random.Random(seed)
for op in (Op.PLAN, Op.PLAN_ENTRIES, Op.VERIFY, Op.WRITE):
    for _ in range(8):
        bad += check_call(_with_extensions(GENERATORS[op](rng, hostile=True), rng), "cpu", "cuda_emu")
assert not bad, bad[:5]
print("asan-clean")
"""


@pytest.mark.slow
@pytest.mark.skipif(__import__("os").environ.get("KVCANARY_RUN_ASAN") != "1",
                    reason="set KVCANARY_RUN_ASAN=1 (several minutes)")
def test_emulated_kernels_stay_in_bounds_under_address_sanitizer() -> None:
    """Golden, pipeline and hostile calls (also with every extension check on) with the emulation built under
    AddressSanitizer (libasan preloaded): torch's CPU tensors get redzones, so any out-of-bounds access of a
    kernel aborts the run."""
    import os
    import subprocess
    import sys

    cxx = _emu.compiler()
    assert cxx is not None
    libasan = subprocess.run([cxx, "-print-file-name=libasan.so"], capture_output=True, text=True,
                             check=True).stdout.strip()
    env = dict(os.environ, LD_PRELOAD=libasan, ASAN_OPTIONS="detect_leaks=0:alloc_dealloc_mismatch=0",
               KVCANARY_EMU_ASAN="1")
    res = subprocess.run([sys.executable, "-c", _ASAN_SCRIPT % _support.fuzz_seed()], env=env, capture_output=True,
                         text=True, check=False, timeout=1800)
    assert res.returncode == 0 and "asan-clean" in res.stdout, res.stderr[-4000:]
