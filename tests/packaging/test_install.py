"""The install owns only the name ``kvcanary``, and the product imports none of its tooling.

A wheel built from this tree installs into a fresh folder and works from a project that has its own
``backends`` and ``contracts`` packages; runtime modules import nothing from tests, benchmarks, the docs
generator, the counterexample search or the stub generator.
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
TOOLING = ("kvcanary.docsgen", "kvcanary.testing", "kvcanary_contracts.examples", "kvcanary_contracts.stubs",
           "kvcanary.launch.stubs", "kvcanary.launch.__main__", "kvcanary.contract.examples", "kvcanary.mypy", "tests",
           "benchmarks")

_GRAPH = """
import importlib, pkgutil, sys
import kvcanary
tooling = {tooling!r}
def tool(name): return any(name == t or name.startswith(t + ".") for t in tooling)
bad = {{}}
for info in pkgutil.walk_packages(kvcanary.__path__, "kvcanary."):
    if tool(info.name):
        continue
    before = set(sys.modules)
    importlib.import_module(info.name)
    new = sorted(m for m in set(sys.modules) - before if tool(m))
    if new:
        bad[info.name] = new
print(len([1 for i in pkgutil.walk_packages(kvcanary.__path__, "kvcanary.") if not tool(i.name)]), bad)
"""


def test_runtime_modules_import_no_tooling() -> None:
    out = subprocess.run([sys.executable, "-c", _GRAPH.format(tooling=TOOLING)], capture_output=True, text=True,
                         cwd=ROOT, check=True, timeout=300).stdout.strip()
    count, _, bad = out.partition(" ")
    assert int(count) > 50 and bad == "{}", out


def _python(env_path: list[Path], cwd: Path, *args: str, timeout: int = 600) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(map(str, env_path))}
    env.pop("TRITON_INTERPRET", None)
    return subprocess.run([sys.executable, *args], capture_output=True, text=True, cwd=cwd, env=env, timeout=timeout,
                          check=False)


@pytest.fixture(scope="module")
def wheel_install(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The wheel built from a copy of this tree (the tree itself is left as it was), installed into a folder."""
    base = tmp_path_factory.mktemp("wheel")
    src = base / "src"
    shutil.copytree(ROOT, src, symlinks=True, ignore=shutil.ignore_patterns(
        ".git", "__pycache__", "*.egg-info", "build", ".mypy_cache", ".ruff_cache", ".pytest_cache", ".hypothesis",
        "site", "results"))
    dist = base / "dist"
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(dist),
                    str(src)], check=True, capture_output=True, timeout=600)
    (wheel,) = dist.glob("kvcanary-*.whl")
    with zipfile.ZipFile(wheel) as zf:
        tops = {name.split("/", 1)[0] for name in zf.namelist()}
    assert {t for t in tops if not t.endswith(".dist-info")} == {"kvcanary"}, tops
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
            "import kvcanary_backends.torch_ref as t; "
            f"assert t.__file__.startswith({str(wheel_install)!r}); print('ok')")
    res = _python([user_project, wheel_install], user_project, "-c", code)
    assert res.returncode == 0 and res.stdout.strip() == "ok", res.stderr


@pytest.mark.slow
@pytest.mark.parametrize("args", [["explain", "KVC-W087"], ["demo"]], ids=["explain", "demo"])
def test_wheel_cli_runs_from_a_users_project(wheel_install: Path, user_project: Path, args: list[str]) -> None:
    script = wheel_install / "bin" / "kvcanary"
    res = _python([user_project, wheel_install], user_project, str(script), *args)
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-2000:]
    assert "Traceback" not in res.stderr
    if args[0] == "explain":
        assert "KVC-W087" in res.stdout
