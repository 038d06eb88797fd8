"""The ``kvcanary`` command as a user meets it: run in a subprocess, from a folder outside the checkout.

Every user error is one line on stderr and exit status 2 (never a traceback); a closed pipe ends a command
quietly; ``--help`` and ``--version`` import neither torch nor any subcommand; ``backends`` tells the truth
about a device torch cannot use and names the backend each launch would get.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

import kvcanary

PACKAGE_PARENT = Path(kvcanary.__file__).resolve().parents[1]
# a CUDA device this torch cannot use: the CPU build has none, a GPU machine has no 99th
NO_CUDA = "cuda" if not torch.cuda.is_available() else "cuda:99"


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("TRITON_INTERPRET", "KVCANARY_BACKEND")}
    env["PYTHONPATH"] = os.pathsep.join([str(PACKAGE_PARENT), *filter(None, [env.get("PYTHONPATH")])])
    return {**env, **extra}


def kvcanary_cmd(*args: str, cwd: Path, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "kvcanary", *args], capture_output=True, text=True, cwd=cwd,
                          env=_env(**env), timeout=300, check=False)


def assert_user_error(res: subprocess.CompletedProcess[str], *needles: str) -> None:
    """Exit 2, no traceback, one line on stderr that names the rule and a hint."""
    assert res.returncode == 2, res.stdout + res.stderr
    assert "Traceback" not in res.stderr and "Traceback" not in res.stdout, res.stderr
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and "(hint: " in lines[0], res.stderr
    for needle in needles:
        assert needle in lines[0], lines[0]


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    """A folder outside the checkout (no mkdocs.yml above it)."""
    return tmp_path


@pytest.mark.parametrize("args", [["--help"], ["--version"], ["selfcheck", "--help"], ["backends", "--help"],
                                  ["demo", "--help"], ["docs", "--help"], ["inspect", "--help"],
                                  ["replay", "--help"]], ids=" ".join)
def test_help_and_version_import_no_torch(args: list[str], outside: Path) -> None:
    code = ("import sys\nfrom kvcanary.cli import main\ntry:\n    main(sys.argv[1:])\nexcept SystemExit as e:\n"
            "    assert e.code == 0, e.code\nheavy = sorted(m for m in ('torch', 'pydantic') if m in sys.modules)\n"
            "print('HEAVY', heavy)\n")
    res = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, cwd=outside,
                         env=_env(), timeout=120, check=False)
    assert res.returncode == 0, res.stderr
    assert "HEAVY []" in res.stdout, res.stdout[-500:]
    if args == ["--version"]:
        assert f"kvcanary {kvcanary.__version__}" in res.stdout


@pytest.mark.parametrize("args", [["contracts", "--json"], ["backends"], ["contracts", "--codes"]], ids=" ".join)
def test_a_closed_pipe_ends_quietly(args: list[str], outside: Path) -> None:
    """``kvcanary contracts --json | head``: the reader is gone before the command writes."""
    proc = subprocess.Popen([sys.executable, "-m", "kvcanary", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, cwd=outside, env=_env())
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.close()
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=300) == 0, err
    assert err == "", err


def test_selfcheck_with_triton_but_no_interpreter(outside: Path) -> None:
    assert_user_error(kvcanary_cmd("selfcheck", "--backend", "triton", cwd=outside),
                      "backend 'triton' cannot run", "TRITON_INTERPRET=1")


def test_selfcheck_on_a_device_torch_cannot_use(outside: Path) -> None:
    assert_user_error(kvcanary_cmd("selfcheck", "--device", NO_CUDA, cwd=outside), f"device {NO_CUDA!r} is not usable")


def test_selfcheck_with_an_unknown_backend_in_the_environment(outside: Path) -> None:
    assert_user_error(kvcanary_cmd("selfcheck", cwd=outside, KVCANARY_BACKEND="foo"),
                      "no backend named 'foo' is registered", "KVCANARY_BACKEND=foo is set in the environment")


@pytest.mark.parametrize("command", ["selfcheck", "backends", "demo"])
def test_an_unknown_device_is_one_line(command: str, outside: Path) -> None:
    assert_user_error(kvcanary_cmd(command, "--device", "bogus", cwd=outside), "unknown device 'bogus'")


def test_demo_refuses_what_cannot_run_in_one_line(outside: Path) -> None:
    assert_user_error(kvcanary_cmd("demo", "--backend", "triton", "--fault", "none", cwd=outside),
                      "backend 'triton' cannot run", "TRITON_INTERPRET=1")
    assert_user_error(kvcanary_cmd("demo", "--device", NO_CUDA, cwd=outside), "is not usable")
    assert_user_error(kvcanary_cmd("demo", "--steps", "3", cwd=outside), "--steps must be >= 16")


@pytest.mark.parametrize(("args", "needle"), [
    (["--fault", "block_handed_twice"], "fault class of the transformers engine only"),
    (["--engine", "transformers", "--workers", "2"], "--workers 2 is not available with --engine transformers"),
    (["--engine", "transformers", "--compile"], "--compile is not available with --engine transformers"),
    (["--workers", "2", "--compile"], "--compile applies to the single-process runs only"),
    (["--device", "meta", "--fault", "none"], "the meta device holds no data"),
], ids=["tf-fault", "tf-workers", "tf-compile", "workers-compile", "meta"])
def test_demo_options_that_do_not_go_together_are_one_line(args: list[str], needle: str, outside: Path) -> None:
    """Nothing is silently ignored: a combination the demo cannot run is refused before any run."""
    assert_user_error(kvcanary_cmd("demo", *args, cwd=outside), needle)


@pytest.mark.parametrize("seed", ["-1", str(2**64)])
def test_demo_seed_out_of_range_is_an_argument_error(seed: str, outside: Path) -> None:
    res = kvcanary_cmd("demo", "--seed", seed, cwd=outside)
    assert res.returncode == 2 and "Traceback" not in res.stderr
    assert "argument --seed: must be in [0, 2**63 - 1]" in res.stderr


def test_backends_tells_the_truth_about_a_device_torch_cannot_use(outside: Path) -> None:
    res = kvcanary_cmd("backends", "--device", NO_CUDA, cwd=outside)
    assert res.returncode == 0 and "Traceback" not in res.stderr, res.stderr
    rows = [line.split() for line in res.stdout.splitlines() if line.startswith("  ") and line.split()[0] in
            ("plan", "write", "verify")]
    assert len(rows) == 3 and all(row[1] == "none" for row in rows), res.stdout
    assert all(cell == "declines" for row in rows for cell in row[2:]), res.stdout
    assert "torch cannot use it" in res.stdout


def test_backends_names_the_selected_backend_and_groups_reasons(outside: Path) -> None:
    res = kvcanary_cmd("backends", "--device", "cpu", cwd=outside)
    assert res.returncode == 0, res.stderr
    head = next(line for line in res.stdout.splitlines() if "operation" in line)
    assert head.split()[:2] == ["operation", "selected"]
    verify = next(line.split() for line in res.stdout.splitlines() if line.split()[:1] == ["verify"])
    assert verify[1] == "torch_ref"
    assert res.stdout.count("TRITON_INTERPRET=1 was not set") == 1, res.stdout  # once, for every operation
    assert "[every operation]" in res.stdout
    verbose = kvcanary_cmd("backends", "--device", "cpu", "--verbose", cwd=outside).stdout
    assert len(verbose.splitlines()) >= len(res.stdout.splitlines()) and "--verbose lists all" not in verbose
    forced = kvcanary_cmd("backends", "--device", "cpu", cwd=outside, KVCANARY_BACKEND="triton",
                          TRITON_INTERPRET="1").stdout
    assert next(line.split() for line in forced.splitlines() if line.split()[:1] == ["verify"])[1] == "triton"


def test_explain_accepts_a_short_code_and_points_at_a_list_that_exists(outside: Path) -> None:
    res = kvcanary_cmd("explain", "W087", cwd=outside)
    assert res.returncode == 0 and res.stdout.startswith("KVC-W087: "), res.stderr
    missing = kvcanary_cmd("explain", "Q999", cwd=outside)
    assert_user_error(missing, "unknown error code 'Q999'", "`kvcanary contracts --codes`")
    listed = kvcanary_cmd("contracts", "--codes", cwd=outside)
    assert listed.returncode == 0 and "  KVC-W087  " in listed.stdout


def test_docs_check_outside_a_checkout_says_there_is_no_docs_folder(outside: Path) -> None:
    assert_user_error(kvcanary_cmd("docs", "--check", cwd=outside), "no docs folder", "--out DIR")
    assert list(outside.iterdir()) == []


def test_an_unknown_contract_is_one_line(outside: Path) -> None:
    assert_user_error(kvcanary_cmd("contracts", "launch_nothing", cwd=outside), "unknown contract 'launch_nothing'")


def test_backends_gives_where_a_backend_runs_before_what_it_lacks(outside: Path) -> None:
    """On the CPU the cuda backend's first reason is about the device, never a package to install."""
    res = kvcanary_cmd("backends", "--device", "cpu", cwd=outside)
    assert res.returncode == 0, res.stderr
    lines = res.stdout.splitlines()
    first = next(line for line in lines[lines.index(next(x for x in lines if "why backends decline" in x)):]
                 if line.strip().startswith("cuda:"))
    assert first.strip().startswith("cuda: [device]"), res.stdout
    assert "kvcanary[cuda]" not in first and "No module named" not in first, first



def test_demo_prints_each_run_as_it_completes_into_a_pipe(outside: Path) -> None:
    """In a pipe (a CI log) each run's block arrives when the run ends, not all at the end: the clean block
    is read at least half the next run's own duration before the command's last line."""
    proc = subprocess.Popen([sys.executable, "-m", "kvcanary", "demo", "--fault", "kv_flip_used", "--steps", "16"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=outside, env=_env())
    assert proc.stdout is not None
    arrived: list[tuple[float, str]] = []
    for line in proc.stdout:
        arrived.append((time.monotonic(), line))
    assert proc.wait(timeout=300) == 0, proc.stderr.read() if proc.stderr else ""
    clean = next(t for t, line in arrived if line.startswith("=== clean [OK]"))
    fault_line = next(line for _, line in arrived if line.startswith("=== kv_flip_used [OK]"))
    fault_seconds = float(fault_line.rsplit("(", 1)[1].rstrip("s)\n"))
    assert fault_seconds > 0.2, fault_line
    assert arrived[-1][0] - clean >= 0.5 * fault_seconds, (arrived[-1][0] - clean, fault_seconds)


@pytest.mark.parametrize(("args", "needles"), [
    (["--fault", "bogus"], ["--fault bogus is not a fault class of the kvcanary engine", "kvcanary demo --help"]),
    (["--fault", "radix_ua"], ["did you mean radix_uaf?"]),
    (["--engine", "transformers", "--fault", "radix_uaf"], ["is a fault class of the kvcanary engine only"]),
], ids=["unknown", "typo", "other-engine"])
def test_a_bad_fault_is_one_short_line(args: list[str], needles: list[str], outside: Path) -> None:
    res = kvcanary_cmd("demo", *args, cwd=outside)
    assert_user_error(res, *needles)
    assert "stale_swa_translation" not in res.stderr  # the list of classes is not repeated


def test_demo_help_says_each_engines_faults_and_the_defaults(outside: Path) -> None:
    res = kvcanary_cmd("demo", "--help", cwd=outside, COLUMNS="200")
    assert res.returncode == 0, res.stderr
    text = " ".join(res.stdout.split())
    assert "kvcanary engine: radix_uaf," in text and "--engine transformers: kv_flip_used, block_handed_twice" in text
    assert "engine steps per run (default: 40" in text and "(default: 0)" in text


def test_python_dash_m_kvcanary_runs_the_command(outside: Path) -> None:
    res = kvcanary_cmd("--version", cwd=outside)
    assert res.returncode == 0 and res.stdout.strip() == f"kvcanary {kvcanary.__version__}", res.stdout + res.stderr


def test_contracts_prints_each_contracts_code_ranges_lowest_to_highest(outside: Path) -> None:
    from kvcanary import catalog

    res = kvcanary_cmd("contracts", cwd=outside)
    assert res.returncode == 0, res.stderr
    for contract in catalog.contracts()["contracts"]:
        numbers = sorted(int(k["code"][5:]) for k in contract["checks"])
        line = next(x for x in res.stdout.splitlines() if x.startswith(contract["name"] + " ("))
        prefix = contract["checks"][0]["code"][:5]
        assert f"({prefix}{numbers[0]:03d}" in line and f"{prefix}{numbers[-1]:03d};" in line, line


def test_code_ranges_are_runs_of_consecutive_numbers() -> None:
    from kvcanary.cli.contracts import code_ranges

    assert code_ranges(["KVC-A008", "KVC-A001", "KVC-A007", "KVC-A002"]) == "KVC-A001..KVC-A002, KVC-A007..KVC-A008"
    assert code_ranges(["KVC-W112", "KVC-W001", "KVC-W003", "KVC-W002"]) == "KVC-W001..KVC-W003, KVC-W112"
    assert code_ranges([]) == "no codes"


@pytest.mark.parametrize(("given", "needle"), [
    ("KVC-W9999", "its letter's codes run KVC-W001..KVC-W"),
    ("", "codes look like KVC-W087"),
    ("KVC-W0871", "KVC-W087?"),
], ids=["too-long", "empty", "typo"])
def test_explain_an_unknown_code_suggests_only_codes_like_it(given: str, needle: str, outside: Path) -> None:
    res = kvcanary_cmd("explain", given, cwd=outside)
    assert_user_error(res, f"unknown error code {given!r}", needle)
    line = res.stderr.strip()
    suggested = [c for c in line.replace(",", " ").replace("?", " ").split() if c.startswith("KVC-") and
                 len(c) == 8 and c[5:].isdigit()]
    assert len(suggested) <= 5, line
    if given == "KVC-W9999":
        assert "did you mean" not in line


def test_similar_codes_are_one_typo_away() -> None:
    from kvcanary.cli.explain import similar_codes

    known = ["KVC-W087", "KVC-W088", "KVC-W187", "KVC-V087", "KVC-W001"]
    assert similar_codes("KVC-W086", known) == ["KVC-W087", "KVC-W088"]
    assert similar_codes("KVC-W087", known) == ["KVC-V087", "KVC-W088", "KVC-W187"]
    assert similar_codes("KVC-W9999", known) == []
    assert similar_codes("", known) == []
