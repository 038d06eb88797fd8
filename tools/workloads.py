"""Benchmark workloads, built on the device with tensor operations and clean (nothing to report), at any
size: :class:`RandomPrevRecords`, :func:`stamp_chains`, :func:`chain_writes`, :func:`decode_writes`,
:class:`PlanBatch`, :func:`scatter_sets`, :func:`byte_sources`.

Development tooling (kvcanary's benchmarks and tests): not part of the installed package.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from kvcanary.consts import (
    CANARY_SLOT_BYTES,
    RealKvHashMode,
)
from kvcanary.context import VerifyOrWriteContext
from kvcanary.launch.write import launch_canary_write_kernel
from kvcanary.plans import VerifyPlan, WritePlan
from kvcanary.sources import RealKvSource
from kvcanary.testing.builders import (
    Device,
    Kwargs,
    context,
    int64_tensor,
    offsets_of,
    plan_kwargs,
    verify_plan,
    write_kwargs,
    write_plan,
)
from kvcanary_backends.torch_ref._hash import mix3, splitmix64
from kvcanary_backends.torch_ref._records import fold_sources

_CHUNK = 1 << 22  # slots stamped per pass, to bound temporaries at any buffer size


def _device_gen(device: Device, seed: int) -> torch.Generator:
    return torch.Generator(device=torch.device(device)).manual_seed(seed)


def byte_sources(num_slots: int, nbpt: int, count: int, device: Device, *, seed: int = 0) -> tuple[RealKvSource, ...]:
    """``count`` token-major real-KV sources (one ``nbpt``-byte strip of random bytes per slot, read whole)."""
    g = _device_gen(device, seed)
    return tuple(RealKvSource(tensor=torch.randint(0, 256, (num_slots, nbpt), dtype=torch.uint8, device=device,
                                                   generator=g),
                              page_size=1, num_bytes_per_token=nbpt, read_bytes=nbpt) for _ in range(count))


class RandomPrevRecords:
    """A canary buffer on ``device`` whose every upper-half slot ``s`` chains to a lower-half slot
    :meth:`prev_of` ``(s)`` (a hash of ``s``): random records, the upper half's chain hashes stamped consistent
    with their predecessors, so any sample of upper-half slots verifies clean and each entry reads two
    independent (cold) records. Real-KV hashes are 0 (mode NONE) until :meth:`stamp_real_kv`."""

    def __init__(self, num_slots: int, device: Device, *, seed: int = 0) -> None:
        self.num_slots, self.half, self.device = num_slots, num_slots // 2, torch.device(device)
        rec = torch.randint(-(2**62), 2**62, (num_slots, 4), dtype=torch.int64, device=device,
                            generator=_device_gen(device, seed))
        rec[:, 3] = 0
        for start in range(self.half, num_slots, _CHUNK):
            s = torch.arange(start, min(num_slots, start + _CHUNK), device=device)
            p = self.prev_of(s)
            rec[s, 2] = mix3(rec[p, 2], rec[p, 0], rec[p, 1])
        self.records = rec
        self.buf = rec.view(torch.uint8).view(num_slots, CANARY_SLOT_BYTES)
        self._stamped: tuple[tuple[int, ...], int] = ((), int(RealKvHashMode.NONE))

    def prev_of(self, slots: torch.Tensor) -> torch.Tensor:
        return 1 + (splitmix64(slots) & ((1 << 62) - 1)) % (self.half - 1)

    def index_sets(self, entries: int, count: int, *, seed: int = 0) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """``count`` sets of (``entries`` random upper-half slots, their predecessors)."""
        g = _device_gen(self.device, seed)
        out = []
        for _ in range(count):
            s = torch.randint(self.half, self.num_slots, (entries,), device=self.device, generator=g)
            out.append((s, self.prev_of(s)))
        return out

    def plan(self, slots: torch.Tensor, prevs: torch.Tensor) -> VerifyPlan:
        """The plan verifying ``slots`` against ``prevs``, expecting their stored positions and tokens."""
        r = self.records[slots]
        return verify_plan(slots, prevs, r[:, 1], r[:, 0])

    def stamp_real_kv(self, sources: Sequence[RealKvSource], mode: RealKvHashMode) -> None:
        """Make the upper half's real-KV hashes those of ``sources`` under ``mode`` (NONE: zero)."""
        key = (tuple(id(s.tensor) for s in sources), int(mode))
        if key == self._stamped:
            return
        for start in range(self.half, self.num_slots, _CHUNK):
            s = torch.arange(start, min(self.num_slots, start + _CHUNK), device=self.device)
            self.records[s, 3] = fold_sources(sources, int(mode), s)[0]
        self._stamped = key

    def context(self, sources: Sequence[RealKvSource] = (), mode: RealKvHashMode = RealKvHashMode.NONE,
                **kw: Any) -> VerifyOrWriteContext:
        """A fresh context over this buffer (ring, counters); stamps the real-KV hashes ``sources`` need."""
        self.stamp_real_kv(sources, mode)
        return context(canary_buf=self.buf, sources=sources, mode=mode, **kw)


def _token_ids(n: int, device: Device) -> torch.Tensor:
    return (torch.arange(n, device=device) * 7919) % 50021


def chain_writes(ctx: VerifyOrWriteContext, lengths: Sequence[int], locs: torch.Tensor, *,
                 seeds: Sequence[int] | torch.Tensor | None = None, start: int = 0) -> Kwargs:
    """Write arguments of requests of ``lengths`` tokens stored at ``locs`` (in order, on ``ctx``'s device):
    each a new chain (seed -1) unless ``seeds`` are given, positions ``start`` onwards in each request."""
    dev = locs.device
    offs = offsets_of(lengths)
    n = offs[-1]
    counts = int64_tensor(lengths, dev)
    positions = torch.arange(n, device=dev) - torch.repeat_interleave(int64_tensor(offs[:-1], dev), counts) + start
    plan = write_plan(offs, [-1] * len(lengths) if seeds is None else seeds, device=dev)
    return write_kwargs(ctx, plan, _token_ids(n, dev), positions, locs[:n].contiguous())


def stamp_chains(ctx: VerifyOrWriteContext, slots: torch.Tensor, length: int, *,
                 backend: str | None = None) -> VerifyPlan:
    """Write ``slots`` as chains of ``length`` tokens (one request each, through the public write launcher,
    ``backend`` forced if given) and return the plan that verifies them: the layout a real batch gives, each
    entry's predecessor the entry before it (a cache hit), positions 0 onwards, the tokens written."""
    n = slots.shape[0] - slots.shape[0] % length
    kw = chain_writes(ctx, [length] * (n // length), slots)
    launch_canary_write_kernel(**kw, backend=backend)
    s = kw["out_cache_loc"]
    pos = kw["positions"]
    return verify_plan(s, torch.where(pos == 0, -1, torch.roll(s, 1)), pos, kw["input_ids"])


def decode_writes(ctx: VerifyOrWriteContext, heads: torch.Tensor, slots: torch.Tensor, *,
                  backend: str | None = None) -> Kwargs:
    """A decode step's write: one token per request at ``slots``, continuing chains whose heads (position 0,
    stamped now by one write through the public launcher) sit at ``heads``; the chain-position assert holds."""
    launch_canary_write_kernel(**chain_writes(ctx, [1] * heads.shape[0], heads), backend=backend)
    return chain_writes(ctx, [1] * slots.shape[0], slots, seeds=heads, start=1)


class PlanBatch:
    """A plan launch's batch on ``device``: ``bs`` requests of ``prefix`` cached tokens and one new token each,
    with ``sets`` req_to_token tensors (and token pools) and plan outputs to use in turn (so that a launch's
    traffic comes from DRAM: four sets of 1 Mi entries are 128 MiB, more than L2 holds)."""

    def __init__(self, bs: int = 256, prefix: int = 4096, sets: int = 1, *, device: Device, pools: bool = False,
                 num_slots: int = 1 << 24, seed: int = 0) -> None:
        cols = prefix + 8
        g = _device_gen(device, seed)
        self.bs, self.prefix, self.entries = bs, prefix, bs * prefix
        self.rpi = torch.arange(1, bs + 1, device=device)
        self.prefix_lens = torch.full((bs,), prefix, dtype=torch.int64, device=device)
        self.extend = torch.ones(bs, dtype=torch.int64, device=device)
        self.rtts = [torch.randint(1, num_slots, (bs + 1, cols), dtype=torch.int32, device=device, generator=g)
                     for _ in range(sets)]
        self.pools = [torch.randint(0, 50000, (bs + 1, cols), dtype=torch.int32, device=device, generator=g)
                      for _ in range(sets if pools else 0)]
        self.valid = torch.full((bs,), cols, dtype=torch.int64, device=device)
        self.vps = [VerifyPlan.allocate(verify_capacity=self.entries, device=device) for _ in range(sets)]
        self.wps = [WritePlan.allocate(write_req_capacity=bs, device=device) for _ in range(sets)]

    def kwargs(self, i: int = 0, *, pool: bool = False, window: int = 0, lut: torch.Tensor | None = None,
               **over: Any) -> Kwargs:
        """A fused plan over set ``i`` (an SWA ``window`` with ``lut``; ``over`` replaces any argument)."""
        kw = plan_kwargs(self.vps[i], self.wps[i], self.rpi, self.prefix_lens, self.extend, self.rtts[i],
                         window=window, lut=lut if window else None, pool=self.pools[i] if pool else None,
                         valid=self.valid if pool else None, capacity=self.entries)
        kw.update(over)
        return kw


def scatter_sets(bs: int, per: int, sets: int, device: Device, *, seed: int = 0) -> list[Kwargs]:
    """``sets`` scatters of ``bs`` requests x ``per`` tokens into pool rows 1..bs, each set in its own memory
    (the same tokens): called in turn, their traffic comes from DRAM."""
    out = []
    for _ in range(sets):
        g = _device_gen(device, seed)
        out.append({"flat_in": torch.randint(0, 1 << 40, (bs * per,), device=device, generator=g),
                    "offsets": torch.arange(bs + 1, device=device) * per,
                    "req_pool_indices": torch.arange(1, bs + 1, device=device),
                    "pool_out": torch.zeros(bs + 1, per, dtype=torch.int32, device=device)})
    return out
