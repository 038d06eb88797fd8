"""cuda: CUDA C++ kernels for every operation, compiled at first use (NVRTC through cuda-python's cuda.core).

Toolchain, and why: the kernels are plain CUDA C++ (``kernels/*.cu``, one per operation, plus the shared
``kvcanary_common.cuh`` / ``plan_common.cuh``) compiled at run time by NVRTC through ``cuda.core``
(``Program`` -> cubin -> ``ObjectCode`` -> ``Kernel``) and launched with ``cuda.core.launch`` on torch's
current stream, by its raw handle:

- nothing is built against torch (no C++ extension, no ABI coupling to a torch or compiler version), and
  the GPU machine already carries cuda.core and NVRTC;
- NVRTC compiles one specialization for the GPU that is present (``sm_XY`` read from the device at run time)
  at the first launch that needs it, and each cubin is cached on disk;
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

from kvcanary.registry import Backend, Op, Reason, ReasonKind

MIN_CAPABILITY = (7, 5)  # CUDA 13 builds nothing older (Volta support ended)
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


def _device_missing() -> Reason | None:
    """Why torch offers no NVIDIA device here (None: it does). Reported before any missing package: on a
    machine without a GPU, the package is not what stands in the way."""
    if getattr(torch.version, "hip", None):
        return Reason(ReasonKind.DEVICE, "cuda: this torch is a ROCm/HIP build; cuda.core needs NVIDIA CUDA")
    if not torch.cuda.is_available():
        return Reason(ReasonKind.DEVICE, "cuda: torch sees no CUDA device")
    return None


def _availability() -> list[Reason]:
    from kvcanary_backends.cuda._toolchain import core_missing, nvrtc_missing

    device = _device_missing()
    reasons = [device] if device is not None else []
    missing = core_missing()
    if missing is not None:
        reasons.append(Reason(ReasonKind.PACKAGE, f"cuda: {missing}",
                              hint="pip install 'kvcanary[cuda]' (cuda-core, with cuda-bindings)"))
    if reasons:
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


def notes(extra: str = "") -> str:
    """A kernel's notes in the support matrix: ``extra``, then what every kernel of this backend shares."""
    return f"{extra}; {_NOTES}" if extra else _NOTES


BACKEND = CudaBackend(
    name="cuda",
    description="CUDA C++ kernels compiled at first use (NVRTC through cuda.core).",
    package=__name__,  # each operation's module attaches its kernel: @OP.kernel("cuda", ...)
    device_types=("cuda",),
)


def preload(device: torch.device | str | int = "cuda", ops: Iterable[Op] | None = None) -> int:
    """Compile and load every specialization of ``ops`` (default: all) on ``device``; returns how many.

    Call it before capturing CUDA graphs that will use specializations not yet launched eagerly.
    """
    from kvcanary_backends.cuda._specs import KEYS
    from kvcanary_backends.cuda._toolchain import arch_of, compile_all

    dev = torch.device(device) if not isinstance(device, int) else torch.device("cuda", device)
    index = dev.index if dev.index is not None else torch.cuda.current_device()
    wanted = [(cache, key) for op, (cache, keys) in KEYS.items() if ops is None or op in set(ops) for key in keys]
    compile_all([cache.spec(*key) for cache, key in wanted], arch_of(index))
    for cache, key in wanted:
        cache.get(index, key)
    return len(wanted)
