"""A decode step (scatter -> plan -> HEAD verify/write -> TAIL verify/write) captured once in a CUDA graph and
replayed 100 times, inputs refilled in place before each replay, equals the same steps launched eagerly, and
both equal torch_ref on the CPU, step by step (rows of one step as a multiset: their order is not fixed).

Faults are injected between steps (a flipped canary bit, a flipped KV byte, a redirected req_to_token entry),
so the ring fills through the graph too.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any

import pytest
import torch

import kvcanary as kc
from tests.backends.cuda import _support

_SKIP = _support.cuda_skip_reason()
pytestmark = [pytest.mark.gpu, pytest.mark.skipif(_SKIP is not None, reason=f"cuda backend unavailable: {_SKIP}")]

STEPS = 100
BS = 8  # the last row is CUDA-graph padding (req_pool_indices == 0)
NUM_SLOTS = 4096
MAX_SEQ = 200
NBPT = 64
RING = 4096


@dataclass
class Script:
    """Every step's inputs, decided up front on the host (identical for the three runs)."""

    prefill: list[int]  # prompt length per request
    slots: torch.Tensor  # [BS, MAX_SEQ] slot of each position
    tokens: torch.Tensor  # [BS, MAX_SEQ] token of each position
    kv: torch.Tensor  # [NUM_SLOTS, NBPT] bytes the "forward" writes for each slot
    faults: dict[int, tuple[str, int, int]]  # step -> (kind, request, position)


def make_script(seed: int) -> Script:
    rng = random.Random(seed)
    g = torch.Generator().manual_seed(seed)
    perm = torch.randperm(NUM_SLOTS - 1, generator=g) + 1
    slots = perm[: BS * MAX_SEQ].view(BS, MAX_SEQ).clone()
    tokens = torch.randint(0, 50000, (BS, MAX_SEQ), generator=g)
    kv = torch.randint(0, 256, (NUM_SLOTS, NBPT), dtype=torch.uint8, generator=g)
    prefill = [rng.randint(3, 40) for _ in range(BS)]
    faults = {30: ("canary", 2, 1), 55: ("kv", 3, 2), 80: ("req_to_token", 4, 5), 90: ("canary", 5, 0)}
    return Script(prefill, slots, tokens, kv, faults)


class World:
    """The engine-side tensors of one run (static: a captured graph keeps their addresses)."""

    def __init__(self, device: str, script: Script) -> None:
        self.device = device
        self.script = script
        z = torch.zeros
        self.head = z(NUM_SLOTS, 32, dtype=torch.uint8, device=device)
        self.tail = z(NUM_SLOTS, 32, dtype=torch.uint8, device=device)
        self.kv = z(NUM_SLOTS, NBPT, dtype=torch.uint8, device=device)
        self.ring = z(RING, 8, dtype=torch.int64, device=device)
        self.widx = z(1, dtype=torch.int32, device=device)
        self.kcount = z(12, dtype=torch.int64, device=device)
        self.scount = z(12, dtype=torch.int64, device=device)
        self.cpa = torch.ones(1, dtype=torch.int32, device=device)
        self.r2t = z(BS + 1, MAX_SEQ, dtype=torch.int32, device=device)
        self.pool = z(BS + 1, MAX_SEQ, dtype=torch.int32, device=device)
        self.vp = kc.VerifyPlan.allocate(verify_capacity=BS * MAX_SEQ, device=device)
        self.wp = kc.WritePlan.allocate(write_req_capacity=BS, device=device)
        self.rpi = z(BS, dtype=torch.int64, device=device)
        self.prefix = z(BS, dtype=torch.int64, device=device)
        self.extend = z(BS, dtype=torch.int64, device=device)
        self.valid = z(BS, dtype=torch.int64, device=device)
        self.ids = z(BS, dtype=torch.int64, device=device)
        self.pos = z(BS, dtype=torch.int64, device=device)
        self.loc = z(BS, dtype=torch.int64, device=device)
        self.flat = z(BS * MAX_SEQ, dtype=torch.int64, device=device)
        self.flat_off = z(BS + 1, dtype=torch.int64, device=device)
        src = kc.RealKvSource(tensor=self.kv, page_size=1, num_bytes_per_token=NBPT, read_bytes=NBPT)

        def ctx(buf: torch.Tensor, tag: kc.CanaryLaunchTag, sources: tuple[kc.RealKvSource, ...],
                mode: kc.RealKvHashMode) -> kc.VerifyOrWriteContext:
            return kc.VerifyOrWriteContext(
                canary_buf=buf, kernel_kind=tag, violation_ring=self.ring, violation_write_index=self.widx,
                slot_run_counter=self.scount[int(tag): int(tag) + 1],
                kernel_run_counter=self.kcount[int(tag): int(tag) + 1], real_kv_sources=sources,
                real_kv_hash_mode=mode, enable_chain_position_assert=self.cpa)

        self.head_ctx = ctx(self.head, kc.CanaryLaunchTag.HEAD_K_FULL, (), kc.RealKvHashMode.PARTIAL)
        self.tail_ctx = ctx(self.tail, kc.CanaryLaunchTag.TAIL_K_FULL, (src,), kc.RealKvHashMode.PARTIAL)

    # -- inputs, refilled in place -----------------------------------------------------------------------------
    def lengths(self, step: int) -> list[int]:
        return [p + step for p in self.script.prefill]

    def refill(self, step: int) -> None:
        """Decode step ``step``: request r writes its position prefill[r] + step (the last row is padding)."""
        s = self.script
        lens = self.lengths(step)
        rows = [r + 1 if r < BS - 1 else 0 for r in range(BS)]
        dev = self.device
        for r in range(BS - 1):
            self.r2t[r + 1, : lens[r] + 1] = s.slots[r, : lens[r] + 1].to(torch.int32).to(dev)
        self.rpi.copy_(torch.tensor(rows))
        self.prefix.copy_(torch.tensor([lens[r] if r < BS - 1 else 0 for r in range(BS)]))
        self.extend.copy_(torch.tensor([1 if r < BS - 1 else 0 for r in range(BS)]))
        self.valid.copy_(torch.tensor([lens[r] + 1 if r < BS - 1 else 0 for r in range(BS)]))
        self.ids.copy_(torch.tensor([int(s.tokens[r, lens[r]]) if r < BS - 1 else 0 for r in range(BS)]))
        self.pos.copy_(torch.tensor([lens[r] if r < BS - 1 else 0 for r in range(BS)]))
        self.loc.copy_(torch.tensor([int(s.slots[r, lens[r]]) if r < BS - 1 else -1 for r in range(BS)]))
        flat = torch.cat([s.tokens[r, : lens[r] + 1] for r in range(BS - 1)])
        self.flat[: flat.shape[0]] = flat.to(dev)
        offs = [0]
        for r in range(BS - 1):
            offs.append(offs[-1] + lens[r] + 1)
        offs.append(offs[-1])
        self.flat_off.copy_(torch.tensor(offs))
        # the forward pass writes this step's KV
        new = torch.tensor([int(s.slots[r, lens[r]]) for r in range(BS - 1)])
        self.kv[new.to(dev)] = s.kv[new].to(dev)

    def inject(self, step: int) -> None:
        fault = self.script.faults.get(step)
        if fault is None:
            return
        kind, r, p = fault
        slot = int(self.script.slots[r, p])
        if kind == "canary":
            self.head[slot, 8] ^= 0x04  # the position field's bit 2
        elif kind == "kv":
            self.kv[slot, 0] ^= 0xFF
        else:
            self.script.slots[r, p] = self.script.slots[r + 1, 0]  # point at another request's live slot

    def prefill_eagerly(self, backend: str) -> None:
        """Step -1: every prompt written at once (not captured: its shape differs from a decode step's)."""
        s = self.script
        dev = self.device
        lens = s.prefill
        for r in range(BS - 1):
            self.r2t[r + 1, : lens[r]] = s.slots[r, : lens[r]].to(torch.int32).to(dev)
        ids = torch.cat([s.tokens[r, : lens[r]] for r in range(BS - 1)]).to(dev)
        pos = torch.cat([torch.arange(lens[r]) for r in range(BS - 1)]).to(dev)
        loc = torch.cat([s.slots[r, : lens[r]] for r in range(BS - 1)])
        self.kv[loc.to(dev)] = s.kv[loc].to(dev)
        offs = [0]
        for r in range(BS - 1):
            offs.append(offs[-1] + lens[r])
        wp = kc.WritePlan(write_offsets=torch.tensor([*offs, offs[-1]], device=dev),
                          write_seed_slot_indices=torch.full((BS,), -1, dtype=torch.int64, device=dev),
                          write_num_valid_reqs=torch.tensor([BS], dtype=torch.int32, device=dev))
        for c in (self.head_ctx, self.tail_ctx):
            kc.launch_canary_write_kernel(context=c, plan=wp, input_ids=ids, positions=pos, out_cache_loc=loc.to(dev),
                                          enable_write_input_assert=False, expected_input_tokens=None,
                                          expected_input_positions=None, backend=backend)

    def step(self, backend: str) -> None:
        """The captured part of a decode step."""
        kc.launch_scatter_req_token_ids_kernel(flat_in=self.flat, offsets=self.flat_off, req_pool_indices=self.rpi,
                                               pool_out=self.pool, backend=backend)
        kc.launch_canary_plan_kernels(
            verify_plan_out=self.vp, write_plan_out=self.wp, req_pool_indices=self.rpi, prefix_lens=self.prefix,
            extend_seq_lens=self.extend, req_to_token=self.r2t, swa_window_size=0, full_to_swa_index_mapping=None,
            verify_capacity=self.vp.verify_capacity, req_to_verify_expected_tokens=self.pool,
            req_to_verify_expected_tokens_valid_lens=self.valid, kv_token_id_vs_position_offset=0, backend=backend)
        for c, check in ((self.head_ctx, True), (self.tail_ctx, False)):
            kc.launch_canary_verify_kernel(context=c, plan=self.vp, check_verify_expected_token=check, backend=backend)
            kc.launch_canary_write_kernel(context=c, plan=self.wp, input_ids=self.ids, positions=self.pos,
                                          out_cache_loc=self.loc, enable_write_input_assert=False,
                                          expected_input_tokens=None, expected_input_positions=None, backend=backend)

    def snapshot(self) -> dict[str, torch.Tensor]:
        t = {"head": self.head, "tail": self.tail, "violation_ring": self.ring, "violation_write_index": self.widx,
             "kernel_run_counters": self.kcount, "slot_run_counters": self.scount, "pool": self.pool,
             "write_offsets": self.wp.write_offsets, "seeds": self.wp.write_seed_slot_indices,
             "num_valid": self.vp.verify_num_valid, "enable": self.vp.enable}
        n = BS * MAX_SEQ
        t.update({"slots": self.vp.verify_slot_indices[:n], "prevs": self.vp.verify_prev_slot_indices[:n]})
        return {k: v.detach().cpu().clone() for k, v in t.items()}


def _run(world: World, backend: str, graph: torch.cuda.CUDAGraph | None) -> list[dict[str, torch.Tensor]]:
    out = []
    for step in range(STEPS):
        world.inject(step)
        world.refill(step)
        if graph is None:
            world.step(backend)
        else:
            graph.replay()
        out.append(world.snapshot())
    return out


def _compare(got: list[dict[str, Any]], want: list[dict[str, Any]]) -> list[str]:
    """Step by step (verify entries only up to num_valid: past it the plans hold allocation garbage)."""
    def trim(states: list[dict[str, Any]]) -> list[dict[str, Any]]:
        out = []
        for st, ref in zip(states, want, strict=True):
            n = int(ref["num_valid"][0])
            out.append({**st, "slots": st["slots"][:n], "prevs": st["prevs"][:n]})
        return out

    return _support.compare_steps(trim(got), trim(want))


@pytest.mark.slow
def test_graph_replay_equals_eager_equals_reference() -> None:
    seed = _support.fuzz_seed()
    # reference: torch_ref on the CPU
    ref_world = World("cpu", make_script(seed))
    ref_world.prefill_eagerly("torch_ref")
    ref = _run(ref_world, "torch_ref", None)
    assert int(ref[-1]["violation_write_index"][0]) > 0, "the injected faults must show"

    eager_world = World("cuda", make_script(seed))
    eager_world.prefill_eagerly("cuda")
    eager = _run(eager_world, "cuda", None)

    graph_world = World("cuda", make_script(seed))
    graph_world.prefill_eagerly("cuda")
    # warm up on a throwaway world (first launches compile and load), then capture the real one's step
    warm = World("cuda", make_script(seed))
    warm.refill(0)
    side = torch.cuda.Stream()  # type: ignore[no-untyped-call]
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        warm.step("cuda")
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        graph_world.step("cuda")
    replayed = _run(graph_world, "cuda", graph)

    assert _compare(eager, ref) == [], f"eager vs torch_ref (KVCANARY_FUZZ_SEED={seed})"
    assert _compare(replayed, ref) == [], f"graph vs torch_ref (KVCANARY_FUZZ_SEED={seed})"
    assert _compare(replayed, eager) == [], f"graph vs eager (KVCANARY_FUZZ_SEED={seed})"
