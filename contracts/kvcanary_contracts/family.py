"""A family of contracts: the message prefix, the pointer line, default templates and the code book.

The framework is generic: a product (kvcanary, say) declares one Family and every one of its contracts
names it. Templates use ``str.format`` names filled in when a check fails (``{name}``, ``{expected}``,
``{actual}``, ``{shape}``, ...); they never include the prefix.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from kvcanary_contracts.codebook import CodeBook

if TYPE_CHECKING:
    from kvcanary_contracts.contract import ContractInfo

DEFAULT_MESSAGES: Mapping[str, str] = MappingProxyType(
    {
        "type": "{name} must be {expected_type}, got {type}",
        "contiguous": "{name} must be contiguous",
        "dtype": "{name} must have dtype {expected}, got {actual}",
        "rank": "{name} must be {rank}-D, got shape {shape}",
        "min_rank": "{name} must be at least {rank}-D, got shape {shape}",
        "size": "{name} length must be {expected}, got {actual}",
        "size_nd": "{name} dim {dim} must be {expected}, got {actual} (shape {shape})",
        "min_size": "{name} length must be >= {minimum}, got {actual}",
        "min_size_nd": "{name} dim {dim} must be >= {minimum}, got {actual} (shape {shape})",
        "device": "{name} must be on {reference_name}'s device {reference_device}, got {device}",
        "max_len": "{name} may hold at most {max_len} entries, got {actual}",
        "all_or_none": "{names} must be given together or not at all; missing: {missing}",
        "required_if": "{flag}=True requires {names}; missing: {missing}",
        "forbidden_unless": "{names} must be None when {flag}=False; given: {given}",
        "required_when": "{names} required when {when}",
        "bool_as_int": "{name} must be an int, got the bool {value}",
        "int64": "{name} must fit in int64 [-2**63, 2**63 - 1], got {value}",
        "meta_device": "{name} is on the meta device, which holds no data; launch on a real device",
        "aliasing": "{first} and {second} share {shared} bytes of memory, and the launch writes {written}",
    }
)

DEFAULT_KIND_DOCS: Mapping[str, tuple[str, str]] = MappingProxyType(
    {
        # kind: (why it is checked, how to fix)
        "type": (
            "The launcher reads this argument's attributes directly; anything else would fail deep inside a "
            "backend, or be silently misread.",
            "Pass an object of the stated type.",
        ),
        "contiguous": (
            "Kernels address this tensor with flat, stride-free indexing; a strided view would be read and "
            "written at the wrong elements.",
            "Pass `t.contiguous()`, or allocate the tensor contiguous in the first place. For a tensor the "
            "kernel writes, copy the result back if you need the strided layout.",
        ),
        "dtype": (
            "The kernels reinterpret this tensor's bytes with a fixed element type; another dtype would be "
            "read as garbage.",
            "Convert with `t.to(dtype)` (or allocate with the stated dtype) before the launch.",
        ),
        "rank": (
            "The kernels index this tensor with a fixed number of dimensions.",
            "Reshape (`t.view(...)`) or index the tensor so it has the stated number of dimensions.",
        ),
        "min_rank": (
            "The layout needs at least this many dimensions to locate a slot's bytes.",
            "View the tensor with the stated number of dimensions.",
        ),
        "size": (
            "Sizes that name the same symbol describe the same quantity; if they disagree a kernel would read "
            "or write past the end of the shorter tensor.",
            "Allocate every tensor that shares the symbol with the same size (the one the first tensor bound).",
        ),
        "min_size": (
            "The kernel indexes this dimension up to the stated bound.",
            "Allocate the dimension at least that large.",
        ),
        "device": (
            "A launch runs on one device; every tensor it touches must live there.",
            "Move the tensor with `t.to(device)` once, at allocation, not per launch.",
        ),
        "max_len": (
            "The kernel ABI has a fixed number of entries for this collection.",
            "Pass fewer entries.",
        ),
        "bool_as_int": (
            "This argument is a number, and a bool is an int in Python: True would silently mean 1. A flag "
            "where a number is meant is a wiring mistake.",
            "Pass the number (an int, or an IntEnum member) the argument describes.",
        ),
        "int64": (
            "The kernels receive this argument as a 64-bit signed integer; a Python int outside that range "
            "cannot be passed and would fail later, part-way through a launch.",
            "Pass a value in [-2**63, 2**63 - 1]; a count or size that large is itself a bug upstream.",
        ),
        "meta_device": (
            "Meta tensors have shapes but no memory: every check of shapes passes, and then no kernel can "
            "read or write them.",
            "Launch with tensors on a real device (use meta tensors only for shape reasoning, never for a "
            "launch).",
        ),
        "aliasing": (
            "A kernel writes these bytes while it reads or writes the same bytes through another argument; "
            "the result would depend on the order threads run in, and outputs would corrupt inputs (or each "
            "other) silently.",
            "Give every tensor the launch writes memory of its own: allocate it separately (views of one "
            "buffer are fine when their byte ranges do not overlap).",
        ),
    }
)


@dataclass(frozen=True)
class Family:
    """Everything the contracts of one product share.

    ``allow_meta=False`` adds a check to every contract with a device key: the launch's tensors must not be
    on the meta device (shape checks pass on meta tensors; kernels cannot run on them).
    """

    name: str
    prefix: str
    codebook: CodeBook
    pointer: str = "[{code}] {contract}: {summary}"
    messages: Mapping[str, str] = field(default_factory=lambda: DEFAULT_MESSAGES)
    kind_docs: Mapping[str, tuple[str, str]] = field(default_factory=lambda: DEFAULT_KIND_DOCS)
    allow_meta: bool = True

    def template(self, kind: str, override: Mapping[str, str] | None = None) -> str:
        if override and kind in override:
            return override[kind]
        if kind in self.messages:
            return self.messages[kind]
        return DEFAULT_MESSAGES[kind]

    def contract(self, name: str, letter: str, summary: str, **options: Any) -> ContractInfo:
        """The :class:`ContractInfo` of one of this family's contracts (``options``: its ContractInfo fields:
        ``device_key``, ``rules``, ``constants``)."""
        from kvcanary_contracts.contract import ContractInfo

        return ContractInfo(name=name, family=self, letter=letter, summary=summary, **options)

    def kind_doc(self, kind: str) -> tuple[str, str]:
        return self.kind_docs.get(kind) or DEFAULT_KIND_DOCS.get(kind) or ("", "")
