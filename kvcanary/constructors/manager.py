"""Contracts of the manager: ``CanaryManager(pool=..., capacities=..., config=...)`` and
``CanaryCapacities.check_batch(batch, enable_verify_token=...)``, the capacities a forward must fit.

The constructor's rules read only its arguments, before anything is allocated. A forward that does not fit
the capacities allocated at attach gets SGLang's RuntimeError texts (``ContractRuntimeError``); the manager's
per-forward path hands a batch to ``check_batch`` only once a plain comparison has refused it, so a batch that
fits costs no checker.
"""

import dataclasses
from typing import Annotated, Any, ClassVar

from pydantic import Field

from kvcanary.backend_names import unregistered
from kvcanary.constructors.pool import _Helper
from kvcanary.consts import CanaryMode, RealKvHashMode
from kvcanary.errors import FAMILY
from kvcanary.manager.batch import CanaryBatch
from kvcanary.manager.capacities import CanaryCapacities
from kvcanary.manager.config import CanaryConfig
from kvcanary.manager.pool import KvPoolSpec
from kvcanary_contracts import Contract, ContractInfo, ContractRuntimeError, ContractTypeError, Relation, ScalarArg

_TYPE = {"type": ContractTypeError}
_REPLACE = _Helper(dataclasses.replace, "`dataclasses.replace`")


def backend_registered(name: str) -> bool:
    """Whether ``name`` is a registered backend's (:func:`kvcanary.backend_names.unregistered`)."""
    return unregistered(name) is None


def known_backends() -> str:
    """The registered backends' names, sorted, for the error text."""
    from kvcanary.registry import REGISTRY

    return ", ".join(sorted(REGISTRY.backends())) or "none"


def has_layers(pool: Any) -> bool:
    """Whether some group of ``pool`` lists its layer buffers (``PoolGroupSpec.layers``)."""
    return any(g.layers for g in pool.groups)


class CanaryManagerContract(Contract):
    """``CanaryManager(pool=..., capacities=..., config=...)`` (and ``CanaryManager.attach``)."""

    contract: ClassVar[ContractInfo] = FAMILY.contract(
        "CanaryManager", "M", "One KV pool's canary manager: its pool, the sizes of its buffers, its settings",
        constants={"has_layers": _Helper(has_layers, "whether some group of `pool` lists its layer buffers"),
                   "registered": _Helper(backend_registered, "whether `name` is a registered backend's"),
                   "known_backends": _Helper(known_backends, "the registered backends' names"),
                   "replace": _REPLACE, "NONE": CanaryMode.NONE, "PARTIAL": RealKvHashMode.PARTIAL},
        rules=(
            Relation(
                name="mode_not_none", require="config.mode.name != 'NONE'", over=("config",),
                message="config.mode is NONE (canary disabled); do not attach a CanaryManager",
                why="mode NONE is how an engine says it runs without a canary (SGLang's --kv-canary none); a "
                    "manager would allocate buffers and launch kernels for a canary that is off.",
                fix="Attach no manager when the mode is NONE, or pass mode LOG or RAISE.",
                breaks={"config": "replace(config, mode=NONE)"}),
            Relation(
                name="graphs_need_cuda_pool", require="config.graphs is not True or pool.device.type == 'cuda'",
                over=("config", "pool"), values={"device": "pool.device"},
                message="CanaryConfig.graphs=True needs a CUDA pool (CUDA graphs), but the pool is on {device}; "
                        "leave graphs at None (on for CUDA pools only) or set it to False",
                why="The manager's own graphs are CUDA graphs, captured on the pool's device; another device has "
                    "none to capture.",
                fix="Leave graphs at None (on for CUDA pools unless compile is on), or set it to False.",
                breaks={"config": "replace(config, graphs=True)"}),
            Relation(
                name="layer_rotation_needs_layers", require="config.layer_rotation == 0 or has_layers(pool)",
                over=("config", "pool"),
                message="CanaryConfig.layer_rotation needs PoolGroupSpec.layers on some group",
                why="The rotation fingerprints the layer buffers a group lists; with none listed there is no "
                    "buffer to rotate over.",
                fix="List each layer's K and V buffers in PoolGroupSpec(layers=...), or set layer_rotation to 0.",
                breaks={"config": "replace(config, layer_rotation=1, real_kv_mode=PARTIAL)"}),
            Relation(
                name="backend_registered", require="config.backend is None or registered(config.backend)",
                over=("config",), values={"backend": "config.backend", "known": "known_backends()"},
                message="CanaryConfig.backend={backend!r} names no registered backend (known: {known}); pass a "
                        "registered backend's name, or None to let kvcanary choose per launch",
                why="The manager forces config.backend for every launch; an unregistered name would attach and "
                    "then fail the first forward's launches with BackendError.",
                fix="Pass a name from kvcanary.registered_backends() (a custom backend registered before attach), "
                    "or None.",
                breaks={"config": "replace(config, backend='no-such-backend')"}),
        ),
    )

    pool: Annotated[KvPoolSpec, ScalarArg(KvPoolSpec, label="pool", errors=_TYPE, messages={
        "type": "{name} must be a KvPoolSpec, got {type}"})] = Field(description="The KV pool to protect.")
    capacities: Annotated[CanaryCapacities, ScalarArg(CanaryCapacities, label="capacities", errors=_TYPE, messages={
        "type": "{name} must be a CanaryCapacities, got {type}"})] = Field(
        description="The sizes of every buffer, allocated once here.")
    config: Annotated[CanaryConfig, ScalarArg(CanaryConfig, label="config", errors=_TYPE, messages={
        "type": "{name} must be a CanaryConfig, got {type}"})] = Field(description="What the manager checks.")


_FITS_WHY = ("Every buffer a forward fills was allocated once, at attach, with these capacities; a larger "
             "forward would write past them.")


class CanaryCapacitiesCheckBatch(Contract):
    """``CanaryCapacities.check_batch(self=capacities, batch=..., enable_verify_token=...)``, i.e.
    ``capacities.check_batch(batch, enable_verify_token=...)``."""

    contract: ClassVar[ContractInfo] = FAMILY.contract(
        "CanaryCapacities.check_batch", "M", "A forward fits the capacities the manager allocated at attach",
        constants={"replace": _REPLACE},
        rules=(
            Relation(
                name="batch_rows_fit", require="batch.batch_size <= self.write_req_capacity",
                over=("batch", "self"), error=ContractRuntimeError,
                values={"rows": "batch.batch_size", "capacity": "self.write_req_capacity"},
                message="forward_batch.batch_size={rows} exceeds pre-allocated write_req_capacity={capacity}; "
                        "raise the engine's max batch size or check CanaryCapacities",
                why=_FITS_WHY + " write_req_capacity counts the request rows of one forward.",
                fix="Size the capacities from the engine's settings (CanaryCapacities.from_engine), CUDA-graph "
                    "padding rows included.",
                breaks={"self": "replace(self, write_req_capacity=1)"}),
            Relation(
                name="batch_tokens_fit", require="batch.num_tokens <= self.write_token_capacity",
                over=("batch", "self"), error=ContractRuntimeError,
                values={"tokens": "batch.num_tokens", "capacity": "self.write_token_capacity"},
                message="forward_batch token count={tokens} exceeds pre-allocated write_entry_capacity={capacity}; "
                        "raise the chunked-prefill size or check CanaryCapacities",
                why=_FITS_WHY + " write_token_capacity counts the tokens one forward writes.",
                fix="Size the capacities from the engine's settings (CanaryCapacities.from_engine: the largest "
                    "prefill chunk).",
                breaks={"self": "replace(self, write_token_capacity=1)"}),
            Relation(
                name="expected_tokens_given", require="not enable_verify_token or batch.expected_tokens is not None",
                over=("enable_verify_token", "batch"),
                message="CanaryBatch.expected_tokens is required when enable_verify_token=True",
                why="With enable_verify_token the verify compares each record's token with the request's "
                    "expected one: the batch must carry them (the expected-token snapshot).",
                fix="Pass CanaryBatch(expected_tokens=ExpectedTokens(...)), or turn enable_verify_token off.",
                breaks={"enable_verify_token": True}),
            Relation(
                name="expected_tokens_fit",
                require="batch.expected_tokens.flat.numel() <= self.expected_token_capacity",
                when="enable_verify_token and batch.expected_tokens is not None",
                over=("batch", "self"), error=ContractRuntimeError,
                values={"tokens": "batch.expected_tokens.flat.numel()", "capacity": "self.expected_token_capacity"},
                message="expected-token snapshot of {tokens} tokens exceeds pre-allocated "
                        "expected_token_capacity={capacity}",
                why=_FITS_WHY + " expected_token_capacity counts the tokens of one forward's snapshot.",
                fix="Size the capacities from the engine's settings (CanaryCapacities.from_engine: request rows "
                    "times the context length).",
                breaks={"self": "replace(self, expected_token_capacity=1)"}),
        ),
    )

    self: Annotated[CanaryCapacities, ScalarArg(CanaryCapacities, label="capacities", errors=_TYPE)] = Field(
        description="The manager's capacities.")
    batch: Annotated[CanaryBatch, ScalarArg(CanaryBatch, label="batch", errors=_TYPE)] = Field(
        description="The forward's batch.")
    enable_verify_token: Annotated[bool, ScalarArg(bool, label="enable_verify_token", errors=_TYPE)] = Field(
        description="Whether the manager checks each record's token (CanaryConfig.enable_verify_token).")


check_manager = CanaryManagerContract.checker()
check_batch_fits = CanaryCapacitiesCheckBatch.checker()
