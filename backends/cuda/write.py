"""write: the CUDA launch of ``kernels/write.cu`` (semantics: backends/torch_ref/write.py).

One block per request row of the write plan (``write_req_capacity`` blocks: fixed, so capturable): a chain
warp, plus three real-KV fold warps when the context hashes real KV.
"""

from __future__ import annotations

import torch

from backends.cuda._pack import Args, KernelCache, Shape, active_sources, ptr, source_args, vec16
from backends.cuda._toolchain import Spec, launch
from kvcanary.context import VerifyOrWriteContext
from kvcanary.plans import WritePlan

Key = tuple[int, bool, bool, bool]  # sources, partial, input assert, 16-byte records


def threads_for(nsrc: int) -> int:
    return 128 if nsrc > 0 else 32


def spec(nsrc: int, partial: bool, assert_inputs: bool, vec: bool) -> Spec:
    return Spec("write.cu", "kvc_write", (
        ("KVC_NSRC", nsrc), ("KVC_PARTIAL", int(partial)), ("KVC_ASSERT", int(assert_inputs)),
        ("KVC_VEC16", int(vec))), threads_for(nsrc))


KERNELS = KernelCache(spec)


def pack(*, context: VerifyOrWriteContext, plan: WritePlan, input_ids: torch.Tensor, positions: torch.Tensor,
         out_cache_loc: torch.Tensor, enable_write_input_assert: bool, expected_input_tokens: torch.Tensor | None,
         expected_input_positions: torch.Tensor | None) -> tuple[Key, int, Args]:
    """(specialization key, request capacity, kernel arguments) of one launch."""
    ctx = context
    buf = ctx.canary_buf
    num_slots, stride = buf.shape
    sources, partial = active_sources(ctx)
    ring = ctx.violation_ring
    on = bool(enable_write_input_assert)
    cap = plan.write_seed_slot_indices.shape[0]
    key: Key = (len(sources), partial, on, vec16(stride))
    args = (buf.data_ptr(), num_slots, stride, plan.write_offsets.data_ptr(), plan.write_seed_slot_indices.data_ptr(),
            plan.write_num_valid_reqs.data_ptr(), cap, input_ids.data_ptr(), positions.data_ptr(),
            out_cache_loc.data_ptr(), input_ids.shape[0], ptr(expected_input_tokens) if on else 0,
            ptr(expected_input_positions) if on else 0, ctx.enable_chain_position_assert.data_ptr(),
            ring.data_ptr(), ring.shape[0], ctx.violation_write_index.data_ptr(), ctx.slot_run_counter.data_ptr(),
            ctx.kernel_run_counter.data_ptr(), int(ctx.kernel_kind), *source_args(sources, partial))
    return key, cap, args


def shape(key: Key, cap: int, max_blocks: int) -> Shape:
    """(grid x, grid y, threads, shared bytes): one block per request row."""
    return max(cap, 1), 1, threads_for(key[0]), 0


def write(*, context: VerifyOrWriteContext, plan: WritePlan, input_ids: torch.Tensor, positions: torch.Tensor,
          out_cache_loc: torch.Tensor, enable_write_input_assert: bool, expected_input_tokens: torch.Tensor | None,
          expected_input_positions: torch.Tensor | None) -> None:
    key, cap, args = pack(context=context, plan=plan, input_ids=input_ids, positions=positions,
                          out_cache_loc=out_cache_loc, enable_write_input_assert=enable_write_input_assert,
                          expected_input_tokens=expected_input_tokens,
                          expected_input_positions=expected_input_positions)
    dev = context.canary_buf.get_device()
    kernel = KERNELS.get(dev, key)
    launch(kernel, dev, shape(key, cap, kernel.max_blocks), args)
