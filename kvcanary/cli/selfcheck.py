"""``kvcanary selfcheck``: plan → write → verify on one device with one injected fault (seconds)."""

from __future__ import annotations

import argparse

from kvcanary.cli.common import backend_usage_error, check_backend_name, usable_device
from kvcanary.cli.parser import arguments


@arguments("selfcheck")
def _selfcheck_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--device", default="cpu", help="torch device (default: cpu)")
    p.add_argument("--backend", default=None, help="force a backend (default: the registry's choice)")


def main(args: argparse.Namespace) -> int:
    from kvcanary import selfcheck as sc
    from kvcanary.registry import BackendError

    device = usable_device(args.device)
    check_backend_name(args.backend)
    try:
        found = sc.run(str(device), args.backend)
    except BackendError as exc:
        raise backend_usage_error(exc, args.backend) from None
    if found <= 0:
        print("self-check FAILED: " + ("the clean steps reported violations" if found < 0 else "fault not detected"))
        return 1
    print("self-check passed: the injected fault was detected, the clean steps were silent")
    return 0
