"""Host emulation of the CUDA backend: the kernel sources built as C++ shared libraries and run on CPU threads.

Each specialization is compiled once by g++ with ``-DKVC_HOST_EMULATION`` and ``emulation/kvc_emu.h``
force-included (every CUDA thread is a std::thread, barriers and warp shuffles are emulated), into
``$TMPDIR/kvcanary-cuda-emu``. The backend ``cuda_emu`` registered here runs the real backend's packing
(``backends.cuda.<op>.pack``) and launch shapes (with a tiny "GPU" of :data:`MAX_BLOCKS` resident blocks, so
grid-stride loops run several rounds) on CPU tensors, so the public launchers can be replayed against
``torch_ref`` on a machine without a GPU. Set ``KVCANARY_EMU_ASAN=1`` (with libasan preloaded) to build the
libraries under AddressSanitizer.
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import shutil
import subprocess
import tempfile
import threading
import typing
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

from kvcanary.registry import Backend, Op, OpSupport
from kvcanary_backends.cuda import budget, plan, plan_entries, plan_offsets, scatter, verify, write
from kvcanary_backends.cuda._toolchain import KERNEL_DIR, Spec, headers_text, once

EMU_DIR = Path(__file__).with_name("emulation")
MAX_BLOCKS = 3
"""Resident blocks of the emulated GPU: persistent grids get at most this many blocks."""


def compiler() -> str | None:
    return shutil.which(os.environ.get("CXX", "g++"))


def _asan() -> bool:
    return os.environ.get("KVCANARY_EMU_ASAN") == "1"


class EmuKernel:
    """One specialization as a loaded host library."""

    def __init__(self, path: Path) -> None:
        self.lib = ctypes.CDLL(str(path))
        self.lib.kvc_emu_launch.restype = ctypes.c_int
        self.lib.kvc_emu_launch.argtypes = [ctypes.c_uint, ctypes.c_uint, ctypes.c_uint, ctypes.c_ulonglong,
                                            ctypes.POINTER(ctypes.c_longlong), ctypes.c_int]
        self.lib.kvc_emu_nparams.restype = ctypes.c_int
        self.lib.kvc_emu_first_fault_address.restype = ctypes.c_longlong
        self.nparams = int(self.lib.kvc_emu_nparams())

    def launch(self, shape: tuple[int, int, int, int], args: tuple[int, ...]) -> None:
        gx, gy, block, shmem = shape
        arr = (ctypes.c_longlong * max(len(args), 1))(*[ctypes.c_longlong(a).value for a in args])
        rc = self.lib.kvc_emu_launch(gx, gy, block, shmem, arr, len(args))
        if rc < 0:
            raise AssertionError(f"kernel takes {self.nparams} parameters, the packer passed {len(args)}")
        if rc > 0:
            raise AssertionError(f"{rc} misaligned vector accesses (first at {self.lib.kvc_emu_first_fault_address():#x})")


_lock = threading.Lock()
_built: dict[Spec, EmuKernel] = {}


def build(spec: Spec) -> EmuKernel:
    """The emulated kernel of ``spec`` (compiled on first use, cached on disk by content)."""
    return once(_built, spec, _lock, lambda: _build(spec))


def _build(spec: Spec) -> EmuKernel:
    cxx = compiler()
    if cxx is None:
        raise RuntimeError("no C++ compiler (g++) for the host emulation")
    src = spec.path()
    shim = (EMU_DIR / "kvc_emu.h").read_text() + (EMU_DIR / "launch.cpp").read_text()
    flags = ["-std=c++20", "-O1", "-g", "-pthread", "-shared", "-fPIC", "-fno-strict-aliasing",
             "-DKVC_HOST_EMULATION", "-include", str(EMU_DIR / "kvc_emu.h"), f"-I{KERNEL_DIR}",
             f"-DKVC_EMU_SOURCE=\"{src.name}\"", f"-DKVC_EMU_ENTRY={spec.entry}", f"-I{src.parent}"]
    flags += [f"-D{k}={v}" for k, v in spec.define_list()]
    if _asan():
        flags += ["-fsanitize=address", "-fno-omit-frame-pointer"]
    key = hashlib.sha256("\0".join([src.read_text(), headers_text(), shim, *flags]).encode()).hexdigest()[:24]
    out_dir = Path(tempfile.gettempdir()) / f"kvcanary-cuda-emu-{os.getuid()}"
    out_dir.mkdir(parents=True, exist_ok=True)
    out = out_dir / f"{spec.entry}-{key}.so"
    if not out.is_file():
        tmp = out.with_suffix(f".{os.getpid()}.tmp")
        cmd = [cxx, *flags, str(EMU_DIR / "launch.cpp"), "-o", str(tmp)]
        res = subprocess.run(cmd, capture_output=True, text=True, check=False)
        if res.returncode != 0:
            raise RuntimeError(f"emulation build of {spec.label()} failed:\n{' '.join(cmd)}\n{res.stderr}")
        os.replace(tmp, out)
    return EmuKernel(out)


def call_of(mod: ModuleType, kwargs: dict[str, Any]) -> Any:
    """The call object ``backends.cuda.<mod>.pack`` takes (its contract model, built without the checks)."""
    contract = typing.get_type_hints(mod.pack)["call"]
    return contract.model_construct(**kwargs)


def _nothing() -> None:
    """The prepared launch of a call that launches nothing."""


def prepared(mod: ModuleType, call: Any) -> Callable[[], None]:
    """What ``backends.cuda.<mod>``'s ``prepare`` does with ``call``, with the kernel to run on the host."""
    key, sizes, args = mod.pack(call)
    shape = mod.shape(key, sizes, MAX_BLOCKS)
    if shape is None:
        return _nothing
    kernel = build(mod.KERNELS.spec(*key))
    return lambda: kernel.launch(shape, args)


def run(mod: ModuleType, call: Any) -> None:
    """What ``backends.cuda.<mod>``'s operation does with ``call``, with the kernel run on the host."""
    prepared(mod, call)()


_MODULES = {Op.VERIFY: verify, Op.WRITE: write, Op.PLAN: plan, Op.PLAN_OFFSETS: plan_offsets,
            Op.PLAN_ENTRIES: plan_entries, Op.SCATTER: scatter, Op.VERIFY_BUDGET: budget}
_BY_CONTRACT = {typing.get_type_hints(m.pack)["call"]: m for m in _MODULES.values()}


def emu(call: Any) -> None:
    """Any operation of the cuda backend, emulated: the call's contract names its module."""
    run(_BY_CONTRACT[type(call)], call)


def prepare(call: Any) -> Callable[[], None]:
    """The emulated launch of ``call``, packed once (the launchers replay it for a repeated call)."""
    return prepared(_BY_CONTRACT[type(call)], call)


_CPU = {"cpu": 0}
BACKEND = Backend(
    name="cuda_emu",
    description="The cuda backend's kernels, emulated on the CPU (tests only).",
    ops={op: OpSupport(f"{__name__}:emu", _CPU, capture_safe=True, prepare=prepare) for op in _MODULES},
)
