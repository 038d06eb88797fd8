"""Load the golden vectors (format ``kv-canary-golden/1``, described in README.md beside this file) and replay
them through the public launchers.

Test tooling, not product: it lives beside the vectors it reads, so the installed package never reads
the source tree. The backend tests and the GPU scripts in ``benchmarks/gpu`` import it as
``tests.golden.loader``.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from kvcanary.consts import CanaryLaunchTag, RealKvHashMode
from kvcanary.context import VerifyOrWriteContext
from kvcanary.launch.plan import launch_canary_plan_kernels
from kvcanary.launch.scatter import launch_scatter_req_token_ids_kernel
from kvcanary.launch.verify import launch_canary_verify_kernel
from kvcanary.launch.write import launch_canary_write_kernel
from kvcanary.plans import VerifyPlan, WritePlan
from kvcanary.sources import RealKvSource

_DTYPES = {"int64": torch.int64, "int32": torch.int32, "uint8": torch.uint8}
_NAMES = {v: k for k, v in _DTYPES.items()}


DIR: Path = Path(__file__).resolve().parent
"""The folder of the vectors: this file's own (``tests/golden``)."""


@dataclass(frozen=True)
class Case:
    """One case of a vectors file: its kind, name, encoded inputs and outputs."""

    kind: str
    name: str
    inputs: Mapping[str, Any]
    outputs: Mapping[str, Any]
    ring_order_sensitive: bool

    def __str__(self) -> str:
        return self.name


def load(name: str, directory: Path = DIR) -> list[Case]:
    """Every case of ``<name>.json`` (``verify_cases``, ``write_errors_and_quirks``, ...) in ``directory``."""
    data = json.loads((directory / f"{name}.json").read_text())
    if data.get("format") != "kv-canary-golden/1":
        raise ValueError(f"{name}: unknown golden format {data.get('format')!r}")
    return [
        Case(c["kind"], c["name"], c["inputs"], c["outputs"], bool(c.get("ring_order_sensitive", False)))
        for c in data["cases"]
    ]


def tensor(enc: Mapping[str, Any] | None, device: torch.device | str = "cpu") -> torch.Tensor | None:
    """Decode one encoded tensor (``{"dtype", "shape", "data"}``); None stays None."""
    if enc is None:
        return None
    dtype = _DTYPES[enc["dtype"]]
    t = torch.tensor(enc["data"], dtype=torch.int64).to(dtype) if dtype != torch.int64 else torch.tensor(
        enc["data"], dtype=torch.int64)
    return t.reshape(enc["shape"]).to(device)


def req(enc: Mapping[str, Any], device: torch.device | str = "cpu") -> torch.Tensor:
    """Decode a tensor the format says is always present."""
    t = tensor(enc, device)
    assert t is not None
    return t


def encode(t: torch.Tensor) -> dict[str, Any]:
    """The inverse of :func:`tensor`."""
    return {"dtype": _NAMES[t.dtype], "shape": list(t.shape), "data": t.cpu().reshape(-1).tolist()}


def sources(encs: list[Mapping[str, Any]], device: torch.device | str) -> tuple[RealKvSource, ...]:
    """Decode ``real_kv_sources``, in fold order."""
    return tuple(
        RealKvSource(tensor=req(s["tensor"], device), page_size=s["page_size"],
                     num_bytes_per_token=s["num_bytes_per_token"], read_bytes=s["read_bytes"])
        for s in encs
    )


def context(enc: Mapping[str, Any], device: torch.device | str) -> VerifyOrWriteContext:
    """Decode a launch context."""
    return VerifyOrWriteContext(
        canary_buf=req(enc["canary_buf"], device),
        kernel_kind=CanaryLaunchTag(enc["kernel_kind"]),
        violation_ring=req(enc["violation_ring"], device),
        violation_write_index=req(enc["violation_write_index"], device),
        slot_run_counter=req(enc["slot_run_counter"], device),
        kernel_run_counter=req(enc["kernel_run_counter"], device),
        real_kv_sources=sources(enc["real_kv_sources"], device),
        real_kv_hash_mode=RealKvHashMode(enc["real_kv_hash_mode"]),
        enable_chain_position_assert=req(enc["enable_chain_position_assert"], device),
    )


def verify_plan(enc: Mapping[str, Any], device: torch.device | str) -> VerifyPlan:
    """Decode a verify plan."""
    return VerifyPlan(**{k: req(v, device) for k, v in enc.items()})


def write_plan(enc: Mapping[str, Any], device: torch.device | str) -> WritePlan:
    """Decode a write plan."""
    return WritePlan(**{k: req(v, device) for k, v in enc.items()})


def _context_outputs(ctx: VerifyOrWriteContext) -> dict[str, torch.Tensor]:
    """The tensors a verify or write launch may change, by their names in the vectors."""
    return {"canary_buf": ctx.canary_buf, "violation_ring": ctx.violation_ring,
            "violation_write_index": ctx.violation_write_index, "slot_run_counter": ctx.slot_run_counter,
            "kernel_run_counter": ctx.kernel_run_counter}


def run_verify(case: Case, device: torch.device | str = "cpu", backend: str | None = None) -> dict[str, torch.Tensor]:
    """Replay a verify case on ``device`` (through ``backend``, or the registry's choice); its outputs."""
    i = case.inputs
    ctx = context(i["context"], device)
    launch_canary_verify_kernel(context=ctx, plan=verify_plan(i["plan"], device),
                                check_verify_expected_token=i["check_verify_expected_token"], backend=backend)
    return _context_outputs(ctx)


def run_write(case: Case, device: torch.device | str = "cpu", backend: str | None = None) -> dict[str, torch.Tensor]:
    """Replay a write case; the buffer, ring, index and counters after it."""
    i = case.inputs
    ctx = context(i["context"], device)
    launch_canary_write_kernel(
        context=ctx, plan=write_plan(i["plan"], device), input_ids=req(i["input_ids"], device),
        positions=req(i["positions"], device), out_cache_loc=req(i["out_cache_loc"], device),
        enable_write_input_assert=i["enable_write_input_assert"],
        expected_input_tokens=tensor(i["expected_input_tokens"], device),
        expected_input_positions=tensor(i["expected_input_positions"], device), backend=backend)
    return _context_outputs(ctx)


def run_plan(case: Case, device: torch.device | str = "cpu", backend: str | None = None) -> dict[str, torch.Tensor]:
    """Replay a plan case; both plans' tensors, named ``verify_plan_out.<field>`` / ``write_plan_out.<field>``."""
    i = case.inputs
    vp = verify_plan(i["verify_plan_out"], device)
    wp = write_plan(i["write_plan_out"], device)
    launch_canary_plan_kernels(
        verify_plan_out=vp, write_plan_out=wp, req_pool_indices=req(i["req_pool_indices"], device),
        prefix_lens=req(i["prefix_lens"], device), extend_seq_lens=req(i["extend_seq_lens"], device),
        req_to_token=req(i["req_to_token"], device), swa_window_size=i["swa_window_size"],
        full_to_swa_index_mapping=tensor(i["full_to_swa_index_mapping"], device),
        verify_capacity=i["verify_capacity"],
        req_to_verify_expected_tokens=tensor(i["req_to_verify_expected_tokens"], device),
        req_to_verify_expected_tokens_valid_lens=tensor(i["req_to_verify_expected_tokens_valid_lens"], device),
        kv_token_id_vs_position_offset=i["kv_token_id_vs_position_offset"], backend=backend)
    out = {f"verify_plan_out.{k}": getattr(vp, k) for k in i["verify_plan_out"]}
    out.update({f"write_plan_out.{k}": getattr(wp, k) for k in i["write_plan_out"]})
    return out


def run_scatter(case: Case, device: torch.device | str = "cpu", backend: str | None = None) -> dict[str, torch.Tensor]:
    """Replay a scatter case; the pool after it."""
    i = case.inputs
    pool = req(i["pool_out"], device)
    launch_scatter_req_token_ids_kernel(flat_in=req(i["flat_in"], device), offsets=req(i["offsets"], device),
                                        req_pool_indices=req(i["req_pool_indices"], device), pool_out=pool,
                                        backend=backend)
    return {"pool_out": pool}


def launch_args(case: Case, device: torch.device | str = "cpu") -> tuple[Callable[..., None], dict[str, Any]]:
    """The case's launcher and keyword arguments, built on ``device`` as the runners build them."""
    i = case.inputs
    if case.kind == "plan":
        return launch_canary_plan_kernels, {
            "verify_plan_out": verify_plan(i["verify_plan_out"], device),
            "write_plan_out": write_plan(i["write_plan_out"], device),
            "req_pool_indices": req(i["req_pool_indices"], device), "prefix_lens": req(i["prefix_lens"], device),
            "extend_seq_lens": req(i["extend_seq_lens"], device), "req_to_token": req(i["req_to_token"], device),
            "swa_window_size": i["swa_window_size"],
            "full_to_swa_index_mapping": tensor(i["full_to_swa_index_mapping"], device),
            "verify_capacity": i["verify_capacity"],
            "req_to_verify_expected_tokens": tensor(i["req_to_verify_expected_tokens"], device),
            "req_to_verify_expected_tokens_valid_lens": tensor(i["req_to_verify_expected_tokens_valid_lens"], device),
            "kv_token_id_vs_position_offset": i["kv_token_id_vs_position_offset"]}
    if case.kind == "scatter":
        return launch_scatter_req_token_ids_kernel, {
            "flat_in": req(i["flat_in"], device), "offsets": req(i["offsets"], device),
            "req_pool_indices": req(i["req_pool_indices"], device), "pool_out": req(i["pool_out"], device)}
    ctx = context(i["context"], device)
    if case.kind == "verify":
        return launch_canary_verify_kernel, {"context": ctx, "plan": verify_plan(i["plan"], device),
                                             "check_verify_expected_token": i["check_verify_expected_token"]}
    return launch_canary_write_kernel, {
        "context": ctx, "plan": write_plan(i["plan"], device), "input_ids": req(i["input_ids"], device),
        "positions": req(i["positions"], device), "out_cache_loc": req(i["out_cache_loc"], device),
        "enable_write_input_assert": i["enable_write_input_assert"],
        "expected_input_tokens": tensor(i["expected_input_tokens"], device),
        "expected_input_positions": tensor(i["expected_input_positions"], device)}


def expected_plan(case: Case) -> dict[str, torch.Tensor]:
    """A plan case's expected plans, named as :func:`run_plan` names them."""
    o = case.outputs
    out = {f"verify_plan_out.{k}": req(v) for k, v in o["verify_plan_out"].items()}
    out.update({f"write_plan_out.{k}": req(v) for k, v in o["write_plan_out"].items()})
    return out


def expected(case: Case) -> dict[str, torch.Tensor]:
    """The case's output tensors by name (plans flattened as ``verify_plan_out.<field>``)."""
    if case.kind == "plan":
        return expected_plan(case)
    return {k: req(v) for k, v in case.outputs.items() if isinstance(v, dict) and "dtype" in v}


def run_pipeline(case: Case, device: torch.device | str = "cpu", backend: str | None = None
                 ) -> list[dict[str, torch.Tensor]]:
    """Replay a pipeline case (README "pipeline"): per step, plan → HEAD verify/write → forward → TAIL.

    Returns the state after each step (plans, ring, index, counters) and, in the last entry, also
    ``final_head_canary_buf`` / ``final_tail_canary_buf``.
    """
    i = case.inputs
    swa = i["group"] == "SWA"
    n, stride = i["num_slots"], i["slot_stride_bytes"]
    head = torch.zeros(n, stride, dtype=torch.uint8, device=device)
    tail = torch.zeros(n, stride, dtype=torch.uint8, device=device)
    ring = torch.zeros(i["ring_capacity"], 8, dtype=torch.int64, device=device)
    widx = torch.zeros(1, dtype=torch.int32, device=device)
    kcount = torch.zeros(12, dtype=torch.int64, device=device)
    scount = torch.zeros(12, dtype=torch.int64, device=device)
    vp = VerifyPlan.allocate(verify_capacity=i["verify_capacity"], device=device)
    wp = WritePlan.allocate(write_req_capacity=i["write_req_capacity"], device=device)
    vp.zero_for_testing_()
    wp.zero_for_testing_()
    src_enc = i["real_kv_sources"][0]
    kv = req(src_enc["initial_tensor"], device)
    source = RealKvSource(tensor=kv, page_size=src_enc["page_size"], num_bytes_per_token=src_enc["num_bytes_per_token"],
                          read_bytes=src_enc["read_bytes"])
    mode = RealKvHashMode(i["real_kv_hash_mode"])
    cpa = torch.tensor([i["enable_chain_position_assert"]], dtype=torch.int32, device=device)
    pool = tensor(i.get("req_to_verify_expected_tokens_initial"), device) if i["check_verify_expected_token"] else None
    tags = (
        (CanaryLaunchTag.HEAD_K_SWA, CanaryLaunchTag.TAIL_K_SWA) if swa
        else (CanaryLaunchTag.HEAD_K_FULL, CanaryLaunchTag.TAIL_K_FULL)
    )

    def ctx(buf: torch.Tensor, tag: CanaryLaunchTag, srcs: tuple[RealKvSource, ...]) -> VerifyOrWriteContext:
        return VerifyOrWriteContext(
            canary_buf=buf, kernel_kind=tag, violation_ring=ring, violation_write_index=widx,
            slot_run_counter=scount[tag : tag + 1], kernel_run_counter=kcount[tag : tag + 1],
            real_kv_sources=srcs, real_kv_hash_mode=mode, enable_chain_position_assert=cpa,
        )

    def poke(pokes: list[Mapping[str, int]]) -> None:
        for p in pokes:
            kv[p["row"], p["col"]] = p["value"]

    nbpt, ps = source.num_bytes_per_token, source.page_size
    states: list[dict[str, torch.Tensor]] = []
    for step in i["steps"]:
        poke(step.get("kv_pokes_before_step", []))
        rpi = req(step["req_pool_indices"], device)
        valid_lens = None
        if pool is not None:
            sc = step["scatter"]
            launch_scatter_req_token_ids_kernel(flat_in=req(sc["flat_in"], device), offsets=req(sc["offsets"], device),
                                                req_pool_indices=rpi, pool_out=pool, backend=backend)
            valid_lens = req(sc["valid_lens"], device)
        lut = tensor(step.get("full_to_swa_index_mapping"), device) if swa else None
        launch_canary_plan_kernels(
            verify_plan_out=vp, write_plan_out=wp, req_pool_indices=rpi, prefix_lens=req(step["prefix_lens"], device),
            extend_seq_lens=req(step["extend_seq_lens"], device), req_to_token=req(step["req_to_token"], device),
            swa_window_size=i["swa_window_size"] if swa else 0, full_to_swa_index_mapping=lut,
            verify_capacity=i["verify_capacity"], req_to_verify_expected_tokens=pool,
            req_to_verify_expected_tokens_valid_lens=valid_lens, kv_token_id_vs_position_offset=0, backend=backend)
        loc = req(step["out_cache_loc"], device)
        if swa:
            assert lut is not None
            loc = torch.where(loc >= 0, lut[loc.clamp(min=0)], loc)
        ids, pos = req(step["input_ids"], device), req(step["positions"], device)
        for buf, tag, srcs in ((head, tags[0], ()), (tail, tags[1], (source,))):
            if buf is tail:
                for w in step["kv_writes"]:
                    s = w["slot"]
                    kv[s // ps, (s % ps) * nbpt : (s % ps + 1) * nbpt] = torch.tensor(w["bytes"], dtype=torch.uint8)
                poke(step.get("kv_pokes_after_forward", []))
            c = ctx(buf, tag, srcs)
            launch_canary_verify_kernel(context=c, plan=vp, backend=backend,
                                        check_verify_expected_token=i["check_verify_expected_token"])
            launch_canary_write_kernel(context=c, plan=wp, input_ids=ids, positions=pos, out_cache_loc=loc,
                                       enable_write_input_assert=False, expected_input_tokens=None,
                                       expected_input_positions=None, backend=backend)
        state = {f"verify_plan_out.{k}": getattr(vp, k).clone() for k in
                 ("verify_slot_indices", "verify_expected_tokens", "verify_expected_positions",
                  "verify_prev_slot_indices", "verify_num_valid", "enable")}
        state.update({f"write_plan_out.{k}": getattr(wp, k).clone() for k in
                      ("write_offsets", "write_seed_slot_indices", "write_num_valid_reqs")})
        state.update({"violation_ring": ring.clone(), "violation_write_index": widx.clone(),
                      "kernel_run_counters": kcount.clone(), "slot_run_counters": scount.clone()})
        states.append(state)
    states[-1]["final_head_canary_buf"] = head
    states[-1]["final_tail_canary_buf"] = tail
    return states


def expected_pipeline(case: Case) -> list[dict[str, torch.Tensor]]:
    """A pipeline case's expected state after each step, as :func:`run_pipeline` returns it."""
    out: list[dict[str, torch.Tensor]] = []
    for st in case.outputs["steps"]:
        d = {f"verify_plan_out.{k}": req(v) for k, v in st["verify_plan_out"].items()}
        d.update({f"write_plan_out.{k}": req(v) for k, v in st["write_plan_out"].items()})
        d.update({k: req(st[k]) for k in ("violation_ring", "violation_write_index", "kernel_run_counters",
                                          "slot_run_counters")})
        out.append(d)
    out[-1]["final_head_canary_buf"] = req(case.outputs["final_head_canary_buf"])
    out[-1]["final_tail_canary_buf"] = req(case.outputs["final_tail_canary_buf"])
    return out
