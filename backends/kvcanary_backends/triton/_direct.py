"""Launch a kernel Triton compiled through ``cuda.core``, as the cuda backend launches its own cubins.

Triton's compiled launcher does Python work on each call (launch metadata, hooks, scratch sizing) before it
parses every argument in C; ``benchmarks/host_launch.py`` times it against this path and against a bare
launch. Once Triton has compiled a variant, this module loads
its cubin once per device (``ObjectCode.from_cubin``) and launches it with ``cuda.core.launch``: the same
kernel, grid, block (``32 * num_warps``), dynamic shared memory (``metadata.shared``) and parameters as
Triton's launcher passes to ``cuLaunchKernelEx``.

The parameters, read from Triton's launcher (``backends/nvidia/driver.py``, the same in 3.6, 3.8 and
3.9): every argument whose signature type is not ``constexpr``, in signature order (pointers as 8-byte
addresses, integers at the width of their type: ``i32`` 4 bytes, ``i64`` 8, ``i1`` 1), then two pointers
Triton 3.x appends, the global scratch and the profile scratch (null when the metadata sizes them 0).

:func:`refusal` says why a variant cannot go this way (None: it can); it then keeps Triton's launcher. It
refuses Triton versions not read (:data:`CHECKED_TRITON`), clusters (``num_ctas`` > 1, cluster dims),
cooperative or PDL launches, scratch memory, tensor descriptors, instrumentation (GSan), more than 48 KiB of
shared memory (Triton sets the opt-in attribute then), argument types other than pointers and integers,
and any variant whose parameter list disagrees with the ``.entry`` of its own PTX (count and widths). It
also keeps Triton's launcher for a variant loaded while Triton's launch hooks (a profiler) are set: hooks
are read when a variant is loaded, not at each launch.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from functools import cache
from typing import Any

import torch
import triton

CHECKED_TRITON: frozenset[tuple[int, int]] = frozenset({(3, 6), (3, 8), (3, 9)})
"""Triton versions whose launcher this module was checked against (major, minor)."""

SCRATCH_POINTERS = 2
"""Pointers Triton's launcher appends after the kernel's arguments: global scratch, profile scratch."""

SHARED_DEFAULT_MAX = 48 * 1024
"""Dynamic shared memory a kernel gets without the opt-in attribute."""

PTR = "ptr"
_WIDTH: dict[str, int] = {PTR: 8, "i64": 8, "i32": 4, "i1": 1}
"""Bytes of each parameter type this path packs (Triton's ``ty_to_cpp``: CUdeviceptr, int64_t, int32_t,
int8_t); unsigned and floating-point types are refused."""


def triton_version() -> tuple[int, int]:
    """(major, minor) of the installed Triton."""
    parts = re.findall(r"\d+", triton.__version__)[:2]
    return int(parts[0]), int(parts[1])


def param_types(signature: Mapping[Any, Any]) -> tuple[str, ...] | None:
    """The types of the parameters Triton's launcher passes for a variant whose ``src.signature`` (every
    kernel argument, in order) is ``signature``: the non-constexpr arguments (pointers as :data:`PTR`), then
    the scratch pointers. None when an argument has a type this path does not pack."""
    out: list[str] = []
    for ty in signature.values():
        if ty == "constexpr":
            continue
        if not isinstance(ty, str):  # a tuple argument (flattened by Triton): not used here
            return None
        if ty.startswith("*"):
            out.append(PTR)
        elif ty in _WIDTH:
            out.append(ty)
        else:
            return None
    return (*out, *(PTR,) * SCRATCH_POINTERS)


def widths(types: Sequence[str]) -> tuple[int, ...]:
    """Bytes of each parameter of ``types`` (:func:`param_types`)."""
    return tuple(_WIDTH[t] for t in types)


_PTX_PARAM = re.compile(r"\.param\s+\.([a-z])(\d+)\b")


def ptx_param_widths(ptx: str, name: str) -> tuple[int, ...] | None:
    """Bytes of each parameter of the ``.entry name(...)`` of ``ptx`` (None: no such entry)."""
    m = re.search(r"\.entry\s+" + re.escape(name) + r"\s*\(([^)]*)\)", ptx)
    if m is None:
        return None
    return tuple(int(bits) // 8 for _kind, bits in _PTX_PARAM.findall(m.group(1)))


def _meta(compiled: Any, name: str, default: Any) -> Any:
    return getattr(compiled.metadata, name, default)


def hooks_active() -> bool:
    """Whether Triton's launch hooks (profilers) are set: its launcher calls them, this path would not."""
    try:
        from triton import knobs
    except ImportError:  # pragma: no cover - before knobs: no hook chains to look at
        return False
    for hook in (knobs.runtime.launch_enter_hook, knobs.runtime.launch_exit_hook):
        if hook is None:
            continue
        calls = getattr(hook, "calls", None)
        if calls is None or calls:
            return True
    return False


def refusal(compiled: Any) -> str | None:
    """Why the launch of ``compiled`` (a ``CompiledKernel``) cannot be reproduced here (None: it can)."""
    version = triton_version()
    if version not in CHECKED_TRITON:
        return f"Triton {version[0]}.{version[1]}: its launcher was not checked"
    if _meta(compiled, "num_ctas", 1) != 1:
        return "num_ctas > 1 (a cluster launch)"
    if any(d != 1 for d in _meta(compiled, "cluster_dims", (1, 1, 1)) or ()):
        return "cluster dims"
    if _meta(compiled, "launch_cooperative_grid", False):
        return "cooperative launch"
    if _meta(compiled, "launch_pdl", False):
        return "programmatic dependent launch"
    if _meta(compiled, "global_scratch_size", 0) or _meta(compiled, "profile_scratch_size", 0):
        return "global or profile scratch memory"
    if _meta(compiled, "tensordesc_meta", None):
        return "tensor descriptors"
    instrumentation = _meta(compiled, "instrumentation_mode", "")
    if instrumentation:  # GSan / ConSan append parameters or use scratch
        return f"instrumentation {instrumentation!r}"
    shared = int(_meta(compiled, "shared", 0))
    if shared > SHARED_DEFAULT_MAX:
        return f"{shared} bytes of shared memory (needs the opt-in attribute)"
    asm = getattr(compiled, "asm", {})
    if "cubin" not in asm or "ptx" not in asm:
        return "no cubin or PTX kept"
    types = param_types(compiled.src.signature)
    if types is None:
        return "an argument type other than a pointer or an integer"
    entry = ptx_param_widths(asm["ptx"], compiled.metadata.name)
    if entry != widths(types):
        return f"parameters {widths(types)} disagree with the PTX entry's {entry}"
    return None


# -- packing --------------------------------------------------------------------------------------------------
def _address(a: Any) -> Any:
    return a.data_ptr() if isinstance(a, torch.Tensor) else a


def _same(a: Any) -> Any:
    return a


def _converters() -> dict[str, Callable[[Any], Any]]:
    """How each parameter type reaches cuda.core, which packs a Python int as an 8-byte ``intptr_t`` (also a
    bool: it tests ``int`` first) and a numpy scalar at its own width."""
    import numpy

    return {PTR: _address, "i64": _same, "i32": numpy.int32, "i1": numpy.bool_}


class Packer:
    """Turns a launch's values (arguments then constexprs, signature order) into the kernel's parameters."""

    __slots__ = ("_convs", "_tail")

    def __init__(self, signature: Mapping[Any, Any]) -> None:
        conv = _converters()
        self._convs: tuple[Callable[[Any], Any] | None, ...] = tuple(
            None if ty == "constexpr" else conv[PTR if ty.startswith("*") else ty] for ty in signature.values())
        self._tail: tuple[int, ...] = (0,) * SCRATCH_POINTERS

    def __call__(self, values: Sequence[Any]) -> tuple[Any, ...]:
        return (*(c(v) for c, v in zip(self._convs, values, strict=False) if c is not None), *self._tail)


# -- loading and launching -------------------------------------------------------------------------------------
class Variant:
    """One compiled variant loaded on one device through cuda.core: kernel, packer, block, shared bytes."""

    __slots__ = ("block", "device", "kernel", "pack", "shared")

    def __init__(self, kernel: Any, pack: Packer, block: int, shared: int, device: int) -> None:
        self.kernel = kernel
        self.pack = pack
        self.block = block
        self.shared = shared
        self.device = device


def load(compiled: Any, device: int) -> Variant | str:
    """``compiled`` loaded on ``device`` for :func:`launch`, or why not (then Triton's launcher stays)."""
    try:
        why = refusal(compiled)
    except AttributeError as exc:  # not a CompiledKernel of the layout read (a stand-in, another version)
        return f"unreadable compiled kernel: {exc}"
    if why is not None:
        return why
    if hooks_active():
        return "Triton launch hooks are set"
    try:
        from kvcanary_backends.cuda._toolchain import core

        cc = core()
        pack = Packer(compiled.src.signature)
        with torch.cuda.device(device):
            cc.Device(device).set_current()  # the primary context, the one torch and Triton use
            obj = cc.ObjectCode.from_cubin(compiled.asm["cubin"], name=compiled.metadata.name)
            kernel = obj.get_kernel(compiled.metadata.name)
    except Exception as exc:  # no cuda.core or numpy, a capture refusing the load, ...: Triton's launcher stays
        return f"loading through cuda.core failed: {type(exc).__name__}: {exc}"
    return Variant(kernel, pack, 32 * int(compiled.metadata.num_warps), int(compiled.metadata.shared), device)


def config(variant: Variant, grid: tuple[int, int, int]) -> Any:
    """The cached ``LaunchConfig`` of ``variant`` on ``grid`` (the cuda backend's cache)."""
    from kvcanary_backends.cuda._toolchain import _config

    return _config(grid[0], grid[1], variant.block, variant.shared, grid[2])


def launch_function() -> Callable[..., None]:
    """cuda.core's ``launch(stream, config, kernel, *params)``."""
    from kvcanary_backends.cuda._toolchain import core

    fn: Callable[..., None] = core().launch
    return fn


@cache
def stream_function() -> Callable[[int, int], Any]:
    """``stream(device, handle)``: torch's raw stream ``handle`` as a cuda.core stream (wrapped once per
    handle), with ``device``'s primary context made current once per thread (the cuda backend's helpers,
    bound once: this runs at every launch)."""
    from kvcanary_backends.cuda import _toolchain as tc

    streams, make_stream, ready, make_current = tc._streams, tc._stream, tc._ready, tc._make_current

    def stream(device: int, handle: int) -> Any:
        done: set[int] | None = getattr(ready, "devices", None)
        if done is None or device not in done:
            make_current(device)
        s = streams.get(handle)
        return s if s is not None else make_stream(handle)

    return stream
