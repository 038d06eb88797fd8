"""Decode-shaped writes: ``bs`` one-token requests, each continuing its chain, on both GPU backends.

Cases: bs 1, 8, 64, 256 and 1024, with real-KV off and PARTIAL over 1, 2 (one token-major, one paged by 16) and
4 sources, each launch replayed from a CUDA graph (GPU time). The floor beside every figure is, for the same
``bs``, a probe launch doing only what a one-token write cannot avoid: per request the two dependent loads
(offset and seed; then the seed record, token and slot) and one store (benchmarks/floors_cuda.py, measured in
the same run); with real-KV PARTIAL also that probe plus each source's strip at the loaded slot (a third
dependent round: the strips' address is the slot), and the cuda write's ratio to it. Beside each case, the same
write by a kernel shaped like SGLang's published one (one thread per request, tokens and folds serial:
benchmarks/sglang_shape.cu), its records checked equal to the backend's (the run fails otherwise). Targets:
real-KV off at most 2x that probe; PARTIAL at most 0.8x the SGLang-shaped write; Triton at most 1.3x CUDA.

Triton's decode-shaped write with sources launches one program per request, whose chain program folds its
token's strips (``TUNING["write_chain_fold"]``, on by default). ``--fold-programs`` also times Triton's earlier
layout for the same writes (``write_chain_fold = 0``: ``bs x 2`` programs, the chain program and a fold program
per request) beside it, floor the probe with its strips, and prints its ratios to cuda and to the default.

``--write-variants 0,1,3`` also times Triton's write with those ``TUNING["write_variant"]`` bits (0: the kernel
before the latency changes; write.py's docstring) beside the default, and prints each one's ratio to cuda.

``--fold-tiles 256,64`` also times that earlier layout with other real-KV fold tiles (tokens per fold
iteration, ``write_fold_tile_decode``, which only its fold programs use): the tile sets the kernel's registers,
hence how many of the ``bs x 2`` programs are resident at once (``tools/triton_resources.py`` prints that
without a GPU).
"""

from __future__ import annotations

import argparse
import sys
import traceback
from functools import partial
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch

import kvcanary as kc
from benchmarks import floors_cuda as fc
from benchmarks import timing
from benchmarks.report import Report, machine
from kvcanary.context import VerifyOrWriteContext
from kvcanary.testing import builders
from kvcanary_backends.cuda.write import WARPS as WRITE_WARPS
from kvcanary_backends.triton._jit import TUNING
from tools import workloads

DEV = torch.device("cuda")
BACKENDS = ("cuda", "triton")
STRIP = 256  # bytes of K (or V) per token in every source


def sources(num_slots: int, count: int) -> tuple[kc.RealKvSource, ...]:
    """``count`` sources alternating token-major and paged (16 tokens a page), ``STRIP`` bytes a token."""
    g = torch.Generator(device=DEV).manual_seed(count)
    out = []
    for i in range(count):
        page = 1 if i % 2 == 0 else 16
        rows = -(-num_slots // page)
        data = torch.randint(0, 256, (rows, page * STRIP), dtype=torch.uint8, device=DEV, generator=g)
        out.append(kc.RealKvSource(tensor=data, page_size=page, num_bytes_per_token=STRIP, read_bytes=STRIP))
    return tuple(out)


def sglang_shape(ctx: VerifyOrWriteContext, kw: dict[str, Any]) -> tuple[float, bool]:
    """The SGLang-shaped write of ``kw`` (benchmarks/sglang_shape.cu): GPU seconds, and whether it leaves the
    records the cuda backend leaves from the same starting buffer."""
    start = ctx.canary_buf.clone()
    kc.launch_canary_write_kernel(**kw, backend="cuda")
    reference = ctx.canary_buf.clone()
    ctx.canary_buf.copy_(start)
    return fc.sglang_shape_write_cuda(ctx, kw["plan"], kw["input_ids"], kw["positions"], kw["out_cache_loc"],
                                      reference)


def fold_programs(kw: dict[str, Any], tile: int) -> float:
    """GPU seconds of Triton's write ``kw`` in the fold-program layout (``write_chain_fold = 0``) with fold tile
    ``tile``, the launch shapes restored afterwards (a change of ``TUNING`` recompiles once, before timing)."""
    keep = {k: TUNING[k] for k in ("write_chain_fold", "write_fold_tile_decode")}
    TUNING.update(write_chain_fold=0, write_fold_tile_decode=tile)
    try:
        return timing.graph(partial(kc.launch_canary_write_kernel, **kw, backend="triton"), rounds=100)
    finally:
        TUNING.update(keep)


def write_variant(kw: dict[str, Any], variant: int) -> float:
    """GPU seconds of Triton's write ``kw`` with ``TUNING["write_variant"] = variant``, restored afterwards."""
    keep = TUNING["write_variant"]
    TUNING.update(write_variant=variant)
    try:
        return timing.graph(partial(kc.launch_canary_write_kernel, **kw, backend="triton"), rounds=100)
    finally:
        TUNING.update(write_variant=keep)


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--out", default=None, help="write the records here")
    ap.add_argument("--fold-tiles", default="",
                    help="comma-separated fold tiles to time Triton's fold-program layout with (see above)")
    ap.add_argument("--fold-programs", action="store_true",
                    help="also time Triton's decode write with fold programs (write_chain_fold = 0) beside the default")
    ap.add_argument("--write-variants", default="",
                    help="comma-separated TUNING['write_variant'] values to time Triton's write with (see above)")
    args = ap.parse_args()
    variants = [int(v) for v in args.write_variants.split(",") if v]
    fold_tiles = [int(t) for t in args.fold_tiles.split(",") if t]
    default_tile = TUNING["write_fold_tile_decode"]
    if not torch.cuda.is_available():
        print("bench_decode_write: needs a CUDA device", file=sys.stderr)
        return
    r = Report("bench_decode_write", machine(DEV))
    mismatches = 0
    for bs in (1, 8, 64, 256, 1024):
        num_slots = 4 * bs + 64
        locs = torch.randperm(num_slots - 1, device=DEV) + 1
        probe = None
        for nsrc in (0, 1, 2, 4):
            mode = kc.RealKvHashMode.NONE if nsrc == 0 else kc.RealKvHashMode.PARTIAL
            label = "real-KV off" if nsrc == 0 else f"PARTIAL, {nsrc} source{'s' if nsrc > 1 else ''}"
            ctx = builders.context(DEV, num_slots=num_slots, sources=sources(num_slots, nsrc), mode=mode)
            kw = workloads.decode_writes(ctx, locs[bs : 2 * bs], locs[:bs], backend="cuda")
            if probe is None:
                plan = kw["plan"]
                probe = fc.dependent_loads_cuda(plan.write_offsets, plan.write_seed_slot_indices, kw["input_ids"],
                                                kw["out_cache_loc"], ctx.canary_buf.view(torch.int64),
                                                warps_per_block=WRITE_WARPS)
                r.add(f"bs={bs}: dependent-load probe", probe, None, note="two dependent loads and a store")
            probe_kv = None
            if nsrc:
                plan = kw["plan"]
                probe_kv = fc.dependent_loads_kv_cuda(
                    plan.write_offsets, plan.write_seed_slot_indices, kw["input_ids"], kw["out_cache_loc"],
                    ctx.canary_buf.view(torch.int64), [src.tensor for src in ctx.real_kv_sources], stride=STRIP,
                    warps_per_block=WRITE_WARPS)
                r.add(f"bs={bs}: dependent-load probe + {nsrc} strip{'s' if nsrc > 1 else ''}", probe_kv, probe,
                      note="floor: the two-load probe; each source's strip at the loaded slot: a third round")
            times = {}
            for b in BACKENDS:
                times[b] = timing.graph(partial(kc.launch_canary_write_kernel, **kw, backend=b), rounds=100)
                r.add(f"bs={bs} x 1, {label} [{b}, graph]", times[b], probe,
                      target=2.0 if nsrc == 0 else None, note="floor: the dependent-load probe, same bs")
            r.value(f"bs={bs} x 1, {label}: triton / cuda", times["triton"] / times["cuda"], 1.0, unit="x",
                    target=1.3)
            if probe_kv is not None:
                r.value(f"bs={bs} x 1, {label}: cuda / the probe with its strips", times["cuda"] / probe_kv, 1.0,
                        unit="x", note="the same dependent rounds as the write, nothing else")
            try:
                shape, same = sglang_shape(ctx, kw)
            except Exception:  # the backends' figures above still get written; the run fails at the end
                traceback.print_exc()
                mismatches += 1
            else:
                mismatches += not same
                r.add(f"bs={bs} x 1, {label} [SGLang shape, graph]", shape, probe,
                      note="records equal the backend's" if same else "RECORDS DIFFER from the backend's")
                r.value(f"bs={bs} x 1, {label}: cuda / SGLang shape", times["cuda"] / shape, 1.0, unit="x",
                        target=0.8)
            if nsrc and args.fold_programs:
                t = fold_programs(kw, default_tile)
                r.add(f"bs={bs} x 1, {label} [triton, fold programs, graph]", t, probe_kv,
                      note=f"floor: the probe with its strips; default (chain fold): {times['triton'] * 1e6:.2f} us")
                r.value(f"bs={bs} x 1, {label}: triton fold programs / cuda", t / times["cuda"], 1.0, unit="x",
                        target=1.3)
                r.value(f"bs={bs} x 1, {label}: triton chain fold / fold programs", times["triton"] / t, 1.0,
                        unit="x", note="below 1: the chain fold is faster")
            for v in variants:
                t = write_variant(kw, v)
                r.add(f"bs={bs} x 1, {label} [triton, write variant {v}, graph]", t, probe,
                      note=f"default (variant {TUNING['write_variant']}): {times['triton'] * 1e6:.2f} us")
                r.value(f"bs={bs} x 1, {label}: triton write variant {v} / cuda", t / times["cuda"], 1.0, unit="x",
                        target=1.3)
            for tile in fold_tiles if nsrc else ():
                t = fold_programs(kw, tile)
                r.add(f"bs={bs} x 1, {label} [triton, fold programs, fold tile {tile}, graph]", t, probe_kv,
                      note=f"floor: the probe with its strips; default (chain fold): {times['triton'] * 1e6:.2f} us")
                r.value(f"bs={bs} x 1, {label}: triton fold programs, fold tile {tile} / cuda", t / times["cuda"],
                        1.0, unit="x", target=1.3)
    r.write(args.out)
    if mismatches:
        sys.exit(f"bench_decode_write: the SGLang-shaped write failed or left other records in {mismatches} cases")


if __name__ == "__main__":
    main()
