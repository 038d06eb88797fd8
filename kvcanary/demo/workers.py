"""``kvcanary demo --workers 2``: the demo engine across two processes (gloo on the loopback).

- **TP=2**: both ranks run the same engine and workload (each its own canary over its own pool); the
  tensor-parallel digest compares the records every step. The faulty run arms ``wrong_cache_loc`` on rank
  1 only: its records diverge and every rank's report names rank 1.
- **PD 2-proc**: rank 0 is the prefill worker, rank 1 the decode engine; each remote-prefill request is
  prefilled on rank 0 and its KV and canary records are sent to rank 1 (:mod:`kvcanary.distributed.wire`),
  which verifies the range before first use. The faulty runs corrupt the transport (:data:`PD_FAULTS`):
  a flipped K byte, two halves of a transfer written to each other's slots, a transfer whose last third
  never arrives, stale slots from the previous transfer.

Each mode spawns one process group that runs its clean and its faulty run. The PD mode runs without the
sliding-window layers (the records API carries the FULL group).
"""

from __future__ import annotations

import dataclasses
import logging
import time
from dataclasses import dataclass
from typing import TextIO

import torch
import torch.distributed as dist

from kvcanary.consts import RealKvHashMode
from kvcanary.demo.engine import (
    Engine,
    EngineConfig,
    Fault,
    FaultInjector,
    ReqState,
    Request,
    demo_engine_config,
    drive,
    shared_prefix_workload,
)
from kvcanary.distributed import (
    TensorParallelCanary,
    TransferMessage,
    TransferVerifier,
    Wire,
    accept_transfer,
    make_message,
    spawn_group,
)
from kvcanary.manager import CanaryConfig, CanaryManager


@dataclass(frozen=True)
class WorkerRow:
    """One row of the workers table: the mode, what was injected, whether the outcome is right, and why."""

    mode: str
    injected: str
    ok: bool
    detail: str
    seconds: float


def _quiet() -> None:
    """Children: one thread (tiny tensors), and no log lines (the table reports)."""
    torch.set_num_threads(1)
    for name in ("kvcanary.manager", "kvcanary.distributed"):
        logging.getLogger(name).setLevel(logging.CRITICAL)


def _canary(backend: str | None) -> CanaryConfig:
    return CanaryConfig(real_kv_mode=RealKvHashMode.PARTIAL, enable_v=True, enable_verify_token=True,
                        sweep_interval=2, health_warmup_steps=10, health_every=10, stats_every=1000,
                        backend=backend)


# -- TP=2 ---------------------------------------------------------------------------------------------------
def _tp_once(rank: int, steps: int, device: str, backend: str | None, seed: int, bad: bool) -> dict[str, object]:
    cfg = demo_engine_config(device)
    faults = FaultInjector(Fault.WRONG_CACHE_LOC if bad and rank == 1 else None)
    engine = Engine(cfg, canary=_canary(backend), faults=faults, name=f"tp{rank}")
    peer = Engine(cfg, canary=_canary(backend), model=engine.model, name=f"tp{rank}-prefill")
    engine.attach_prefill_peer(peer)
    peer.warmup()
    engine.warmup()
    assert engine.canary is not None
    tp = TensorParallelCanary(engine.canary)

    def on_step(step: int) -> None:
        tp.after_step(step)

    start = time.perf_counter()
    drive(engine, shared_prefix_workload(seed=seed, vocab_size=cfg.model.vocab_size, steps=steps), steps,
          on_step=on_step)
    report = tp.flush()
    first = report.divergences[0] if report.divergences else None
    return {"diverging": report.diverging_ranks, "violating": report.ranks_with_violations,
            "first_step": first.step if first else None, "fired": faults.first_fired_step,
            "seconds": time.perf_counter() - start}


def tp_worker(rank: int, world_size: int, steps: int, device: str, backend: str | None,
              seed: int) -> list[dict[str, object]]:
    """One TP rank: the clean run, then the run with rank 1's fault."""
    _quiet()
    return [_tp_once(rank, steps, device, backend, seed, bad) for bad in (False, True)]


# -- PD, two processes --------------------------------------------------------------------------------------
@dataclass
class DistributedPrefill:
    """The decode engine's side of PD across processes: ask rank ``src`` to prefill, receive the KV and
    records, verify them before first use, seat the request."""

    engine: Engine
    wire: Wire
    verifier: TransferVerifier | None
    src: int = 0

    def pull(self, req: Request) -> None:
        prompt = torch.tensor(req.tokens, dtype=torch.int64)
        dist.send(torch.tensor([len(prompt)], dtype=torch.int64), self.src)
        dist.send(prompt, self.src)
        first = torch.zeros(1, dtype=torch.int64)
        dist.recv(first, self.src)
        msg = self.wire.recv(self.src)
        mem = self.engine.memory
        slots = mem.alloc_slots(len(req.tokens))
        accept_transfer(self.engine.canary, self.verifier, mem.pool.k + mem.pool.v, msg, slots,
                        tokens=list(req.tokens))
        self.engine.requests.receive_transfer(req, [*req.tokens, int(first[0])], slots)

    def close(self) -> None:
        dist.send(torch.zeros(1, dtype=torch.int64), self.src)


PD_FAULTS: dict[str, str] = {
    "flip": "1 K byte flipped in transit",
    "wrong_slots": "2 halves sent to swapped slots",
    "partial": "last third never sent",
    "stale": "2nd transfer: 4 stale slots",
}
"""The transfer faults of the PD rows (applied by the sender to the message it ships)."""


def _corrupt(fault: str | None, served: int, msg: TransferMessage, previous: TransferMessage | None) -> TransferMessage:
    """``msg`` as the faulty transport delivers it (unchanged when ``fault`` does not fire on this transfer)."""
    kv, rec = msg.kv, msg.records
    n = int(kv.shape[0])
    if fault == "flip" and served == 0:
        kv = kv.clone()
        kv[n // 2, 0] ^= 0x20  # one K byte of layer 0, inside the fingerprinted bytes
    elif fault == "wrong_slots" and served == 0 and n >= 2:
        h = n // 2
        kv = torch.cat([kv[h : 2 * h], kv[:h], kv[2 * h :]])
        rec = torch.cat([rec[:, h : 2 * h], rec[:, :h], rec[:, 2 * h :]], dim=1)
    elif fault == "partial" and served == 0:
        keep = n - max(1, n // 3)
        kv, rec = kv[:keep], rec[:, :keep]
    elif fault == "stale" and served == 1 and previous is not None:
        k = min(4, n, previous.num_slots)  # the tail of the previous transfer, left in the staging buffer
        kv, rec = kv.clone(), rec.clone()
        kv[n - k :], rec[:, n - k :] = previous.kv[-k:], previous.records[:, -k:]
    return TransferMessage(kv, rec)


def _serve_prefill(engine: Engine, wire: Wire, fault: str | None, dst: int = 1) -> int:
    """Rank 0: prefill each prompt rank ``dst`` sends and ship its KV and records; return the count."""
    served = 0
    previous: TransferMessage | None = None
    n = torch.zeros(1, dtype=torch.int64)
    while True:
        dist.recv(n, dst)
        if int(n[0]) == 0:
            return served
        prompt = torch.zeros(int(n[0]), dtype=torch.int64)
        dist.recv(prompt, dst)
        remote = engine.submit(prompt.tolist(), 1, hold_for_transfer=True)
        for _ in range(1000):
            if remote.state is ReqState.TRANSFER or remote.done:
                break
            engine.step()
        if remote.state is not ReqState.TRANSFER:
            raise RuntimeError("PD worker: prefill did not complete")
        mem = engine.memory
        src = mem.r2t.read(remote.row, 0, remote.kv_len)
        msg = make_message(engine.canary, mem.pool.k + mem.pool.v, src)
        dist.send(torch.tensor([remote.tokens[-1]], dtype=torch.int64), dst)
        wire.send(_corrupt(fault, served, msg, previous), dst)
        previous = msg
        engine.release_transferred(remote)
        served += 1


def _pd_once(rank: int, steps: int, device: str, backend: str | None, seed: int,
             fault: str | None) -> dict[str, object]:
    cfg: EngineConfig = dataclasses.replace(demo_engine_config(device), swa_window=0)
    engine = Engine(cfg, canary=_canary(backend), name="prefill" if rank == 0 else "decode")
    engine.warmup()
    wire = Wire(backend="gloo", device=torch.device(device))
    start = time.perf_counter()
    if rank == 0:
        served = _serve_prefill(engine, wire, fault)
        engine.flush_canaries()
        return {"served": served, "violations": len(engine.events()), "seconds": time.perf_counter() - start}
    mgr: CanaryManager | None = engine.canary
    puller = DistributedPrefill(engine, wire, TransferVerifier(mgr, 256) if mgr is not None else None)
    engine.attach_remote_prefill(puller)
    try:
        drive(engine, shared_prefix_workload(seed=seed, vocab_size=cfg.model.vocab_size, steps=steps), steps)
    finally:
        puller.close()
    engine.flush_canaries()
    ev = engine.events()
    return {"violations": len(ev), "tags": sorted({e.violation.tag_name for e in ev}),
            "reasons": sorted({r for e in ev for r in e.violation.reason_labels}),
            "first_step": ev[0].step_recorded if ev else None, "seconds": time.perf_counter() - start}


def pd_worker(rank: int, world_size: int, steps: int, device: str, backend: str | None,
              seed: int) -> list[dict[str, object]]:
    """One PD rank: the clean run, then one run per transfer fault (:data:`PD_FAULTS`)."""
    _quiet()
    return [_pd_once(rank, steps, device, backend, seed, f) for f in (None, *PD_FAULTS)]


# -- the rows -----------------------------------------------------------------------------------------------
def worker_rows(steps: int, device: str, backend: str | None, seed: int) -> list[WorkerRow]:
    """Spawn the TP=2 group and the PD group; one row per run."""
    rows: list[WorkerRow] = []
    tp = spawn_group(tp_worker, 2, steps, device, backend, seed, timeout_s=300)
    for i, injected in enumerate(("-", "rank 1: wrong_cache_loc")):
        views = [tp[r][i] for r in range(2)]
        secs = max(float(str(v["seconds"])) for v in views)
        if i == 0:
            ok = all(not v["diverging"] and not v["violating"] for v in views)
            rows.append(WorkerRow("TP=2", injected, ok, "silent" if ok else f"reported {views}", secs))
        else:
            ok = all(v["diverging"] == [1] for v in views)
            rows.append(WorkerRow("TP=2", injected, ok, f"rank 1 named on every rank, digest diverges at step "
                                  f"{views[0]['first_step']} (fault fired at step {views[1]['fired']})"
                                  if ok else f"not named: {views}", secs))
    pd = spawn_group(pd_worker, 2, steps, device, backend, seed, timeout_s=300)
    for i, fault in enumerate((None, *PD_FAULTS)):
        pre, dec = pd[0][i], pd[1][i]
        secs = max(float(str(pre["seconds"])), float(str(dec["seconds"])))
        if fault is None:
            ok = dec["violations"] == 0 and pre["violations"] == 0 and int(str(pre["served"])) > 0
            rows.append(WorkerRow("PD 2-proc", "-", ok, f"silent, {pre['served']} transfers verified"
                                  if ok else f"reported {dec}", secs))
            continue
        ok = dec["violations"] != 0 and (fault != "flip" or dec["reasons"] == ["verify_real_kv_hash"])
        detail = (f"{', '.join(str(t) for t in dec['reasons'])} on {', '.join(dec['tags'])}, "
                  f"step {dec['first_step']}" if ok else f"missed: {dec}")
        rows.append(WorkerRow("PD 2-proc", PD_FAULTS[fault], ok, detail, secs))
    return rows


def print_rows(rows: list[WorkerRow], out: TextIO) -> None:
    """The workers table."""
    out.write("\n2 workers (gloo, loopback)\n")
    out.write(f"{'mode':<10} {'injected':<32} {'result':<6} {'seconds':>7}  detail\n")
    for r in rows:
        out.write(f"{r.mode:<10} {r.injected:<32} {'ok' if r.ok else 'FAIL':<6} {r.seconds:>7.1f}  {r.detail}\n")
