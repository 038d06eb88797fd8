"""A tiny engine-like step loop with CUDA-graph-shaped (fixed) inputs, refilled in place every step.

Requests arrive, prefill in chunks, decode one token per step and finish; slots come from a free list and
go back to it; ``req_to_token`` rows are filled as the engine would. Every step has ``bs`` batch rows
(rows past the live requests are padding: pool row 0) and ``num_tokens`` flat tokens (unused ones have
``out_cache_loc = -1``). The "forward" writes fresh KV bytes for the new slots into a real-KV source, and
some steps inject a fault (a flipped canary byte, a flipped KV byte, a redirected ``req_to_token`` entry)
so that the ring fills too. Two engines built with the same seed see identical inputs, which is how a
graph-replayed engine is compared with an eager one.

The step is ``plan → HEAD verify → HEAD write → TAIL verify → TAIL write`` (TAIL with the real-KV source),
through the public launchers.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

import torch

import kvcanary as kc

KV_BYTES = 64  # bytes of one slot's strip in the real-KV source


@dataclass
class _Req:
    rp: int
    length: int  # tokens the request will have in the end
    slots: list[int] = field(default_factory=list)
    tokens: list[int] = field(default_factory=list)


class Engine:
    """Static device buffers plus a host-side scheduler that refills them before each step."""

    def __init__(self, device: torch.device | str, *, seed: int, num_slots: int = 2048, max_reqs: int = 12,
                 max_seq: int = 160, bs: int = 8, num_tokens: int = 48, ring: int = 1 << 16,
                 mode: kc.RealKvHashMode = kc.RealKvHashMode.PARTIAL) -> None:
        dev = torch.device(device)
        self.device, self.bs, self.num_tokens, self.max_seq = dev, bs, num_tokens, max_seq
        self.rng = random.Random(seed)
        self.free = list(range(1, num_slots))
        self.rng.shuffle(self.free)
        self.idle_rows = list(range(1, max_reqs))
        self.reqs: list[_Req] = []

        def i64(n: int) -> torch.Tensor:
            return torch.zeros(n, dtype=torch.int64, device=dev)

        self.req_pool_indices, self.prefix_lens, self.extend_seq_lens = i64(bs), i64(bs), i64(bs)
        self.req_to_token = torch.zeros(max_reqs, max_seq, dtype=torch.int32, device=dev)
        self.input_ids, self.positions, self.out_cache_loc = i64(num_tokens), i64(num_tokens), i64(num_tokens)
        self.vp = kc.VerifyPlan.allocate(verify_capacity=bs * max_seq, device=dev)
        self.wp = kc.WritePlan.allocate(write_req_capacity=bs, device=dev)
        self.vp.zero_for_testing_()
        self.wp.zero_for_testing_()
        self.head = torch.zeros(num_slots, kc.CANARY_SLOT_BYTES, dtype=torch.uint8, device=dev)
        self.tail = torch.zeros_like(self.head)
        self.kv = torch.zeros(num_slots, KV_BYTES, dtype=torch.uint8, device=dev)
        self.ring = torch.zeros(ring, 8, dtype=torch.int64, device=dev)
        self.write_index = torch.zeros(1, dtype=torch.int32, device=dev)
        self.kernel_runs = torch.zeros(kc.NUM_LAUNCH_TAGS, dtype=torch.int64, device=dev)
        self.slot_runs = torch.zeros_like(self.kernel_runs)
        self.chain_assert = torch.ones(1, dtype=torch.int32, device=dev)
        source = kc.RealKvSource(tensor=self.kv, page_size=1, num_bytes_per_token=KV_BYTES, read_bytes=KV_BYTES)
        self.contexts = [self._context(buf, tag, srcs, mode) for buf, tag, srcs in (
            (self.head, kc.CanaryLaunchTag.HEAD_K_FULL, ()),
            (self.tail, kc.CanaryLaunchTag.TAIL_K_FULL, (source,)))]

    def _context(self, buf: torch.Tensor, tag: kc.CanaryLaunchTag, sources: tuple[kc.RealKvSource, ...],
                 mode: kc.RealKvHashMode) -> kc.VerifyOrWriteContext:
        return kc.VerifyOrWriteContext(
            canary_buf=buf, kernel_kind=tag, violation_ring=self.ring, violation_write_index=self.write_index,
            slot_run_counter=self.slot_runs[tag : tag + 1], kernel_run_counter=self.kernel_runs[tag : tag + 1],
            real_kv_sources=sources, real_kv_hash_mode=mode, enable_chain_position_assert=self.chain_assert)

    # -- host side: schedule the next step and refill the static inputs in place -------------------------
    def prepare(self) -> None:
        """Pick this step's requests and tokens, allocate slots, write KV bytes, maybe inject a fault."""
        rng = self.rng
        self.reqs = [q for q in self.reqs if len(q.slots) < q.length]
        while len(self.reqs) < self.bs and self.idle_rows and len(self.free) > self.max_seq and rng.random() < 0.5:
            self.reqs.append(_Req(self.idle_rows.pop(rng.randrange(len(self.idle_rows))), rng.randint(2, self.max_seq)))
        rows: list[tuple[int, int, int]] = []
        ids: list[int] = []
        pos: list[int] = []
        locs: list[int] = []
        budget = self.num_tokens
        for q in self.reqs:
            prefix = len(q.slots)
            want = 1 if prefix else rng.randint(1, 24)  # a prefill chunk, then decode
            n = max(0, min(want, q.length - prefix, budget))
            budget -= n
            new = [self.free.pop() for _ in range(n)]
            for k, s in enumerate(new):
                self.req_to_token[q.rp, prefix + k] = s
                q.slots.append(s)
                q.tokens.append(rng.randint(0, 50000))
                ids.append(q.tokens[-1])
                pos.append(prefix + k)
                locs.append(s)
            rows.append((q.rp, prefix, n))
        for q in [q for q in self.reqs if len(q.slots) >= q.length]:  # finished after this step: free later
            self.free[:0] = q.slots
            self.idle_rows.append(q.rp)
        rows += [(0, 0, 0)] * (self.bs - len(rows))
        pad = self.num_tokens - len(ids)
        dev = self.device

        def fill(dst: torch.Tensor, values: list[int]) -> None:
            dst.copy_(torch.tensor(values, dtype=dst.dtype).to(dev))

        fill(self.req_pool_indices, [r[0] for r in rows])
        fill(self.prefix_lens, [r[1] for r in rows])
        fill(self.extend_seq_lens, [r[2] for r in rows])
        fill(self.input_ids, ids + [rng.randint(0, 9) for _ in range(pad)])
        fill(self.positions, pos + [0] * pad)
        fill(self.out_cache_loc, locs + [-1] * pad)
        for s in locs:  # the forward's KV bytes for the new slots
            self.kv[s] = torch.tensor([rng.randrange(256) for _ in range(KV_BYTES)], dtype=torch.uint8).to(dev)
        self._maybe_fault()

    def _maybe_fault(self) -> None:
        rng = self.rng
        live = [q for q in self.reqs if len(q.slots) > 1]
        if not live or rng.random() > 0.25:
            return
        q = rng.choice(live)
        s = rng.choice(q.slots[:-1])
        kind = rng.randrange(3)
        if kind == 0:
            self.head[s, rng.randrange(kc.CANARY_SLOT_BYTES)] ^= 1 << rng.randrange(8)
        elif kind == 1:
            self.kv[s, rng.randrange(16)] ^= 0x5A
        else:
            other = rng.choice([x for r in self.reqs for x in r.slots])
            self.req_to_token[q.rp, rng.randrange(len(q.slots) - 1)] = other

    # -- device side: the step the engine captures ------------------------------------------------------
    def step(self, backend: str) -> None:
        kc.launch_canary_plan_kernels(
            verify_plan_out=self.vp, write_plan_out=self.wp, req_pool_indices=self.req_pool_indices,
            prefix_lens=self.prefix_lens, extend_seq_lens=self.extend_seq_lens, req_to_token=self.req_to_token,
            swa_window_size=0, full_to_swa_index_mapping=None, verify_capacity=self.vp.verify_capacity,
            req_to_verify_expected_tokens=None, req_to_verify_expected_tokens_valid_lens=None,
            kv_token_id_vs_position_offset=0, backend=backend)
        for ctx in self.contexts:
            kc.launch_canary_verify_kernel(context=ctx, plan=self.vp, check_verify_expected_token=False,
                                           backend=backend)
            kc.launch_canary_write_kernel(
                context=ctx, plan=self.wp, input_ids=self.input_ids, positions=self.positions,
                out_cache_loc=self.out_cache_loc, enable_write_input_assert=False, expected_input_tokens=None,
                expected_input_positions=None, backend=backend)

    def state(self) -> dict[str, torch.Tensor]:
        """Every tensor a step may change (host copies); the ring is compared as a multiset by the caller."""
        out = {"head": self.head, "tail": self.tail, "violation_ring": self.ring,
               "violation_write_index": self.write_index, "kernel_run_counters": self.kernel_runs,
               "slot_run_counters": self.slot_runs}
        out.update({f"vp.{k}": getattr(self.vp, k) for k in ("verify_slot_indices", "verify_expected_tokens",
                                                               "verify_expected_positions", "verify_prev_slot_indices",
                                                               "verify_num_valid", "enable")})
        out.update({f"wp.{k}": getattr(self.wp, k) for k in ("write_offsets", "write_seed_slot_indices",
                                                               "write_num_valid_reqs")})
        return {k: v.detach().cpu().clone() for k, v in out.items()}


def compare_states(got: dict[str, torch.Tensor], want: dict[str, torch.Tensor]) -> list[str]:
    """Exact tensors; the ring's valid rows as a multiset (rows of a step's launches land in any order)."""
    problems = []
    for name, w in want.items():
        g = got[name]
        if name == "violation_ring":
            n = min(int(want["violation_write_index"][0]), w.shape[0])
            rows_g = sorted(map(tuple, g[:n].tolist()))
            rows_w = sorted(map(tuple, w[:n].tolist()))
            if rows_g != rows_w or not torch.equal(g[n:], w[n:]):
                problems.append("violation_ring differs (as a multiset)")
        elif not torch.equal(g, w):
            problems.append(f"{name}: {int((g != w).sum())} elements differ")
    return problems
