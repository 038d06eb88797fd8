"""cuda: CUDA C++ kernels for every operation, compiled at first use (NVRTC through cuda-python's cuda.core).

Toolchain, and why: the kernels are plain CUDA C++ (``kernels/*.cu``, one per operation, plus the shared
``kvcanary_common.cuh`` / ``plan_common.cuh``) compiled at run time by NVRTC through ``cuda.core``
(``Program`` -> cubin -> ``ObjectCode`` -> ``Kernel``) and launched with ``cuda.core.launch`` on torch's
current stream, by its raw handle:

- nothing is built against torch (no C++ extension, no ABI coupling to a torch or compiler version), and
  the GPU machine already carries cuda.core and NVRTC;
- NVRTC compiles one specialization in about 0.1-0.5 s, for the GPU that is present (``sm_XY`` read from the
  device at run time), and each cubin is cached on disk;
- the launches are ordinary kernel launches on torch's stream, so they are ordered with torch's work and are
  recorded by ``torch.cuda.graph`` capture; no kernel allocates, syncs or reads a device value on the host;
- the sources include no header (NVRTC has no host headers), so CI compiles every one of them with NVRTC and
  with nvcc on a machine without a GPU (tests/backends/cuda/test_compile.py).

Specializations are compile-time defines (token check, number of real-KV sources, PARTIAL or ALL, 16-byte
record alignment, LUT, token pool); every kernel parameter is an 8-byte integer or pointer, passed as a Python
``int`` (cuda.core's cheapest argument path). Each operation's module documents its launch shape; the kernel
sources document the memory access and how they reach their floors.

Run a kernel once eagerly before capturing it in a CUDA graph (the first call compiles and loads it; the
driver may refuse a module load during capture): :func:`preload` does it for every specialization.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import torch

from kvcanary.registry import Backend, Op, OpSupport, Reason, ReasonKind

# Below Triton's 50 on every operation but the fused plan, write and scatter. benchmarks/bench_backends.py on
# one H200 (CUDA graphs, identical inputs, cuda vs triton, 2026-12-03 after verify's L1-allocating loads and
# write's lane-0 chain): verify is split (16 Mi random 835 vs 836 us, 1 Mi random 62.6 vs 60.9 us, 1 Mi
# chained 40.8 vs 42.4 us, 16 Mi chained 539 vs 472 us, PARTIAL 16 Mi 1645 vs 1636 us), with Triton's one
# clear win the largest; scatter changed order between runs of unchanged kernels (cuda vs triton 17.0 vs
# 11.2 us, then 14.6 vs 17.3, 10.1 vs 16.2, 9.9 vs 10.8 and 17.2 vs 17.2 us: a one-launch graph over L2-warm
# inputs is that noisy), so it waited for a head-to-head over rotating inputs (below).
# The fused plan ranks above Triton since its tile path without per-entry checks: 17.0 vs 18.4 us, 15.4 vs
# 16.7 us, 17.0 vs 20.0 and 16.1 vs 17.5 us in four head-to-head runs, and 14.1-14.3 us in bench_cuda's rotating
# graphs (15.4 us with the token pool) against bench_triton's 19.0 us (22.8 us with the token pool).
# Two more runs with the per-warp fast path (the first with a scan change then dropped): plan 17.0 vs 17.2 and
# 15.6 vs 16.9 us; scatter 9.6 vs 10.6 and 11.3 vs 16.3 us. Then bench_backends rotated its inputs (plan: 4
# sets of outputs, 128 MiB; scatter: 8 sets, 96 MiB, so neither replays out of L2; recorded in
# benchmarks/results/bench_backends.json): plan 14.7 vs 15.1 us, scatter 7.26 vs 8.58 us. scatter therefore
# ranks above Triton too (CUDA ahead in the last four runs). plan_offsets and plan_entries alone were not
# compared.
# write ranks above Triton since its chain blocks hold 4 warps, not 8 (one per scheduler): one 32 Ki-token
# chain 3.62 vs 4.10 ms (CUDA ahead in every run), 64 x 512 63.9 vs 72.0 us (it was 80-83 vs 70-73 us with 8
# warps; 58.8 us in explore_cuda_4.log), 1024 x 1 a tie in every run (9.41 vs 9.44, 16.8 vs 18.0 us). The
# write shape lives in device data (write_offsets), so the registry could not choose per shape anyway.
PRIORITY = 40
AHEAD_PRIORITY = 60  # above Triton's 50: plan, write and scatter, measured faster (above)
MIN_CAPABILITY = (7, 5)  # CUDA 13 builds nothing older (Volta support ended)
_ON_CUDA = {"cuda": PRIORITY}
_NOTES = "NVRTC via cuda.core; capturable (no host sync, no allocation)"


class CudaBackend(Backend):
    """Available when cuda.core and NVRTC load and torch sees an NVIDIA GPU of compute capability >= 7.5."""

    _available: tuple[Reason, ...] | None = None

    def availability(self) -> Sequence[Reason]:
        if self._available is None:
            self._available = tuple(_availability())
        return self._available

    def device_reasons(self, op: Op, device: torch.device) -> Sequence[Reason]:
        cache: dict[int, tuple[Reason, ...]] = self.__dict__.setdefault("_capability_cache", {})
        index = device.index if device.index is not None else torch.cuda.current_device()
        hit = cache.get(index)
        if hit is None:
            hit = tuple(_capability_reasons(index))
            cache[index] = hit
        return hit


def _availability() -> list[Reason]:
    from kvcanary.backends.cuda._toolchain import core_missing, nvrtc_missing

    reasons = []
    missing = core_missing()
    if missing is not None:
        reasons.append(Reason(ReasonKind.PACKAGE, f"cuda: {missing}",
                              hint="pip install 'kvcanary[cuda]' (cuda-core, with cuda-bindings)"))
        return reasons
    if getattr(torch.version, "hip", None):
        reasons.append(Reason(ReasonKind.DEVICE, "cuda: this torch is a ROCm/HIP build; cuda.core needs NVIDIA CUDA"))
        return reasons
    if not torch.cuda.is_available():
        reasons.append(Reason(ReasonKind.DEVICE, "cuda: torch sees no CUDA device"))
        return reasons
    missing = nvrtc_missing()
    if missing is not None:
        reasons.append(Reason(ReasonKind.PACKAGE, f"cuda: {missing}",
                              hint="install a CUDA toolkit or the nvidia-cuda-nvrtc wheel"))
    return reasons


def _capability_reasons(index: int) -> list[Reason]:
    cc = torch.cuda.get_device_capability(index)
    if tuple(cc) < MIN_CAPABILITY:
        return [Reason(ReasonKind.CAPABILITY, f"cuda: cuda:{index} has compute capability {cc[0]}.{cc[1]}; the "
                       f"kernels need {MIN_CAPABILITY[0]}.{MIN_CAPABILITY[1]} or newer")]
    return []


BACKEND = CudaBackend(
    name="cuda",
    description="CUDA C++ kernels compiled at first use (NVRTC through cuda.core).",
    ops={
        Op.PLAN: OpSupport("kvcanary.backends.cuda.plan:plan", {"cuda": AHEAD_PRIORITY}, capture_safe=True,
                           notes="one launch for both stages; " + _NOTES),
        Op.PLAN_OFFSETS: OpSupport("kvcanary.backends.cuda.plan_offsets:plan_offsets", _ON_CUDA, capture_safe=True,
                                   notes=_NOTES),
        Op.PLAN_ENTRIES: OpSupport("kvcanary.backends.cuda.plan_entries:plan_entries", _ON_CUDA, capture_safe=True,
                                   notes=_NOTES),
        Op.VERIFY: OpSupport("kvcanary.backends.cuda.verify:verify", _ON_CUDA, capture_safe=True, notes=_NOTES),
        Op.WRITE: OpSupport("kvcanary.backends.cuda.write:write", {"cuda": AHEAD_PRIORITY}, capture_safe=True,
                            notes=_NOTES),
        Op.SCATTER: OpSupport("kvcanary.backends.cuda.scatter:scatter_req_token_ids", {"cuda": AHEAD_PRIORITY},
                              capture_safe=True, notes=_NOTES),
    },
)


def preload(device: torch.device | str | int = "cuda", ops: Iterable[Op] | None = None) -> int:
    """Compile and load every specialization of ``ops`` (default: all) on ``device``; returns how many.

    Call it before capturing CUDA graphs that will use specializations not yet launched eagerly.
    """
    from kvcanary.backends.cuda._specs import KEYS
    from kvcanary.backends.cuda._toolchain import arch_of, compile_all

    dev = torch.device(device) if not isinstance(device, int) else torch.device("cuda", device)
    index = dev.index if dev.index is not None else torch.cuda.current_device()
    wanted = [(cache, key) for op, (cache, keys) in KEYS.items() if ops is None or op in set(ops) for key in keys]
    compile_all([cache.spec(*key) for cache, key in wanted], arch_of(index))
    for cache, key in wanted:
        cache.get(index, key)
    return len(wanted)
