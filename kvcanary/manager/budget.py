"""A verification budget: verify at most ``max_entries`` plan entries per launch, rotating through the live set.

Full verification re-reads every live slot's records at HEAD and TAIL of every forward. With a budget, the
plan the plan kernels build is filtered on the device (one launch of ``launch_verify_budget_kernel``, whose
work is proportional to the entries kept: no host read, capturable) into a smaller plan that the verify
launches of the step share. Each request keeps:

- its newest ``newest_per_request`` entries, every step (the tokens attention has just started to read,
  and the write chain's seed);
- a window of ``stride`` further entries from a cursor kept per request row (a token position, so a sliding
  window's dropped entries never shift it), advanced by ``stride`` every step (none when the full plan
  overflowed) and wrapping over the request's older entries.

So a request whose older entries number at most ``M`` has each of them verified at least once every
``ceil(M / stride) + 1`` steps (:meth:`VerifyBudget.period`); sliding-window requests, whose entries shift by
their extend length ``E`` per step, every ``ceil(M / (stride - E)) + 1`` steps. A step keeps at most
:meth:`VerifyBudget.entries_bound` entries, more than ``max_entries`` when the batch is too large for
``newest + 1`` entries per request within it; the filter has room for that at every batch size the engine
declared, so no request is ever cut off. With layer rotation over ``G`` sets, a request's cursor moves once
every ``G`` of the forwards it has entries in (each window is read in ``G`` forwards: against every set when they
are consecutive), so the period, counted in the request's own forwards, is ``G`` times as long.
"""

from __future__ import annotations

import functools
import importlib
import math
import types
from dataclasses import dataclass

import torch

from kvcanary.constructors.budget import validate_verify_budget
from kvcanary.launch.budget import launch_verify_budget_kernel
from kvcanary.ops.budget import empty_batch
from kvcanary.plans import VerifyPlan


@dataclass(frozen=True, kw_only=True)
class VerifyBudget:
    """At most ``max_entries`` verify entries per launch; ``newest_per_request`` always verified per request."""

    max_entries: int
    newest_per_request: int = 2

    def __post_init__(self) -> None:
        validate_verify_budget(self)  # the rules: kvcanary/constructors/budget.py

    def stride(self, batch_size: int) -> int:
        """Older entries verified per request per step at ``batch_size`` requests (at least 1)."""
        if batch_size <= 0:  # refused: period's batch_size_positive rule raises, with its code
            _checks().check_period(self=self, batch_size=batch_size, max_verify_len=0, slide=0)
        return max(self.max_entries // batch_size - self.newest_per_request, 1)

    def entries_bound(self, batch_size: int) -> int:
        """The most entries one step verifies: ``batch_size * (stride + newest)`` (at most ``max_entries`` when
        ``max_entries >= batch_size * (newest + 1)``)."""
        return batch_size * (self.stride(batch_size) + self.newest_per_request)

    def period(self, *, batch_size: int, max_verify_len: int, slide: int = 0) -> int:
        """Steps within which every live entry is verified at least once: requests of at most
        ``max_verify_len`` verify entries, whose entries shift by ``slide`` per step (sliding windows)."""
        _checks().check_period(self=self, batch_size=batch_size, max_verify_len=max_verify_len, slide=slide)
        step = self.stride(batch_size) - slide
        older = max(max_verify_len - self.newest_per_request, 0)
        return math.ceil(older / step) + 1


class BudgetFilter:
    """The device-side filter of one forward slot's verify plan (buffers allocated once).

    One launch per forward (``launch_verify_budget_kernel``, on ``backend``: None lets the registry pick),
    whose work is proportional to the batch and to the entries kept, never to the full plan's: a budget of 1/16
    of the live entries reads 1/16 of them."""

    def __init__(self, budget: VerifyBudget, *, num_rows: int, device: torch.device,
                 max_batch: int = 1, backend: str | None = None) -> None:
        self.budget = budget
        # room for the most one step keeps at any batch size up to max_batch (entries_bound): max_entries, or
        # more when the batch is too large for every request's newest entries and one older one to fit
        cap = max(budget.max_entries, max_batch * (budget.newest_per_request + 1))
        self.capacity = cap
        self._ext = [torch.zeros(cap, dtype=torch.int64, device=device) for _ in range(4)]
        self._ext[1].fill_(-1)
        self.plan = VerifyPlan(
            verify_slot_indices=self._ext[0], verify_expected_tokens=self._ext[1],
            verify_expected_positions=self._ext[2], verify_prev_slot_indices=self._ext[3],
            verify_num_valid=torch.zeros(1, dtype=torch.int32, device=device),
            enable=torch.ones(1, dtype=torch.int32, device=device))
        self.cursor = torch.zeros(num_rows, dtype=torch.int64, device=device)
        """Per request row: where its older-entries window starts next step."""
        self._one = torch.ones(1, dtype=torch.int64, device=device)
        """``advance`` when the cursors move every step (no layer rotation)."""
        self.seen = torch.zeros(num_rows, dtype=torch.int64, device=device)
        """Per request row: the forwards it had entries in (counted only with ``rounds`` > 1)."""
        self._backend = backend

    def apply(self, full: VerifyPlan, *, batch_size: int, req_pool_indices: torch.Tensor,
              advance: torch.Tensor | None = None, stride: int | None = None,
              skipped_verifies: torch.Tensor | None = None, rounds: int = 1) -> VerifyPlan:
        """Fill :attr:`plan` from ``full`` (built by the plan kernels for ``batch_size`` requests, with its
        offsets scratch) and advance the cursors. Returns :attr:`plan`.

        ``stride`` (None: ``budget.stride(batch_size)``) is the stride of the forward's real batch size when
        ``batch_size`` counts padding rows too (a bucket of the manager's CUDA graphs): padding rows hold
        no entries, so the kept entries are those of the unpadded forward.

        ``advance`` (a device int64 scalar, 0 or 1; None: 1) says whether the cursors move this step at all
        (the rows ``rounds`` holds stay whatever it says).

        ``skipped_verifies`` (the manager's overflow counter, a device int64 of shape (1,); None: not counted)
        gains ``1 - full.enable`` in the same launch: the full plan's overflow, counted once per call, an
        empty forward included, so the caller launches no count of its own.

        ``rounds`` (layer rotation's ``G``; 1: none) holds each request's window for ``rounds`` of the forwards
        that request has entries in: a row's cursor moves in its ``rounds``-th such forward, counted per row
        (:attr:`seen`), so a request that is not in every forward (an engine alternating requests, one joining
        mid-round) still has its window moved, and one in consecutive forwards has each window read against
        every set. Device work only (a few torch ops around the launch, captured with it)."""
        scratch = full.verify_offsets_scratch
        if scratch is None:
            raise ValueError("kv-canary: a verification budget needs the plan's verify_offsets_scratch")
        if batch_size == 0:  # an empty forward: what the launch of no request does, without launching
            empty_batch(out_verify_num_valid=self.plan.verify_num_valid, out_verify_enable=self.plan.enable,
                        verify_enable=full.enable, skipped_verifies=skipped_verifies)
            return self.plan
        stride = self.budget.stride(batch_size) if stride is None else stride
        rows = req_pool_indices[:batch_size].to(torch.int64)
        if rounds > 1:  # the launch clamps rows into the table; the hold indexes with the same rows
            rows = rows.clamp(0, self.cursor.numel() - 1)
        held = self._hold(rows, scratch, full.enable, batch_size, rounds) if rounds > 1 else None
        launch_verify_budget_kernel(
            req_pool_indices=rows, verify_offsets_scratch=scratch,
            verify_slot_indices=full.verify_slot_indices, verify_expected_tokens=full.verify_expected_tokens,
            verify_expected_positions=full.verify_expected_positions,
            verify_prev_slot_indices=full.verify_prev_slot_indices, verify_num_valid=full.verify_num_valid,
            verify_enable=full.enable, cursor=self.cursor, advance=self._one if advance is None else advance.view(1),
            out_verify_slot_indices=self._ext[0], out_verify_expected_tokens=self._ext[1],
            out_verify_expected_positions=self._ext[2], out_verify_prev_slot_indices=self._ext[3],
            out_verify_num_valid=self.plan.verify_num_valid, out_verify_enable=self.plan.enable,
            newest_per_request=self.budget.newest_per_request, stride=stride, skipped_verifies=skipped_verifies,
            backend=self._backend)
        if held is not None:  # the rows whose turn has not come: their move taken back
            before, hold = held
            self.cursor.index_add_(0, rows, self.cursor.index_select(0, rows).sub_(before).mul_(hold).neg_())
        return self.plan

    def _hold(self, rows: torch.Tensor, scratch: torch.Tensor, enable: torch.Tensor, batch_size: int,
              rounds: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Before the launch, with rotation: each row's cursor, and whether the row keeps it this forward (it has
        entries and this is not its ``rounds``-th forward with entries since it last moved); counts the forward
        in :attr:`seen`. A row of no entries (a padding row, a first chunk) neither counts nor is held (the
        launch leaves its cursor), so padding rows naming a real request's row never undo its move; nor does a
        forward whose full plan overflowed (``enable`` 0: it verifies nothing, and the launch moves no cursor).
        ``rows`` are clamped into the cursor table as the launch clamps them."""
        present = scratch[1 : batch_size + 1].sub(scratch[:batch_size]).gt_(0).to(torch.int64).mul_(enable)
        seen = self.seen.index_select(0, rows)
        hold = torch.remainder(seen, rounds).ne_(rounds - 1).to(torch.int64).mul_(present)
        self.seen.index_add_(0, rows, present)
        return self.cursor.index_select(0, rows), hold


@functools.cache
def _checks() -> types.ModuleType:
    """The contract of :meth:`VerifyBudget.period` (whose batch rule :meth:`VerifyBudget.stride` shares),
    imported on first use: it names this module's class."""
    return importlib.import_module("kvcanary.constructors.budget_methods")
