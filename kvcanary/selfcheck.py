"""The self-check: plan → write → verify a small batch, inject one corruption, show what was caught.

It needs no engine: two requests share a prefix, the canary records are written for their tokens, one
``req_to_token`` entry is then pointed at another live slot (the classic page-table bug), and the next
verify must report it as ``verify_chain_hash`` / ``verify_position``.
"""

from __future__ import annotations

import torch

from kvcanary.consts import CANARY_SLOT_BYTES, NUM_LAUNCH_TAGS, CanaryLaunchTag, RealKvHashMode
from kvcanary.context import VerifyOrWriteContext
from kvcanary.launch.plan import launch_canary_plan_kernels
from kvcanary.launch.verify import launch_canary_verify_kernel
from kvcanary.launch.write import launch_canary_write_kernel
from kvcanary.plans import VerifyPlan, WritePlan
from kvcanary.registry import REGISTRY, Op
from kvcanary.sources import RealKvSource
from kvcanary.violations import ViolationLog, format_violation


def run(device: str = "cpu", backend: str | None = None, *, verbose: bool = True) -> int:
    """Run the self-check; return the number of violations found after the injected fault (expect > 0)."""
    dev = torch.device(device)
    num_slots, max_reqs, max_len = 64, 4, 16
    kv = torch.randint(0, 256, (num_slots, 64), dtype=torch.uint8, device=dev)  # layer-0 K, 64 B per token
    canary = torch.zeros(num_slots, CANARY_SLOT_BYTES, dtype=torch.uint8, device=dev)
    log = ViolationLog.allocate(ring_capacity=64, device=dev)
    kcount = torch.zeros(NUM_LAUNCH_TAGS, dtype=torch.int64, device=dev)
    scount = torch.zeros(NUM_LAUNCH_TAGS, dtype=torch.int64, device=dev)
    tag = CanaryLaunchTag.TAIL_K_FULL
    ctx = VerifyOrWriteContext(
        canary_buf=canary, kernel_kind=tag, violation_ring=log.violation_ring,
        violation_write_index=log.violation_write_index, slot_run_counter=scount[tag : tag + 1],
        kernel_run_counter=kcount[tag : tag + 1],
        real_kv_sources=(RealKvSource(tensor=kv, page_size=1, num_bytes_per_token=64, read_bytes=64),),
        real_kv_hash_mode=RealKvHashMode.ALL, enable_chain_position_assert=torch.ones(1, dtype=torch.int32, device=dev),
    )
    vplan = VerifyPlan.allocate(verify_capacity=128, device=dev)
    wplan = WritePlan.allocate(write_req_capacity=8, device=dev)
    req_to_token = torch.zeros(max_reqs, max_len, dtype=torch.int32, device=dev)
    req_to_token[1, :10] = torch.arange(1, 11, dtype=torch.int32)  # request A: slots 1..10
    req_to_token[2, :6] = req_to_token[1, :6]  # request B shares A's first 6 tokens (prefix cache)
    req_to_token[2, 6:9] = torch.arange(11, 14, dtype=torch.int32)
    tokens = {1: list(range(100, 110)), 2: [*list(range(100, 106)), 300, 301, 302]}

    def step(rows: list[int], prefix: list[int], extend: list[int]) -> None:
        rpi = torch.tensor(rows, dtype=torch.int64, device=dev)
        launch_canary_plan_kernels(
            verify_plan_out=vplan, write_plan_out=wplan, req_pool_indices=rpi,
            prefix_lens=torch.tensor(prefix, dtype=torch.int64, device=dev),
            extend_seq_lens=torch.tensor(extend, dtype=torch.int64, device=dev), req_to_token=req_to_token,
            swa_window_size=0, full_to_swa_index_mapping=None, verify_capacity=vplan.verify_capacity,
            req_to_verify_expected_tokens=None, req_to_verify_expected_tokens_valid_lens=None,
            kv_token_id_vs_position_offset=0, backend=backend)
        launch_canary_verify_kernel(context=ctx, plan=vplan, check_verify_expected_token=False, backend=backend)
        ids, pos, loc = [], [], []
        for r, p, e in zip(rows, prefix, extend, strict=True):
            for k in range(p, p + e):
                ids.append(tokens[r][k])
                pos.append(k)
                loc.append(int(req_to_token[r, k]))

        def t(x: list[int]) -> torch.Tensor:
            return torch.tensor(x, dtype=torch.int64, device=dev)

        launch_canary_write_kernel(context=ctx, plan=wplan, input_ids=t(ids), positions=t(pos), out_cache_loc=t(loc),
                                   enable_write_input_assert=False, expected_input_tokens=None,
                                   expected_input_positions=None, backend=backend)

    step([1], [0], [10])  # prefill A
    step([2], [6], [3])  # B reuses A's prefix, writes 3 tokens
    step([1, 2], [10, 9], [0, 0])  # verify both: must be clean
    clean = log.read()
    req_to_token[2, 7] = 4  # the bug: B's row now names one of A's slots
    step([1, 2], [10, 9], [0, 0])
    snap = log.read()
    if verbose:
        chosen = REGISTRY.select(Op.VERIFY, dev, backend).backend.name
        print(f"kvcanary self-check on {dev} (verify backend: {chosen})")
        print(f"  clean steps: {clean.total} violations (expected 0)")
        print(f"  after pointing req_to_token[2, 7] at slot 4: {snap.total} violation(s)")
        for v in snap.violations:
            print(format_violation(v, total_violations=snap.total, ring_capacity=snap.ring_capacity,
                                   step_when_pumped=4))
    if clean.total:
        return -clean.total
    return snap.total
