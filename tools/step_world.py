"""A forward step with canaries, small enough to compile: plan, HEAD verify, write, a stand-in forward that
writes K/V, TAIL verify. Used by the ``torch.compile`` tests and the compiled-step benchmark.

:class:`StepWorld` holds every persistent buffer (the K pool, page table, canary records, ring, counters,
plans); :func:`canary_step` is the function a test runs eagerly on one world and compiled on an identical
one, then compares the buffers byte for byte. :meth:`StepWorld.inputs` makes one step's batch (a
:class:`~kvcanary.manager.CanaryBatch`):
a batch of requests, each extending its row by a few tokens, with a decode-shaped or prefill-shaped mix.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

import torch

from kvcanary.consts import CANARY_SLOT_BYTES, NUM_LAUNCH_TAGS, CanaryLaunchTag, RealKvHashMode
from kvcanary.context import VerifyOrWriteContext
from kvcanary.launch.plan import launch_canary_plan_kernels
from kvcanary.launch.verify import launch_canary_verify_kernel
from kvcanary.launch.write import launch_canary_write_kernel
from kvcanary.manager.batch import CanaryBatch
from kvcanary.plans import VerifyPlan, WritePlan
from kvcanary.sources import RealKvSource
from kvcanary.violations import ViolationLog

BYTES_PER_SLOT = 64


def batch_tensors(x: CanaryBatch) -> list[torch.Tensor]:
    """A step's six per-batch tensors (its request rows, lengths and flat token arrays)."""
    return [x.req_pool_indices, x.prefix_lens, x.extend_lens, x.input_ids, x.positions, x.out_cache_loc]


@dataclass
class StepWorld:
    """Every buffer a canary step keeps across steps, on one device; request rows 1..``rows`` of ``max_len``."""

    device: torch.device
    rows: int
    max_len: int
    kv: torch.Tensor
    req_to_token: torch.Tensor
    canary_head: torch.Tensor
    canary_tail: torch.Tensor
    log: ViolationLog
    kernel_runs: torch.Tensor
    slot_runs: torch.Tensor
    head: VerifyOrWriteContext
    tail: VerifyOrWriteContext
    verify_plan: VerifyPlan
    write_plan: WritePlan
    lengths: list[int] = field(default_factory=list)
    """Host-side bookkeeping: tokens written so far per row (the engine's own state, never read from the
    device)."""

    @classmethod
    def create(cls, device: torch.device | str, *, rows: int = 8, max_len: int = 64, seed: int = 0,
               mode: RealKvHashMode = RealKvHashMode.PARTIAL) -> StepWorld:
        dev = torch.device(device)
        num_slots = rows * max_len + 1
        gen = torch.Generator().manual_seed(seed)
        kv = torch.randint(0, 256, (num_slots, BYTES_PER_SLOT), dtype=torch.uint8, generator=gen).to(dev)
        # rows 1..rows own slots 1.. in a shuffled order, as a paged allocator hands them out; row 0 is the
        # padding request row and slot 0 the padding slot, as in every engine
        perm = torch.randperm(rows * max_len, generator=gen) + 1
        r2t = torch.cat([torch.zeros(1, max_len, dtype=torch.int64), perm.reshape(rows, max_len)])
        r2t = r2t.to(torch.int32).to(dev)
        # HEAD records carry no real-KV fingerprint (the forward has not written K yet), TAIL records do: each
        # endpoint keeps its own records, as the manager's do
        canary_head, canary_tail = (torch.zeros(num_slots, CANARY_SLOT_BYTES, dtype=torch.uint8, device=dev)
                                    for _ in range(2))
        log = ViolationLog.allocate(ring_capacity=256, device=dev)
        kernel_runs = torch.zeros(NUM_LAUNCH_TAGS, dtype=torch.int64, device=dev)
        slot_runs = torch.zeros(NUM_LAUNCH_TAGS, dtype=torch.int64, device=dev)
        chain_assert = torch.ones(1, dtype=torch.int32, device=dev)
        source = RealKvSource(tensor=kv, page_size=1, num_bytes_per_token=BYTES_PER_SLOT, read_bytes=BYTES_PER_SLOT)

        def ctx(tag: CanaryLaunchTag, canary: torch.Tensor, sources: tuple[RealKvSource, ...]
                ) -> VerifyOrWriteContext:
            return VerifyOrWriteContext(
                canary_buf=canary, kernel_kind=tag, violation_ring=log.violation_ring,
                violation_write_index=log.violation_write_index, slot_run_counter=slot_runs[tag:tag + 1],
                kernel_run_counter=kernel_runs[tag:tag + 1], real_kv_sources=sources,
                real_kv_hash_mode=mode if sources else RealKvHashMode.NONE,
                enable_chain_position_assert=chain_assert)

        return cls(
            device=dev, rows=rows, max_len=max_len, kv=kv, req_to_token=r2t, canary_head=canary_head,
            canary_tail=canary_tail, log=log, kernel_runs=kernel_runs, slot_runs=slot_runs,
            head=ctx(CanaryLaunchTag.HEAD_K_FULL, canary_head, ()),
            tail=ctx(CanaryLaunchTag.TAIL_K_FULL, canary_tail, (source,)),
            verify_plan=VerifyPlan.allocate(verify_capacity=rows * max_len, device=dev),
            write_plan=WritePlan.allocate(write_req_capacity=rows, device=dev),
            lengths=[0] * (rows + 1),
        )

    def buffers(self) -> dict[str, torch.Tensor]:
        """Everything a step may change, by name (what eager and compiled runs must agree on)."""
        return {"kv": self.kv, "canary_head": self.canary_head, "canary_tail": self.canary_tail,
                "violation_ring": self.log.violation_ring,
                "violation_write_index": self.log.violation_write_index, "kernel_runs": self.kernel_runs,
                "slot_runs": self.slot_runs}

    def buffer_tensors(self) -> list[torch.Tensor]:
        return list(self.buffers().values())

    def mark_static(self) -> None:
        """Mark every persistent buffer as keeping its address across steps, so that CUDA graphs recorded
        through the compiler (``mode="reduce-overhead"``) may write them in place."""
        tensors = [*self.buffer_tensors(), self.req_to_token]
        for ctx in (self.head, self.tail):
            tensors += [ctx.slot_run_counter, ctx.kernel_run_counter, ctx.enable_chain_position_assert]
        for plan in (self.verify_plan, self.write_plan):
            tensors += [t for t in vars(plan).values() if isinstance(t, torch.Tensor)]
        for t in tensors:
            torch._dynamo.mark_static_address(t)

    def inputs(self, rng: random.Random, *, bs: int, max_extend: int = 4) -> CanaryBatch:
        """A batch of ``bs`` distinct rows that still have room, each extending by 1..max_extend tokens;
        rows that fill up start over (a new request in a recycled row). Advances :attr:`lengths`."""
        order = list(range(1, self.rows + 1))
        rng.shuffle(order)
        chosen = order[:bs]
        rpi: list[int] = []
        prefix: list[int] = []
        extend: list[int] = []
        ids: list[int] = []
        pos: list[int] = []
        loc: list[int] = []
        r2t = self.req_to_token.cpu()
        for r in chosen:
            if self.lengths[r] + max_extend > self.max_len:
                self.lengths[r] = 0
            start, n = self.lengths[r], rng.randint(1, max_extend)
            rpi.append(r)
            prefix.append(start)
            extend.append(n)
            ids.extend(1000 * r + p for p in range(start, start + n))
            pos.extend(range(start, start + n))
            loc.extend(int(s) for s in r2t[r, start:start + n])
            self.lengths[r] = start + n

        def t(v: list[int]) -> torch.Tensor:
            return torch.tensor(v, dtype=torch.int64, device=self.device)

        return CanaryBatch(req_pool_indices=t(rpi), prefix_lens=t(prefix), extend_lens=t(extend), input_ids=t(ids),
                           positions=t(pos), out_cache_loc=t(loc))


def fake_forward(kv: torch.Tensor, input_ids: torch.Tensor, positions: torch.Tensor, loc: torch.Tensor) -> None:
    """Stand-in for attention writing K: each token's bytes, a function of its id and position, at its slot."""
    lanes = torch.arange(BYTES_PER_SLOT, device=kv.device, dtype=torch.int64)
    values = (input_ids[:, None] * 31 + positions[:, None] * 7 + lanes[None, :]) % 251
    kv.index_copy_(0, loc, values.to(torch.uint8))


def canary_step(world: StepWorld, x: CanaryBatch, backend: str | None = None) -> None:
    """One forward with canaries: plan, HEAD verify + write, the forward, TAIL verify + write (real KV)."""
    launch_canary_plan_kernels(
        verify_plan_out=world.verify_plan, write_plan_out=world.write_plan, req_pool_indices=x.req_pool_indices,
        prefix_lens=x.prefix_lens, extend_seq_lens=x.extend_lens, req_to_token=world.req_to_token,
        swa_window_size=0, full_to_swa_index_mapping=None, verify_capacity=world.verify_plan.verify_capacity,
        req_to_verify_expected_tokens=None, req_to_verify_expected_tokens_valid_lens=None,
        kv_token_id_vs_position_offset=0, backend=backend)
    for ctx in (world.head, world.tail):
        launch_canary_verify_kernel(context=ctx, plan=world.verify_plan, check_verify_expected_token=False,
                                    backend=backend)
        launch_canary_write_kernel(
            context=ctx, plan=world.write_plan, input_ids=x.input_ids, positions=x.positions,
            out_cache_loc=x.out_cache_loc, enable_write_input_assert=False, expected_input_tokens=None,
            expected_input_positions=None, backend=backend)
        if ctx is world.head:
            fake_forward(world.kv, x.input_ids, x.positions, x.out_cache_loc)


def forward_only(world: StepWorld, x: CanaryBatch) -> None:
    """The same step without canaries (the benchmark's baseline)."""
    fake_forward(world.kv, x.input_ids, x.positions, x.out_cache_loc)
