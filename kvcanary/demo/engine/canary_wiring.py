"""How the engine hands its pools to the canary: the pool description, the capacities, the managers."""

from __future__ import annotations

import dataclasses

from kvcanary.consts import PoolKind
from kvcanary.demo.engine.config import EngineConfig
from kvcanary.demo.engine.kv_pool import KvPool
from kvcanary.demo.engine.memory import KvMemory
from kvcanary.manager import CanaryCapacities, CanaryConfig, CanaryManager, KvPoolSpec, PoolGroupSpec

TARGET_FORWARD_SLOTS = 2  # the (graph-padded) decode forward and the prefill (extend) forward


def capacities(cfg: EngineConfig) -> CanaryCapacities:
    """Sized from the engine: graph buckets and running requests, the prefill chunk (plus, with
    speculative decoding, the draft extend's accepted tokens), the pool, the context length."""
    k = cfg.num_draft_tokens
    max_bs = max(cfg.max_running, *cfg.buckets, 1)
    tokens = cfg.chunk_size + (cfg.max_running * (k + 1) if k else 0)
    return CanaryCapacities.from_engine(
        pool_slot_count=cfg.num_slots, max_batch_size=max_bs, req_rows=cfg.req_rows,
        max_tokens_per_forward=tokens, max_context_len=cfg.max_context_len, spec_num_draft_tokens=k)


def attach_canaries(cfg: EngineConfig, mem: KvMemory, draft_pool: KvPool | None,
                    config: CanaryConfig) -> tuple[CanaryManager, CanaryManager | None]:
    """The target pool's manager (FULL group, plus the SWA group with its LUT) and, with a draft model,
    the draft pool's (+1 token offset). Both sweep the radix tree, if there is one."""
    if mem.tree is None:
        config = dataclasses.replace(config, sweep_interval=0)  # nothing to sweep without a prefix cache
    groups = [PoolGroupSpec(kind=PoolKind.FULL, k_layer0=mem.pool.k[0], v_layer0=mem.pool.v[0])]
    if mem.swa is not None:
        groups.append(PoolGroupSpec(kind=PoolKind.SWA, k_layer0=mem.swa.kv.k[0], v_layer0=mem.swa.kv.v[0],
                                    swa_window_size=cfg.swa_window, full_to_swa_index_mapping=mem.swa.lut))
    caps = capacities(cfg)
    target = CanaryManager.attach(
        pool=KvPoolSpec(groups=tuple(groups), req_to_token=mem.r2t.device_table), capacities=caps,
        config=dataclasses.replace(config, num_forward_slots=TARGET_FORWARD_SLOTS))
    draft = None
    if draft_pool is not None:
        draft = CanaryManager.attach(
            pool=KvPoolSpec(groups=(PoolGroupSpec(kind=PoolKind.FULL, k_layer0=draft_pool.k[0],
                                                  v_layer0=draft_pool.v[0]),),
                            req_to_token=mem.r2t.device_table, kv_token_id_vs_position_offset=1),
            capacities=caps, config=dataclasses.replace(config, num_forward_slots=max(1, cfg.num_draft_tokens)))
    if mem.tree is not None:
        for m in (target, draft):
            if m is not None:
                m.set_sweep_source(mem.tree.sweep_entries)
    return target, draft
