"""kvcanary across processes: what the canary adds to a prefill→decode transfer and to a TP step.

Two ranks (``torch.multiprocessing`` spawn, one process group on the loopback; gloo by default, CUDA tensors
staged through the host with gloo). Rank 0 is the sender / TP peer, rank 1 measures.

- ``kv transfer``: the transfer itself, one request's KV of every layer (``--layers`` x K and V, bf16, 8 KV
  heads x 128) sent rank 0 → rank 1 through :class:`kvcanary.distributed.Wire` with no records; the
  reference every canary cost is compared with. Floor: its bytes at the device copy bandwidth.
- ``kv + records transfer``: the same message with the canary records (4 buffers x 32 B per slot).
- ``pack_records`` / ``unpack_records`` (sender gather, receiver scatter at other slot numbers) and the
  receiver's ``TransferVerifier`` (HEAD + TAIL, K + V, real-KV PARTIAL, token check; the run given as host
  lists, then as device tensors), each beside its traffic floor; then the canary's total per transfer
  against the transfer, and per transferred MiB.
- TP: the per-forward digest fold of a decode batch, the per-step exchange's host cost (take + async
  all_gather start + non-blocking poll), beside the canary's own decode step (bench_engine's CanaryWorld).
  The fold on CUDA is the fused Triton launch a TP rank runs (eager, floor: an empty Triton launch; and
  replayed from a CUDA graph, as inside a captured forward, floor: an empty launch in a graph); the torch-ops
  fold (the reference, what runs without Triton) is the second row, floor: the records read at copy
  bandwidth. The fold and the decode step are timed on rank 1 while rank 0 waits at a barrier (two
  processes on one GPU would otherwise time-share it).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch
import torch.distributed as dist

from benchmarks import floors, timing
from benchmarks.bench_engine import CanaryWorld
from benchmarks.report import Report, machine
from kvcanary.consts import RealKvHashMode
from kvcanary.distributed import (
    DigestAccumulator,
    TensorParallelCanary,
    TransferMessage,
    TransferVerifier,
    Wire,
    fold_records_torch,
    make_message,
    pack_records,
    spawn_group,
    unpack_kv,
    unpack_records,
)

BENCH = "bench_distributed"
MiB = float(1 << 20)


def _sync(dev: torch.device) -> None:
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)


def _timed_transfers(rank: int, wire: Wire, msg: TransferMessage, reps: int, dev: torch.device) -> float:
    """Median seconds of one send → receive (rank 1's clock, from a common barrier to the data in place)."""
    out: list[float] = []
    for _ in range(reps + 1):
        dist.barrier()
        t0 = time.perf_counter()
        if rank == 0:
            wire.send(msg, 1)
        else:
            got = wire.recv(0)
            del got
            _sync(dev)
        out.append(time.perf_counter() - t0)
    return float(statistics.median(out[1:]))


def _rank(rank: int, world_size: int, cfg: dict[str, Any]) -> dict[str, Any]:
    dev = torch.device(cfg["device"])
    if dev.type == "cpu":
        torch.set_num_threads(1)
    ctx, layers, reps = int(cfg["ctx"]), int(cfg["layers"]), int(cfg["reps"])
    world = CanaryWorld(bs=2, ctx=ctx, kv_heads=8, head_dim=128, device=dev, mode=RealKvHashMode.PARTIAL,
                        backend=cfg["backend"], chunk=min(ctx, 512))
    mgr = world.manager
    extra = [torch.randn_like(world.k) for _ in range(2 * (layers - 1))]
    kv_layers = [world.k, world.v, *extra]
    n = ctx - 1
    src = world.r2t[1, :n].to(torch.int64)
    dst = world.r2t[2, :n].to(torch.int64)  # the receiver writes at other slots (relocation)
    wire = Wire(backend=cfg["backend_dist"], device=dev)
    full = make_message(mgr, kv_layers, src)
    bare = TransferMessage(full.kv, full.records[:0])
    res: dict[str, Any] = {"n": n, "kv_bytes": int(full.kv.numel()), "rec_bytes": int(full.records.numel())}
    res["t_kv"] = _timed_transfers(rank, wire, bare, reps, dev)
    res["t_full"] = _timed_transfers(rank, wire, full, reps, dev)
    tokens = world.tokens[0, :n].tolist()
    slots = dst.tolist()
    verifier = TransferVerifier(mgr, capacity=n)
    unpack_kv(kv_layers, dst, full.kv)  # the receiver's KV, so that its verify and decode steps are clean
    res["t_pack"] = timing.device_time(lambda: pack_records(mgr, src), dev, reps=reps)
    res["t_unpack"] = timing.device_time(lambda: unpack_records(mgr, full.records, dst), dev, reps=reps)
    res["t_verify"] = timing.device_time(lambda: verifier.verify(slots, tokens=tokens), dev, reps=reps)
    dev_tokens = world.tokens[0, :n]
    res["t_verify_tensor"] = timing.device_time(lambda: verifier.verify(dst, tokens=dev_tokens), dev, reps=reps)
    res["nbuf"] = int(full.records.shape[0])
    # TP: the digest of a decode step (rank 1 alone), then the per-step exchange, both ranks in lockstep
    buf = mgr.groups[0].k_head
    loc = world.decode.out_cache_loc
    dist.barrier()
    if rank == 1:
        acc = DigestAccumulator(buf)  # the implementation a TP rank picks on this device
        res["fused"] = acc.fused
        res["t_fold_torch"] = timing.device_time(lambda: fold_records_torch(buf, loc), dev, reps=reps)
        if acc.fused:
            res["t_fold_fused"] = timing.device_time(lambda: acc.add(loc), dev, reps=reps)
            res["t_fold_graph"] = timing.graph(lambda: acc.add(loc))
        res["t_step"] = timing.device_time(world.step, dev, reps=reps)
    dist.barrier()
    tp = TensorParallelCanary(mgr)
    dist.barrier()
    steps = 50
    t0 = time.perf_counter()
    for s in range(steps):
        tp.after_step(s)
    res["t_exchange"] = (time.perf_counter() - t0) / steps
    tp.exchange.drain()
    res["bs"] = world.bs
    mgr.flush()
    res["violations"] = mgr.total_violations
    res["divergences"] = len(tp.divergences)
    return res


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--ctx", type=int, default=None, help="tokens per transfer (default 4096; cpu 1024)")
    p.add_argument("--layers", type=int, default=None, help="layers of KV per transfer (default 32; cpu 4)")
    p.add_argument("--dist-backend", default="gloo", help="torch.distributed backend (gloo; nccl needs 2 GPUs)")
    p.add_argument("--backend", default=None, help="force a kvcanary backend (default: automatic)")
    p.add_argument("--out", default=None, help="write the JSON records here")
    args = p.parse_args(argv)
    dev = torch.device(args.device)
    cpu = dev.type == "cpu"
    cfg = {"device": args.device, "ctx": args.ctx or (1024 if cpu else 4096),
           "layers": args.layers or (4 if cpu else 32), "reps": 5 if cpu else 10, "backend": args.backend,
           "backend_dist": args.dist_backend}
    if cpu:
        torch.set_num_threads(1)
    r = Report(BENCH, machine(dev, f"2 processes, {args.dist_backend}"))
    bw = floors.copy_bandwidth(dev, 1 << (24 if cpu else 31))
    r.floor("copy bandwidth (B/s, read + written)", bw, "a device copy")
    launch = launch_graph = None
    if not cpu and floors.TRITON:
        launch, launch_graph = floors.empty_launch(), floors.empty_launch_graph()
        r.floor("empty launch, eager (s)", launch, "Triton probe, host launch cost included")
        r.floor("empty launch, in a CUDA graph (s)", launch_graph, "Triton probe")
    res = spawn_group(_rank, 2, cfg, backend=args.dist_backend, timeout_s=280)[1]
    n, kvb, recb = res["n"], res["kv_bytes"], res["rec_bytes"]
    mib = kvb / MiB
    tag = f"{n} tok, {mib:.1f} MiB KV"
    t_kv = r.add(f"kv transfer {tag}", res["t_kv"], kvb / bw, unit="ms").figure / 1e3
    r.add(f"kv + records transfer {tag} (+{recb / 1024:.0f} KiB records)", res["t_full"], (kvb + recb) / bw,
          unit="ms")
    r.value(f"kv transfer bandwidth {tag}", kvb / t_kv / 1e9, bw / 2 / 1e9, unit="GB/s",
            note="floor: half the copy figure (bytes moved once)")
    r.add(f"pack_records {n} slots x {res['nbuf']} buffers", res["t_pack"], 2 * recb / bw)
    r.add(f"unpack_records {n} slots (relocated)", res["t_unpack"], 2 * recb / bw)
    verify_bytes = 4 * n * (2 * 32 + 4 * 8) + 2 * n * 16
    r.add(f"receiver verify {n} slots (HEAD+TAIL, K+V, PARTIAL)", res["t_verify"], verify_bytes / bw)
    r.add(f"receiver verify {n} slots, slots and tokens as device tensors", res["t_verify_tensor"], verify_bytes / bw)
    canary = (res["t_full"] - res["t_kv"]) + res["t_pack"] + res["t_unpack"] + res["t_verify"]
    r.value(f"canary per transfer / kv transfer {tag}", canary / res["t_kv"], None, unit="x",
            note="records on the wire + pack + unpack + verify")
    r.value(f"canary per transferred MiB {tag}", canary / mib * 1e6, None, unit="us/MiB")
    bs = res["bs"]
    fold_bytes = bs * (8 + 32)  # a slot and its record per token
    t_fold = res["t_fold_torch"]
    if res["fused"]:
        t_fold = res["t_fold_fused"]
        r.add(f"tp digest fold, fused Triton, decode bs={bs}", t_fold, launch, note="floor: an empty Triton launch")
        r.add(f"tp digest fold, fused Triton, in a CUDA graph, decode bs={bs}", res["t_fold_graph"], launch_graph,
              note="floor: an empty launch in a graph")
    r.add(f"tp digest fold, torch ops, decode bs={bs}", res["t_fold_torch"], fold_bytes / bw,
          note="the reference" + ("" if res["fused"] else "; what runs here (no fused fold on this device)"))
    r.add(f"tp exchange host cost per step (take + async all_gather + poll), {args.dist_backend}",
          res["t_exchange"], None)
    r.add(f"canary decode step bs={bs} ctx={n + 1} (reference)", res["t_step"], None)
    r.value(f"tp digest + exchange / canary decode step bs={bs}", (t_fold + res["t_exchange"]) / res["t_step"],
            None, unit="x", note="the fold a TP rank runs here" + (" (fused)" if res["fused"] else " (torch ops)"))
    if res["violations"] or res["divergences"]:
        print(f"  WARNING: {res['violations']} violations, {res['divergences']} divergences on a clean run")
    r.write(args.out)
    return 1 if res["violations"] or res["divergences"] else 0


if __name__ == "__main__":
    raise SystemExit(main())
