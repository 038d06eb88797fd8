"""``CanaryServer.start()`` on a server that is already serving (``server.start()`` then ``with server:``, whose
``__enter__`` starts it): the running server keeps serving, and the call either returns it or says it is running.
Today the second start binds the same port again, fails with "Address already in use", and its clean-up stops the
running server (rD)."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

pytest.importorskip("fastapi", reason="the 'serve' extra is not installed")

from kvcanary.serve.client import health
from kvcanary.serve.server import CanaryServer
from kvcanary.serve.tiny import build_tiny_model


@pytest.mark.xfail(strict=True, reason="rD: start() is not guarded: a second start fails with OSError 'Address "
                                       "already in use' and stop()s the server that was running")
def test_a_second_start_leaves_the_running_server_serving(tmp_path: Path) -> None:
    model_dir = build_tiny_model(tmp_path / "tiny", seed=0)
    server = CanaryServer(model_dir, port=0)
    server.start()
    try:
        url = server.url
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(logging.getLogger("kvcanary"), "disabled", True)
            try:
                assert server.start() is server
            except RuntimeError as err:
                assert "already" in str(err)
        assert server.url == url and server.monitor is not None
        assert health(url)[0] == 200
    finally:
        server.stop()
