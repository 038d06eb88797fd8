"""Process groups on the loopback: a free port, ``init_process_group`` with a hard timeout, and a bounded
``torch.multiprocessing`` spawn that returns each rank's result (or raises: a hung group fails, never hangs).

The backend ('gloo' on CPU, or with CUDA tensors staged through the host; 'nccl' across GPUs) is a
parameter everywhere, so the same code runs on either.
"""

from __future__ import annotations

import os
import queue
import socket
import time
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.multiprocessing.spawn import start_processes

from kvcanary.constructors.transfer import BACKENDS, check_wire

__all__ = ["BACKENDS", "check_backend", "free_loopback_port", "init_loopback_group", "spawn_group"]

LOOPBACK = "127.0.0.1"


def free_loopback_port() -> int:
    """A TCP port free on 127.0.0.1 right now (the OS picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((LOOPBACK, 0))
        return int(s.getsockname()[1])


def check_backend(backend: str) -> None:
    """Refuse a backend that is not one of :data:`BACKENDS`, naming the argument: the wire's rule, with its
    code (kvcanary/constructors/transfer.py), for the group that the wire runs over."""
    check_wire(backend=backend, device=torch.device("cpu"))


def init_loopback_group(rank: int, world_size: int, port: int, *, backend: str = "gloo",
                        timeout_s: float = 60.0) -> None:
    """``init_process_group`` over ``tcp://127.0.0.1:port``; gloo is pinned to the loopback interface."""
    check_backend(backend)
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    dist.init_process_group(backend, init_method=f"tcp://{LOOPBACK}:{port}", rank=rank, world_size=world_size,
                            timeout=timedelta(seconds=timeout_s))


def _entry(rank: int, fn: Callable[..., Any], world_size: int, port: int, backend: str, timeout_s: float,
           results: Any, args: tuple[Any, ...]) -> None:
    if backend == "nccl":  # one device per rank: NCCL cannot put two ranks on one GPU
        torch.cuda.set_device(rank % torch.cuda.device_count())
    init_loopback_group(rank, world_size, port, backend=backend, timeout_s=timeout_s)
    try:
        results.put((rank, fn(rank, world_size, *args)))
    finally:
        dist.destroy_process_group()


def spawn_group(fn: Callable[..., Any], world_size: int, *args: Any, backend: str = "gloo",
                timeout_s: float = 120.0) -> list[Any]:
    """Run ``fn(rank, world_size, *args)`` in ``world_size`` spawned processes joined in one group; return
    the results by rank. ``fn`` must be a module-level function and its result picklable. A child that
    raises re-raises here; a group still running after ``timeout_s`` is terminated and TimeoutError raised."""
    if world_size < 1:
        raise ValueError(f"kv-canary: world_size must be >= 1, got {world_size}")
    results = mp.get_context("spawn").Queue()
    port = free_loopback_port()
    init_timeout = min(timeout_s, 60.0)
    ctx = start_processes(_entry, args=(fn, world_size, port, backend, init_timeout, results, args),  # type: ignore[no-untyped-call]
                          nprocs=world_size, join=False, start_method="spawn")
    deadline = time.monotonic() + timeout_s
    got: dict[int, Any] = {}
    done = False
    while not done:
        try:
            done = ctx.join(timeout=0.2)
        finally:
            while True:
                try:
                    rank, value = results.get_nowait()
                except queue.Empty:
                    break
                got[rank] = value
        if not done and time.monotonic() > deadline:
            for p in ctx.processes:
                p.terminate()
            for p in ctx.processes:
                p.join(5)
            raise TimeoutError(f"kv-canary: process group of {world_size} still running after {timeout_s:.0f}s")
    while len(got) < world_size:  # a result may still sit in the queue's pipe
        rank, value = results.get(timeout=10)
        got[rank] = value
    return [got[r] for r in range(world_size)]
