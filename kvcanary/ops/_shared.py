"""Spec fragments shared by several launcher contracts: the context, the two plans, the sources."""


import torch

from kvcanary.consts import MAX_REAL_KV_SOURCES, PLAN_OFFSETS_SCRATCH_LEN
from kvcanary.context import VerifyOrWriteContext
from kvcanary.extensions import Extensions
from kvcanary.plans import VerifyPlan, WritePlan
from kvcanary.sources import RealKvSource
from kvcanary_contracts import ItemsArg, Relation, ScalarArg, StructArg, TensorArg
from kvcanary_contracts.mutations import Misalign, Resize

i64, i32, u8 = torch.int64, torch.int32, torch.uint8

REAL_KV_SOURCE_ITEM = StructArg(
    RealKvSource,
    {
        "tensor": TensorArg(
            shape=("*", "*"),
            doc="The source's bytes; viewed as uint8 it must be 2-D: [rows, row_bytes].",
            messages={"rank": "{name} (viewed as uint8) must be 2-D, got {ndim}-D"},
        ),
        "page_size": ScalarArg(int, doc="Slots per row."),
        "num_bytes_per_token": ScalarArg(int, doc="Bytes of one slot's strip."),
        "read_bytes": ScalarArg(int, doc="Bytes ALL mode hashes."),
    },
    rules=(
        Relation(
            name="row_holds_page",
            require="tensor.shape[1] * tensor.element_size() >= page_size * num_bytes_per_token",
            message="RealKvSource row is too narrow for its slot layout: dim-1 is {row_bytes} bytes but "
            "page_size={page_size} x num_bytes_per_token={num_bytes_per_token} needs {min_row_bytes}",
            values={
                "row_bytes": "tensor.shape[1] * tensor.element_size()",
                "min_row_bytes": "page_size * num_bytes_per_token",
            },
            why="A row holds page_size slot strips side by side; a narrower row would put the last strips "
            "past its end (into the next row, or out of the tensor).",
            fix="Describe the layout the tensor really has: page_size x num_bytes_per_token must fit in one "
            "row (dim 1, in bytes).",
            breaks={"page_size": "page_size * 2"},
        ),
        Relation(
            name="has_rows",
            require="tensor.shape[0] >= 1",
            message="{name}.tensor must have at least one row, got shape {shape}",
            values={"shape": "tuple(tensor.shape)"},
            why="Slot s's strip lives in row s // page_size; a source without rows has no strip for any slot, "
            "not even the padding slot 0 (every backend rejects it rather than fold nothing).",
            fix="Pass the pool buffer the source describes (at least one page), or leave the source out.",
            breaks={"tensor": Resize(0, 0)},
        ),
        Relation(
            name="base_aligned_16",
            require="tensor.data_ptr() % 16 == 0",
            message="{name}.tensor must start on a 16-byte boundary, got data_ptr() % 16 == {misalignment}",
            values={"misalignment": "tensor.data_ptr() % 16"},
            why="Strips are read with 16-byte vector loads, which must be 16-byte aligned.",
            fix="Pass a view that starts at a 16-byte boundary of the pool (whole layers or pages always do).",
            breaks={"tensor": Misalign(8)},
        ),
    ),
)

REAL_KV_SOURCES = ItemsArg(
    REAL_KV_SOURCE_ITEM,
    max_len=MAX_REAL_KV_SOURCES,
    doc="Up to four buffers whose bytes are folded, in order, into each slot's real-KV hash.",
    messages={"max_len": "at most {max_len} RealKvSource entries supported by the CUDA ABI, got {actual}"},
)

CONTEXT = StructArg(
    VerifyOrWriteContext,
    {
        "canary_buf": TensorArg(dtype=u8, shape=("num_slots", "slot_stride_bytes"),
                                doc="The canary records: one slot_stride_bytes row per KV slot (32 B used)."),
        "kernel_kind": ScalarArg(int, doc="The launch tag written into every violation row."),
        "violation_ring": TensorArg(dtype=i64, shape=("ring_capacity", 8),
                                    doc="Fill-once ring of violation rows, shared by all launches."),
        "violation_write_index": TensorArg(dtype=i32, shape=(1,),
                                           doc="Count of every violation ever recorded (rows past capacity dropped)."),
        "slot_run_counter": TensorArg(dtype=i64, shape=(1,), doc="This tag's count of slots processed."),
        "kernel_run_counter": TensorArg(dtype=i64, shape=(1,), doc="This tag's count of launches."),
        "real_kv_sources": REAL_KV_SOURCES,
        "real_kv_hash_mode": ScalarArg(int, doc="RealKvHashMode: NONE, PARTIAL or ALL."),
        "enable_chain_position_assert": TensorArg(dtype=i32, shape=(1,),
                                                  doc="Device flag: 1 enables write's chain-position assert."),
    },
    prefix="",
    doc="Buffers shared by every launch of one endpoint.",
    rules=(
        Relation(
            name="slot_stride_holds_record",
            require="slot_stride_bytes >= 32",
            message="canary_buf slot stride must hold at least 4 int64 fields, got {slot_stride_i64}",
            values={"slot_stride_i64": "slot_stride_bytes // 8"},
            why="Each slot stores four int64 fields (token, position, prev_hash, real_kv_hash) at the start of "
            "its row.",
            fix="Allocate the canary buffer as `torch.zeros(num_slots, CANARY_SLOT_BYTES, dtype=torch.uint8)`.",
            breaks={"slot_stride_bytes": 24},
        ),
        Relation(
            name="slot_stride_multiple_of_8",
            require="slot_stride_bytes % 8 == 0",
            message="canary_buf slot stride must be a multiple of 8 bytes, got {slot_stride_bytes}",
            why="Records are read and written as aligned int64 words; a stride that is not a multiple of 8 "
            "misaligns every other slot.",
            fix="Use a slot stride of 32 bytes (or a larger multiple of 8 if you keep extra data per slot).",
            breaks={"slot_stride_bytes": 36},
        ),
        Relation(
            name="canary_buf_aligned",
            require="canary_buf.data_ptr() % 16 == 0",
            message="canary_buf must start on a 16-byte boundary, got data_ptr() % 16 == {misalignment}",
            values={"misalignment": "canary_buf.data_ptr() % 16"},
            why="Records are moved with 16-byte vector loads and stores.",
            fix="Pass the buffer as allocated (or a view starting at a slot boundary).",
            breaks={"canary_buf": Misalign(8)},
        ),
        Relation(
            name="canary_buf_has_slots",
            require="num_slots >= 1",
            message="canary_buf must hold at least one slot (slot 0, the padding slot), got shape {shape}",
            values={"shape": "tuple(canary_buf.shape)"},
            why="Every plan and write names slots of this buffer, and slot 0 (the padding slot) always exists; "
            "an empty buffer has no slot to read or write, so every backend rejects it up front.",
            fix="Allocate one record per KV slot, slot 0 included: "
            "`torch.zeros(num_slots, CANARY_SLOT_BYTES, dtype=torch.uint8)` with num_slots >= 1.",
            breaks={"num_slots": 0},
        ),
        Relation(
            name="real_kv_hash_mode_known",
            require="real_kv_hash_mode in (0, 1, 2)",
            message="real_kv_hash_mode must be RealKvHashMode.NONE, PARTIAL or ALL, got {real_kv_hash_mode}",
            why="Backends specialise on the mode; an unknown value has no meaning.",
            fix="Pass a RealKvHashMode member.",
        ),
    ),
)


EXTENSIONS = StructArg(
    Extensions,
    {
        "zero_slot_in_live_range": ScalarArg(bool, doc="Report padding-slot entries inside live ranges."),
        "write_slot_mismatch": ScalarArg(bool, doc="Report writes outside req_to_token[req, position]."),
        "write_slot_owner_mismatch": ScalarArg(bool, doc="Report writes into a slot the owner map gives to "
                                               "anyone but the writing request."),
    },
    doc="The opt-in extension checks (None: none of them; the kernels are today's).",
)
EXTENSIONS_DOC = "Opt-in extension checks (kvcanary.Extensions); None runs exactly the default kernels."


# What each launch writes (ContractInfo.writes): nothing else may overlap these tensors' memory.
VERIFY_WRITES = ("context.violation_ring", "context.violation_write_index", "context.slot_run_counter",
                 "context.kernel_run_counter")
WRITE_WRITES = ("context.canary_buf", *VERIFY_WRITES)
VERIFY_PLAN_FIELDS = ("verify_slot_indices", "verify_expected_tokens", "verify_expected_positions",
                      "verify_prev_slot_indices", "verify_num_valid", "enable", "verify_offsets_scratch")
WRITE_PLAN_FIELDS = ("write_seed_slot_indices", "write_offsets", "write_num_valid_reqs")


def verify_plan_struct(prefix: str, capacity_symbol: str = "verify_capacity") -> StructArg:
    """The VerifyPlan spec, labelled ``<prefix>field``; its arrays share ``capacity_symbol``."""
    cap = (capacity_symbol,)
    return StructArg(
        VerifyPlan,
        {
            "verify_slot_indices": TensorArg(dtype=i64, shape=cap, doc="Slot to verify, per entry."),
            "verify_expected_tokens": TensorArg(dtype=i64, shape=cap,
                                                doc="Token the slot must hold, per entry (-1: no token check)."),
            "verify_expected_positions": TensorArg(dtype=i64, shape=cap, doc="Position the slot must hold."),
            "verify_prev_slot_indices": TensorArg(dtype=i64, shape=cap,
                                                  doc="Predecessor slot (-1: chain head, 0: unreachable)."),
            "verify_num_valid": TensorArg(dtype=i32, shape=(1,), doc="Entries in use (device scalar)."),
            "enable": TensorArg(dtype=i32, shape=(1,), doc="0 skips the launch (plan overflow)."),
            "verify_offsets_scratch": TensorArg(dtype=i64, shape=(f">= {PLAN_OFFSETS_SCRATCH_LEN}",),
                                                optional=True,
                                                doc="Plan-kernel scratch (kvcanary); VerifyPlan.allocate makes it."),
        },
        prefix=prefix,
        doc="The verify work list, refilled in place by the plan launch.",
    )


def write_plan_struct(prefix: str) -> StructArg:
    return StructArg(
        WritePlan,
        {
            # seeds first: they bind write_req_capacity, and write_offsets must be one longer.
            "write_seed_slot_indices": TensorArg(dtype=i64, shape=("write_req_capacity",),
                                                 doc="Slot each request's chain continues from (-1: anchor)."),
            "write_offsets": TensorArg(
                dtype=i64, shape=("write_req_capacity + 1",),
                doc="Exclusive prefix sums into the flat token arrays; write_offsets[0] == 0.",
                messages={"size": "{name} length must equal write_req_capacity + 1 ({expected}), got {actual}"},
            ),
            "write_num_valid_reqs": TensorArg(dtype=i32, shape=(1,), doc="Request rows in use."),
        },
        prefix=prefix,
        doc="The write work list, refilled in place by the plan launch.",
    )
