"""plan_offsets: stage 1 alone, one block of ``kernels/plan_offsets.cu`` (semantics: torch_ref/plan_offsets.py)."""

from __future__ import annotations

import torch

from kvcanary.backends.cuda._pack import Args, KernelCache, Shape, ptr
from kvcanary.backends.cuda._toolchain import Spec, launch

THREADS = 512

Key = tuple[bool]  # LUT


def spec(has_lut: bool) -> Spec:
    return Spec("plan_offsets.cu", "kvc_plan_offsets", (("KVC_THREADS", THREADS), ("KVC_HAS_LUT", int(has_lut))),
                THREADS)


KERNELS = KernelCache(spec)


def pack(*, req_pool_indices: torch.Tensor, prefix_lens: torch.Tensor, extend_seq_lens: torch.Tensor,
         req_to_token: torch.Tensor, full_to_swa_index_mapping: torch.Tensor | None,
         out_verify_offsets_scratch: torch.Tensor, out_write_offsets: torch.Tensor,
         out_write_seed_slot_indices: torch.Tensor, out_verify_num_valid: torch.Tensor,
         out_verify_enable: torch.Tensor, out_write_num_valid_reqs: torch.Tensor, swa_window_size: int,
         verify_capacity: int) -> tuple[Key, int, Args]:
    """(specialization key, batch size, kernel arguments) of one launch."""
    lut = full_to_swa_index_mapping
    bs = req_pool_indices.shape[0]
    rows, cols = req_to_token.shape
    args = (req_pool_indices.data_ptr(), prefix_lens.data_ptr(), extend_seq_lens.data_ptr(), req_to_token.data_ptr(),
            rows, cols, ptr(lut), lut.shape[0] if lut is not None else 0, swa_window_size, bs, verify_capacity,
            out_verify_offsets_scratch.data_ptr(), out_write_offsets.data_ptr(), out_write_offsets.shape[0],
            out_write_seed_slot_indices.data_ptr(), out_verify_num_valid.data_ptr(), out_verify_enable.data_ptr(),
            out_write_num_valid_reqs.data_ptr())
    return (lut is not None,), bs, args


def shape(key: Key, bs: int, max_blocks: int) -> Shape:
    """(grid x, grid y, threads, shared bytes): one block, static shared memory only."""
    return 1, 1, THREADS, 0


def plan_offsets(*, req_pool_indices: torch.Tensor, prefix_lens: torch.Tensor, extend_seq_lens: torch.Tensor,
                 req_to_token: torch.Tensor, full_to_swa_index_mapping: torch.Tensor | None,
                 out_verify_offsets_scratch: torch.Tensor, out_write_offsets: torch.Tensor,
                 out_write_seed_slot_indices: torch.Tensor, out_verify_num_valid: torch.Tensor,
                 out_verify_enable: torch.Tensor, out_write_num_valid_reqs: torch.Tensor, swa_window_size: int,
                 verify_capacity: int) -> None:
    key, bs, args = pack(
        req_pool_indices=req_pool_indices, prefix_lens=prefix_lens, extend_seq_lens=extend_seq_lens,
        req_to_token=req_to_token, full_to_swa_index_mapping=full_to_swa_index_mapping,
        out_verify_offsets_scratch=out_verify_offsets_scratch, out_write_offsets=out_write_offsets,
        out_write_seed_slot_indices=out_write_seed_slot_indices, out_verify_num_valid=out_verify_num_valid,
        out_verify_enable=out_verify_enable, out_write_num_valid_reqs=out_write_num_valid_reqs,
        swa_window_size=swa_window_size, verify_capacity=verify_capacity)
    dev = out_verify_offsets_scratch.get_device()
    kernel = KERNELS.get(dev, key)
    launch(kernel, dev, shape(key, bs, kernel.max_blocks), args)
