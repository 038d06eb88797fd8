"""Every lazy package (``kvcanary._lazy.attach``): no public name is also one of its submodules' names.

Importing a submodule makes the import system set the package's attribute of that name to the module, so a
public name shared with a submodule would be the module or the function depending on what was imported first.
"""

from __future__ import annotations

import pkgutil
from pathlib import Path

import pytest

import kvcanary
from kvcanary._lazy import imported_names

ROOT = Path(kvcanary.__file__).parent


def lazy_packages() -> list[Path]:
    """The ``__init__.py`` of each kvcanary package whose namespace :func:`kvcanary._lazy.attach` builds."""
    return sorted(p for p in ROOT.rglob("__init__.py") if "attach(__name__" in p.read_text(encoding="utf-8"))


def test_the_lazy_packages_are_found() -> None:
    found = {p.parent.relative_to(ROOT.parent).as_posix() for p in lazy_packages()}
    assert {"kvcanary", "kvcanary/evidence", "kvcanary/monitor"} <= found, found


@pytest.mark.parametrize("init", lazy_packages(), ids=lambda p: p.parent.relative_to(ROOT.parent).as_posix())
def test_no_public_name_is_a_submodule(init: Path) -> None:
    source = init.read_text(encoding="utf-8")
    public = set(imported_names(source))
    submodules = {m.name for m in pkgutil.iter_modules([str(init.parent)])}
    assert public, f"{init}: no names under `if TYPE_CHECKING:`"
    assert not public & submodules, (f"{init.parent.name}: {sorted(public & submodules)} is both a public name "
                                     "and a submodule; rename the submodule")
