"""Two processes on one GPU: the transfer and the TP digest with CUDA tensors over gloo (staged through
host memory; NCCL needs one device per rank). Skipped without CUDA."""

from __future__ import annotations

import random

import pytest
import torch

from kvcanary.consts import FailReason
from kvcanary.distributed import DigestAccumulator, fold_records, spawn_group
from tests.distributed.world import CASES, pd_run, tp_run

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")]


def test_transfer_between_two_processes_on_one_gpu() -> None:
    found = spawn_group(pd_run, 2, random.randrange(1 << 30), "gloo", "cuda:0", timeout_s=180)[1]
    assert found["clean"] == []
    for case in CASES[1:]:
        assert [e for e in found[case] if e[0] != "after_decode"], case
    assert {b for _, _, b in found["flip_kv"]} == {int(FailReason.VERIFY_REAL_KV_HASH_MISMATCH)}


def test_tensor_parallel_digest_on_one_gpu() -> None:
    bad_step = random.randrange(1, 6)
    views = spawn_group(tp_run, 2, random.randrange(1 << 30), [(None, 0), (1, bad_step)], "cuda:0",
                        timeout_s=180)
    for clean, bad in views:
        assert clean["clean"]
        assert bad["diverging"] == [1]
        assert bad["divergences"][0][0] == bad_step


def test_the_digest_is_captured_in_a_cuda_graph() -> None:
    """The TP digest runs after the HEAD, inside the forward's graph: capture it, replay it twice."""
    buf = torch.randint(0, 256, (64, 32), dtype=torch.uint8, device="cuda")
    loc = torch.tensor([*random.sample(range(1, 64), 8), 0, -1], device="cuda")
    acc = DigestAccumulator(buf)
    side = torch.cuda.Stream()  # type: ignore[no-untyped-call]
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # warm up outside the capture
        acc.add(loc)
    torch.cuda.current_stream().wait_stream(side)
    acc.acc.zero_()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        acc.add(loc)
    acc.acc.zero_()
    graph.replay()
    graph.replay()
    assert torch.equal(acc.acc, 2 * fold_records(buf, loc))
