"""verify_budget: ``kernels/budget.cu`` (semantics: backends/torch_ref/budget.py).

Grid ``(bs,)``: one block per request, sized from shapes only, so the launch is capturable. An empty batch
launches nothing: its count is zeroed, its enable copied and its overflow counted (device ops only).
"""

from __future__ import annotations

from kvcanary.ops.budget import VERIFY_BUDGET, VerifyBudgetLaunch, empty_batch
from kvcanary_backends.cuda import notes
from kvcanary_backends.cuda._pack import Args, KernelCache, Launch, Shape, prepare_launch, ptr
from kvcanary_backends.cuda._toolchain import Spec

THREADS = 128

Key = tuple[()]


def spec() -> Spec:
    return Spec("budget.cu", "kvc_verify_budget", (), THREADS)


KERNELS = KernelCache(spec, preload=[()])


def pack(call: VerifyBudgetLaunch) -> tuple[Key, int, Args]:
    """(specialization key, batch size, kernel arguments) of one launch."""
    bs = call.req_pool_indices.shape[0]
    args = (call.verify_offsets_scratch.data_ptr(), call.verify_slot_indices.data_ptr(),
            call.verify_expected_tokens.data_ptr(), call.verify_expected_positions.data_ptr(),
            call.verify_prev_slot_indices.data_ptr(), call.verify_num_valid.data_ptr(), call.verify_enable.data_ptr(),
            call.req_pool_indices.data_ptr(), call.cursor.data_ptr(), call.advance.data_ptr(),
            call.out_verify_slot_indices.data_ptr(), call.out_verify_expected_tokens.data_ptr(),
            call.out_verify_expected_positions.data_ptr(), call.out_verify_prev_slot_indices.data_ptr(),
            call.out_verify_num_valid.data_ptr(), call.out_verify_enable.data_ptr(), ptr(call.skipped_verifies), bs,
            call.verify_slot_indices.shape[0], call.out_verify_slot_indices.shape[0], call.cursor.shape[0],
            call.newest_per_request, call.stride)
    return (), bs, args


def shape(key: Key, bs: int, max_blocks: int) -> Shape | None:
    """(grid x, grid y, threads, shared bytes): a block per request; None for an empty batch."""
    return None if bs == 0 else (bs, 1, THREADS, 0)


def _empty(call: VerifyBudgetLaunch) -> Launch:
    def empty() -> None:
        empty_batch(out_verify_num_valid=call.out_verify_num_valid, out_verify_enable=call.out_verify_enable,
                    verify_enable=call.verify_enable, skipped_verifies=call.skipped_verifies)

    return empty


def prepare(call: VerifyBudgetLaunch) -> Launch:
    """The launch of ``call``, packed once (:attr:`kvcanary.registry.OpSupport.prepare`)."""
    key, bs, args = pack(call)
    if bs == 0:
        return _empty(call)
    return prepare_launch(KERNELS, call.verify_slot_indices.get_device(), key, bs, args, shape)


@KERNELS.kernel(VERIFY_BUDGET, notes=notes("a block per request"), prepare=prepare)
def verify_budget(call: VerifyBudgetLaunch) -> None:
    prepare(call)()
