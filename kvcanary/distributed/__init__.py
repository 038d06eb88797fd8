"""kvcanary across processes: tensor-parallel digests and prefill→decode transfer of canary records.

Built on ``torch.distributed`` (gloo on CPU or through the host, NCCL across GPUs; the backend is a
parameter). See docs/distributed.md.
"""

from kvcanary.distributed.digest import (
    DigestAccumulator,
    fold_records,
    fold_records_torch,
    fused_fold,
    launch_digest_fold_kernel,
)
from kvcanary.distributed.exchange import DigestExchange, RankDivergence
from kvcanary.distributed.group import free_loopback_port, init_loopback_group, spawn_group
from kvcanary.distributed.records import pack_records, packed_shape, record_buffers, unpack_records
from kvcanary.distributed.tp import RankSummary, TensorParallelCanary, TpReport
from kvcanary.distributed.verify import TransferVerifier, transfer_entries
from kvcanary.distributed.wire import (
    ReceivedTransfer,
    TransferMessage,
    Wire,
    accept_transfer,
    make_message,
    pack_kv,
    unpack_kv,
)

__all__ = [
    "DigestAccumulator",
    "DigestExchange",
    "RankDivergence",
    "RankSummary",
    "ReceivedTransfer",
    "TensorParallelCanary",
    "TpReport",
    "TransferMessage",
    "TransferVerifier",
    "Wire",
    "accept_transfer",
    "fold_records",
    "fold_records_torch",
    "free_loopback_port",
    "fused_fold",
    "init_loopback_group",
    "launch_digest_fold_kernel",
    "make_message",
    "pack_kv",
    "pack_records",
    "packed_shape",
    "record_buffers",
    "spawn_group",
    "transfer_entries",
    "unpack_kv",
    "unpack_records",
]
