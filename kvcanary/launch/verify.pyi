# Generated from the contracts by `python -m tools.launcher_stubs`; do not edit (a test fails when it drifts).
"""``launch_canary_verify_kernel``: re-verify the slots a forward is about to read."""

from kvcanary.context import VerifyOrWriteContext
from kvcanary.extensions import Extensions
from kvcanary.plans import VerifyPlan

def launch_canary_verify_kernel(*, context: VerifyOrWriteContext, plan: VerifyPlan, check_verify_expected_token: bool, extensions: Extensions | None = None, backend: str | None = None) -> None:
    """Verify ``plan``'s entries against ``context.canary_buf``; violations go to the ring.

    Never raises because of device data: bad indices are recorded as INDEX_OUT_OF_RANGE violations.
    Raises :class:`~contracts.ContractError` (a ValueError) for a bad call, before anything runs.

    Verify the slots a forward is about to read; mismatches go to the violation ring.

    Args:
        context: The endpoint's buffers.
            Checks: KVC-V001, KVC-V002, KVC-V003, KVC-V004, KVC-V005, KVC-V006, KVC-V007, KVC-V008, KVC-V009, KVC-V010, KVC-V011, KVC-V012, KVC-V013, KVC-V014, KVC-V015, KVC-V016, KVC-V017, KVC-V018, KVC-V019, KVC-V020, KVC-V021, KVC-V022, KVC-V023, KVC-V024, KVC-V025, KVC-V026, KVC-V027, KVC-V028, KVC-V029, KVC-V030, KVC-V031, KVC-V032, KVC-V033, KVC-V034, KVC-V035, KVC-V036, KVC-V037, KVC-V038, KVC-V039, KVC-V076, KVC-V077, KVC-V078, KVC-V079, KVC-V080, KVC-V081, KVC-V082, KVC-V083, KVC-V091, KVC-V092, KVC-V093, KVC-V094, KVC-V095, KVC-V096, KVC-V097, KVC-V098, KVC-V099, KVC-V100, KVC-V101, KVC-V103.
        plan: What to verify.
            Checks: KVC-V040, KVC-V041, KVC-V042, KVC-V043, KVC-V044, KVC-V045, KVC-V046, KVC-V047, KVC-V048, KVC-V049, KVC-V050, KVC-V051, KVC-V052, KVC-V053, KVC-V054, KVC-V055, KVC-V056, KVC-V057, KVC-V058, KVC-V059, KVC-V060, KVC-V061, KVC-V062, KVC-V063, KVC-V064, KVC-V065, KVC-V066, KVC-V067, KVC-V068, KVC-V069, KVC-V070, KVC-V071, KVC-V072, KVC-V084, KVC-V085, KVC-V086, KVC-V087, KVC-V088, KVC-V089, KVC-V090.
        check_verify_expected_token: Compare stored tokens with plan.verify_expected_tokens (entries of -1 are skipped).
            Checks: KVC-V073.
        extensions (optional): Opt-in extension checks (kvcanary.Extensions); None runs exactly the default kernels.
            Checks: KVC-V105, KVC-V106, KVC-V107, KVC-V108.
        backend (optional): Force this backend by name (None: the registry picks).

    Other checks:
        - KVC-V074 (requires `slot_stride_bytes >= 32`)
        - KVC-V075 (requires `slot_stride_bytes % 8 == 0`)
        - KVC-V102 (requires `num_slots >= 1`)
        - KVC-V104 (no tensor the launch writes may share memory with another argument)

    Raises:
        ContractError (a ValueError) before anything runs, for a call that breaks a check: 108 checks, codes KVC-V001 to KVC-V108; each error names its code and the page that explains it."""
