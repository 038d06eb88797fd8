"""The backend registry: discovery through entry points, selection by device, capability and priority.

Backends are found in the ``kvcanary.backends`` entry-point group (kvcanary never imports one by name) or
added with :func:`register_backend`. For each operation a backend declares an :class:`OpSupport`: the
device types it serves, its priority there, whether it is safe under CUDA-graph capture, and optional
per-call limits. Selection, per launch:

1. the forced backend, if any: ``backend=`` on the launcher, else :func:`use_backend`, else the
   ``KVCANARY_BACKEND`` environment variable; it must be able to serve, or :class:`BackendError` lists why;
2. otherwise the highest-priority backend that can serve, skipping (with reasons) those that cannot.

Static answers (availability, device support) are cached per (operation, device, forced name); per-call
limits and the capture check run only for backends that declare them. ``KVCANARY_BACKEND`` is read once, at
the first launch, not per launch: after changing it inside a running process, call
:meth:`Registry.invalidate` (``use_backend`` and ``backend=`` need nothing).
"""

from __future__ import annotations

import contextlib
import contextvars
import importlib
import os
import pkgutil
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from enum import Enum
from importlib import metadata
from typing import Any

import torch

from kvcanary.operation import Op, Operation, declared

__all__ = [
    "ENTRY_POINT_GROUP", "ENV_BACKEND", "REGISTRY", "Backend", "BackendError", "Choice", "Impl", "Limits", "Op",
    "OpSupport", "Operation", "Prepare", "Reason", "ReasonKind", "Registry", "register_backend", "registered_backends",
    "use_backend",
]

ENV_BACKEND = "KVCANARY_BACKEND"
ENTRY_POINT_GROUP = "kvcanary.backends"


class ReasonKind(str, Enum):
    """Why a backend cannot serve a launch (stable: tooling and the support matrix group by it)."""

    PACKAGE = "package"  # a Python package or toolchain is missing
    DEVICE = "device"  # the device type is not served
    CAPABILITY = "capability"  # compute capability or hardware feature
    INTERPRETER = "interpreter"  # runs on this device only through an interpreter that is not enabled
    OPERATION = "operation"  # the backend does not implement this operation
    LIMIT = "limit"  # an input is outside what this backend supports
    CAPTURE = "capture"  # not safe under CUDA-graph capture, and a capture is running
    BROKEN = "broken"  # loading the implementation failed


@dataclass(frozen=True, slots=True)
class Reason:
    """One structured reason a backend declined."""

    kind: ReasonKind
    message: str
    hint: str = ""

    def __str__(self) -> str:
        return self.message + (f" (hint: {self.hint})" if self.hint else "")


Impl = Callable[[Any], None]  # takes the operation's call object (an instance of its contract model)
Limits = Callable[[Any], Sequence[Reason]]
Launch = Callable[[], "bool | None"]
Prepare = Callable[[Any], "Launch | None"]
"""A kernel's launch, split: ``prepare(call)`` does everything that depends only on the call's argument types,
scalars, tensor metadata and addresses (choosing the compiled kernel, packing its arguments) and returns the
launch itself, ``() -> None``, which reads only what may change between identical calls (the current stream);
the launch returns False, having launched nothing, when what it was prepared from no longer holds. ``prepare``
returns None when it cannot prepare this call yet (it is then run as ``impl(call)``)."""


@dataclass(frozen=True)
class OpSupport:
    """What a backend declares for one operation."""

    impl: str | Impl  # the kernel, or "module:function" imported on first use
    devices: Mapping[str, int]  # device type -> priority ("*" = any device type)
    capture_safe: bool = False
    host_sync: bool = False
    limits: Limits | None = None
    notes: str = ""
    prepare: Prepare | None = None
    """The kernel split for repeated calls (optional): calling ``prepare(call)()`` must do exactly what
    ``impl(call)`` does. A launcher replays the prepared launch for a call that repeats a remembered one
    exactly (:meth:`Registry.preparer`)."""

    def priority(self, device_type: str) -> int | None:
        if device_type in self.devices:
            return self.devices[device_type]
        return self.devices.get("*")


class Backend:
    """A named set of operation implementations.

    A backend gets its kernels two ways: ``ops``, one table of :class:`OpSupport` (a third party's backend, a
    test double), and the kernels its ``package``'s modules attach to operations with
    :meth:`Operation.kernel <kvcanary.operation.Operation.kernel>` (the built-in backends). The package's
    modules are imported the first time the registry asks what the backend serves, and only once the
    backend is available (importing the Triton kernels needs triton). Subclass and override
    :meth:`availability` / :meth:`device_reasons` for package and hardware checks.
    """

    def __init__(self, name: str, description: str, ops: Mapping[Operation, OpSupport] | None = None, *,
                 package: str | None = None, device_types: Sequence[str] | None = None) -> None:
        self.name = name
        self.description = description
        self.package = package
        self.device_types = tuple(device_types) if device_types is not None else None
        """The device types this backend can serve at all (None: whatever its kernels declare). Selection checks
        them, and :meth:`device_reasons`, before importing the kernels: a backend that cannot run on a
        device never imports its kernel modules there."""
        self._table: dict[Operation, OpSupport] = {Op.named(op): s for op, s in (ops or {}).items()}
        self._impls: dict[Operation, Impl] = {}
        self._kernels_loaded = package is None
        self.load_error: str | None = None

    def __repr__(self) -> str:
        return f"{type(self).__name__}(name={self.name!r})"

    @property
    def ops(self) -> dict[Operation, OpSupport]:
        """Every operation this backend serves: its table, then the kernels it attached (loaded on first use)."""
        if not self._kernels_loaded:
            self.load_kernels()
        out = dict(self._table)
        for op in declared():
            support = op.kernels.get(self.name)
            if support is not None and op not in out:
                out[op] = support
        return out

    def load_kernels(self) -> None:
        """Import every public module of ``package`` (each attaches its kernels); a failure is kept in
        :attr:`load_error` and leaves the operations it did not reach unserved."""
        self._kernels_loaded = True
        if self.package is None:
            return
        try:
            pkg = importlib.import_module(self.package)
            for info in sorted(pkgutil.iter_modules(pkg.__path__), key=lambda m: m.name):
                if not info.name.startswith("_") and not info.ispkg:
                    importlib.import_module(f"{self.package}.{info.name}")
        except Exception as exc:  # a broken kernel module must not take the registry down
            self.load_error = f"importing {self.package}'s kernels failed: {type(exc).__name__}: {exc}"

    def availability(self) -> Sequence[Reason]:
        """Reasons this backend cannot run at all here (missing package, toolkit); empty when available."""
        return ()

    def device_reasons(self, op: Operation, device: torch.device) -> Sequence[Reason]:
        """Reasons it cannot serve ``op`` on ``device`` beyond the device type (interpreter, capability)."""
        return ()

    def implementation(self, op: Operation) -> Impl:
        ref = self.ops[op].impl
        if not isinstance(ref, str):  # an attached kernel (re-attaching replaces it: nothing to cache)
            return ref
        impl = self._impls.get(op)
        if impl is None:
            module, _, attr = ref.partition(":")
            impl = self._impls[op] = getattr(importlib.import_module(module), attr)
        return impl

    def static_reasons(self, op: Operation, device: torch.device) -> list[Reason]:
        """Everything that does not depend on the call's values: availability, op, device type."""
        reasons = list(self.availability())
        if reasons:
            return reasons
        if self.device_types is not None:
            if device.type not in self.device_types:
                served = ", ".join(self.device_types) or "nothing"
                return [Reason(ReasonKind.DEVICE, f"{self.name} runs on {served}, not {device.type}")]
            early = list(self.device_reasons(op, device))
            if early:
                return early
        support = self.ops.get(op)
        if support is None:
            why = f"{self.name} does not implement {op.value}"
            kind = ReasonKind.OPERATION
            if self.load_error is not None:
                why, kind = f"{why} ({self.load_error})", ReasonKind.BROKEN
            reasons.append(Reason(kind, why))
            return reasons
        if support.priority(device.type) is None:
            served = ", ".join(sorted(support.devices)) or "nothing"
            reasons.append(Reason(ReasonKind.DEVICE, f"{self.name} {op.value} runs on {served}, not {device.type}"))
        if not reasons and self.device_types is None:
            reasons.extend(self.device_reasons(op, device))
        return reasons


class BackendError(RuntimeError):
    """No backend (or not the forced one) can serve a launch; the message lists every backend's reasons."""

    def __init__(self, op: Op, device: torch.device, forced: str | None, reasons: Mapping[str, Sequence[Reason]]):
        self.op = op
        self.device = device
        self.forced = forced
        self.reasons = {k: list(v) for k, v in reasons.items()}
        head = (
            f"kv-canary: backend {forced!r} cannot run {op.value} on {device}"
            if forced
            else f"kv-canary: no backend can run {op.value} on {device}"
        )
        lines = [head]
        for name, rs in self.reasons.items():
            lines.append(f"  {name}:")
            lines.extend(f"    - [{r.kind.value}] {r}" for r in rs)
        super().__init__("\n".join(lines))


@dataclass(frozen=True)
class Choice:
    backend: Backend
    support: OpSupport
    impl: Impl


_CPU = torch.device("cpu")
_forced_ctx: contextvars.ContextVar[str | None] = contextvars.ContextVar("kvcanary_backend", default=None)


class Registry:
    """Backends by name, and the cached answers to "who serves this op on this device"."""

    def __init__(self) -> None:
        self._backends: dict[str, Backend] = {}
        self._loaded = False
        self._load_errors: dict[str, str] = {}
        self._cache: dict[tuple[Op, torch.device, str | None], tuple[list[Choice], dict[str, list[Reason]]]] = {}
        self._env_read = False
        self._env_forced: str | None = None
        self.generation = 0
        """Bumped by :meth:`invalidate`: a prepared launch made under an older generation is void."""

    def env_backend(self) -> str | None:
        """The backend ``KVCANARY_BACKEND`` forces (None: unset or empty), as read at the first launch."""
        if not self._env_read:
            self._env_forced = os.environ.get(ENV_BACKEND) or None
            self._env_read = True
        return self._env_forced

    # -- membership ---------------------------------------------------------------------------------
    def _ensure_loaded(self) -> None:
        if self._loaded:
            return
        self._loaded = True
        for ep in sorted(metadata.entry_points(group=ENTRY_POINT_GROUP), key=lambda e: e.name):
            if ep.name in self._backends:
                continue
            try:
                backend = ep.load()
            except Exception as exc:  # a broken third-party backend must not take the others down
                self._load_errors[ep.name] = f"{type(exc).__name__}: {exc}"
                continue
            self._backends[ep.name] = backend

    def register(self, backend: Backend, *, replace: bool = False) -> None:
        self._ensure_loaded()
        if backend.name in self._backends and not replace:
            raise ValueError(f"kv-canary: a backend named {backend.name!r} is already registered")
        self._backends[backend.name] = backend
        self.invalidate()

    def unregister(self, name: str) -> None:
        self._backends.pop(name, None)
        self.invalidate()

    def backends(self) -> dict[str, Backend]:
        self._ensure_loaded()
        return dict(self._backends)

    def load_errors(self) -> dict[str, str]:
        self._ensure_loaded()
        return dict(self._load_errors)

    def get(self, name: str) -> Backend:
        self._ensure_loaded()
        try:
            return self._backends[name]
        except KeyError:
            known = ", ".join(sorted(self._backends)) or "none"
            raise BackendError(
                Op.VERIFY, torch.device("cpu"), name,
                {name: [Reason(ReasonKind.PACKAGE, f"no backend named {name!r} is registered (known: {known})")]},
            ) from None

    # -- selection ----------------------------------------------------------------------------------
    def _candidates(self, op: Op, device: torch.device, forced: str | None
                    ) -> tuple[list[Choice], dict[str, list[Reason]]]:
        key = (op, device, forced)
        hit = self._cache.get(key)
        if hit is not None:
            return hit
        self._ensure_loaded()
        declined: dict[str, list[Reason]] = {}
        ranked: list[tuple[int, str, Choice]] = []
        names = [forced] if forced else sorted(self._backends)
        for name in names:
            backend = self._backends.get(name)
            if backend is None:
                known = ", ".join(sorted(self._backends)) or "none"
                msg = f"no backend named {name!r} is registered (known: {known})"
                declined[name] = [Reason(ReasonKind.PACKAGE, msg)]
                continue
            reasons = backend.static_reasons(op, device)
            if reasons:
                declined[name] = reasons
                continue
            support = backend.ops[op]
            try:
                impl = backend.implementation(op)
            except Exception as exc:
                where = support.impl if isinstance(support.impl, str) else getattr(support.impl, "__qualname__", "")
                msg = f"loading {where} failed: {type(exc).__name__}: {exc}"
                declined[name] = [Reason(ReasonKind.BROKEN, msg)]
                continue
            prio = support.priority(device.type)
            assert prio is not None
            ranked.append((prio, name, Choice(backend, support, impl)))
        ranked.sort(key=lambda t: (-t[0], t[1]))
        result = ([c for _, _, c in ranked], declined)
        self._cache[key] = result
        return result

    def select(self, op: Op, device: torch.device, backend: str | None = None, call: Any = None) -> Choice:
        """The backend that runs ``op`` on ``device`` for this call (see the module docstring)."""
        forced = backend or _forced_ctx.get() or (self._env_forced if self._env_read else self.env_backend())
        choices, declined = self._candidates(op, device, forced)
        extra: dict[str, list[Reason]] = {}
        for choice in choices:
            support = choice.support
            if support.limits is None and (support.capture_safe or device.type != "cuda"):
                return choice
            reasons: list[Reason] = []
            if support.limits is not None:
                reasons.extend(support.limits(call))
            if not support.capture_safe and device.type == "cuda" and torch.cuda.is_current_stream_capturing():
                reasons.append(Reason(ReasonKind.CAPTURE, f"{choice.backend.name} {op.value} syncs with the host "
                                      "and cannot run under CUDA-graph capture"))
            if not reasons:
                return choice
            extra[choice.backend.name] = reasons
        raise BackendError(op, device, forced, {**declined, **extra})

    def runner(self, op: Op) -> Callable[[Any, torch.device | None, str | None], None]:
        """What a launcher calls after its contract check: select a backend for ``op`` and run the call."""
        select = self.select

        def run(call: Any, device: torch.device | None, backend: str | None) -> None:
            select(op, device if device is not None else _CPU, backend, call).impl(call)

        return run

    def preparer(self, op: Op) -> Callable[..., bool]:
        """A launcher's repeat-call path for ``op`` (``prepare`` of
        :func:`~kvcanary_contracts.launcher.build_launcher`): select a backend as :meth:`runner` does, run the
        call, and leave in the memo a replay of the launch when the chosen kernel declares ``prepare`` and the
        choice does not depend on the call's values (no limits; capture-safe, or not on a CUDA device). The
        replay is void once the registry changes (:meth:`invalidate`: a backend registered, a kernel attached,
        the environment re-read) or :func:`use_backend` forces another backend; a chosen kernel without
        ``prepare`` leaves a marker that runs nothing, so such calls dispatch without preparing again."""
        select = self.select

        def prepare(memo: dict[Any, Any], key: Any, call: Any, device: torch.device | None,
                    backend: str | None) -> bool:
            dev = device if device is not None else _CPU
            scoped = _forced_ctx.get()
            generation = self.generation
            choice = select(op, dev, backend, call)
            support = choice.support
            fast = support.limits is None and (support.capture_safe or dev.type != "cuda")
            if self.generation != generation:  # selecting loaded kernels (which invalidates): prepare next time
                choice.impl(call)
                return True
            if not fast or support.prepare is None:
                def skip() -> bool:  # a marker: such calls dispatch, without preparing again while it holds
                    if self.generation != generation or _forced_ctx.get() != scoped:
                        memo.pop(key, None)
                    return False

                memo[key] = skip
                choice.impl(call)
                return True
            launch = support.prepare(call)
            if launch is None:  # nothing to prepare yet (a kernel's first launch compiles it): the next call tries
                choice.impl(call)
                return True
            run = launch

            def replay() -> bool:
                if self.generation == generation and _forced_ctx.get() == scoped and run() is not False:
                    return True
                memo.pop(key, None)  # void: the next call prepares again
                return False

            memo[key] = replay
            if run() is False:
                memo.pop(key, None)
                choice.impl(call)
            return True

        return prepare

    def explain(self, op: Op, device: torch.device) -> dict[str, list[Reason]]:
        """Every backend's reasons for ``op`` on ``device`` (empty list: it can serve)."""
        self._ensure_loaded()
        out: dict[str, list[Reason]] = {}
        for name, b in sorted(self._backends.items()):
            out[name] = b.static_reasons(op, device)
        return out

    def invalidate(self) -> None:
        """Forget every cached answer and re-read ``KVCANARY_BACKEND`` at the next launch."""
        self._cache.clear()
        self._env_read = False
        self.generation += 1


REGISTRY = Registry()


def register_backend(backend: Backend, *, replace: bool = False) -> None:
    """Add a backend (a third party's, or a test double) without an entry point."""
    REGISTRY.register(backend, replace=replace)


@contextlib.contextmanager
def use_backend(name: str | None) -> Iterator[None]:
    """Force ``name`` for every launch inside the block (``None`` restores automatic selection)."""
    token = _forced_ctx.set(name)
    try:
        yield
    finally:
        _forced_ctx.reset(token)


def registered_backends() -> dict[str, Backend]:
    return REGISTRY.backends()
