"""``CanaryServer``'s host, port and sweep interval: refused with their codes before anything is done, a port
that cannot be bound refused before the model loads, and ``stop()`` that raises raise mode's last violations
only once the server is stopped."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.importorskip("fastapi", reason="the 'serve' extra is not installed")

from prometheus_client import CollectorRegistry

from kvcanary.errors import FAMILY, ContractError, ContractTypeError
from kvcanary.monitor import Monitor
from kvcanary.serve.server import CanaryServer
from kvcanary.serve.settings import ServeSettings


@pytest.fixture()
def model_dir(tmp_path: Path) -> Path:
    """A folder the constructor takes for a model (a config.json); loading it would fail, which no test here
    must reach."""
    (tmp_path / "config.json").write_text("{}")
    return tmp_path


def _code(slug: str) -> str:
    code = FAMILY.codebook.lookup("ServeSettings", slug)
    assert code is not None and code.startswith("KVC-F"), slug
    return code


@pytest.mark.parametrize(("kwargs", "slug", "text"), [
    ({"port": 70000}, "port_in_range", "ServeSettings.port must be a TCP port from 0 to 65535"),
    ({"port": -1}, "port_in_range", "ServeSettings.port must be a TCP port from 0 to 65535"),
    ({"host": ""}, "host_named", "ServeSettings.host must name an address"),
    ({"host": "  "}, "host_named", "ServeSettings.host must name an address"),
    ({"host": "localhost:8000"}, "host_bare", "ServeSettings.host must be a bare address"),
    ({"host": "http://127.0.0.1"}, "host_bare", "ServeSettings.host must be a bare address"),
    ({"host": "[::1]"}, "host_bare", "ServeSettings.host must be a bare address"),
    ({"sweep_interval": -1}, "sweep_interval_non_negative", "ServeSettings.sweep_interval must be a non-negative"),
])
def test_a_setting_that_breaks_its_rule_is_refused_with_its_code(model_dir: Path, kwargs: dict[str, object],
                                                                 slug: str, text: str) -> None:
    with pytest.raises(ContractError) as info:
        CanaryServer(model_dir, **kwargs)  # type: ignore[arg-type]
    assert info.value.code == _code(slug) and text in str(info.value), info.value


@pytest.mark.parametrize(("kwargs", "slug"), [
    ({"host": 8000}, "ServeSettings.host:type"),
    ({"port": "8000"}, "ServeSettings.port:type"),
    ({"port": True}, "ServeSettings.port:not_bool"),
    ({"sweep_interval": 2.5}, "ServeSettings.sweep_interval:type"),
])
def test_a_setting_of_the_wrong_type_is_refused_with_its_code(model_dir: Path, kwargs: dict[str, object],
                                                              slug: str) -> None:
    with pytest.raises(ContractError) as info:
        CanaryServer(model_dir, **kwargs)  # type: ignore[arg-type]
    assert info.value.code == _code(slug), info.value
    assert isinstance(info.value, ContractTypeError) == slug.endswith(":type")  # a TypeError too; a bool is no int


@pytest.mark.parametrize("kwargs", [{"host": "127.0.0.1", "port": 0, "sweep_interval": 0},
                                    {"host": "::1", "port": 65535, "sweep_interval": 4},
                                    {"host": "localhost", "port": 8000, "sweep_interval": 1}])
def test_good_settings_are_taken(model_dir: Path, kwargs: dict[str, object]) -> None:
    server = CanaryServer(model_dir, **kwargs)  # type: ignore[arg-type]
    assert (server.host, server.port, server.sweep_interval) == (kwargs["host"], kwargs["port"],
                                                                 kwargs["sweep_interval"])
    assert ServeSettings(**kwargs) == ServeSettings(**kwargs)  # type: ignore[arg-type]


def test_ipv6_url_is_bracketed(model_dir: Path) -> None:
    assert CanaryServer(model_dir, host="::1", port=8000).url == "http://[::1]:8000"


@pytest.fixture()
def taken_port() -> Iterator[int]:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen(1)
        yield int(sock.getsockname()[1])


def test_a_port_in_use_fails_start_before_the_model_loads(model_dir: Path, taken_port: int) -> None:
    """The model folder here cannot load: an error about it would mean the model was loaded before the bind."""
    server = CanaryServer(model_dir, port=taken_port)
    with pytest.raises(OSError, match=rf"kv-canary: cannot listen on host '127.0.0.1', port {taken_port}: "):
        server.start()
    assert server.canary is None and server._sock is None and server._serve is None


class _RaisingCanary:
    """A canary whose detach raises what raise mode raises for the violations read back last."""

    def __init__(self) -> None:
        self.detached = 0

    def detach(self) -> list[object]:
        self.detached += 1
        raise RuntimeError("kv-canary: 1 violation(s) found at detach; requests affected: ['r1']")


def _running(model_dir: Path) -> tuple[CanaryServer, _RaisingCanary, socket.socket]:
    """A server in the state start() leaves it (its canary attached, a monitor, a socket), without a model."""
    server = CanaryServer(model_dir, on_violation="raise")
    canary = _RaisingCanary()
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    server.canary, server._attached, server._sock = canary, True, sock  # type: ignore[assignment]
    server.monitor = Monitor(registry=CollectorRegistry())
    return server, canary, sock


def test_stop_raises_the_last_violations_once_everything_is_stopped(model_dir: Path) -> None:
    server, canary, sock = _running(model_dir)
    with pytest.raises(RuntimeError, match="found at detach"):
        server.stop()
    assert server.monitor is None and server._sock is None and sock.fileno() == -1  # stopped all the same
    server.stop()  # idempotent: detached once, nothing raised again
    assert canary.detached == 1


def test_a_with_block_raises_them_on_a_clean_exit_and_keeps_an_error_under_way(
        model_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    server, canary, _ = _running(model_dir)
    monkeypatch.setattr(server, "start", lambda: server)  # already "started" by _running
    with pytest.raises(RuntimeError, match="found at detach"), server:
        pass
    server, canary, _ = _running(model_dir)
    monkeypatch.setattr(server, "start", lambda: server)
    with pytest.raises(KeyError, match="the caller's"), server:
        raise KeyError("the caller's")
    assert canary.detached == 1 and server.monitor is None
