"""Misuse that mypy must reject: each marked line (an "E:" comment) must get an error containing its text."""

import torch

import kvcanary as kc


def write_misuse(ctx: kc.VerifyOrWriteContext, plan: kc.WritePlan, t: torch.Tensor) -> None:
    kc.launch_canary_write_kernel(context=ctx, plan=plan, input_ids=t, positions=t, out_cache_loc=t, enable_write_input_assert=True, expected_input_tokens=None, expected_input_positions=None)  # E: expected input tensors are required when enable_write_input_assert=True
    kc.launch_canary_write_kernel(context=ctx, plan=plan, input_ids=t, positions=t, out_cache_loc=t, enable_write_input_assert=True, expected_input_tokens=t, expected_input_positions=None)  # E: expected input tensors are required when enable_write_input_assert=True
    kc.launch_canary_write_kernel(context=ctx, plan=plan, input_ids=t, positions=t, out_cache_loc=t, enable_write_input_assert=False, expected_input_tokens=t, expected_input_positions=t)  # E: expected input tensors must be None when enable_write_input_assert=False
    kc.launch_canary_write_kernel(context=ctx, plan=plan, input_ids=t, positions=t, out_cache_loc=t, enable_write_input_assert=False, expected_input_tokens=None, expected_input_positions=t)  # E: expected input tensors must be None when enable_write_input_assert=False


def plan_misuse(vp: kc.VerifyPlan, wp: kc.WritePlan, t: torch.Tensor) -> None:
    kc.launch_canary_plan_kernels(verify_plan_out=vp, write_plan_out=wp, req_pool_indices=t, prefix_lens=t, extend_seq_lens=t, req_to_token=t, swa_window_size=0, full_to_swa_index_mapping=None, verify_capacity=8, req_to_verify_expected_tokens=t, req_to_verify_expected_tokens_valid_lens=None, kv_token_id_vs_position_offset=0)  # E: requires req_to_verify_expected_tokens_valid_lens when req_to_verify_expected_tokens is set
    kc.launch_plan_entries_kernel(req_pool_indices=t, prefix_lens=t, req_to_token=t, full_to_swa_index_mapping=None, verify_offsets_scratch=t, verify_enable=t, req_to_verify_expected_tokens=t, req_to_verify_expected_tokens_valid_lens=None, out_verify_slot_indices=t, out_verify_expected_tokens=t, out_verify_expected_positions=t, out_verify_prev_slot_indices=t, kv_token_id_vs_position_offset=1, swa_window_size=0)  # E: launch_plan_entries_kernel requires req_to_verify_expected_tokens_valid_lens


def wrong_types(ctx: kc.VerifyOrWriteContext, vp: kc.VerifyPlan) -> None:
    kc.launch_canary_verify_kernel(context=ctx, plan=vp, check_verify_expected_token="yes")  # E: incompatible type "str"
    kc.launch_canary_verify_kernel(context=ctx, plan=ctx, check_verify_expected_token=True)  # E: incompatible type "VerifyOrWriteContext"
    kc.launch_canary_verify_kernel(context=ctx, plan=vp)  # E: Missing named argument "check_verify_expected_token"
    print(kc.FailReason.VERIFY_CHAIN_HASH_MISMATCH.labelz)  # E: has no attribute "labelz"
