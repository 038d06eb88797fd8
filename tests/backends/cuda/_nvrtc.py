"""NVRTC through ctypes (no GPU, no cuda-python needed): the run-time compiler, for CI's compile checks.

The library is looked up in the ``nvidia-cuda-nvrtc`` wheel (the ``dev`` extra installs it), then in a CUDA
toolkit (``$CUDA_HOME``, /usr/local/cuda), then on the loader path.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import importlib.util
import os
import re
from pathlib import Path


def _candidates() -> list[Path]:
    out: list[Path] = []
    spec = importlib.util.find_spec("nvidia")
    for root in (spec.submodule_search_locations or []) if spec else []:
        out += sorted(Path(root).glob("*/lib/libnvrtc.so*"))
    for home in (os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda"):
        if home:
            out += sorted(Path(home).glob("lib64/libnvrtc.so*")) + sorted(Path(home).glob("lib/libnvrtc.so*"))
    return [p for p in out if "builtins" not in p.name and ".alt." not in p.name]


def load() -> ctypes.CDLL | None:
    for path in _candidates():
        try:
            for builtins in sorted(path.parent.glob("libnvrtc-builtins.so*")):  # NVRTC dlopens it by name
                if ".alt." not in builtins.name:
                    ctypes.CDLL(str(builtins), mode=ctypes.RTLD_GLOBAL)
            return ctypes.CDLL(str(path))
        except OSError:
            continue
    name = ctypes.util.find_library("nvrtc")
    if name:
        try:
            return ctypes.CDLL(name)
        except OSError:
            return None
    return None


class NvrtcError(RuntimeError):
    pass


def compile_source(lib: ctypes.CDLL, source: str, name: str, options: list[str], *, ptx: bool) -> bytes:
    """PTX (``ptx=True``, options name a ``compute_XY``) or a cubin (``sm_XY``); raises NvrtcError with the log."""
    prog = ctypes.c_void_p()
    rc = lib.nvrtcCreateProgram(ctypes.byref(prog), source.encode(), name.encode(), 0, None, None)
    if rc != 0:
        raise NvrtcError(f"nvrtcCreateProgram failed ({rc})")
    try:
        opts = (ctypes.c_char_p * len(options))(*[o.encode() for o in options])
        rc = lib.nvrtcCompileProgram(prog, len(options), opts)
        size = ctypes.c_size_t()
        lib.nvrtcGetProgramLogSize(prog, ctypes.byref(size))
        log = ctypes.create_string_buffer(size.value)
        lib.nvrtcGetProgramLog(prog, log)
        if rc != 0:
            raise NvrtcError(f"{name} {' '.join(options)}:\n{log.value.decode(errors='replace')}")
        get_size, get = (lib.nvrtcGetPTXSize, lib.nvrtcGetPTX) if ptx else (lib.nvrtcGetCUBINSize, lib.nvrtcGetCUBIN)
        get_size(prog, ctypes.byref(size))
        out = ctypes.create_string_buffer(size.value)
        if get(prog, out) != 0:
            raise NvrtcError(f"{name}: could not fetch the {'PTX' if ptx else 'cubin'}")
        return out.raw
    finally:
        lib.nvrtcDestroyProgram(ctypes.byref(prog))


def entry_params(ptx: str, entry: str) -> list[str]:
    """The ``.param`` declarations of ``entry`` in ``ptx``."""
    m = re.search(r"\.entry\s+" + re.escape(entry) + r"\s*\((.*?)\)", ptx, re.S)
    if m is None:
        raise NvrtcError(f"no .entry {entry} in the PTX")
    return [p.strip() for p in m.group(1).split(",") if p.strip()]
