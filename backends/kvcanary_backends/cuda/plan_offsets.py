"""plan_offsets: stage 1 alone, one block of ``kernels/plan_offsets.cu`` (semantics: torch_ref/plan_offsets.py)."""

from __future__ import annotations

from kvcanary.ops.plan_offsets import PLAN_OFFSETS, PlanOffsetsLaunch
from kvcanary_backends.cuda import notes
from kvcanary_backends.cuda._pack import BOOLS, Args, KernelCache, Launch, Shape, prepare_launch, ptr
from kvcanary_backends.cuda._toolchain import Spec

THREADS = 512

Key = tuple[bool]  # LUT


def spec(has_lut: bool) -> Spec:
    return Spec("plan_offsets.cu", "kvc_plan_offsets", (("KVC_THREADS", THREADS), ("KVC_HAS_LUT", int(has_lut))),
                THREADS)


KERNELS = KernelCache(spec, preload=[(lut,) for lut in BOOLS])


def pack(call: PlanOffsetsLaunch) -> tuple[Key, int, Args]:
    """(specialization key, batch size, kernel arguments) of one launch."""
    lut = call.full_to_swa_index_mapping
    bs = call.req_pool_indices.shape[0]
    rows, cols = call.req_to_token.shape
    args = (call.req_pool_indices.data_ptr(), call.prefix_lens.data_ptr(), call.extend_seq_lens.data_ptr(),
            call.req_to_token.data_ptr(), rows, cols, ptr(lut), lut.shape[0] if lut is not None else 0,
            call.swa_window_size, bs, call.verify_capacity, call.out_verify_offsets_scratch.data_ptr(),
            call.out_write_offsets.data_ptr(), call.out_write_offsets.shape[0],
            call.out_write_seed_slot_indices.data_ptr(), call.out_verify_num_valid.data_ptr(),
            call.out_verify_enable.data_ptr(), call.out_write_num_valid_reqs.data_ptr())
    return (lut is not None,), bs, args


def shape(key: Key, bs: int, max_blocks: int) -> Shape:
    """(grid x, grid y, threads, shared bytes): one block, static shared memory only."""
    return 1, 1, THREADS, 0


def prepare(call: PlanOffsetsLaunch) -> Launch:
    """The launch of ``call``, packed once (:attr:`kvcanary.registry.OpSupport.prepare`)."""
    key, bs, args = pack(call)
    return prepare_launch(KERNELS, call.out_verify_offsets_scratch.get_device(), key, bs, args, shape)


@KERNELS.kernel(PLAN_OFFSETS, notes=notes(), prepare=prepare)
def plan_offsets(call: PlanOffsetsLaunch) -> None:
    prepare(call)()
