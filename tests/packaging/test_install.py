"""The layout: every module at the path its import name says, no links, three names all ``kvcanary*``.

The repository holds no symbolic link, so a checkout that turns links into plain files (Windows' default,
``core.symlinks=false``) is the same checkout. A wheel built from a copy of this tree installs the three
packages (``kvcanary``, ``kvcanary_contracts``, ``kvcanary_backends``) with every module of the source, and
works from a project that has its own ``backends`` and ``contracts`` packages; no module is loaded under two
names. Runtime modules import nothing from tests, benchmarks, the repository's ``tools/`` (the docs
generator, the random scenarios and benchmark workloads), the conformance kit (``kvcanary.testing``), the
counterexample search (``tools/counterexamples.py``) or the stub generator. The wheel holds no tooling (no
module of it defines the search): ``kvcanary docs`` there says it needs a checkout, while ``explain`` and
``contracts`` read the pages the package ships.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[2]
PACKAGES = {"kvcanary": ROOT / "kvcanary", "kvcanary_contracts": ROOT / "contracts" / "kvcanary_contracts",
            "kvcanary_backends": ROOT / "backends" / "kvcanary_backends"}
TOOLING = ("tools", "kvcanary.testing", "kvcanary_contracts.stubs",
           "kvcanary.valid_calls", "kvcanary.mypy", "tests",
           "benchmarks")

_GRAPH = """
import importlib, pkgutil, sys
import kvcanary, kvcanary_contracts, kvcanary_backends
tooling = {tooling!r}
def tool(name): return any(name == t or name.startswith(t + ".") for t in tooling)
def script(name): return name.endswith(".__main__")  # runs the command when imported; imports only kvcanary.cli
bad = {{}}
count = 0
for pkg in (kvcanary, kvcanary_contracts, kvcanary_backends):
    for info in pkgutil.walk_packages(pkg.__path__, pkg.__name__ + "."):
        if tool(info.name) or script(info.name):
            continue
        count += 1
        before = set(sys.modules)
        importlib.import_module(info.name)
        new = sorted(m for m in set(sys.modules) - before if tool(m))
        if new:
            bad[info.name] = new
print(count, bad)
"""


def test_runtime_modules_import_no_tooling() -> None:
    out = subprocess.run([sys.executable, "-c", _GRAPH.format(tooling=TOOLING)], capture_output=True, text=True,
                         cwd=ROOT, check=True, timeout=300).stdout.strip()
    count, _, bad = out.partition(" ")
    assert int(count) > 50 and bad == "{}", out


def test_the_repository_holds_no_symbolic_link() -> None:
    """A link is a plain file in a checkout with ``core.symlinks=false``: none may exist for the build to need."""
    staged = subprocess.run(["git", "ls-files", "-s"], capture_output=True, text=True, cwd=ROOT, check=False)
    if staged.returncode == 0:  # a git checkout: mode 120000 is a link
        links = [line.split("\t", 1)[1] for line in staged.stdout.splitlines() if line.startswith("120000 ")]
        assert links == [], links
    on_disk = [p for p in ROOT.rglob("*") if p.is_symlink() and ".git" not in p.parts]
    assert on_disk == [], on_disk


_ONCE = """
import importlib, pkgutil, sys
import contracts, backends  # from the root, the source folders: namespaces that hold no module of their own
assert not [n for n in sys.modules if n.startswith(("contracts.", "backends."))]
import kvcanary, kvcanary_contracts, kvcanary_backends
root = {root!r}
for pkg in (kvcanary, kvcanary_contracts, kvcanary_backends):
    for info in pkgutil.walk_packages(pkg.__path__, pkg.__name__ + "."):
        if info.name.endswith("__main__") or info.name.startswith("kvcanary.integrations"):
            continue
        importlib.import_module(info.name)
seen = {{}}
for name, mod in list(sys.modules.items()):
    path = getattr(mod, "__file__", None)
    if path and path.startswith(root):
        seen.setdefault(path, []).append(name)
print({{p: n for p, n in seen.items() if len(n) > 1}})
"""


def test_no_module_is_loaded_under_two_names() -> None:
    """From the repository root (where ``contracts/`` and ``backends/`` are folders on ``sys.path``), every
    module of the three packages is loaded once, under the name its path says."""
    # the root with its separator: a sibling folder whose name merely starts alike (a venv beside the checkout)
    # is not the repository
    out = subprocess.run([sys.executable, "-c", _ONCE.format(root=str(ROOT) + os.sep)], capture_output=True, text=True, cwd=ROOT, check=True,
                         timeout=300).stdout.strip()
    assert out == "{}", out


def _python(env_path: list[Path], cwd: Path, *args: str, timeout: int = 600) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(map(str, env_path))}
    env.pop("TRITON_INTERPRET", None)
    return subprocess.run([sys.executable, *args], capture_output=True, text=True, cwd=cwd, env=env, timeout=timeout,
                          check=False)


@pytest.fixture(scope="module")
def wheel_install(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The wheel built from a copy of this tree (the tree itself is left as it was), installed into a folder.
    The copy is made as a checkout with ``core.symlinks=false`` makes it: a link would become a plain file."""
    base = tmp_path_factory.mktemp("wheel")
    src = base / "src"
    shutil.copytree(ROOT, src, symlinks=True, ignore=shutil.ignore_patterns(
        ".git", "__pycache__", "*.egg-info", "build", ".mypy_cache", ".ruff_cache", ".pytest_cache", ".hypothesis",
        "site", "results"))
    for linked in [p for p in src.rglob("*") if p.is_symlink()]:
        pointee = os.readlink(linked)
        linked.unlink()
        linked.write_text(pointee)
    dist = base / "dist"
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(dist),
                    str(src)], check=True, capture_output=True, timeout=600)
    (wheel,) = dist.glob("kvcanary-*.whl")
    with zipfile.ZipFile(wheel) as zf:
        names = set(zf.namelist())
    tops = {name.split("/", 1)[0] for name in names}
    assert {t for t in tops if not t.endswith(".dist-info")} == set(PACKAGES), tops
    for package, folder in PACKAGES.items():  # every module and data file of the source is in the wheel
        wanted = {f"{package}/{p.relative_to(folder).as_posix()}" for p in folder.rglob("*")
                  if p.is_file() and "__pycache__" not in p.parts}
        assert wanted and wanted <= names, sorted(wanted - names)[:10]
    target = base / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "-q", "--target", str(target), str(wheel)],
                   check=True, capture_output=True, timeout=600)
    return target


@pytest.fixture(scope="module")
def user_project(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A user's project with packages named ``backends`` and ``contracts`` of its own."""
    project = tmp_path_factory.mktemp("user_project")
    for name in ("backends", "contracts"):
        (project / name).mkdir()
        (project / name / "__init__.py").write_text(f"OWNER = 'user'\nNAME = {name!r}\n")
    return project


@pytest.mark.slow
def test_wheel_serves_the_public_api_beside_a_users_packages(wheel_install: Path, user_project: Path) -> None:
    code = ("import backends, contracts, kvcanary as kc; "
            "assert backends.OWNER == contracts.OWNER == 'user'; "
            f"assert kc.__file__.startswith({str(wheel_install)!r}), kc.__file__; "
            "assert {'torch_ref', 'triton', 'cuda'} <= set(kc.registered_backends()); "
            "assert all(b.ops for b in kc.registered_backends().values()); "
            "import kvcanary_backends.torch_ref as t, kvcanary_contracts as c; "
            f"assert t.__file__.startswith({str(wheel_install)!r}) and c.__file__.startswith({str(wheel_install)!r}); "
            "print('ok')")
    res = _python([user_project, wheel_install], user_project, "-c", code)
    assert res.returncode == 0 and res.stdout.strip() == "ok", res.stderr


SEARCH_MARKERS = ("def counterexample(", "def all_failures(", "class NoCounterexample(")
"""What only the counterexample search defines (``tools/counterexamples.py``)."""


def _search_modules(files: dict[str, str]) -> list[str]:
    """The files (name -> source) that define any part of the counterexample search."""
    return sorted(name for name, src in files.items() if any(m in src for m in SEARCH_MARKERS))


def test_tooling_lives_outside_the_package() -> None:
    """The docs generator, the counterexample search and the random scenarios sit in ``tools/``, the slim kit in
    ``kvcanary.testing``; no module of the three packages (what the wheel holds) defines the search."""
    assert not (ROOT / "kvcanary" / "docsgen").exists()
    assert (ROOT / "tools" / "docsgen" / "__init__.py").is_file() and (ROOT / "tools" / "scenarios.py").is_file()
    assert _search_modules({"tools/counterexamples.py": (ROOT / "tools" / "counterexamples.py").read_text()})
    shipped = {p.relative_to(ROOT).as_posix(): p.read_text() for folder in PACKAGES.values() for p in folder.rglob("*.py")}
    assert len(shipped) > 50 and _search_modules(shipped) == []
    kit = sorted(p.stem for p in (ROOT / "kvcanary" / "testing").glob("*.py"))
    assert kit == ["__init__", "builders", "calls", "opcheck", "parity"], kit


@pytest.mark.slow
def test_wheel_holds_no_tooling_and_docs_says_so(wheel_install: Path, user_project: Path) -> None:
    assert not (wheel_install / "kvcanary" / "docsgen").exists() and not (wheel_install / "tools").exists()
    installed = {p.relative_to(wheel_install).as_posix(): p.read_text() for package in PACKAGES
                 for p in (wheel_install / package).rglob("*.py")}
    assert len(installed) > 50 and _search_modules(installed) == []  # the counterexample search stayed out
    assert (wheel_install / "kvcanary_contracts" / "examples.py").is_file()  # its data types ship
    assert (wheel_install / "kvcanary" / "catalog.json.gz").is_file()
    res = _python([user_project, wheel_install], user_project, str(wheel_install / "bin" / "kvcanary"), "docs")
    assert res.returncode == 2 and "Traceback" not in res.stderr, res.stderr
    assert "kvcanary docs needs a kvcanary checkout" in res.stderr, res.stderr


@pytest.mark.slow
@pytest.mark.parametrize("args", [["explain", "KVC-W087"], ["contracts", "--codes"], ["demo"]],
                         ids=["explain", "contracts", "demo"])
def test_wheel_cli_runs_from_a_users_project(wheel_install: Path, user_project: Path, args: list[str]) -> None:
    script = wheel_install / "bin" / "kvcanary"
    res = _python([user_project, wheel_install], user_project, str(script), *args)
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-2000:]
    assert "Traceback" not in res.stderr
    if args[0] in ("explain", "contracts"):
        assert "KVC-W087" in res.stdout
