# Generated from the contracts by `python -m tools.launcher_stubs`; do not edit (a test fails when it drifts).
"""``launch_digest_fold_kernel``: add the tensor-parallel digest of the records at some slots to an accumulator."""

from torch import Tensor

def launch_digest_fold_kernel(*, acc: Tensor, canary_buf: Tensor, slots: Tensor, backend: str | None = None) -> None:
    """Add ``(Σ mix(slot, token, position, prev_hash), count)`` over the records at ``slots`` to ``acc``.

    Order-free (a wrapping sum), no host read, capturable on every backend that serves it.

    Add the digest of the records at the given slots (slot, token, position, prev_hash) to an int64 [2] accumulator.

    Args:
        acc: The accumulator the fold adds to: (wrapping sum of the records' mixes, record count).
            Checks: KVC-D001, KVC-D002, KVC-D003, KVC-D004, KVC-D005, KVC-D017, KVC-D019.
        canary_buf: The canary records, one per row (32 bytes, as any integer dtype); rows may be farther apart.
            Checks: KVC-D006, KVC-D007, KVC-D008, KVC-D013, KVC-D014, KVC-D015, KVC-D016.
        slots: The slots to fold (entries <= 0 are left out; a slot past the buffer folds zeros).
            Checks: KVC-D009, KVC-D010, KVC-D011, KVC-D018.
        backend (optional): Force this backend by name (None: the registry picks).

    Rules:
        - canary_buf rows must hold one {record_bytes}-byte record, got {row_bytes} bytes ({row_words} x {dtype}) (KVC-D012)
        - canary_buf rows must be contiguous, got strides {strides}
        - canary_buf rows must be a whole number of int64 words apart, got a row stride of {stride_bytes} bytes
        - canary_buf must start on an 8-byte boundary, got data_ptr() % 8 == {misalignment}

    Raises:
        ContractError (a ValueError) before anything runs, for a call that breaks a check: 19 checks, codes KVC-D001 to KVC-D019; each error names its code and the page that explains it."""
