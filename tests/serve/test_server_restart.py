"""``CanaryServer.start()`` on a server that is already serving (``server.start()`` then ``with server:``, whose
``__enter__`` starts it): the running server keeps serving, and the call returns it. Unguarded, the second start
bound the same port again, failed with "Address already in use", and its clean-up stopped the running server (rD)."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

pytest.importorskip("fastapi", reason="the 'serve' extra is not installed")

from kvcanary.serve.client import health
from kvcanary.serve.server import CanaryServer
from kvcanary.serve.tiny import build_tiny_model


def test_a_second_start_leaves_the_running_server_serving(tmp_path: Path) -> None:
    model_dir = build_tiny_model(tmp_path / "tiny", seed=0)
    server = CanaryServer(model_dir, port=0)
    server.start()
    try:
        url = server.url
        monitor = server.monitor
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(logging.getLogger("kvcanary"), "disabled", True)
            assert server.start() is server  # nothing done: the running server is the one started
            assert server.url == url and server.monitor is monitor is not None and server.serving
            assert health(url)[0] == 200
            with server:  # __enter__ starts: the same server, which leaving the block stops
                assert server.url == url and server.monitor is monitor and health(url)[0] == 200
        assert not server.serving and server.monitor is None
    finally:
        server.stop()
