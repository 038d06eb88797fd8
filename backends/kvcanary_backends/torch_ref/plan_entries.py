"""plan_entries: stage 2 alone (SGLang's ``launch_plan_entries_kernel``), from stage 1's scratch."""

from __future__ import annotations

from kvcanary.extensions import zero_slot_on
from kvcanary.ops.plan_entries import PLAN_ENTRIES, PlanEntriesLaunch
from kvcanary_backends.torch_ref._plan_common import entries_stage


@PLAN_ENTRIES.kernel("torch_ref")
def plan_entries(call: PlanEntriesLaunch) -> None:
    bs = call.req_pool_indices.shape[0]
    lut = call.full_to_swa_index_mapping
    entries_stage(
        req_pool_indices=call.req_pool_indices, prefix_lens=call.prefix_lens, req_to_token=call.req_to_token, lut=lut,
        swa_window_size=call.swa_window_size, offsets=call.verify_offsets_scratch[:bs],
        total=call.verify_offsets_scratch[bs : bs + 1], enable=call.verify_enable,
        pool=call.req_to_verify_expected_tokens, valid_lens=call.req_to_verify_expected_tokens_valid_lens,
        token_offset=call.kv_token_id_vs_position_offset, out_slots=call.out_verify_slot_indices,
        out_tokens=call.out_verify_expected_tokens, out_positions=call.out_verify_expected_positions,
        out_prev=call.out_verify_prev_slot_indices, mark_zero=zero_slot_on(call.extensions),
    )
