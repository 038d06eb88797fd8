"""The launchers' ``.pyi`` stubs: one per launcher module, generated from the contracts (development tooling).

``python -m tools.launcher_stubs`` (from the repository root) rewrites them; ``--check`` exits 1 and names the
stale files instead. The test suite runs the check, so a contract change without regenerated stubs fails CI.
"""

from __future__ import annotations

import importlib
import inspect
from pathlib import Path

from kvcanary_contracts.stubs import StubLauncher, render

COMMAND = "python -m tools.launcher_stubs"
LAUNCH = Path(__file__).parents[1] / "kvcanary" / "launch"
"""The launcher modules' folder, beside which each stub is written."""


def stub_text(module_name: str) -> str:
    """The stub of ``kvcanary.launch.<module_name>``, as it should be."""
    module = importlib.import_module(f"kvcanary.launch.{module_name}")
    launchers = [
        StubLauncher(name, fn.__kvc_contract__, fn.__kvc_extras__, fn.__doc__ or "")
        for name, fn in vars(module).items()
        if callable(fn) and hasattr(fn, "__kvc_contract__")
    ]
    return render(inspect.getdoc(module) or "", launchers, COMMAND)


def modules() -> list[str]:
    """The launcher modules: every public module of ``kvcanary.launch`` (one per operation)."""
    return sorted(p.stem for p in LAUNCH.glob("*.py") if not p.stem.startswith("_"))


def stub_path(module_name: str) -> Path:
    return LAUNCH / f"{module_name}.pyi"


def stale() -> list[Path]:
    """The stubs whose text differs from what the contracts generate."""
    out = []
    for name in modules():
        path = stub_path(name)
        if not path.exists() or path.read_text() != stub_text(name):
            out.append(path)
    return out


def main(argv: list[str]) -> int:
    if argv == ["--check"]:
        paths = stale()
        for path in paths:
            print(f"stale: {path} (run `{COMMAND}`)")
        return 1 if paths else 0
    if argv:
        print(f"usage: {COMMAND} [--check]")
        return 2
    for name in modules():
        stub_path(name).write_text(stub_text(name))
    return 0


if __name__ == "__main__":
    import sys

    sys.exit(main(sys.argv[1:]))
