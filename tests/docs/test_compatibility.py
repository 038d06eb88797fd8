"""The compatibility page states what the code does: its tables, check values, messages and signatures.

The page is hand-written, so every fact it lists that the code can confirm is confirmed here; a change of
format, message or signature then fails until the page says so.
"""

from __future__ import annotations

import inspect
import re
from pathlib import Path

import kvcanary as kc
from kvcanary import codes, consts
from kvcanary.errors import FAMILY
from kvcanary.hashing import chain_prev_hashes, real_kv_hash, splitmix64

PAGE = (Path(__file__).resolve().parents[2] / "docs" / "compatibility.md").read_text()
LAUNCHERS = ["launch_canary_plan_kernels", "launch_plan_offsets_kernel", "launch_plan_entries_kernel",
             "launch_canary_verify_kernel", "launch_canary_write_kernel", "launch_scatter_req_token_ids_kernel"]


def _fence_after(marker: str) -> str:
    """The body of the first fenced block after ``marker`` (indentation removed)."""
    rest = PAGE[PAGE.index(marker):]
    m = re.search(r"```text\n(.*?)\n\s*```", rest, flags=re.S)
    assert m, marker
    return "\n".join(line.strip() for line in m.group(1).splitlines())


def test_record_fields_and_offsets() -> None:
    for name in ("TOKEN", "POSITION", "PREV_HASH", "REAL_KV_HASH"):
        field = getattr(consts, f"CANARY_FIELD_{name}")
        assert f"| {field} | `CANARY_FIELD_{name}` | {8 * field} |" in PAGE, name
    assert consts.CANARY_SLOT_BYTES == 8 * consts.CANARY_FIELDS_PER_SLOT == 32


def test_violation_columns_and_fail_reasons() -> None:
    for name in ("KERNEL_KIND", "SLOT_IDX", "POSITION", "STORED_TOKEN", "EXPECTED_TOKEN", "STORED_CHAIN_HASH",
                 "EXPECTED_AUX", "FAIL_REASON_BITS"):
        assert f"| {getattr(consts, f'VIOLATION_FIELD_{name}')} | `VIOLATION_FIELD_{name}` |" in PAGE, name
    for bit in kc.FailReason:
        assert bit.name is not None
        row = f"| {int(bit).bit_length() - 1} | {int(bit)} | `{bit.name}` | `{bit.label}` |"
        assert row in PAGE, row
    assert f"DEFAULT_RING_CAPACITY = {consts.DEFAULT_RING_CAPACITY}" in PAGE


def test_hash_check_values() -> None:
    assert f"`CANARY_CHAIN_ANCHOR = {consts.CANARY_CHAIN_ANCHOR:#X}`".replace("0X", "0x") in PAGE
    assert f"| `splitmix64(1)` | `{splitmix64(1):#018x}` |" in PAGE
    assert f"| `splitmix64(0xFFFFFFFFFFFFFFFF)` | `{splitmix64(2**64 - 1):#018x}` |" in PAGE
    assert f"| `ANCHOR_HASH` | `{kc.ANCHOR_HASH:#018x}` |" in PAGE
    chain = ", ".join(f"`{h:#018x}`" for h in chain_prev_hashes([11, 22, 33], [0, 1, 2]))
    assert chain in PAGE
    assert f"`{real_kv_hash([bytes(range(16))], kc.RealKvHashMode.PARTIAL):#018x}`" in PAGE
    assert f"`{real_kv_hash([bytes(range(32))], kc.RealKvHashMode.ALL):#018x}`" in PAGE


def test_kept_messages_are_raised_by_some_check() -> None:
    templates = {FAMILY.prefix + c.template for c in codes.checks()}
    kept = _fence_after("The texts kept word for word").splitlines()
    assert len(kept) > 20
    missing = [line for line in kept if line not in templates]
    assert missing == []


def test_launcher_signatures() -> None:
    block = " ".join(_fence_after("The six launchers").split())
    for name in LAUNCHERS:
        params = inspect.signature(getattr(kc, name)).parameters
        args = ", ".join(p if p != "backend" else "backend=None" for p in params)
        assert f"{name}(*, {args})" in block, name
