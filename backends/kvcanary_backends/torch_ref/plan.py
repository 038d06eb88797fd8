"""plan: both stages in one call, writing the two plans (and the plan's scratch, when it has one)."""

from __future__ import annotations

from kvcanary.extensions import zero_slot_on
from kvcanary.ops.plan import PLAN, PlanLaunch
from kvcanary_backends.torch_ref._plan_common import entries_stage, offsets_stage


@PLAN.kernel("torch_ref")
def plan(call: PlanLaunch) -> None:
    bs = call.req_pool_indices.shape[0]
    lut = call.full_to_swa_index_mapping
    off = offsets_stage(call)
    vp, wp = call.verify_plan_out, call.write_plan_out
    wp.write_offsets.zero_()
    wp.write_offsets[:bs] = off.write_exclusive
    wp.write_offsets[bs : bs + 1] = off.write_total
    wp.write_seed_slot_indices[:bs] = off.seeds
    wp.write_num_valid_reqs.fill_(bs)
    if vp.verify_offsets_scratch is not None:
        vp.verify_offsets_scratch[:bs] = off.verify_exclusive
        vp.verify_offsets_scratch[bs : bs + 1] = off.verify_total
    vp.verify_num_valid.copy_(off.num_valid)
    vp.enable.copy_(off.enable)
    entries_stage(req_pool_indices=call.req_pool_indices, prefix_lens=call.prefix_lens, req_to_token=call.req_to_token,
                  lut=lut, swa_window_size=call.swa_window_size, offsets=off.verify_exclusive, total=off.verify_total,
                  enable=off.enable, pool=call.req_to_verify_expected_tokens,
                  valid_lens=call.req_to_verify_expected_tokens_valid_lens,
                  token_offset=call.kv_token_id_vs_position_offset, out_slots=vp.verify_slot_indices,
                  out_tokens=vp.verify_expected_tokens, out_positions=vp.verify_expected_positions,
                  out_prev=vp.verify_prev_slot_indices, mark_zero=zero_slot_on(call.extensions))
