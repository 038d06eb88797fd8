"""verify: re-check each planned slot's record against its predecessor, position, token and real KV.

Per entry ``e < clamp(num_valid, 0, capacity)`` (nothing when ``enable == 0``; ``kernel_run_counter``
always counts the launch, ``slot_run_counter`` counts the active entries, slot-0 entries included):

- slot 0 is skipped; a slot outside the buffer (or INVALID_SLOT) is reported as INDEX_OUT_OF_RANGE with
  ``position`` = the planned position, ``stored_token`` = -1 and both hash fields 0;
- predecessor 0: no chain check; negative: the chain anchor; INVALID_SLOT or past the buffer:
  INDEX_OUT_OF_RANGE, no chain check, ``expected_aux`` = the predecessor index;
- otherwise the row is SGLang's: stored position, stored token, expected token (-1 if unchecked), stored
  prev_hash, expected prev_hash.

With the ZERO_SLOT_IN_LIVE_RANGE extension, an entry whose slot is ZERO_SLOT_MARK (the plan's mark of a
padding slot inside a live range) gives one row: slot 0, ``position`` = the planned position,
``stored_token`` = -1, both hash fields 0, bits ZERO_SLOT_IN_LIVE_RANGE. Without it such an entry is an
ordinary negative slot (INDEX_OUT_OF_RANGE).

Rows are appended in entry order. On devices other than the CPU the whole capacity is processed under
masks, so no value is read back to the host.
"""

from __future__ import annotations

import torch

from kvcanary.consts import INVALID_SLOT, ZERO_SLOT_MARK
from kvcanary.extensions import zero_slot_on
from kvcanary.ops.verify import VERIFY, VerifyLaunch
from kvcanary_backends.torch_ref._hash import ANCHOR_I64, mix3
from kvcanary_backends.torch_ref._records import CHAIN, OOB, POS, RKV, TOK, ZERO, append_rows, fold_sources, records


@VERIFY.kernel("torch_ref")
def verify(call: VerifyLaunch) -> None:
    ctx = call.context
    ctx.kernel_run_counter.add_(1)
    cap = call.plan.verify_slot_indices.shape[0]
    active = torch.where(call.plan.enable != 0, call.plan.verify_num_valid.to(torch.int64).clamp(0, cap), 0)  # [1]
    ctx.slot_run_counter.add_(active)
    n = int(active[0]) if active.device.type == "cpu" else cap
    if n == 0:
        return
    dev = ctx.canary_buf.device
    live = torch.arange(n, device=dev) < active
    slot = call.plan.verify_slot_indices[:n]
    prev = call.plan.verify_prev_slot_indices[:n]
    exp_pos = call.plan.verify_expected_positions[:n]
    if call.check_verify_expected_token:
        exp_tok = call.plan.verify_expected_tokens[:n]
    else:
        exp_tok = torch.full((n,), -1, dtype=torch.int64, device=dev)

    rec = records(ctx.canary_buf)
    num_slots = rec.shape[0]
    slot_oob = (slot < 0) | (slot >= num_slots)
    sc = torch.where(slot_oob, 0, slot)
    cur = rec[sc, :4]
    tok, pos, chain, rkv = cur[:, 0], cur[:, 1], cur[:, 2], cur[:, 3]

    prev_oob = (prev == INVALID_SLOT) | (prev >= num_slots)
    prev_anchor = (prev < 0) & ~prev_oob
    prev_reach = (prev != 0) & ~prev_oob
    pc = torch.where((prev > 0) & ~prev_oob, prev, 0)
    p = rec[pc, :4]
    link = mix3(p[:, 2], p[:, 0], p[:, 1])
    exp_chain = torch.where(prev_anchor, ANCHOR_I64, torch.where(prev_reach, link, chain))
    exp_rkv, src_oob = fold_sources(ctx.real_kv_sources, int(ctx.real_kv_hash_mode), sc)

    bits = (prev_reach & (chain != exp_chain)).to(torch.int64) * CHAIN
    bits |= (pos != exp_pos).to(torch.int64) * POS
    bits |= (rkv != exp_rkv).to(torch.int64) * RKV
    if call.check_verify_expected_token:
        bits |= ((exp_tok != -1) & (tok != exp_tok)).to(torch.int64) * TOK
    bits |= (prev_oob | src_oob).to(torch.int64) * OOB
    bits = torch.where(slot_oob, OOB, bits)
    if zero_slot_on(call.extensions):
        marked = slot == ZERO_SLOT_MARK
        bits = torch.where(marked, ZERO, bits)
    else:
        marked = torch.zeros_like(slot_oob)

    zero = torch.zeros_like(slot)
    row = torch.stack(
        [
            torch.full_like(slot, int(ctx.kernel_kind)),
            torch.where(marked, 0, slot),
            torch.where(slot_oob, exp_pos, pos),
            torch.where(slot_oob, -1, tok),
            exp_tok,
            torch.where(slot_oob, zero, chain),
            torch.where(slot_oob, zero, torch.where(prev_oob, prev, exp_chain)),
            bits,
        ],
        dim=1,
    )
    keep = live & (slot != 0) & (bits != 0)
    append_rows(ctx.violation_ring, ctx.violation_write_index, row, keep)
