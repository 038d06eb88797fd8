"""Larger parity calls (engine-sized): verify over stamped chains, long writes, big plans.

Each builder returns a :class:`~kvcanary.testing.scenarios.Call` whose ``make(device)`` copies CPU master
tensors to the device, so ``parity.check_call`` runs torch_ref on the CPU and triton on the device on
identical inputs. Sizes are arguments: the GPU tests use engine-like sizes, the CPU suite runs the same
builders tiny (through the interpreter) so that they are exercised everywhere.
"""

from __future__ import annotations

import random
from typing import Any

import torch

import kvcanary as kc
from kvcanary.hashing import ANCHOR_HASH, to_int64
from kvcanary.testing.scenarios import Call, Device

_OUT = ("canary_buf", "violation_ring", "violation_write_index", "slot_run_counter", "kernel_run_counter")


def _gen(rng: random.Random) -> torch.Generator:
    g = torch.Generator()
    g.manual_seed(rng.getrandbits(62))
    return g


def _sources(rng: random.Random, num_slots: int, count: int) -> list[tuple[torch.Tensor, int, int, int]]:
    """``count`` sources: (bytes, page_size, num_bytes_per_token, read_bytes), every slot inside."""
    out = []
    for _ in range(count):
        page = rng.choice([1, 1, 4])
        nbpt = rng.choice([16, 64, 128])
        read = rng.randrange(16, nbpt + 1, 16)
        data = torch.randint(0, 256, (-(-num_slots // page), page * nbpt), dtype=torch.uint8, generator=_gen(rng))
        out.append((data, page, nbpt, read))
    return out


def _context(dev: Device, buf: torch.Tensor, sources: list[tuple[torch.Tensor, int, int, int]],
             mode: kc.RealKvHashMode, ring: int) -> kc.VerifyOrWriteContext:
    return kc.VerifyOrWriteContext(
        canary_buf=buf.clone().to(dev), kernel_kind=kc.CanaryLaunchTag.TAIL_K_FULL,
        violation_ring=torch.zeros(ring, 8, dtype=torch.int64, device=dev),
        violation_write_index=torch.zeros(1, dtype=torch.int32, device=dev),
        slot_run_counter=torch.zeros(1, dtype=torch.int64, device=dev),
        kernel_run_counter=torch.zeros(1, dtype=torch.int64, device=dev),
        real_kv_sources=tuple(kc.RealKvSource(tensor=d.clone().to(dev), page_size=p, num_bytes_per_token=n,
                                              read_bytes=r) for d, p, n, r in sources),
        real_kv_hash_mode=mode, enable_chain_position_assert=torch.ones(1, dtype=torch.int32, device=dev))


def _outputs(kw: dict[str, Any]) -> dict[str, torch.Tensor]:
    ctx: kc.VerifyOrWriteContext = kw["context"]
    return {k: getattr(ctx, k) for k in _OUT}


def _requests(rng: random.Random, num_slots: int, nreq: int, length: int) -> tuple[list[list[int]], list[int]]:
    """Disjoint slot lists (one per request) and their tokens, flattened."""
    slots = torch.randperm(num_slots - 1, generator=_gen(rng))[: nreq * length] + 1
    reqs = [slots[r * length : (r + 1) * length].tolist() for r in range(nreq)]
    return reqs, [rng.randint(0, 2**31) for _ in range(nreq * length)]


def write_call(rng: random.Random, *, num_slots: int, nreq: int, length: int, mode: kc.RealKvHashMode,
               num_sources: int, ring: int = 4096) -> Call:
    """One write of ``nreq`` requests of ``length`` tokens (chunked continuation from seeds for half)."""
    reqs, tokens = _requests(rng, num_slots, nreq, length + 1)
    srcs = _sources(rng, num_slots, num_sources)
    buf = torch.zeros(num_slots, kc.CANARY_SLOT_BYTES, dtype=torch.uint8)
    seeds, ids, pos, locs, offs = [], [], [], [], [0]
    for r, slots in enumerate(reqs):
        cont = r % 2 == 1  # continue from slot 0 of the list (stamped below as a chain head)
        seeds.append(slots[0] if cont else -1)
        for k, s in enumerate(slots[1:]):
            ids.append(tokens[r * (length + 1) + k])
            pos.append(k + 1 if cont else k)
            locs.append(s if rng.random() < 0.98 else -1)
        offs.append(len(ids))
        if cont:  # a valid chain head at position 0 in the seed slot
            rec = torch.tensor([7, 0, to_int64(ANCHOR_HASH), 0], dtype=torch.int64)
            buf[slots[0]] = rec.view(torch.uint8)

    def make(dev: Device) -> dict[str, Any]:
        def t(xs: list[int]) -> torch.Tensor:
            return torch.tensor(xs, dtype=torch.int64, device=dev)

        plan = kc.WritePlan(write_offsets=t(offs), write_seed_slot_indices=t(seeds),
                            write_num_valid_reqs=torch.tensor([nreq], dtype=torch.int32, device=dev))
        return {"context": _context(dev, buf, srcs, mode, ring), "plan": plan, "input_ids": t(ids),
                "positions": t(pos), "out_cache_loc": t(locs), "enable_write_input_assert": False,
                "expected_input_tokens": None, "expected_input_positions": None}

    return Call(kc.Op.WRITE, make, _outputs, 0, label=f"write {nreq}x{length}")


def verify_call(rng: random.Random, *, num_slots: int, nreq: int, length: int, mode: kc.RealKvHashMode,
                num_sources: int, corruptions: int, ring: int = 4096) -> Call:
    """Chains stamped by torch_ref's write, some bytes flipped, then a verify of every chain slot."""
    reqs, tokens = _requests(rng, num_slots, nreq, length)
    srcs = _sources(rng, num_slots, num_sources)
    stamp = _context("cpu", torch.zeros(num_slots, kc.CANARY_SLOT_BYTES, dtype=torch.uint8), srcs, mode, 16)
    flat = [s for slots in reqs for s in slots]

    def t(xs: list[int]) -> torch.Tensor:
        return torch.tensor(xs, dtype=torch.int64)

    kc.launch_canary_write_kernel(
        context=stamp, plan=kc.WritePlan(write_offsets=t([length * r for r in range(nreq + 1)]),
                                         write_seed_slot_indices=t([-1] * nreq),
                                         write_num_valid_reqs=torch.tensor([nreq], dtype=torch.int32)),
        input_ids=t(tokens), positions=t([k for _ in reqs for k in range(length)]), out_cache_loc=t(flat),
        enable_write_input_assert=False, expected_input_tokens=None, expected_input_positions=None,
        backend="torch_ref")
    buf = stamp.canary_buf
    for _ in range(corruptions):
        s = rng.choice(flat)
        buf[s, rng.randrange(kc.CANARY_SLOT_BYTES)] ^= 1 << rng.randrange(8)
    for data, page, nbpt, _ in srcs:
        if rng.random() < 0.5:
            s = rng.choice(flat)
            data[s // page, (s % page) * nbpt + rng.randrange(16)] ^= 0x21
    entries = [(s, slots[k - 1] if k else -1, k, tokens[r * length + k])
               for r, slots in enumerate(reqs) for k, s in enumerate(slots)]
    entries += [(0, -1, 0, -1), (num_slots + 5, 3, 1, -1), (flat[0], kc.INVALID_SLOT, 1, -1)]
    rng.shuffle(entries)
    cap = len(entries) + 7
    arr = torch.zeros(cap, 4, dtype=torch.int64)
    arr[: len(entries)] = torch.tensor(entries, dtype=torch.int64)

    def make(dev: Device) -> dict[str, Any]:
        plan = kc.VerifyPlan(
            verify_slot_indices=arr[:, 0].contiguous().to(dev), verify_prev_slot_indices=arr[:, 1].contiguous().to(dev),
            verify_expected_positions=arr[:, 2].contiguous().to(dev),
            verify_expected_tokens=arr[:, 3].contiguous().to(dev),
            verify_num_valid=torch.tensor([len(entries)], dtype=torch.int32, device=dev),
            enable=torch.ones(1, dtype=torch.int32, device=dev))
        return {"context": _context(dev, buf, srcs, mode, ring), "plan": plan, "check_verify_expected_token": True}

    return Call(kc.Op.VERIFY, make, _outputs, 0, label=f"verify {len(entries)}")


def plan_call(rng: random.Random, *, bs: int, max_seq: int, num_slots: int, swa: int, with_pool: bool) -> Call:
    """A plan over ``bs`` rows with prefixes up to ``max_seq`` (SWA LUT when ``swa > 0``)."""
    max_reqs = bs + 3
    g = _gen(rng)
    r2t = torch.randint(0, num_slots, (max_reqs, max_seq), dtype=torch.int32, generator=g)
    rpi = [rng.randrange(1, max_reqs) if rng.random() < 0.9 else 0 for _ in range(bs)]
    prefix = [rng.randint(0, max_seq) for _ in range(bs)]
    extend = [rng.choice([0, 1, rng.randint(1, 64)]) for _ in range(bs)]
    lut = torch.randint(-1, num_slots, (num_slots - 3,), dtype=torch.int64, generator=g) if swa else None
    pool = torch.randint(0, 50000, (max_reqs, max_seq + 1), dtype=torch.int32, generator=g) if with_pool else None
    valid = torch.tensor([rng.randint(0, max_seq + 1) for _ in range(bs)], dtype=torch.int64) if with_pool else None
    total = sum(max(0, p - (max(0, p - swa) if swa else 0)) for p, r in zip(prefix, rpi, strict=True) if r != 0)
    cap = max(1, total + 11)
    offset = rng.choice([0, 1])

    def make(dev: Device) -> dict[str, Any]:
        vp = kc.VerifyPlan.allocate(verify_capacity=cap, device=dev)
        wp = kc.WritePlan.allocate(write_req_capacity=bs + 2, device=dev)
        return {
            "verify_plan_out": vp, "write_plan_out": wp,
            "req_pool_indices": torch.tensor(rpi, dtype=torch.int64, device=dev),
            "prefix_lens": torch.tensor(prefix, dtype=torch.int64, device=dev),
            "extend_seq_lens": torch.tensor(extend, dtype=torch.int64, device=dev),
            "req_to_token": r2t.to(dev), "swa_window_size": swa,
            "full_to_swa_index_mapping": None if lut is None else lut.to(dev), "verify_capacity": cap,
            "req_to_verify_expected_tokens": None if pool is None else pool.to(dev),
            "req_to_verify_expected_tokens_valid_lens": None if valid is None else valid.to(dev),
            "kv_token_id_vs_position_offset": offset,
        }

    def outputs(kw: dict[str, Any]) -> dict[str, torch.Tensor]:
        vp: kc.VerifyPlan = kw["verify_plan_out"]
        wp: kc.WritePlan = kw["write_plan_out"]
        n = int(vp.verify_num_valid[0])  # entries past num_valid are left uninitialised by allocate
        return {"num_valid": vp.verify_num_valid, "enable": vp.enable,
                "slots": vp.verify_slot_indices[:n], "tokens": vp.verify_expected_tokens[:n],
                "positions": vp.verify_expected_positions[:n], "prev": vp.verify_prev_slot_indices[:n],
                "write_offsets": wp.write_offsets, "seeds": wp.write_seed_slot_indices[:bs],
                "num_reqs": wp.write_num_valid_reqs, "scratch": vp.verify_offsets_scratch[: bs + 1]}  # type: ignore[index]

    return Call(kc.Op.PLAN, make, outputs, label=f"plan bs={bs}")
