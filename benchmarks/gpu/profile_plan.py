"""Where the fused plan's time goes (bs=256 x 4096, four rotating plans): ``python benchmarks/gpu/profile_plan.py``.

Times, as CUDA-graph replays: the fused plan, stage 2 alone (``plan_entries`` from a precomputed scratch, so
no row scan), and the plain streams of the same traffic (floors_cuda.plan_stream_cuda); with ``--ncu``,
launches the plan kernels once per set instead (no graphs), for ``ncu --kernel-name NAME --launch-skip 2
--launch-count 1``.
"""

from __future__ import annotations

import sys
from functools import partial
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import torch

from benchmarks import bench_cuda as bc
from benchmarks import floors_cuda as fc
from kvcanary.backends.cuda import plan as cplan
from kvcanary.backends.cuda import plan_entries as cent
from kvcanary.backends.cuda import plan_offsets as coff


def main() -> None:
    world = bc.PlanWorld()
    n, rpi, prefix_t = world.entries, world.rpi, world.prefix_lens
    plans = []
    entries = []
    for i, (vp, wp, rtt) in enumerate(zip(world.vps, world.wps, world.rtts, strict=True)):
        assert vp.verify_offsets_scratch is not None
        plans.append(partial(cplan.plan, **world.kwargs(i)))
        coff.plan_offsets(req_pool_indices=rpi, prefix_lens=prefix_t, extend_seq_lens=world.extend, req_to_token=rtt,
                          full_to_swa_index_mapping=None, out_verify_offsets_scratch=vp.verify_offsets_scratch,
                          out_write_offsets=wp.write_offsets, out_write_seed_slot_indices=wp.write_seed_slot_indices,
                          out_verify_num_valid=vp.verify_num_valid, out_verify_enable=vp.enable,
                          out_write_num_valid_reqs=wp.write_num_valid_reqs, swa_window_size=0, verify_capacity=n)
        entries.append(partial(cent.plan_entries, req_pool_indices=rpi, prefix_lens=prefix_t, req_to_token=rtt,
                               full_to_swa_index_mapping=None, verify_offsets_scratch=vp.verify_offsets_scratch,
                               verify_enable=vp.enable, req_to_verify_expected_tokens=None,
                               req_to_verify_expected_tokens_valid_lens=None,
                               out_verify_slot_indices=vp.verify_slot_indices,
                               out_verify_expected_tokens=vp.verify_expected_tokens,
                               out_verify_expected_positions=vp.verify_expected_positions,
                               out_verify_prev_slot_indices=vp.verify_prev_slot_indices,
                               kv_token_id_vs_position_offset=0, swa_window_size=0))
    profiling = "--ncu" in sys.argv  # under ncu: no graphs, each kernel launched once per set
    for name, fns in (("fused plan", plans), ("plan_entries alone", entries)):
        if profiling:
            for f in fns:
                f()
            continue
        t = fc.rotating_graph(fns)
        print(f"{name:28s} {t * 1e6:7.2f} us per launch (graph, 4 rotating sets)")
    if not profiling:
        for label, t in fc.plan_stream_cuda(n, len(world.vps)).items():
            print(f"{'stream of the same traffic ' + label:28s} {t * 1e6:7.2f} us per launch (graph, 4 rotating sets)")
    torch.cuda.synchronize()
    print("plan checks:", int(world.vps[1].enable[0]), int(world.vps[1].verify_num_valid[0]) == n)


if __name__ == "__main__":
    main()
