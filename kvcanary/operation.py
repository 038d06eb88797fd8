"""An operation is one object: its contract, launcher, ``torch.library`` operator and kernels hang from it.

Declare an operation once, with the contract of its arguments::

    FOLD = Operation("fold", FoldLaunch, constant="FOLD", doc="...", examples=..., call=...)

and everything else derives from that object: ``FOLD.launcher`` (a keyword-only function whose arguments
are the contract's fields, plus ``backend=None``; it runs the compiled checks, then the kernel the registry
selects), ``FOLD.operator`` (``torch.ops.kvcanary.fold``, its schema flattened from the contract), the
contract's error codes and catalog pages (built from ``examples``, its valid calls), the stubs, and the
conformance kit's call builder (``FOLD.call(device)``, from ``call``). Backends attach kernels the way
``torch.library.register_kernel`` attaches them to a custom op, in the kernel's own file::

    @FOLD.kernel("torch_ref", host_sync=False)
    def fold(call: FoldLaunch) -> None: ...

with the device types it serves and their priorities beside it (by default the backend's row of
:data:`kvcanary_backends.priority.PRIORITY`). The built-in operations are the ``OPERATION`` of each
module of :mod:`kvcanary.ops`; :class:`Operation` (also named ``Op``) lists them: ``Op.WRITE``,
``Op("write")``, ``list(Op)``. An operation declared elsewhere (a third party's, a test's) joins the same
list until :meth:`Operation.discard` removes it.
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil
from collections.abc import Callable, Iterator, Mapping
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
    import torch

    from kvcanary.registry import Limits, OpSupport, Prepare
    from kvcanary_contracts import Contract
    from kvcanary_contracts.examples import ExampleSet
    from kvcanary_contracts.launcher import Extra
    from kvcanary_contracts.torch_op import ContractOp

NAMESPACE = "kvcanary"
"""The ``torch.library`` namespace of the built-in operators: ``torch.ops.kvcanary.<operation>``."""
BUILTIN_PACKAGE = "kvcanary.ops"
"""The package whose modules declare the built-in operations (each module's ``OPERATION``)."""

_DECLARED: dict[str, Operation] = {}
_BUILTIN_LOADED: list[bool] = []  # one entry once the built-in declarations were imported
F = TypeVar("F", bound=Callable[..., None])
CallBuilder = Callable[..., dict[str, Any]]
"""``(device="cpu", **options) -> keyword arguments``: a small valid call of an operation, on ``device``."""


def _load_builtin() -> None:
    """Import every module of :data:`BUILTIN_PACKAGE` once: each declares its operation on import."""
    if _BUILTIN_LOADED:
        return
    _BUILTIN_LOADED.append(True)
    package = importlib.import_module(BUILTIN_PACKAGE)
    for info in sorted(pkgutil.iter_modules(package.__path__), key=lambda m: m.name):
        if not info.name.startswith("_"):
            importlib.import_module(f"{BUILTIN_PACKAGE}.{info.name}")


def operations() -> list[Operation]:
    """Every declared operation: the built-in ones (by name), then any declared elsewhere (as declared).

    The order does not depend on which module a program imported first: pages and tables generated from it
    must not."""
    _load_builtin()
    ops = list(_DECLARED.values())
    builtin = sorted((op for op in ops if op.module.startswith(BUILTIN_PACKAGE + ".")), key=lambda op: op.value)
    return builtin + [op for op in ops if op not in builtin]


def declared() -> list[Operation]:
    """The operations declared so far, without importing the built-in ones (what the registry looks at)."""
    return list(_DECLARED.values())


class _OperationType(type):
    """Makes the class :class:`Operation` read like the enum it replaces: ``Op.WRITE``, ``Op("write")``."""

    def __call__(cls, *args: Any, **kwargs: Any) -> Operation:
        if len(args) == 1 and not kwargs:  # Op("write"): the declared operation of that name
            return cls.named(args[0])
        op: Operation = super().__call__(*args, **kwargs)
        return op

    def named(cls, value: object) -> Operation:
        if isinstance(value, Operation):
            return value
        hit = _DECLARED.get(str(value)) if isinstance(value, str) else None
        if hit is None:
            _load_builtin()
            hit = _DECLARED.get(value) if isinstance(value, str) else None
        if hit is None:
            known = ", ".join(sorted(_DECLARED))
            raise ValueError(f"{value!r} is not a kvcanary operation (known: {known})")
        return hit

    def __getattr__(cls, attr: str) -> Operation:  # Op.WRITE
        if attr.isupper():
            for op in operations():
                if op.constant == attr:
                    return op
        raise AttributeError(f"type object 'Operation' has no attribute {attr!r}")

    def __getitem__(cls, constant: str) -> Operation:  # Op["WRITE"], as an enum's
        for op in operations():
            if op.constant == constant:
                return op
        raise KeyError(constant)

    def __iter__(cls) -> Iterator[Operation]:
        return iter(operations())

    def __len__(cls) -> int:
        return len(operations())


class Operation(metaclass=_OperationType):
    """One operation: a contract, the launcher and operator generated from it, and the kernels backends attach.

    ``name`` is the operation's identity (the registry's key, the operator's name, a column of the
    priority table); ``constant`` its upper-case alias (``Op.WRITE``); ``doc`` the launcher's description;
    ``module`` where the launcher is exported from; ``namespace`` the ``torch.library`` namespace;
    ``examples`` its valid calls (the catalog's pages are built from them); ``call`` the conformance kit's
    builder of a small valid call on any device (:meth:`call`, :mod:`kvcanary.testing.calls`).
    """

    contract: type[Contract]

    def __init__(self, name: str, contract: type[Contract] | None = None, *, constant: str | None = None, doc: str = "",
                 module: str | None = None, namespace: str = NAMESPACE, examples: ExampleSet | None = None,
                 extras: Mapping[str, Extra] | None = None, call: CallBuilder | None = None) -> None:
        from kvcanary.registry import REGISTRY
        from kvcanary_contracts.contract import remember_contract
        from kvcanary_contracts.launcher import Extra, build_launcher

        if contract is None:  # ``Operation("write")`` alone is a lookup, answered by the metaclass
            raise TypeError("Operation(name, contract, ...) declares an operation; Operation(name) looks one up")
        if name in _DECLARED:
            raise ValueError(f"kv-canary: an operation named {name!r} is already declared "
                             f"(by {_DECLARED[name].contract.__name__})")
        remember_contract(contract)
        self.module: str = contract.__module__
        """The module that declares the operation (its contract's)."""
        self.name = name
        self.constant = constant or name.upper()
        self.contract = contract
        self.doc = inspect.cleandoc(doc) if doc else (contract.__doc__ or "")
        self.namespace = namespace
        self.examples = examples
        self.call_builder = call
        """The builder :meth:`call` runs (None: the operation declares none)."""
        self.kernels: dict[str, OpSupport] = {}
        """Backend name -> the kernel it attached (with its devices, priorities and capture safety)."""
        self.extras: dict[str, Extra] = dict(extras) if extras is not None else {
            "backend": Extra(None, "str | None", "str?", "Force this backend by name (None: the registry picks).")}
        self.launcher = build_launcher(contract, dispatch=REGISTRY.runner(self), extras=self.extras, doc=self.doc,
                                       module=module, operator=self.qualname,
                                       prepare=REGISTRY.preparer(self) if list(self.extras) == ["backend"] else None)
        operator: ContractOp = self.launcher.__kvc_operator__  # type: ignore[attr-defined]
        self.operator = operator
        _DECLARED[name] = self

    # -- enum compatibility -------------------------------------------------------------------------
    @property
    def value(self) -> str:
        """The operation's name (what ``Op.X.value`` was)."""
        return self.name

    @property
    def qualname(self) -> str:
        """The operator's name: ``"kvcanary::write"``."""
        return f"{self.namespace}::{self.name}"

    def __repr__(self) -> str:
        return f"<Op.{self.constant}: {self.name!r}>"

    def __str__(self) -> str:
        return f"Op.{self.constant}"

    def __reduce__(self) -> tuple[Any, tuple[str]]:
        return (Operation, (self.name,))

    # -- valid calls --------------------------------------------------------------------------------
    def call(self, device: torch.device | str = "cpu", **options: Any) -> dict[str, Any]:
        """A small valid call: fresh keyword arguments (no ``backend``) on ``device`` that pass the contract.

        ``options`` are the builder's own (a write's ``assert_inputs=True``, a plan's ``pool=True``, ...).
        Tests mutate one argument to break one rule; backends run it for parity with torch_ref.
        """
        if self.call_builder is None:
            raise LookupError(f"kv-canary: operation {self.name!r} declares no call builder "
                              f"(declare it with Operation(..., call=builder))")
        return self.call_builder(device, **options)

    # -- kernels ------------------------------------------------------------------------------------
    def kernel(self, backend: str, *, devices: Mapping[str, int] | None = None, capture_safe: bool = True,
               host_sync: bool = False, limits: Limits | None = None, notes: str = "",
               prepare: Prepare | None = None) -> Callable[[F], F]:
        """Decorator: attach the decorated function as ``backend``'s kernel of this operation.

        The kernel receives the call object (an unvalidated instance of the contract: the checks have run).
        ``devices`` maps device types to priorities (``"*"``: any); by default the backend's row of the
        priority table. A kernel that syncs with the host (``host_sync``) is not capture-safe. ``prepare``
        (optional) is the same kernel split for repeated calls: ``prepare(call)`` returns the launch, and
        ``prepare(call)()`` must do what the kernel does (:attr:`kvcanary.registry.OpSupport.prepare`).
        """

        def attach(fn: F) -> F:
            self.register_kernel(backend, fn, devices=devices, capture_safe=capture_safe and not host_sync,
                                 host_sync=host_sync, limits=limits, notes=notes, prepare=prepare)
            return fn

        return attach

    def register_kernel(self, backend: str, impl: Callable[[Any], None], *, devices: Mapping[str, int] | None = None,
                        capture_safe: bool = True, host_sync: bool = False, limits: Limits | None = None,
                        notes: str = "", prepare: Prepare | None = None) -> None:
        """Attach ``impl`` as ``backend``'s kernel (see :meth:`kernel`); replaces an earlier one."""
        from kvcanary.registry import REGISTRY, OpSupport

        if devices is None:
            from kvcanary_backends.priority import devices as table_devices

            devices = table_devices(backend, self)
        self.kernels[backend] = OpSupport(impl, dict(devices), capture_safe=capture_safe, host_sync=host_sync,
                                          limits=limits, notes=notes, prepare=prepare)
        REGISTRY.invalidate()

    # -- lifetime -----------------------------------------------------------------------------------
    def discard(self) -> None:
        """Forget this operation: its kernels, its operator, its contract (an external operation's cleanup).

        The launcher object keeps working for whoever holds it, but no registry lookup finds the operation
        and ``torch.ops.<namespace>.<name>`` is gone once the namespace's library is dropped
        (:func:`kvcanary_contracts.torch_op.drop_namespace`).
        """
        from kvcanary.registry import REGISTRY
        from kvcanary_contracts.contract import forget_contract

        if _DECLARED.get(self.name) is self:
            del _DECLARED[self.name]
        self.kernels.clear()
        forget_contract(self.contract.contract.name)
        REGISTRY.invalidate()


def operators() -> dict[Operation, ContractOp]:
    """The ``torch.library`` operator of every operation, by operation (importing the built-in ones registers
    their operators: ``import kvcanary.ops`` is the one import that makes every ``torch.ops.kvcanary.*`` exist)."""
    return {op: op.operator for op in operations()}


Op = Operation
"""The operations, as the enum that preceded them read: ``Op.WRITE``, ``Op("write")``, ``list(Op)``."""
