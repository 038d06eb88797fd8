"""Calls that must type-check clean under ``mypy --strict`` (checked by test_typing.py, never run)."""

import torch

import kvcanary as kc
from kvcanary.testing import calls


def literal_flags(ctx: kc.VerifyOrWriteContext, plan: kc.WritePlan, t: torch.Tensor) -> None:
    kc.launch_canary_write_kernel(context=ctx, plan=plan, input_ids=t, positions=t, out_cache_loc=t,
                                  enable_write_input_assert=True, expected_input_tokens=t, expected_input_positions=t)
    kc.launch_canary_write_kernel(context=ctx, plan=plan, input_ids=t, positions=t, out_cache_loc=t,
                                  enable_write_input_assert=False, expected_input_tokens=None,
                                  expected_input_positions=None, backend="torch_ref")


def plain_bool_uses_the_general_signature(flag: bool, maybe: torch.Tensor | None) -> None:
    kw = calls.write()
    kc.launch_canary_write_kernel(context=kw["context"], plan=kw["plan"], input_ids=kw["input_ids"],
                                  positions=kw["positions"], out_cache_loc=kw["out_cache_loc"],
                                  enable_write_input_assert=flag, expected_input_tokens=maybe,
                                  expected_input_positions=maybe)


def plan_with_and_without_pool(vp: kc.VerifyPlan, wp: kc.WritePlan, t: torch.Tensor, pool: torch.Tensor | None) -> None:
    for p, v in ((t, t), (None, None), (None, t), (pool, pool)):
        kc.launch_canary_plan_kernels(
            verify_plan_out=vp, write_plan_out=wp, req_pool_indices=t, prefix_lens=t, extend_seq_lens=t,
            req_to_token=t, swa_window_size=0, full_to_swa_index_mapping=None, verify_capacity=8,
            req_to_verify_expected_tokens=p, req_to_verify_expected_tokens_valid_lens=v,
            kv_token_id_vs_position_offset=0)
    kc.launch_plan_entries_kernel(
        req_pool_indices=t, prefix_lens=t, req_to_token=t, full_to_swa_index_mapping=None, verify_offsets_scratch=t,
        verify_enable=t, req_to_verify_expected_tokens=t, req_to_verify_expected_tokens_valid_lens=t,
        out_verify_slot_indices=t, out_verify_expected_tokens=t, out_verify_expected_positions=t,
        out_verify_prev_slot_indices=t, kv_token_id_vs_position_offset=1, swa_window_size=0)


def typed_results(log: kc.ViolationLog) -> list[str]:
    snap: kc.ViolationSnapshot = log.read()
    labels: list[str] = []
    for v in snap.violations:
        tag: kc.CanaryLaunchTag | None = v.tag
        reasons: kc.FailReason = v.reasons
        labels += reasons.labels()
        labels.append(tag.name if tag else v.tag_name)
        labels.append(kc.format_violation(v, total_violations=snap.total, ring_capacity=snap.ring_capacity,
                                          step_when_pumped=0))
    choice = kc.registry.REGISTRY.select(kc.Op.VERIFY, torch.device("cpu"))
    backend: kc.Backend = choice.backend
    labels.append(backend.name)
    return labels
