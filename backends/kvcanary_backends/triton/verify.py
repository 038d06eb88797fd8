"""verify: re-check each planned slot against its predecessor, position, token and real KV (torch_ref's rules).

One persistent grid (a fixed number of programs, from the GPU's size) strides over the plan's entries
``e < clamp(num_valid, 0, capacity)`` (none when ``enable == 0``); the count is read on the device, so the
launch is the same for every step and is captured once in a CUDA graph. Program 0 bumps
``kernel_run_counter`` (always) and adds the active count to ``slot_run_counter`` (slot-0 entries included).

Per entry, as ``backends/torch_ref/verify.py`` documents: slot 0 is skipped; a slot outside the buffer (or
INVALID_SLOT) gives one INDEX_OUT_OF_RANGE row; predecessor 0 skips the chain check, a negative one is the
anchor, INVALID_SLOT or one past the buffer gives INDEX_OUT_OF_RANGE with ``expected_aux`` = the index;
a real-KV strip outside its source folds as 0 and sets INDEX_OUT_OF_RANGE. Every load is masked to its
tensor. Rows are appended with atomics (any order); nothing writes the canary buffer.
"""

from __future__ import annotations

import triton.language as tl

from kvcanary.context import VerifyOrWriteContext
from kvcanary.extensions import zero_slot_on
from kvcanary.ops.verify import VERIFY, VerifyLaunch
from kvcanary_backends.triton._hash import (
    ANCHOR_HASH_I64,
    CHAIN_BIT,
    INVALID,
    OOB_BIT,
    POS_BIT,
    RKV_BIT,
    VTOK_BIT,
    ZERO_BIT,
    ZERO_MARK,
    as_i64,
    record_link,
)
from kvcanary_backends.triton._jit import (
    TUNING,
    LaunchArgs,
    Launcher,
    ObjectCache,
    PreparedLaunch,
    cdiv,
    fits32,
    kernel,
    persistent_grid,
)
from kvcanary_backends.triton._records import ContextArgs, append_rows, context_args, fold_sources


@kernel()
def _verify_kernel(
    buf: tl.tensor, stride_words: tl.tensor, num_slots: tl.tensor,
    ring: tl.tensor, ring_cap: tl.tensor, write_index: tl.tensor,
    slot_counter: tl.tensor, kernel_counter: tl.tensor, kind: tl.tensor,
    slots: tl.tensor, tokens: tl.tensor, positions: tl.tensor, prevs: tl.tensor,
    num_valid: tl.tensor, enable: tl.tensor, capacity: tl.tensor,
    s0: tl.tensor, r0: tl.tensor, w0: tl.tensor, p0: tl.tensor, t0: tl.tensor, n0: tl.tensor,
    s1: tl.tensor, r1: tl.tensor, w1: tl.tensor, p1: tl.tensor, t1: tl.tensor, n1: tl.tensor,
    s2: tl.tensor, r2: tl.tensor, w2: tl.tensor, p2: tl.tensor, t2: tl.tensor, n2: tl.tensor,
    s3: tl.tensor, r3: tl.tensor, w3: tl.tensor, p3: tl.tensor, t3: tl.tensor, n3: tl.tensor,
    CHECK: tl.constexpr, NUM_SOURCES: tl.constexpr, PARTIAL: tl.constexpr, BLOCK: tl.constexpr,
    ZERO: tl.constexpr,
) -> None:
    pid = tl.program_id(0)
    nprog = tl.num_programs(0)
    rec = buf.to(tl.pointer_type(tl.int64))
    en = tl.load(enable)
    nv = tl.load(num_valid).to(tl.int64)
    active = tl.where(en != 0, tl.minimum(tl.maximum(nv, 0), capacity), 0)
    if pid == 0:
        tl.atomic_add(kernel_counter, 1)
        tl.atomic_add(slot_counter, active)
    lanes = tl.arange(0, BLOCK).to(tl.int64)
    first = pid.to(tl.int64) * BLOCK
    step = nprog.to(tl.int64) * BLOCK
    for start in range(first, active, step):
        e = start + lanes
        m = e < active
        slot = tl.load(slots + e, mask=m, other=0)
        prev = tl.load(prevs + e, mask=m, other=0)
        exp_pos = tl.load(positions + e, mask=m, other=0)
        exp_tok = tl.full((BLOCK,), -1, tl.int64)
        if CHECK:
            exp_tok = tl.load(tokens + e, mask=m, other=-1)

        slot_oob = (slot < 0) | (slot >= num_slots)
        live = m & (slot != 0)
        rd = live & ~slot_oob
        sbase = tl.where(rd, slot, 0) * stride_words
        tok = tl.load(rec + sbase, mask=rd, other=0)
        pos = tl.load(rec + sbase + 1, mask=rd, other=0)
        chain = tl.load(rec + sbase + 2, mask=rd, other=0)
        rkv = tl.load(rec + sbase + 3, mask=rd, other=0)

        prev_oob = (prev == INVALID) | (prev >= num_slots)
        anchor = (prev < 0) & ~prev_oob
        reach = (prev != 0) & ~prev_oob
        pld = rd & (prev > 0) & ~prev_oob
        pbase = tl.where(pld, prev, 0) * stride_words
        p_tok = tl.load(rec + pbase, mask=pld, other=0)
        p_pos = tl.load(rec + pbase + 1, mask=pld, other=0)
        p_chain = tl.load(rec + pbase + 2, mask=pld, other=0)
        link = record_link(p_chain, p_tok, p_pos)
        exp_chain = tl.where(anchor, ANCHOR_HASH_I64, tl.where(reach, link, chain))

        exp_rkv, src_oob = fold_sources(tl.where(rd, slot, 0), rd,
                                        s0, r0, w0, p0, t0, n0, s1, r1, w1, p1, t1, n1,
                                        s2, r2, w2, p2, t2, n2, s3, r3, w3, p3, t3, n3,
                                        NUM_SOURCES, PARTIAL)

        bits = tl.where(reach & (chain != exp_chain), CHAIN_BIT, 0).to(tl.int64)
        bits = bits | tl.where(pos != exp_pos, POS_BIT, 0)
        bits = bits | tl.where(rkv != as_i64(exp_rkv), RKV_BIT, 0)
        if CHECK:
            bits = bits | tl.where((exp_tok != -1) & (tok != exp_tok), VTOK_BIT, 0)
        bits = bits | tl.where(prev_oob | src_oob, OOB_BIT, 0)
        bits = tl.where(slot_oob, OOB_BIT, bits)
        row_slot = slot
        if ZERO:  # the plan's mark of a padding slot inside a live range: its own bit, reported at slot 0
            marked = slot == ZERO_MARK
            bits = tl.where(marked, ZERO_BIT, bits)
            row_slot = tl.where(marked, 0, slot)

        keep = live & (bits != 0)
        append_rows(ring, write_index, ring_cap, keep,
                    kind, row_slot, tl.where(slot_oob, exp_pos, pos), tl.where(slot_oob, -1, tok), exp_tok,
                    tl.where(slot_oob, 0, chain), tl.where(slot_oob, 0, tl.where(prev_oob, prev, exp_chain)), bits,
                    "acq_rel")


_LAUNCH = Launcher(_verify_kernel)
_CONTEXTS = ObjectCache()


def _context_part(ctx: VerifyOrWriteContext) -> ContextArgs:
    return context_args(ctx, with_chain_assert=False)


def _launch_args(call: VerifyLaunch) -> LaunchArgs:
    """(grid, variant key, arguments, constexprs, warps) of the launch of ``call``."""
    c: ContextArgs = _CONTEXTS.get(call.context, _context_part)
    slots = call.plan.verify_slot_indices
    capacity = slots.shape[0]
    check = bool(call.check_verify_expected_token)
    tokens = call.plan.verify_expected_tokens if check else None  # not read without the token check
    pos, prevs, nv, en = (call.plan.verify_expected_positions, call.plan.verify_prev_slot_indices,
                          call.plan.verify_num_valid, call.plan.enable)
    key = (c.key, slots.dtype, None if tokens is None else tokens.dtype, pos.dtype, prevs.dtype, nv.dtype, en.dtype,
           fits32(capacity))
    block = TUNING["verify_block"]
    grid = (persistent_grid(slots.device, cdiv(capacity, block), TUNING["verify_waves"]),)
    return (grid, key, (*c.head, slots, tokens, pos, prevs, nv, en, capacity, *c.sources),
            (check, c.num_sources, c.partial, block, zero_slot_on(call.extensions)), TUNING["verify_warps"])


def prepare(call: VerifyLaunch) -> PreparedLaunch | None:
    """The launch of ``call`` with its arguments bound (:meth:`Launcher.prepare`)."""
    return _LAUNCH.prepare(*_launch_args(call))


@VERIFY.kernel("triton", notes="persistent grid over the plan's entries", prepare=prepare)
def verify(call: VerifyLaunch) -> None:
    """Launch the verify kernel (capture-safe: fixed grid, counts read on the device, no allocation)."""
    _LAUNCH(*_launch_args(call))
