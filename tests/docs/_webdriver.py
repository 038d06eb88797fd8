"""A minimal W3C WebDriver client over the standard library, for driving headless Chromium via chromedriver."""

from __future__ import annotations

import json
import socket
import subprocess
import time
import urllib.request
from pathlib import Path
from typing import Any

CHROMIUM_FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--disable-dev-shm-usage",
)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class WebDriver:
    """One chromedriver process and one browser session."""

    def __init__(self, driver: str, browser: str, user_data_dir: Path) -> None:
        self.port = free_port()
        self.proc = subprocess.Popen([driver, f"--port={self.port}"], stdout=subprocess.DEVNULL,
                                     stderr=subprocess.DEVNULL)
        self.base = f"http://127.0.0.1:{self.port}"
        deadline = time.monotonic() + 20
        while True:
            try:
                self._request("GET", "/status")
                break
            except OSError:
                if time.monotonic() > deadline:
                    self.proc.kill()
                    raise
                time.sleep(0.1)
        caps = {"capabilities": {"alwaysMatch": {"browserName": "chrome", "goog:chromeOptions": {
            "binary": browser, "args": [*CHROMIUM_FLAGS, f"--user-data-dir={user_data_dir}"]}}}}
        self.session = self._request("POST", "/session", caps)["sessionId"]

    def _request(self, method: str, path: str, body: dict[str, Any] | None = None) -> dict[str, Any]:
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(self.base + path, data=data, method=method,
                                     headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=60) as resp:
            value: dict[str, Any] = json.loads(resp.read() or b"{}").get("value") or {}
            return value if isinstance(value, dict) else {"value": value}

    def get(self, url: str) -> None:
        self._request("POST", f"/session/{self.session}/url", {"url": url})

    def run(self, script: str, *args: Any) -> Any:
        """Run ``script`` (a function body) in the page and return its value."""
        out = self._request("POST", f"/session/{self.session}/execute/sync", {"script": script, "args": list(args)})
        return out.get("value", out)

    def wait_for(self, script: str, timeout: float = 20.0) -> Any:
        """Poll ``script`` until it returns something truthy."""
        deadline = time.monotonic() + timeout
        while True:
            value = self.run(script)
            if value or time.monotonic() > deadline:
                return value
            time.sleep(0.2)

    def close(self) -> None:
        try:
            self._request("DELETE", f"/session/{self.session}")
        finally:
            self.proc.terminate()
            self.proc.wait(timeout=10)
