"""A family of contracts: the message prefix, the pointer line, default templates and the code book.

The framework is generic: a product (kvcanary, say) declares one Family and every one of its contracts
names it. Templates use ``str.format`` names filled in when a check fails (``{name}``, ``{expected}``,
``{actual}``, ``{shape}``, ...); they never include the prefix.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from kvcanary.contracts.codebook import CodeBook

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
    }
)


@dataclass(frozen=True)
class Family:
    """Everything the contracts of one product share."""

    name: str
    prefix: str
    codebook: CodeBook
    pointer: str = "[{code}] {contract}: {summary}"
    messages: Mapping[str, str] = field(default_factory=lambda: DEFAULT_MESSAGES)
    kind_docs: Mapping[str, tuple[str, str]] = field(default_factory=lambda: DEFAULT_KIND_DOCS)

    def template(self, kind: str, override: Mapping[str, str] | None = None) -> str:
        if override and kind in override:
            return override[kind]
        if kind in self.messages:
            return self.messages[kind]
        return DEFAULT_MESSAGES[kind]

    def kind_doc(self, kind: str) -> tuple[str, str]:
        return self.kind_docs.get(kind) or DEFAULT_KIND_DOCS.get(kind) or ("", "")
