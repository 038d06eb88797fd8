"""``kvcanary docs``: regenerate the docs site's generated pages with the checkout's docs generator.

The generator is development tooling (``tools/docsgen`` in the repository, not in the installed package):
the command finds the kvcanary checkout it runs in (this folder or a parent, or the one an editable install
points at) and says so plainly when there is none. Writing the checkout's own ``docs/`` also rewrites the
package's copy of the pages (``kvcanary/catalog.json.gz``).
"""

from __future__ import annotations

import argparse
import importlib
import sys
from pathlib import Path
from types import ModuleType

from kvcanary.cli.parser import UsageError, arguments

GENERATOR = Path("tools") / "docsgen" / "__init__.py"


@arguments("docs")
def _docs_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--out", default=None,
                   help="the docs directory (default: the docs_dir of the mkdocs.yml here or in a parent folder)")
    p.add_argument("--check", action="store_true", help="write nothing; exit 1 if a generated page is stale")
    p.add_argument("--update-codes", action="store_true",
                   help="first give new checks their stable codes (kvcanary/codebook.json)")


def checkout_root(start: Path) -> Path | None:
    """The kvcanary checkout holding the docs generator: ``start`` or a parent, else the folder above the
    imported package (an editable install); None when neither is one."""
    import kvcanary

    here = start.resolve()
    for folder in (here, *here.parents, Path(kvcanary.__file__).resolve().parents[1]):
        if (folder / GENERATOR).is_file() and (folder / "kvcanary").is_dir():
            return folder
    return None


def generator(root: Path) -> ModuleType:
    """``tools.docsgen`` of the checkout at ``root`` (its folder put first on ``sys.path``)."""
    if str(root) not in sys.path:
        sys.path.insert(0, str(root))
    module = importlib.import_module("tools.docsgen")
    if not Path(module.__file__ or "").resolve().is_relative_to(root):
        raise UsageError(f"`tools` imports from {module.__file__}, not from the checkout {root}",
                         hint="run kvcanary docs from the checkout's folder")
    return module


def main(args: argparse.Namespace) -> int:
    from kvcanary import codes

    root = checkout_root(Path.cwd())
    if root is None:
        raise UsageError("kvcanary docs needs a kvcanary checkout: the docs generator is development tooling "
                         "(tools/docsgen in the repository) that the installed package does not hold",
                         hint="run it in a clone of the repository; `kvcanary explain` and `kvcanary contracts` "
                         "print the pages without it")
    docsgen = generator(root)
    out = Path(args.out) if args.out is not None else docsgen.find_docs_dir(Path.cwd())
    if out is None:
        verb = "check the generated pages in DIR" if args.check else "write the generated pages into DIR"
        raise UsageError("no docs folder: there is no mkdocs.yml in this folder or its parents (run it in a "
                         "kvcanary checkout, or a project with its own docs)", hint=f"pass --out DIR to {verb}")
    if args.update_codes:
        added = codes.update_codebook()
        print(f"code book: {len(added)} new code(s)" + "".join(f"\n  {k}" for k in added))
    # the package's copy of the pages belongs to the checkout's own docs, not to another folder's
    own = out.resolve() == (root / "docs").resolve()
    report = docsgen.generate(out, dry_run=args.check, package_root=root if own else None)
    if args.check:
        for rel in report.stale:
            print(f"stale: {rel}")
        print(f"{len(report.stale)} stale, {len(report.unchanged)} up to date")
        return 1 if report.stale else 0
    print(f"wrote {len(report.written)} page(s), removed {len(report.removed)}, "
          f"{len(report.unchanged)} unchanged, under {out}/")
    return 0
