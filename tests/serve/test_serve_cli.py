"""``kvcanary serve``: its help imports nothing heavy; a folder that is no model, a host or a port it cannot listen
on is one line, exit 2, before anything is written."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _run(*args: str, cwd: Path, code: str | None = None) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    cmd = [sys.executable, "-c", code, *args] if code else [sys.executable, "-m", "kvcanary.cli", *args]
    return subprocess.run(cmd, capture_output=True, text=True, cwd=cwd, env=env, timeout=300, check=False)


def test_serve_help_imports_no_torch(tmp_path: Path) -> None:
    code = ("import sys\nfrom kvcanary.cli import main\ntry:\n    main(sys.argv[1:])\nexcept SystemExit as e:\n"
            "    assert e.code == 0, e.code\nheavy = sorted(m for m in ('torch', 'transformers', 'fastapi') "
            "if m in sys.modules)\nprint('HEAVY', heavy)\n")
    res = _run("serve", "--help", cwd=tmp_path, code=code)
    assert res.returncode == 0, res.stderr
    assert "--on-violation" in res.stdout and "HEAVY []" in res.stdout


def test_serve_refuses_a_folder_that_is_no_model_in_one_line(tmp_path: Path) -> None:
    res = _run("serve", str(tmp_path), "--port", "0", cwd=tmp_path)
    assert res.returncode == 2, res.stdout + res.stderr
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and "is not a model directory (no config.json)" in lines[0]
    assert "(hint: pass --tiny" in lines[0] and "Traceback" not in res.stderr


def test_serve_refuses_a_port_out_of_range_before_doing_anything(tmp_path: Path) -> None:
    """Bad input gets one line naming the argument and the rule, and nothing is modified: ``--port 70000``
    used to write the tiny model into MODEL_DIR, load it, and only then fail in ``socket.bind``."""
    model_dir = tmp_path / "tiny"
    res = _run("serve", str(model_dir), "--tiny", "--port", "70000", cwd=tmp_path)
    assert res.returncode == 2, res.stdout + res.stderr
    assert "--port" in res.stderr and "Traceback" not in res.stderr, res.stderr
    assert not model_dir.exists()


def test_serve_refuses_a_host_with_a_port_in_one_line_with_its_code(tmp_path: Path) -> None:
    model_dir = tmp_path / "tiny"
    res = _run("serve", str(model_dir), "--tiny", "--host", "localhost:8000", cwd=tmp_path)
    assert res.returncode == 2, res.stdout + res.stderr
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and "--host must be a bare address" in lines[0] and "[KVC-F" in lines[0], res.stderr
    assert "(hint: Pass the address alone" in lines[0]
    assert not model_dir.exists()


def test_serve_refuses_a_port_in_use_before_writing_the_model(tmp_path: Path) -> None:
    model_dir = tmp_path / "tiny"
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        res = _run("serve", str(model_dir), "--tiny", "--port", str(port), cwd=tmp_path)
    assert res.returncode == 2, res.stdout + res.stderr
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and f"cannot listen on host '127.0.0.1', port {port}" in lines[0], res.stderr
    assert not model_dir.exists()
