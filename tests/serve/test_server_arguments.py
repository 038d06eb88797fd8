"""``CanaryServer``'s backend and device: checked as it is built, as ``kvcanary serve`` checks ``--backend`` and
``--device``. Today the Python API takes them: with an unregistered backend the server starts, ``/kvcanary/health``
answers ok and ready, and every completion is an HTTP 500 carrying BackendError (rD)."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("fastapi", reason="the 'serve' extra is not installed")

from kvcanary.serve.server import CanaryServer


@pytest.fixture()
def model_dir(tmp_path: Path) -> Path:
    """A folder the constructor takes for a model (a config.json); nothing here loads it."""
    (tmp_path / "config.json").write_text("{}")
    return tmp_path


@pytest.mark.xfail(strict=True, reason="rD: CanaryServer(backend=...) is not checked (cli.common.check_backend_name "
                                       "is, for --backend only)")
def test_an_unregistered_backend_is_refused_as_the_server_is_built(model_dir: Path) -> None:
    with pytest.raises(ValueError, match=r"\bbackend\b.*'nope'"):
        CanaryServer(model_dir, backend="nope")


@pytest.mark.xfail(strict=True, reason="rD: CanaryServer(device=...) is not checked (cli.common.usable_device is, "
                                       "for --device only); start() binds the port and fails in transformers' "
                                       "device_map parsing")
@pytest.mark.parametrize("device", ["gpu", "", "cuda:x"])
def test_a_device_torch_cannot_name_is_refused_as_the_server_is_built(model_dir: Path, device: str) -> None:
    with pytest.raises(ValueError, match=r"\bdevice\b"):
        CanaryServer(model_dir, device=device)
