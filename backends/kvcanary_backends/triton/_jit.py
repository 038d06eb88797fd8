"""Host-side helpers shared by the Triton kernels: typed jit decorators, launch geometry, tuning knobs.

Triton reads ``TRITON_INTERPRET`` when a kernel is *decorated* (module import), so :data:`INTERPRET` records
the mode the kernels of this package were built in; the backend refuses a device the built mode cannot
serve (compiled kernels cannot take CPU tensors, interpreted ones would sync with the host on CUDA).

Kernel parameters are annotated ``tl.tensor`` (or ``tl.constexpr``) only: Triton ignores the former (it
is no type it specialises on), mypy sees ``Any``, and no annotation forces a signature type.

Kernels specialise on argument *types* only (every runtime parameter is in ``do_not_specialize``: no
integer is specialised on its value, no pointer on its alignment), so batch sizes never recompile and the
compiled variant is a function of a few cheap facts; :class:`Launcher` uses that to launch eagerly without
Triton's per-call argument binding (most of an eager launch of a kernel with dozens of arguments).
"""

from __future__ import annotations

import inspect
import os
import weakref
from collections.abc import Callable, Hashable, Sequence
from functools import cache
from typing import Any

import torch
import triton

from kvcanary_backends.triton import _direct

INTERPRET: bool = os.environ.get("TRITON_INTERPRET", "0") == "1"
"""True when the kernels below were decorated under Triton's interpreter (CPU tensors only)."""

class Tuning(dict[str, int]):
    """The launch shapes: a dict that counts its changes (``version``), so that a prepared launch, which read
    them once, knows when it is out of date."""

    version: int = 0

    def _changed(self) -> None:
        self.version += 1

    def __setitem__(self, key: str, value: int) -> None:
        super().__setitem__(key, value)
        self._changed()

    def __delitem__(self, key: str) -> None:
        super().__delitem__(key)
        self._changed()

    def update(self, *args: Any, **kwargs: int) -> None:
        super().update(*args, **kwargs)
        self._changed()

    def __ior__(self, other: Any) -> Tuning:  # type: ignore[override,misc]
        self.update(other)
        return self

    def setdefault(self, key: str, default: int) -> int:
        out = super().setdefault(key, default)
        self._changed()
        return out

    def pop(self, key: str, *default: Any) -> Any:
        out = super().pop(key, *default)
        self._changed()
        return out

    def popitem(self) -> tuple[str, int]:
        out = super().popitem()
        self._changed()
        return out

    def clear(self) -> None:
        super().clear()
        self._changed()


#: Launch shapes. Module-level so that a benchmark can try alternatives on a GPU without touching the kernels
#: (each key is read at launch time; changing one recompiles once): ``bench_decode_write.py --fold-tiles``.
TUNING: Tuning = Tuning({
    "verify_block": 512,  # entries per program iteration
    "verify_warps": 8,
    "verify_waves": 8,  # persistent programs per SM
    "write_tile": 32,  # tokens per serial tile (one warp: one token per lane)
    "write_warps": 1,
    "write_fold_tile": 256,  # tokens per real-KV fold iteration
    "write_fold_tile_decode": 32,  # the same for a decode-shaped write (no more tokens than request rows)
    "write_fold_tokens": 4096,  # tokens per fold program (how many fold programs a request gets)
    "write_fold_max": 16,  # at most this many fold programs per request row
    "write_chain_fold": 1,  # 1: a decode-shaped write's chain program folds its tokens' strips (no fold programs)
    "write_chain_fold_all": 0,  # 1: real-KV ALL too (its fold reads every byte, serial with the chain: untimed)
    # the write's latency changes, bits (0: the kernel before them; 3, relaxed atomics and the lean chain, the
    # default: docs/tuning.md; write.py's docstring):
    # 1 relaxed atomics (no fence before a counter or a ring claim); 2 the lean decode chain (the first round
    # holds every independent load; a one-token tile runs no serial step); 4 a decode write's strips at the
    # guessed slot (PARTIAL chain fold: request r's token at index r)
    "write_variant": 3,
    "plan_tile": 1024,  # verify entries per plan tile (a tile never spans two requests)
    "plan_chunk": 256,  # batch rows held in registers at a time (the scan: one chunk for bs <= 256)
    "plan_warps": 8,
    "plan_row_waves": 8,  # row programs per SM at most (G = min(bs, SMs x this))
    "plan_max_y": 1024,  # programs per row at most
    "plan_max_registers": 0,  # a plan without the token pool: ptxas registers per thread at most (0: no cap)
    # the plan with the token pool only (benchmarks/bench_i36k.py times the alternatives; docs/tuning.md)
    "plan_pool_cap_mask": 1,  # 1: each entry also masked to before + j < capacity (never fails)
    "plan_pool_token_last": 0,  # 1: the tokens gathered and stored after the other three stores
    "plan_pool_max_registers": 0,  # ptxas registers per thread at most (0: no cap)
    "entries_block": 1024,
    "entries_warps": 4,
    "entries_waves": 4,
    "scatter_block": 1024,
    "scatter_row_block": 1024,
    "scatter_max_tiles": 8,
    "digest_block": 256,  # slots per digest fold iteration
    "digest_warps": 4,
    "digest_waves": 4,  # persistent digest programs per SM (one launch; a decode batch needs one program)
    "budget_block": 256,  # kept entries per verify_budget iteration (one program per request)
    "budget_row_block": 1024,  # earlier requests summed per iteration (their kept entries: the program's offset)
    "budget_warps": 4,
})

_INTERPRETER_TUNING: dict[str, int] = {
    "verify_block": 16,
    "write_tile": 8,
    "write_fold_tile": 8,
    "write_fold_tile_decode": 4,
    "write_fold_tokens": 16,
    "plan_tile": 8,
    "plan_chunk": 16,
    "plan_max_y": 3,
    "entries_block": 16,
    "scatter_block": 16,
    "scatter_row_block": 4,
    "scatter_max_tiles": 2,
    "digest_block": 8,
    "budget_block": 4,
    "budget_row_block": 4,
}
if INTERPRET:
    # The interpreter runs every program one after another with numpy: small blocks keep it fast, and on
    # the small inputs of CPU tests they make every multi-tile, multi-chunk and multi-program path run.
    TUNING.update(_INTERPRETER_TUNING)

INTERPRETER_PROGRAMS = 2
"""Persistent-grid size under the interpreter (programs run one after another on the host)."""


def kernel() -> Callable[[Callable[..., Any]], Any]:
    """``triton.jit`` for a kernel that specialises on nothing but types: every parameter not annotated
    ``tl.constexpr`` is in ``do_not_specialize`` (integers: no value 1 / multiple-of-16 variants, so a new
    batch size never recompiles; pointers: no alignment variants), which :class:`Launcher` relies on."""

    def decorate(fn: Callable[..., Any]) -> Any:
        runtime = [name for name, p in inspect.signature(fn).parameters.items() if not _is_constexpr(p)]
        return triton.jit(fn, do_not_specialize=runtime)

    return decorate


def _is_constexpr(p: inspect.Parameter) -> bool:
    ann = p.annotation
    return ann is triton.language.constexpr or (isinstance(ann, str) and ann.endswith("constexpr"))


def device_fn(fn: Callable[..., Any]) -> Any:
    """``triton.jit`` for a device function called from kernels (inlined)."""
    return triton.jit(fn)


@cache
def _sm_count(index: int) -> int:
    return int(torch.cuda.get_device_properties(index).multi_processor_count)


def num_sms(device: torch.device) -> int:
    """Streaming multiprocessors of ``device`` (a host query, cached; no device sync)."""
    if device.type != "cuda":
        return 1
    index = device.index if device.index is not None else torch.cuda.current_device()
    return _sm_count(index)


def persistent_grid(device: torch.device, work_items: int, waves: int) -> int:
    """Programs of a persistent grid: enough to fill the GPU, never more than there are work items.

    ``work_items`` is a bound known from shapes (a capacity), never a device value, so the grid is fixed
    for a CUDA graph; programs find their real share in the device counts.
    """
    cap = INTERPRETER_PROGRAMS if device.type != "cuda" else num_sms(device) * waves
    return max(1, min(work_items, cap))


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


# -- eager launches ---------------------------------------------------------------------------------------------
I32_MIN, I32_MAX = -(1 << 31), (1 << 31) - 1


def fits32(*sizes: int) -> bool:
    """Whether every size (a non-negative integer argument) is passed as an i32 (Triton types an integer
    by its value)."""
    acc = 0
    for v in sizes:
        acc |= v
    return 0 <= acc <= I32_MAX


def type_key(args: Sequence[Any]) -> tuple[object, ...]:
    """What Triton's specialisation of ``args`` depends on when it specialises on types only: each tensor's
    dtype, each integer's width (i32 or not), None (a constexpr)."""
    out: list[object] = []
    for a in args:
        out.append(a.dtype if isinstance(a, torch.Tensor) else
                   (I32_MIN <= a <= I32_MAX) if isinstance(a, int) else type(a))
    return tuple(out)


@cache
def _driver() -> Any:
    from triton.runtime import driver

    return driver


_INTERNED: dict[Hashable, int] = {}


def intern_key(key: Hashable) -> int:
    """A small int standing for ``key`` (cheap to hash in the per-call key of a long-lived object's part)."""
    return _INTERNED.setdefault(key, len(_INTERNED))


LaunchArgs = tuple[tuple[int, ...], Hashable, Sequence[Any], tuple[Any, ...], int]
"""What :class:`Launcher` takes: grid, variant key, arguments, constexprs, warps."""
PreparedLaunch = Callable[[], "bool | None"]
"""A launch with its arguments bound (:meth:`Launcher.prepare`); False: it launched nothing."""



def nothing() -> None:
    """The prepared launch of a call that launches nothing (an empty batch)."""


def _options(num_warps: int, maxnreg: int) -> dict[str, int]:
    """Triton's launch options: the warps, and the register cap where one is set (none passed otherwise, so a
    kernel without one compiles as it always has)."""
    return {"num_warps": num_warps, "maxnreg": maxnreg} if maxnreg else {"num_warps": num_warps}


_RUNNER_CAP = 256  # launch shapes remembered per kernel (grids change with batch shapes)


class Launcher:
    """``fn[grid](*args, *consts, num_warps=...)`` without Triton's per-call binding, for compiled kernels.

    ``key`` must determine the compiled variant given ``consts``: with :func:`kernel`'s type-only
    specialisation that is the dtype of every tensor argument, which integers fit 32 bits, and which
    arguments are None (:func:`type_key` computes it generically; a launcher can cache the part that comes
    from a long-lived object). A new (device, key, consts, num_warps, maxnreg) goes through Triton (compiling if
    needed) and keeps the ``CompiledKernel`` it returns. Later calls take one of two fast paths:

    - direct (:attr:`direct`): the variant's cubin loaded once per device and launched through cuda.core,
      as the cuda backend launches its own (:mod:`._direct`, which says what it refuses: such a variant
      keeps the next path);
    - Triton's compiled launcher (``CompiledKernel[grid](*args, stream=...)``, every parameter in signature
      order, constexprs included, exactly what ``JITFunction.run`` passes it).

    Under the interpreter every call goes through Triton. If a launcher refuses the arguments of a call (a
    Triton or cuda.core version parsing them otherwise), its path is switched off for good.
    ``maxnreg`` (0: none) caps ptxas's registers per thread, a compile option like ``num_warps``.
    """

    fast: bool = not INTERPRET
    direct: bool = not INTERPRET
    """Whether variants :mod:`._direct` accepts launch through cuda.core (off: Triton's compiled launcher)."""

    def __init__(self, fn: Any) -> None:
        self.fn = fn
        params = list(inspect.signature(fn.fn).parameters.values())
        flags = [_is_constexpr(p) for p in params]
        self.const_names = [p.name for p, c in zip(params, flags, strict=True) if c]
        n_rt = len(params) - len(self.const_names)
        # constexprs last, so that (*args, *consts) is the signature order
        self._ordered = not any(flags[:n_rt]) and all(flags[n_rt:])
        self._runners: dict[Hashable, _Entry] = {}
        self._variants: dict[Hashable, Any] = {}  # (device, key, consts, warps, maxnreg) -> Variant | why not

    def direct_refusals(self) -> dict[Hashable, str]:
        """Why each variant launched so far does not go through cuda.core, by (device, key, consts, warps,
        maxnreg) (empty: every one does)."""
        return {k: v for k, v in self._variants.items() if isinstance(v, str)}

    def __call__(self, grid: tuple[int, ...], key: Hashable, args: Sequence[Any], consts: tuple[Any, ...],
                 num_warps: int, *, maxnreg: int = 0) -> None:
        options = _options(num_warps, maxnreg)
        if Launcher.fast and self._ordered:
            drv = _driver().active
            dev = drv.get_current_device()
            rk = (dev, key, consts, num_warps, maxnreg, grid)
            hit = self._runners.get(rk)
            if hit is not None:
                runner, variant, cfg = hit
                if variant is not None and Launcher.direct:
                    try:
                        cu_stream = _direct.stream_function()(dev, drv.get_current_stream(dev))
                        _launch_fn()(cu_stream, cfg, variant.kernel, *variant.pack(args))
                        return
                    except TypeError:  # pragma: no cover - a cuda.core refusing an argument type (before
                        Launcher.direct = False  # launching): Triton's compiled launcher takes over
                try:
                    runner(*args, *consts, stream=drv.get_current_stream(dev))
                    return
                except (TypeError, ValueError, SystemError):  # pragma: no cover - a launcher that parses
                    # its arguments otherwise refuses them before launching: fall back to Triton's own path
                    Launcher.fast = False
            else:
                compiled = self.fn[grid](*args, **dict(zip(self.const_names, consts, strict=True)), **options)
                if compiled is None:  # pragma: no cover - nothing to keep
                    return
                if len(self._runners) >= _RUNNER_CAP:
                    self._runners.clear()
                self._runners[rk] = self._entry(compiled, dev, (dev, key, consts, num_warps, maxnreg), grid)
                return
        self.fn[grid](*args, **dict(zip(self.const_names, consts, strict=True)), **options)

    def _entry(self, compiled: Any, dev: int, vk: Hashable, grid: tuple[int, ...]) -> _Entry:
        """What a repeated launch of ``compiled`` on ``grid`` needs: Triton's runner, and the cuda.core variant
        with its launch config (None: Triton's runner only)."""
        g3 = (*grid, 1, 1, 1)[:3]
        runner = compiled[g3]
        variant = self._variants.get(vk)
        if variant is None:  # loaded whatever :attr:`direct` says now: each call reads it
            variant = _direct.load(compiled, dev)
            self._variants[vk] = variant
        if not isinstance(variant, _direct.Variant) or 0 in g3:  # refused, or an empty grid (launches nothing)
            return runner, None, None
        return runner, variant, _direct.config(variant, (g3[0], g3[1], g3[2]))

    def prepare(self, grid: tuple[int, ...], key: Hashable, args: Sequence[Any], consts: tuple[Any, ...],
                num_warps: int, *, maxnreg: int = 0) -> Callable[[], bool | None] | None:
        """This launch for a call repeated exactly (``OpSupport.prepare``): the variant's parameters packed
        once for cuda.core (each tensor as its address) and, for Triton's compiled launcher, every argument
        bound (tensors as addresses: that launcher then neither calls ``data_ptr`` nor asks the driver about
        the pointer). Each call reads the current stream and :attr:`direct`; it returns False, launching
        nothing, where the current device is another, the launch shapes (:data:`TUNING`) changed or the fast
        path was switched off (the caller then launches through :meth:`__call__`). None where there is
        nothing to bind yet (the variant's first launch goes through Triton, which compiles it) or no fast
        path (the interpreter)."""
        if not (Launcher.fast and self._ordered):
            return None
        drv = _driver().active
        dev = drv.get_current_device()
        hit = self._runners.get((dev, key, consts, num_warps, maxnreg, grid))
        if hit is None:
            return None
        runner, variant, cfg = hit
        params = (*(a.data_ptr() if isinstance(a, torch.Tensor) else a for a in args), *consts)
        current, stream = drv.get_current_device, drv.get_current_stream
        tuning, version = TUNING, TUNING.version
        if variant is not None:
            kernel, packed = variant.kernel, variant.pack(args)
            launch, cu_stream = _launch_fn(), _direct.stream_function()

        def run() -> bool | None:
            if not Launcher.fast or tuning.version != version:
                return False
            d = current()
            if d != dev:
                return False
            if variant is not None and Launcher.direct:
                try:
                    launch(cu_stream(d, stream(d)), cfg, kernel, *packed)
                    return None
                except TypeError:  # pragma: no cover - cuda.core refusing an argument type, before launching
                    Launcher.direct = False
            try:
                runner(*params, stream=stream(d))
            except (TypeError, ValueError, SystemError):  # pragma: no cover - a launcher refusing the call: it
                Launcher.fast = False  # parses its arguments before launching; Triton's own path takes over
                return False
            return None

        return run


_Entry = tuple[Any, Any, Any]
"""A kept launch: Triton's runner for the grid, the cuda.core variant and its launch config (or None, None)."""


@cache
def _launch_fn() -> Callable[..., None]:
    return _direct.launch_function()


class ObjectCache:
    """Values derived from long-lived objects (a context), recomputed only for a new object.

    Keyed by identity, held weakly: an entry goes when its object does (objects that take no weak
    reference are not cached). The objects are frozen dataclasses; what is derived must not depend on
    tensor *contents*, only on which tensors they are and their shapes.
    """

    def __init__(self) -> None:
        self._entries: dict[int, tuple[weakref.ref[Any], Any]] = {}

    def get(self, obj: Any, make: Callable[[Any], Any]) -> Any:
        hit = self._entries.get(id(obj))
        if hit is not None and hit[0]() is obj:
            return hit[1]
        value = make(obj)
        key = id(obj)
        entries = self._entries

        def forget(_ref: weakref.ref[Any]) -> None:
            entries.pop(key, None)

        try:
            ref = weakref.ref(obj, forget)
        except TypeError:
            return value
        self._entries[key] = (ref, value)
        return value
