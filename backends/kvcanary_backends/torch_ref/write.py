"""write: stamp one record per written token, chaining each request from its seed slot.

For request rows ``r < clamp(num_valid_reqs, 0, capacity)`` (nothing at all when
``write_offsets[that] <= 0``, SGLang's early exit), tokens ``[offsets[r], offsets[r+1])`` clipped to the
token arrays; tokens with ``out_cache_loc < 0`` are skipped without advancing the chain. The running hash
starts at ``mix3`` of the seed's record (the anchor hash for a negative seed) and advances on the actual
token and position. Per token, rows are recorded in this order:

1. a slot past the buffer: one INDEX_OUT_OF_RANGE row, no store (the chain still advances);
2. the input assert (WRITE_TOKEN / WRITE_POSITION against the oracle's expected tensors);
3. the chain-position assert (seed in range and ``enable_chain_position_assert``): ``pos == prev + 1``;
4. a real-KV strip outside its source: INDEX_OUT_OF_RANGE (that source folds as 0).

5. with the WRITE_SLOT_MISMATCH extension, for a request row ``r < len(req_pool_indices)`` whose pool row
   is not the padding row: ``out_cache_loc`` (any advancing token, in the buffer or not) differs from
   ``req_to_token[req_pool_indices[r], position]`` (read and translated by the plan's rules, INVALID_SLOT
   outside the table): WRITE_SLOT_MISMATCH with ``expected_aux`` = that slot.
6. with the WRITE_SLOT_OWNER_MISMATCH extension, for the same request rows: a stored token (slot in the
   buffer) whose holder ``slot_owner[out_cache_loc]`` is not the writer ``req_pool_indices[r]`` (another
   request's row, -1 free, below -1 read-only): WRITE_SLOT_OWNER_MISMATCH with ``expected_token`` = the
   writer's row and ``expected_aux`` = the holder.

A seed of INVALID_SLOT or past the buffer records one INDEX_OUT_OF_RANGE row (slot = the seed,
``expected_aux`` = the request row) and starts from the anchor without the position assert. Seeds are read
before anything is written. Records are always stored, even after a violation.
"""

from __future__ import annotations

import torch

from kvcanary.consts import INVALID_SLOT, REQ_POOL_IDX_PADDING
from kvcanary.extensions import write_owner_on, write_slot_on
from kvcanary.ops.write import WRITE, WriteLaunch
from kvcanary_backends.torch_ref._hash import ANCHOR_I64, mix3
from kvcanary_backends.torch_ref._plan_common import read_slot
from kvcanary_backends.torch_ref._records import OOB, WOWN, WPOS, WSLOT, WTOK, append_rows, fold_sources, records


@WRITE.kernel("torch_ref", host_sync=True, notes="loops over the longest request's tokens; sizes the loop on the host")
def write(call: WriteLaunch) -> None:
    ctx = call.context
    ctx.kernel_run_counter.add_(1)
    cap = call.plan.write_seed_slot_indices.shape[0]
    nreq = min(max(int(call.plan.write_num_valid_reqs[0]), 0), cap)
    if nreq == 0:
        return
    offsets = call.plan.write_offsets[: nreq + 1]
    if int(offsets[nreq]) <= 0:
        return
    dev = ctx.canary_buf.device
    ntok = call.input_ids.shape[0]
    starts = offsets[:nreq].clamp(0, ntok)
    ends = offsets[1:].clamp(0, ntok)
    counts = (ends - starts).clamp(min=0)
    width = int(counts.max()) if nreq else 0
    if width == 0:
        return

    rec = records(ctx.canary_buf)
    num_slots = rec.shape[0]
    kind = int(ctx.kernel_kind)

    # seeds (read before any store)
    seed = call.plan.write_seed_slot_indices[:nreq]
    seed_oob = (seed == INVALID_SLOT) | (seed >= num_slots)
    seed_ok = (seed >= 0) & ~seed_oob
    s = rec[torch.where(seed_ok, seed, 0), :4]
    running = torch.where(seed_ok, mix3(s[:, 2], s[:, 0], s[:, 1]), ANCHOR_I64)
    pos_assert = seed_ok & (ctx.enable_chain_position_assert[0] != 0)

    # the [request, j] grid of tokens
    j = torch.arange(width, device=dev)
    valid = j[None, :] < counts[:, None]
    idx = torch.where(valid, starts[:, None] + j[None, :], 0)
    loc = call.out_cache_loc[idx]
    tok = call.input_ids[idx]
    pos = call.positions[idx]
    adv = valid & (loc >= 0)
    loc_oob = adv & (loc >= num_slots)
    store = adv & ~loc_oob

    # running hash before each token: serial in j, vectorized over requests
    hashes = torch.empty_like(tok)
    for k in range(width):
        hashes[:, k] = running
        running = torch.where(adv[:, k], mix3(running, tok[:, k], pos[:, k]), running)

    # position of the previous advancing token (or of the seed)
    marks = torch.where(adv, j[None, :].expand_as(adv), -1)
    last = torch.cummax(marks, dim=1).values
    before = torch.cat([torch.full_like(last[:, :1], -1), last[:, :-1]], dim=1)
    prev_pos = torch.where(before >= 0, torch.gather(pos, 1, before.clamp(min=0)), s[:, 1:2].expand_as(pos))

    rkv_flat, src_oob_flat = fold_sources(ctx.real_kv_sources, int(ctx.real_kv_hash_mode),
                                          torch.where(store, loc, 0).reshape(-1))
    rkv = rkv_flat.view_as(loc)
    src_oob = src_oob_flat.view_as(loc) & store

    kcol = torch.full_like(loc, kind)
    oob_row = torch.stack([kcol, loc, pos, tok, tok, hashes, pos, torch.full_like(loc, OOB)], dim=-1)
    if call.enable_write_input_assert:
        assert call.expected_input_tokens is not None and call.expected_input_positions is not None
        etok = call.expected_input_tokens[idx]
        epos = call.expected_input_positions[idx]
        ibits = (tok != etok).to(torch.int64) * WTOK | (pos != epos).to(torch.int64) * WPOS
        in_row = torch.stack([kcol, loc, pos, tok, etok, hashes, epos, ibits], dim=-1)
        in_keep = store & (ibits != 0)
    else:
        in_row = oob_row
        in_keep = torch.zeros_like(store)
    cp_keep = store & pos_assert[:, None] & (pos != prev_pos + 1)
    cp_row = torch.stack([kcol, loc, pos, tok, tok, hashes, prev_pos + 1, torch.full_like(loc, WPOS)], dim=-1)
    kinds, kinds_keep = [oob_row, in_row, cp_row, oob_row], [loc_oob, in_keep, cp_keep, src_oob]
    if write_slot_on(call.extensions) or write_owner_on(call.extensions):
        assert call.req_pool_indices is not None
        rpi = call.req_pool_indices
        r = torch.arange(nreq, device=dev)
        has_row = r < rpi.shape[0]
        padded = torch.cat([rpi, torch.zeros(1, dtype=rpi.dtype, device=dev)])  # row past the end: padding
        rp = padded[r.clamp(max=rpi.shape[0])]
        checked = (has_row & (rp != REQ_POOL_IDX_PADDING))[:, None]
        writer = rp[:, None].expand_as(pos)
    if write_slot_on(call.extensions):
        assert call.req_to_token is not None
        want = read_slot(call.req_to_token, call.full_to_swa_index_mapping, writer, pos)
        kinds.append(torch.stack([kcol, loc, pos, tok, tok, hashes, want, torch.full_like(loc, WSLOT)], dim=-1))
        kinds_keep.append(adv & checked & (loc != want))
    if write_owner_on(call.extensions):
        assert call.slot_owner is not None
        holder = call.slot_owner[torch.where(store, loc, 0)]
        kinds.append(torch.stack([kcol, loc, pos, tok, writer, hashes, holder, torch.full_like(loc, WOWN)], dim=-1))
        kinds_keep.append(store & checked & (holder != writer))
    rows = torch.stack(kinds, dim=2)  # [req, j, kinds, 8]
    keep = torch.stack(kinds_keep, dim=2)

    seed_row = torch.stack(
        [torch.full_like(seed, kind), seed, torch.full_like(seed, -1), torch.full_like(seed, -1),
         torch.full_like(seed, -1), torch.zeros_like(seed), torch.arange(nreq, device=dev),
         torch.full_like(seed, OOB)], dim=-1)
    seed_keep = seed_oob & (counts > 0)
    all_rows = torch.cat([seed_row[:, None, :], rows.reshape(nreq, -1, 8)], dim=1).reshape(-1, 8)
    all_keep = torch.cat([seed_keep[:, None], keep.reshape(nreq, -1)], dim=1).reshape(-1)

    # store every in-range record (even after a violation)
    fields = torch.stack([tok, pos, hashes, rkv], dim=-1)[store]
    rec[loc[store], :4] = fields
    ctx.slot_run_counter.add_(store.sum())
    append_rows(ctx.violation_ring, ctx.violation_write_index, all_rows, all_keep)
