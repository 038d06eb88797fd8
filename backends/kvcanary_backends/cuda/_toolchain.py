"""Compile, cache, load and launch the CUDA kernels: NVRTC through cuda-python's ``cuda.core``.

A kernel *specialization* is a source file under ``kernels/``, its ``extern "C"`` entry point and a few
``-D`` defines (:class:`Spec`). Each is compiled once per process and GPU architecture (NVRTC, ``sm_XY`` read
from the device at run time), cached on disk as a cubin (``$KVCANARY_CUDA_CACHE_DIR``, default
``~/.cache/kvcanary/cuda``; ``KVCANARY_CUDA_CACHE=0`` turns it off) and loaded once per device.

Launches go through ``cuda.core.launch`` on torch's current stream (its raw handle, wrapped once per handle),
so they are ordered with torch's work and are recorded by ``torch.cuda.graph`` capture. Every kernel
parameter is 8 bytes and every argument a Python ``int`` (pointers, sizes, flags): cuda.core packs ints as
``intptr_t``, its cheapest path. Nothing here allocates device memory or synchronizes.

``cuda.core`` is imported lazily, so the backend's modules import (and its host-side packing is testable)
on a machine without CUDA.
"""

from __future__ import annotations

import hashlib
import importlib
import os
import re
import sys
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import torch

KERNEL_DIR = Path(__file__).with_name("kernels")
"""The kernel sources (``*.cu``, one per operation) and their shared headers (``*.cuh``)."""

ENV_CACHE = "KVCANARY_CUDA_CACHE"
ENV_CACHE_DIR = "KVCANARY_CUDA_CACHE_DIR"
ENV_LINEINFO = "KVCANARY_CUDA_LINEINFO"  # 1: compile with -lineinfo (sanitizer reports name source lines)
ENV_VERBOSE = "KVCANARY_CUDA_VERBOSE"  # 1: print ptxas resource usage of every compile to stderr


@dataclass(frozen=True)
class Spec:
    """One compiled kernel: ``source`` (a file of KERNEL_DIR), ``entry`` and its ``-D`` defines."""

    source: str
    entry: str
    defines: tuple[tuple[str, int], ...] = ()
    threads: int = 256
    extra_include: str | None = None  # a second include directory (benchmark probes live outside KERNEL_DIR)

    def path(self) -> Path:
        base = Path(self.extra_include) if self.extra_include else KERNEL_DIR
        return base / self.source

    def define_list(self) -> list[tuple[str, str]]:
        return [(k, str(v)) for k, v in self.defines]

    def label(self) -> str:
        d = ",".join(f"{k.removeprefix('KVC_')}={v}" for k, v in self.defines)
        return f"{self.entry}[{d}]"


class Compiled:
    """A loaded kernel and what the launcher needs to size its grid."""

    __slots__ = ("kernel", "label", "local_bytes", "max_blocks", "num_regs", "spec")

    def __init__(self, spec: Spec, kernel: Any, max_blocks: int, num_regs: int, local_bytes: int) -> None:
        self.spec = spec
        self.kernel = kernel
        self.label = spec.label()
        self.max_blocks = max_blocks  # resident blocks of spec.threads on the whole GPU (persistent grids)
        self.num_regs = num_regs
        self.local_bytes = local_bytes


# -- cuda.core, imported on first use -------------------------------------------------------------------------
_lazy: dict[str, Any] = {}  # "core": the cuda.core module, "launch": its launch function


def core() -> Any:
    """The ``cuda.core`` module (``cuda.core.experimental`` before 1.0); raises ImportError if absent."""
    mod = _lazy.get("core")
    if mod is not None:
        return mod
    with _import_lock:  # a module half-imported by another thread would look like it lacks attributes
        return _import_core()


_import_lock = threading.Lock()


def _import_core() -> Any:
    mod = _lazy.get("core")
    if mod is not None:
        return mod
    errors: list[str] = []
    for name in ("cuda.core", "cuda.core.experimental"):
        try:
            mod = importlib.import_module(name)
        except Exception as exc:  # ImportError, or a broken install raising something else
            errors.append(f"{name}: {type(exc).__name__}: {exc}")
            continue
        if all(hasattr(mod, a) for a in ("Program", "ProgramOptions", "ObjectCode", "LaunchConfig", "launch",
                                         "Stream", "Device")):
            _lazy["core"] = mod
            return mod
        errors.append(f"{name}: lacks Program/ObjectCode/LaunchConfig/launch/Stream/Device")
    raise ImportError(f"cuda.core is not usable: {'; '.join(errors)}")


def core_missing() -> str | None:
    """Why cuda.core cannot be used here (None when it can)."""
    try:
        core()
    except ImportError as exc:
        return str(exc)
    return None


def nvrtc_missing() -> str | None:
    """Why NVRTC cannot be loaded (None when it can): cuda.core compiles through it."""
    try:
        nvrtc = importlib.import_module("cuda.bindings.nvrtc")
        err, _major, _minor = nvrtc.nvrtcVersion()
    except Exception as exc:
        return f"NVRTC is not loadable: {type(exc).__name__}: {exc}"
    if int(err) != 0:
        return f"NVRTC is not loadable: nvrtcVersion returned {err}"
    return None


def _versions() -> str:
    parts = []
    for name in ("cuda.core", "cuda.bindings"):
        try:
            parts.append(f"{name}={importlib.import_module(name).__version__}")
        except Exception:
            parts.append(f"{name}=?")
    return ";".join(parts)


# -- compilation ----------------------------------------------------------------------------------------------
def headers_text() -> str:
    """Every shared header, concatenated (part of each cache key)."""
    return "".join(p.read_text() for p in sorted(KERNEL_DIR.glob("*.cuh")))


def arch_of(device_index: int) -> str:
    major, minor = torch.cuda.get_device_capability(device_index)
    return f"sm_{major}{minor}"


def _cache_dir() -> Path | None:
    if os.environ.get(ENV_CACHE, "1") == "0":
        return None
    root = os.environ.get(ENV_CACHE_DIR) or os.path.join(os.path.expanduser("~"), ".cache", "kvcanary", "cuda")
    return Path(root)


class _Log:
    def __init__(self) -> None:
        self.parts: list[str] = []

    def write(self, text: str) -> None:
        self.parts.append(text)


_cubins: dict[str, bytes] = {}


def _cache_key(spec: Spec, arch: str) -> str:
    lineinfo = os.environ.get(ENV_LINEINFO) == "1"
    text = "\0".join([spec.path().read_text(), headers_text(), repr(spec.define_list()), arch, str(lineinfo),
                      _versions(), spec.entry])
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def compile_cubin(spec: Spec, arch: str) -> bytes:
    """NVRTC-compile ``spec`` for ``arch`` (``sm_90``), through the disk cache."""
    source = spec.path().read_text()
    lineinfo = os.environ.get(ENV_LINEINFO) == "1"
    verbose = os.environ.get(ENV_VERBOSE) == "1"
    key = _cache_key(spec, arch)
    hit = _cubins.get(key)
    if hit is not None:
        return hit
    cache = _cache_dir()
    path = cache / f"{spec.entry}-{key}.cubin" if cache is not None else None
    if path is not None and path.is_file() and not verbose:
        cubin = path.read_bytes()
        _cubins[key] = cubin
        return cubin
    cc = core()
    include = [str(KERNEL_DIR)] + ([spec.extra_include] if spec.extra_include else [])
    opts = cc.ProgramOptions(arch=arch, std="c++17", include_path=include, define_macro=spec.define_list() or None,
                             lineinfo=lineinfo or None, ptxas_options=["-v"] if verbose else None,
                             name=re.sub(r"[^A-Za-z0-9_]+", "_", spec.label()).strip("_"))
    log = _Log()
    try:
        obj = cc.Program(source, "c++", options=opts).compile("cubin", logs=log)
    except Exception as exc:
        raise RuntimeError(f"kv-canary cuda: compiling {spec.label()} for {arch} failed: {exc}\n"
                           + "".join(log.parts)) from exc
    if verbose:
        sys.stderr.write(f"[kvcanary cuda] {spec.label()} {arch}\n{''.join(log.parts)}\n")
    cubin = bytes(obj.code)
    _cubins[key] = cubin
    if path is not None:
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_suffix(f".{os.getpid()}.{threading.get_ident()}.tmp")
            tmp.write_bytes(cubin)
            os.replace(tmp, path)
        except OSError:
            pass  # a read-only home only costs a recompile next time
    return cubin


_lock = threading.Lock()
_compiled: dict[tuple[Spec, int], Compiled] = {}


K = TypeVar("K")
V = TypeVar("V")


def once(cache: dict[K, V], key: K, lock: threading.Lock, make: Callable[[], V]) -> V:
    """``cache[key]``, made by ``make()`` under ``lock`` the first time (no lock taken on a hit)."""
    hit = cache.get(key)
    if hit is not None:
        return hit
    with lock:
        hit = cache.get(key)
        if hit is None:
            hit = make()
            cache[key] = hit
        return hit


def load(spec: Spec, device_index: int, shmem: int = 0) -> Compiled:
    """``spec`` compiled and loaded on ``device_index`` (once per process)."""
    return once(_compiled, (spec, device_index), _lock, lambda: _load(spec, device_index, shmem))


def _load(spec: Spec, device_index: int, shmem: int) -> Compiled:
    cc = core()
    arch = arch_of(device_index)
    cubin = compile_cubin(spec, arch)
    dev = cc.Device(device_index)
    try:
        # Loading is not a stream operation, but the driver may refuse it while a capture runs: launch
        # each specialization once eagerly before capturing (backends.cuda.preload does the common ones).
        with torch.cuda.device(device_index):
            dev.set_current()  # the primary context, the one torch uses
            obj = cc.ObjectCode.from_cubin(cubin, name=spec.label())
            kernel = obj.get_kernel(spec.entry)
    except Exception as exc:
        hint = (" (a CUDA-graph capture is running: launch each kernel once eagerly before capturing)"
                if torch.cuda.is_current_stream_capturing() else "")
        raise RuntimeError(f"kv-canary cuda: loading {spec.label()} on cuda:{device_index} failed: "
                           f"{exc}{hint}") from exc
    sms = int(dev.properties.multiprocessor_count)
    try:
        per_sm = int(kernel.occupancy.max_active_blocks_per_multiprocessor(spec.threads, shmem))
    except Exception:
        per_sm = max(1, 2048 // spec.threads)
    try:  # properties in cuda.core 1.x, methods taking a device before
        attrs = kernel.attributes
        regs, local = (v() if callable(v) else v for v in (attrs.num_regs, attrs.local_size_bytes))
        regs, local = int(regs), int(local)
    except Exception:
        regs, local = -1, -1
    return Compiled(spec, kernel, max(1, per_sm) * sms, regs, local)


def _compile_worker(spec: Spec, arch: str) -> bytes:
    return compile_cubin(spec, arch)


def compile_all(specs: Iterable[Spec], arch: str, workers: int | None = None) -> None:
    """Compile ``specs`` for ``arch`` into the caches, in worker processes when there are many (NVRTC through
    cuda.core holds the GIL); sequentially if worker processes cannot be started."""
    todo = list(specs)
    workers = workers or min(16, max(1, (os.cpu_count() or 1)), len(todo))
    if workers > 1 and len(todo) > 4:
        try:
            import multiprocessing
            from concurrent.futures import ProcessPoolExecutor

            ctx = multiprocessing.get_context("spawn")  # never fork a process that may hold a CUDA context
            with ProcessPoolExecutor(max_workers=workers, mp_context=ctx) as pool:
                for spec, cubin in zip(todo, pool.map(_compile_worker, todo, [arch] * len(todo)), strict=True):
                    _cubins[_cache_key(spec, arch)] = cubin
            return
        except Exception:
            pass
    for spec in todo:
        compile_cubin(spec, arch)


def loaded() -> list[Compiled]:
    """Every kernel loaded so far (the benchmark prints their resource usage)."""
    return list(_compiled.values())


# -- launching ------------------------------------------------------------------------------------------------
_streams: dict[int, Any] = {}
_configs: dict[tuple[int, ...], Any] = {}
_ready = threading.local()


def _stream(handle: int) -> Any:
    s = _streams.get(handle)
    if s is None:
        cc = core()
        if handle == 0 and hasattr(cc, "LEGACY_DEFAULT_STREAM"):
            s = cc.LEGACY_DEFAULT_STREAM
        else:
            s = cc.Stream.from_handle(handle)
        if len(_streams) > 256:  # streams come and go; the wrappers are cheap to rebuild
            _streams.clear()
        _streams[handle] = s
    return s


def _config(grid_x: int, grid_y: int, block: int, shmem: int, grid_z: int = 1) -> Any:
    """A cached LaunchConfig (building one per launch would cost more than the launch itself). Keyed like
    :func:`launch`'s ``shape`` (a ``grid_z`` other than 1 appended), so that its hot path looks it up directly."""
    key = (grid_x, grid_y, block, shmem) if grid_z == 1 else (grid_x, grid_y, block, shmem, grid_z)
    cfg = _configs.get(key)
    if cfg is None:
        cc = core()
        grid = grid_x if grid_y == 1 and grid_z == 1 else (grid_x, grid_y, grid_z)
        cfg = cc.LaunchConfig(grid=grid, block=block, shmem_size=shmem)
        if len(_configs) > 4096:
            _configs.clear()
        _configs[key] = cfg
    return cfg


def _make_current(device_index: int) -> None:
    done: set[int] | None = getattr(_ready, "devices", None)
    if done is None:
        done = set()
        _ready.devices = done
    if device_index not in done:
        core().Device(device_index).set_current()  # the primary context, the one torch uses
        done.add(device_index)


_raw_stream = torch._C._cuda_getCurrentRawStream if hasattr(torch._C, "_cuda_getCurrentRawStream") else None
_get_device = getattr(torch._C, "_cuda_getDevice", None)


def current_stream(device_index: int) -> int:
    """torch's current stream on ``device_index``, as a raw ``cudaStream_t`` value."""
    if _raw_stream is not None:
        return int(_raw_stream(device_index))
    return int(torch.cuda.current_stream(device_index).cuda_stream)


def _current_device() -> int:
    return int(_get_device()) if _get_device is not None else torch.cuda.current_device()


def launch(compiled: Compiled, device_index: int, shape: tuple[int, int, int, int], args: Iterable[int]) -> None:
    """Launch with ``shape`` = (grid x, grid y, threads, shared bytes) on torch's current stream of
    ``device_index`` (asynchronous, capturable).

    The hot path is a few dictionary lookups: the LaunchConfig is cached per shape, the stream
    wrapper per raw handle, the launch function once, and the context is made current once per thread.
    """
    if _current_device() != device_index:
        with torch.cuda.device(device_index):
            launch(compiled, device_index, shape, args)
        return
    done: set[int] | None = getattr(_ready, "devices", None)
    if done is None or device_index not in done:
        _make_current(device_index)
    cfg = _configs.get(shape)
    if cfg is None:
        cfg = _config(*shape)
    handle = int(_raw_stream(device_index)) if _raw_stream is not None else current_stream(device_index)
    stream = _streams.get(handle)
    if stream is None:
        stream = _stream(handle)
    fn = _lazy.get("launch")
    if fn is None:
        fn = _lazy["launch"] = core().launch
    fn(stream, cfg, compiled.kernel, *args)


def prepared(compiled: Compiled, device_index: int, shape: tuple[int, int, int, int],
             args: Iterable[int]) -> Callable[[], None]:
    """``launch(compiled, device_index, shape, args)`` as a function of nothing: the LaunchConfig, the kernel
    handle and the argument tuple are looked up once; each call reads torch's current device and stream (a
    launch replayed under another stream, or captured in a CUDA graph, goes there)."""
    cfg = _configs.get(shape)
    if cfg is None:
        cfg = _config(*shape)
    kernel = compiled.kernel
    params = tuple(args)
    streams = _streams
    raw = _raw_stream
    current = _current_device
    fn = _lazy.get("launch")
    if fn is None:
        fn = _lazy["launch"] = core().launch

    def run() -> None:
        done: set[int] | None = getattr(_ready, "devices", None)
        if current() != device_index or done is None or device_index not in done:
            launch(compiled, device_index, shape, params)  # another device is current, or a new thread
            return
        handle = int(raw(device_index)) if raw is not None else current_stream(device_index)
        stream = streams.get(handle)
        if stream is None:
            stream = _stream(handle)
        fn(stream, cfg, kernel, *params)

    return run


def cdiv(a: int, b: int) -> int:
    return -(-a // b)
