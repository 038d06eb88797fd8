"""Registers of the Triton write kernel's specializations, compiled for a Hopper GPU without one.

Triton compiles ahead of time for a named target (``GPUTarget("cuda", 90, 32)``) with the ``ptxas`` its
wheel ships, so the register count of every specialization, and from it how many programs an SM holds at
once, can be read on a machine with no GPU. For a decode-shaped write (``bs`` one-token requests, grid
``bs x F`` with ``F = 2`` when real-KV sources are folded) this says whether the whole grid is resident in
one wave or needs two, which the GPU benchmark (``benchmarks/bench_decode_write.py --fold-tiles``) then
measures.

    python tools/triton_resources.py [--sms 132] [--bs 1024] [--tiles 256,128,64,32]
    python tools/triton_resources.py --plan     # the fused plan kernel's registers and resident programs
"""

from __future__ import annotations

import argparse
import inspect
import re
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource

from benchmarks.before import triton_plan as before_plan
from kvcanary_backends.triton import plan as triton_plan
from kvcanary_backends.triton import write as triton_write
from kvcanary_backends.triton._jit import TUNING

# sm_90 limits (CUDA occupancy rules): registers are allocated per warp in units of 256
REGS_PER_SM, MAX_BLOCKS, MAX_WARPS, REG_UNIT = 65536, 32, 64, 256
POINTERS = {"buf": "*u8", "ring": "*i64", "write_index": "*i32", "slot_counter": "*i64", "kernel_counter": "*i64",
            "chain_assert": "*i32", "offsets": "*i64", "seeds": "*i64", "num_valid_reqs": "*i32",
            "input_ids": "*i64", "positions": "*i64", "out_cache_loc": "*i64"}
SOURCE_ARG = re.compile(r"^([srwptn])(\d)$")


def write_signature(nsrc: int, partial: bool, fold_tile: int, chain_fold: bool = False
                    ) -> tuple[dict[str, str], dict[str, Any]]:
    """Argument types and constexprs of the write kernel as the backend launches it (input assert and the
    write-slot check off: arguments the kernel never reads are constexpr None); ``chain_fold``: the decode
    layout whose chain program folds its own strips (no fold programs)."""
    consts = {"ASSERT": False, "NUM_SOURCES": nsrc, "PARTIAL": partial, "TILE": TUNING["write_tile"],
              "FOLD_TILE": fold_tile, "SLOT_CHECK": False, "SLOT_LUT": False, "OWNER_CHECK": False,
              "WRITER_ROWS": False, "EARLY_FOLD": fold_tile < TUNING["write_fold_tile"] and not chain_fold,
              "CHAIN_FOLD": chain_fold, "SEM": "relaxed" if TUNING["write_variant"] & 1 else "acq_rel",
              "LEAN": bool(TUNING["write_variant"] & 2),
              "GUESS": chain_fold and partial and bool(TUNING["write_variant"] & 4),
              "expected_tokens": None,
              "expected_positions": None, "rpi": None, "r2t": None, "lut": None, "owner": None, "rpi_len": 0,
              "r2t_rows": 0, "r2t_cols": 0, "lut_len": 0}
    sig: dict[str, str] = {}
    for name in inspect.signature(triton_write._write_kernel.fn).parameters:
        m = SOURCE_ARG.match(name)
        if name in consts:
            sig[name] = "constexpr"
        elif m and int(m.group(2)) >= nsrc:
            sig[name], consts[name] = "constexpr", None
        elif m:
            sig[name] = "*u8" if m.group(1) == "s" else "i64"
        else:
            sig[name] = POINTERS.get(name, "i64")
    return sig, consts


def registers(fn: Any, sig: dict[str, str], consts: dict[str, Any], warps: int, maxnreg: int = 0) -> tuple[int, int]:
    """Registers per thread of ``fn`` compiled for sm_90 (under a cap of ``maxnreg`` where set) and the bytes of
    local memory (spills) per thread, read back from the cubin with cuobjdump."""
    names = list(sig)
    src = ASTSource(fn, sig, {(names.index(k),): v for k, v in consts.items()})
    options: dict[str, int] = {"num_warps": warps, **({"maxnreg": maxnreg} if maxnreg else {})}
    compiled = triton.compile(src, target=GPUTarget("cuda", 90, 32), options=options)
    tool = Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "cuobjdump"
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(compiled.asm["cubin"])
        f.flush()
        out = subprocess.run([str(tool), "--dump-resource-usage", f.name], capture_output=True, text=True,
                             check=True).stdout
    return int(re.findall(r"REG:(\d+)", out)[0]), int(re.findall(r"LOCAL:(\d+)", out)[0])


PLAN_POINTERS = {"rpi": "*i64", "prefix": "*i64", "extend": "*i64", "r2t": "*i32", "lut": "*i64", "pool": "*i32",
                 "valid_lens": "*i64", "out_slots": "*i64", "out_tokens": "*i64", "out_positions": "*i64",
                 "out_prev": "*i64", "num_valid_out": "*i32", "enable_out": "*i32", "scratch": "*i64",
                 "write_offsets": "*i64", "seeds_out": "*i64", "num_reqs_out": "*i32"}


def plan_signature(fn: Any, pool: bool, limbs: bool | None) -> tuple[dict[str, str], dict[str, Any]]:
    """Argument types and constexprs of a fused plan kernel as the backend launches a plan with a scratch, no
    LUT, with or without the token pool, its row scan on the limb path or not (None: a kernel without the
    choice, the one before issue 36; the token-pool switches off)."""
    consts: dict[str, Any] = {"HAS_LUT": False, "HAS_POOL": pool, "HAS_SCRATCH": True, "CHUNK": TUNING["plan_chunk"],
                              "TILE": TUNING["plan_tile"], "MARK_ZERO": False, "lut": None, "lut_len": 0}
    if limbs is not None:
        consts.update(SAT_LIMBS=limbs, CAP_MASK=False, TOKEN_LAST=False)
    if not pool:
        consts.update(pool=None, pool_rows=0, pool_cols=0, valid_lens=None)
    names = inspect.signature(fn.fn).parameters
    sig = {n: "constexpr" if n in consts else PLAN_POINTERS.get(n, "i32") for n in names}
    return sig, consts


def plan_report(sms: int) -> None:
    """Registers of the fused plan and how much of its grid at bs = 256 x 4096 (1 Mi entries) is resident."""
    warps = TUNING["plan_warps"]
    g = min(256, sms * TUNING["plan_row_waves"])
    y = max(1, min(TUNING["plan_max_y"], -(-(256 * 4096) // (g * TUNING["plan_tile"]))))
    grid = (g + 1) * y
    print(f"plan kernel, {warps} warps a program, sm_90, {sms} SMs; grid at 256 x 4096: {grid} programs")
    print(f"triton {triton.__version__}")
    print(f"{'pool':>5} {'kernel':>34} {'regs':>5} {'spill B':>7} {'programs/SM':>11} {'resident':>8} {'waves':>5}")
    # (label, kernel, limb scan, token-pool switches (CAP_MASK, TOKEN_LAST), register cap)
    kernels: list[tuple[str, Any, bool | None, tuple[bool, bool], int]] = [
        ("now, clamped scan", triton_plan._plan_kernel, False, (False, False), 0),
        ("now, limb scan", triton_plan._plan_kernel, True, (False, False), 0),
        ("before (benchmarks/before)", before_plan._plan_kernel, None, (False, False), 0)]
    # the candidates (TUNING's plan_pool_* keys, plan_max_registers; benchmarks/bench_i36k.py times them)
    pool_candidates: list[tuple[str, Any, bool | None, tuple[bool, bool], int]] = [
        ("now, pool cap mask", triton_plan._plan_kernel, False, (True, False), 0),
        ("now, pool cap mask + token last", triton_plan._plan_kernel, False, (True, True), 0),
        ("now, pool 64 registers", triton_plan._plan_kernel, False, (False, False), 64)]
    plain_candidates = [("now, 64 registers", triton_plan._plan_kernel, False, (False, False), 64)]
    for pool in (False, True):
        for label, fn, limbs, (cap_mask, token_last), cap in kernels + (pool_candidates if pool else
                                                                         plain_candidates):
            sig, consts = plan_signature(fn, pool, limbs)
            if limbs is not None:
                consts.update(CAP_MASK=cap_mask, TOKEN_LAST=token_last)
            regs, spill = registers(fn, sig, consts, warps, cap)
            resident = blocks_per_sm(regs, warps) * sms
            print(f"{pool!s:>5} {label:>34} {regs:>5} {spill:>7} {blocks_per_sm(regs, warps):>11} {resident:>8} "
                  f"{-(-grid // resident):>5}")


def blocks_per_sm(regs: int, warps: int) -> int:
    per_warp = -(-regs * 32 // REG_UNIT) * REG_UNIT
    return min(MAX_BLOCKS, MAX_WARPS // warps, REGS_PER_SM // (per_warp * warps))


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--sms", type=int, default=132, help="streaming multiprocessors (H100 SXM and H200: 132)")
    ap.add_argument("--bs", type=int, default=1024, help="one-token requests of the decode write")
    ap.add_argument("--tiles", default="256,128,64,32", help="fold tiles to compile")
    ap.add_argument("--plan", action="store_true", help="the fused plan kernel instead of the write kernel")
    args = ap.parse_args()
    if args.plan:
        plan_report(args.sms)
        return
    warps = TUNING["write_warps"]
    tiles = [int(t) for t in args.tiles.split(",")]
    print(f"write kernel, {warps} warp(s) a program, sm_90, {args.sms} SMs; decode grid {args.bs} x F "
          f"(decode-shaped writes' fold tile {TUNING['write_fold_tile_decode']})")
    print(f"{'sources':>7} {'mode':>7} {'fold tile':>10} {'regs':>5} {'spill B':>7} {'programs/SM':>11} "
          f"{'resident':>8} {'grid':>6} {'waves':>5}")
    for nsrc in (0, 1, 2, 4):
        for partial in ((True,) if nsrc == 0 else (True, False)):
            # each fold tile (fold programs), then the chain fold (the chain program folds: no fold programs)
            shapes = [(t, False) for t in (tiles[:1] if nsrc == 0 else tiles)]
            shapes += [(TUNING["write_fold_tile_decode"], True)] * (nsrc > 0)
            for tile, chain in shapes:
                sig, consts = write_signature(nsrc, partial, tile, chain)
                regs, spill = registers(triton_write._write_kernel, sig, consts, warps)
                per_sm = blocks_per_sm(regs, warps)
                resident = per_sm * args.sms
                grid = args.bs * (1 if chain else triton_write.fold_programs(nsrc, args.bs))
                mode = "NONE" if nsrc == 0 else ("PARTIAL" if partial else "ALL")
                label = "chain fold" if chain else str(tile) if nsrc else "-"
                print(f"{nsrc:>7} {mode:>7} {label:>10} {regs:>5} {spill:>7} {per_sm:>11} {resident:>8} "
                      f"{grid:>6} {-(-grid // resident):>5}")


if __name__ == "__main__":
    main()
