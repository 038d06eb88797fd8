"""Engine and model configuration (small by design: a real serving loop on a tiny random model)."""

from __future__ import annotations

from dataclasses import dataclass


def _pos(owner: str, name: str, value: int) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
        raise ValueError(f"{owner}.{name} must be a positive int, got {value!r}")


@dataclass(frozen=True, kw_only=True)
class ModelConfig:
    """A decoder-only transformer with RoPE, GQA and RMSNorm; random weights from ``seed``.

    With a sliding window, odd layers are SWA layers (their KV lives in the SWA pool), even layers full.
    """

    vocab_size: int = 256
    hidden: int = 64
    n_layers: int = 2
    n_heads: int = 4
    n_kv_heads: int = 2
    head_dim: int = 16
    mlp_hidden: int = 128
    rope_theta: float = 10000.0
    seed: int = 0

    def __post_init__(self) -> None:
        for name in ("vocab_size", "hidden", "n_layers", "n_heads", "n_kv_heads", "head_dim", "mlp_hidden"):
            _pos("ModelConfig", name, getattr(self, name))
        if self.n_heads % self.n_kv_heads:
            raise ValueError(f"ModelConfig.n_heads ({self.n_heads}) must be a multiple of n_kv_heads "
                             f"({self.n_kv_heads})")
        if self.head_dim % 2:
            raise ValueError(f"ModelConfig.head_dim must be even (RoPE rotates pairs), got {self.head_dim}")
        if (self.n_kv_heads * self.head_dim * 4) % 16:
            raise ValueError("ModelConfig: a K/V row (n_kv_heads * head_dim * 4 bytes) must be a multiple of 16 bytes")


@dataclass(frozen=True, kw_only=True)
class EngineConfig:
    """Pool and scheduler sizes.

    ``num_slots`` and ``req_rows`` include the reserved slot 0 / row 0. ``chunk_size`` is the prefill token
    budget per step (chunked prefill). ``swa_window`` > 0 adds the SWA pool (same slot count, its own
    free list, translated through ``full_to_swa_index_mapping``). ``num_draft_tokens`` > 0 runs speculative
    decoding with a draft model whose pool has the +1 token offset. ``graph_buckets`` pads pure-decode
    batches to those sizes with padding rows (row 0, slot 0), as CUDA-graph replay does; None picks
    (1, 2, 4, 8, 16, ...) on CUDA and no padding elsewhere; () disables it.
    """

    model: ModelConfig = ModelConfig()
    num_slots: int = 512
    req_rows: int = 17
    max_context_len: int = 256
    chunk_size: int = 32
    max_running: int = 16
    swa_window: int = 0
    num_draft_tokens: int = 0
    graph_buckets: tuple[int, ...] | None = None
    prefix_cache: bool = True
    transfer_chunk: int = 16
    device: str = "cpu"

    def __post_init__(self) -> None:
        for name in ("num_slots", "req_rows", "max_context_len", "chunk_size", "max_running", "transfer_chunk"):
            _pos("EngineConfig", name, getattr(self, name))
        if self.num_slots < 2 or self.req_rows < 2:
            raise ValueError("EngineConfig.num_slots and req_rows must be >= 2 (slot 0 and row 0 are reserved)")
        if self.swa_window < 0 or self.num_draft_tokens < 0:
            raise ValueError("EngineConfig.swa_window and num_draft_tokens must be non-negative")
        if self.swa_window and self.num_draft_tokens:
            raise ValueError("EngineConfig: speculative decoding (num_draft_tokens > 0) needs full attention "
                             "(swa_window = 0)")
        if self.swa_window and self.model.n_layers < 2:
            raise ValueError("EngineConfig.swa_window needs model.n_layers >= 2 (layer 0 full, layer 1 SWA)")
        if self.graph_buckets is not None and any(b <= 0 for b in self.graph_buckets):
            raise ValueError(f"EngineConfig.graph_buckets must be positive sizes, got {self.graph_buckets}")

    @property
    def buckets(self) -> tuple[int, ...]:
        if self.graph_buckets is not None:
            return tuple(sorted(self.graph_buckets))
        if self.device.startswith("cuda"):
            return tuple(1 << i for i in range(max(1, self.max_running).bit_length() + 1))
        return ()

    def is_swa_layer(self, layer: int) -> bool:
        return self.swa_window > 0 and layer % 2 == 1


def demo_engine_config(device: str = "cpu") -> EngineConfig:
    """The demo's engine: hybrid full + SWA (window 8), a 192-slot pool (so the radix cache evicts),
    chunked prefill of 32 tokens, decode batches padded to graph buckets of 1/2/4/8 rows."""
    return EngineConfig(num_slots=192, req_rows=9, max_running=8, chunk_size=32, swa_window=8,
                        graph_buckets=(1, 2, 4, 8), device=device)
