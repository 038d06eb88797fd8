"""``CanaryServer``'s backend and device: checked as it is built, by the rules ``kvcanary serve`` checks
``--backend`` and ``--device`` with (kvcanary.backend_names, kvcanary.devices). Unchecked, the Python API took
them: with an unregistered backend the server started, ``/kvcanary/health`` answered ok and ready, and every
completion was an HTTP 500 carrying BackendError; a device torch cannot name failed in transformers' device_map
parsing once the port was bound (rD)."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("fastapi", reason="the 'serve' extra is not installed")

from kvcanary.registry import ENV_BACKEND, registered_backends
from kvcanary.serve.server import CanaryServer


@pytest.fixture()
def model_dir(tmp_path: Path) -> Path:
    """A folder the constructor takes for a model (a config.json); nothing here loads it."""
    (tmp_path / "config.json").write_text("{}")
    return tmp_path


@pytest.fixture(autouse=True)
def _no_env_backend(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(ENV_BACKEND, raising=False)


@pytest.mark.parametrize("backend", ["nope", ""])
def test_an_unregistered_backend_is_refused_as_the_server_is_built(model_dir: Path, backend: str) -> None:
    with pytest.raises(ValueError, match=rf"^kv-canary: backend must be a registered backend's name or None; "
                                         rf"no backend named {backend!r} is registered \(known: "):
        CanaryServer(model_dir, backend=backend)


def test_a_backend_that_is_no_str_is_a_type_error(model_dir: Path) -> None:
    with pytest.raises(TypeError, match=r"^kv-canary: backend must be .* or None, got int$"):
        CanaryServer(model_dir, backend=5)  # type: ignore[arg-type]


def test_an_unregistered_backend_in_the_environment_is_refused(model_dir: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ENV_BACKEND, "nope")
    with pytest.raises(ValueError, match=rf"^kv-canary: {ENV_BACKEND} must be unset or name a registered backend"):
        CanaryServer(model_dir)


def test_a_registered_backend_and_the_cpu_are_taken(model_dir: Path) -> None:
    name = sorted(registered_backends())[0]
    server = CanaryServer(model_dir, backend=name, device="cpu")
    assert (server.backend, server.device, server.serving) == (name, "cpu", False)


@pytest.mark.parametrize("device", ["gpu", "", "cuda:x", "auto"])
def test_a_device_torch_cannot_name_is_refused_as_the_server_is_built(model_dir: Path, device: str) -> None:
    with pytest.raises(ValueError, match=rf"^kv-canary: device must name a torch device such as cpu, cuda or "
                                         rf"cuda:1, got {device!r}$"):
        CanaryServer(model_dir, device=device)


def test_a_device_torch_cannot_use_here_is_refused_as_the_server_is_built(model_dir: Path) -> None:
    with pytest.raises(ValueError, match=r"^kv-canary: device must be a device torch can use here; 'meta' is not: "
                                         r"the meta device holds no data"):
        CanaryServer(model_dir, device="meta")
