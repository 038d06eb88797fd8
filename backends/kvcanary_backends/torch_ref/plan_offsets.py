"""plan_offsets: stage 1 alone (SGLang's ``launch_plan_offsets_kernel``)."""

from __future__ import annotations

from kvcanary.ops.plan_offsets import PLAN_OFFSETS, PlanOffsetsLaunch
from kvcanary_backends.torch_ref._plan_common import offsets_stage


@PLAN_OFFSETS.kernel("torch_ref")
def plan_offsets(call: PlanOffsetsLaunch) -> None:
    bs = call.req_pool_indices.shape[0]
    off = offsets_stage(call)
    call.out_verify_offsets_scratch[:bs] = off.verify_exclusive
    call.out_verify_offsets_scratch[bs : bs + 1] = off.verify_total
    call.out_write_offsets[:bs] = off.write_exclusive
    call.out_write_offsets[bs : bs + 1] = off.write_total
    call.out_write_seed_slot_indices[:bs] = off.seeds
    call.out_verify_num_valid.copy_(off.num_valid)
    call.out_verify_enable.copy_(off.enable)
    call.out_write_num_valid_reqs.fill_(bs)
