"""Every operation launched through each fast path of compiled variants equals torch_ref (GPU only).

For each operation's random scenarios (``tools.scenarios``, realistic and hostile) every call runs twice on
fresh tensors: the first launch of a variant goes through Triton (which compiles it), the second through the
selected fast path (cuda.core for ``direct``, Triton's compiled launcher otherwise); both must equal torch_ref
on the CPU. The digest fold runs the same way over each buffer word type against the torch-ops fold. The
direct run must have launched through cuda.core, with no variant refused; the other run never.
"""

from __future__ import annotations

import os
import random
import time
import zlib

import pytest
import torch

from kvcanary.registry import Op
from kvcanary.testing.parity import check_call
from tests.backends.triton._support import LAUNCH_PATHS, assert_path_taken, use_launch_path
from tools.scenarios import GENERATORS

pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")]

SEED = int(os.environ.get("KVCANARY_TEST_SEED", time.time_ns() % 2**32))
CASES = 6


@pytest.mark.parametrize("path", LAUNCH_PATHS)
@pytest.mark.parametrize("hostile", [False, True], ids=["realistic", "hostile"])
@pytest.mark.parametrize("op", list(GENERATORS), ids=lambda o: o.value)
def test_every_operation_equals_torch_ref_on_each_path(op: Op, hostile: bool, path: str,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    seen = use_launch_path(path, monkeypatch)
    rng = random.Random(SEED ^ zlib.crc32(f"{op.value}/{hostile}".encode()))
    for i in range(CASES):
        call = GENERATORS[op](rng, hostile=hostile)
        for attempt in ("first", "repeated"):
            problems = check_call(call, "cuda", "triton")
            assert not problems, f"{op.value} call {i} ({call.label}), {attempt} launch, {path}, " \
                                 f"KVCANARY_TEST_SEED={SEED}: {problems}"
    torch.cuda.synchronize()
    assert_path_taken(path, seen)


@pytest.mark.parametrize("path", LAUNCH_PATHS)
def test_the_digest_fold_equals_the_torch_fold_on_each_path(path: str, monkeypatch: pytest.MonkeyPatch) -> None:
    from kvcanary.distributed import fold_records, fold_records_torch

    seen = use_launch_path(path, monkeypatch)
    g = torch.Generator().manual_seed(SEED)
    words = torch.randint(-(1 << 63), (1 << 63) - 1, (64, 6), dtype=torch.int64, generator=g)
    buf = words.view(torch.uint8)[:, :32].cuda()
    slots = torch.randint(-2, 64, (40,), generator=g)
    for dtype in (torch.uint8, torch.int16, torch.int32, torch.int64):
        for slots_dtype in (torch.int64, torch.int32):
            s = slots.to(slots_dtype).cuda()
            want = fold_records_torch(buf.view(dtype), s).tolist()
            for attempt in ("first", "repeated"):
                got = fold_records(buf.view(dtype), s, fused=True).tolist()
                assert got == want, (dtype, slots_dtype, attempt, path, SEED)
    assert_path_taken(path, seen)
