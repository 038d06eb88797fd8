"""A tiny canary world for hand-written cases: write chains with the real launchers, verify entries."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

import torch

import kvcanary as kc
from kvcanary.testing import builders


@dataclass
class World:
    num_slots: int = 16
    ring: int = 16
    mode: kc.RealKvHashMode = kc.RealKvHashMode.ALL
    nbpt: int = 32
    read_bytes: int = 32
    source_rows: int | None = None
    backend: str = "torch_ref"
    cpa: int = 1
    kv: torch.Tensor = field(init=False)
    ctx: kc.VerifyOrWriteContext = field(init=False)

    def __post_init__(self) -> None:
        rows = self.num_slots if self.source_rows is None else self.source_rows
        g = torch.Generator().manual_seed(7)
        self.kv = torch.randint(0, 256, (rows, self.nbpt), dtype=torch.uint8, generator=g)
        src = kc.RealKvSource(tensor=self.kv, page_size=1, num_bytes_per_token=self.nbpt, read_bytes=self.read_bytes)
        self.ctx = builders.context(num_slots=self.num_slots, ring=self.ring, sources=[src], mode=self.mode,
                              chain_assert=bool(self.cpa))

    @property
    def records(self) -> torch.Tensor:
        return self.ctx.canary_buf.view(torch.int64)

    def write(self, requests: list[tuple[int, list[int], list[int], list[int]]], *,
              expected: tuple[list[int], list[int]] | None = None) -> None:
        """``requests``: (seed, slots, tokens, positions) each; all tokens flattened in order."""
        offsets, seeds, locs, toks, poss = [0], [], [], [], []
        for seed, slots, tokens, positions in requests:
            seeds.append(seed)
            locs += slots
            toks += tokens
            poss += positions
            offsets.append(len(locs))
        def t(x: list[int]) -> torch.Tensor:
            return torch.tensor(x, dtype=torch.int64)

        kw = builders.write_kwargs(self.ctx, builders.write_plan(offsets, seeds), t(toks), t(poss), t(locs),
                             expected_tokens=t(expected[0]) if expected else None,
                             expected_positions=t(expected[1]) if expected else None)
        kc.launch_canary_write_kernel(**kw, backend=self.backend)

    def verify(self, entries: list[tuple[int, int, int, int]], *, check: bool = False, num_valid: int | None = None,
               enable: int = 1, capacity: int | None = None) -> None:
        """``entries``: (slot, prev, expected position, expected token) each."""
        cap = capacity if capacity is not None else max(1, len(entries))
        arr = torch.zeros(cap, 4, dtype=torch.int64)
        if entries:
            arr[: len(entries)] = torch.tensor(entries, dtype=torch.int64)
        plan = builders.verify_plan(arr[:, 0], arr[:, 1], arr[:, 2], arr[:, 3],
                              num_valid=len(entries) if num_valid is None else num_valid, enable=enable)
        kc.launch_canary_verify_kernel(context=self.ctx, plan=plan, check_verify_expected_token=check,
                                       backend=self.backend)

    def take(self) -> list[kc.Violation]:
        """Every violation recorded so far (in ring order), then reset the ring."""
        n = int(self.ctx.violation_write_index[0])
        rows = self.ctx.violation_ring[: min(n, self.ring)].tolist()
        self.ctx.violation_ring.zero_()
        self.ctx.violation_write_index.zero_()
        return [kc.Violation.from_row(r) for r in rows]

    def with_mode(self, mode: kc.RealKvHashMode) -> None:
        self.ctx = dataclasses.replace(self.ctx, real_kv_hash_mode=mode)


def bits(vs: list[kc.Violation]) -> list[int]:
    return [v.fail_reason_bits for v in vs]
