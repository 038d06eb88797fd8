"""mypy sees what the contracts say: clean calls type-check, misuse is reported at the marked lines,
and the launchers' overloads and the ``kvcanary.mypy`` plugin encode exactly the contracts' presence rules.

mypy runs as an integrator runs it: in a project folder outside the checkout, against the installed
kvcanary, twice: with the ``deprecated`` error code (the stubs' overloads) and with the plugin alone.
"""

from __future__ import annotations

import itertools
import re
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import kvcanary as kc
from kvcanary.testing import calls

HERE = Path(__file__).parent


PRESENCE: list[tuple[str, Callable[[], dict[str, Any]], dict[str, tuple[object, ...]]]] = [
    ("launch_canary_write_kernel", lambda: calls.write(assert_inputs=True),
     {"enable_write_input_assert": (True, False), "expected_input_tokens": ("t", None),
      "expected_input_positions": ("t", None)}),
    ("launch_canary_plan_kernels", lambda: calls.plan(pool=True),
     {"req_to_verify_expected_tokens": ("t", None), "req_to_verify_expected_tokens_valid_lens": ("t", None)}),
    ("launch_plan_entries_kernel", lambda: calls.plan_entries(pool=True),
     {"req_to_verify_expected_tokens": ("t", None), "req_to_verify_expected_tokens_valid_lens": ("t", None)}),
]


def combos() -> list[tuple[str, dict[str, object]]]:
    """Every presence combination of every flag-dependent launcher."""
    out = []
    for name, _, axes in PRESENCE:
        for combo in itertools.product(*axes.values()):
            out.append((name, dict(zip(axes, combo, strict=True))))
    return out


FIXED = {
    "launch_canary_write_kernel": "context=ctx, plan=wp, input_ids=t, positions=t, out_cache_loc=t",
    "launch_canary_plan_kernels": "verify_plan_out=vp, write_plan_out=wp, req_pool_indices=t, prefix_lens=t, "
    "extend_seq_lens=t, req_to_token=t, swa_window_size=0, full_to_swa_index_mapping=None, verify_capacity=8, "
    "kv_token_id_vs_position_offset=0",
    "launch_plan_entries_kernel": "req_pool_indices=t, prefix_lens=t, req_to_token=t, full_to_swa_index_mapping=None, "
    "verify_offsets_scratch=t, verify_enable=t, out_verify_slot_indices=t, out_verify_expected_tokens=t, "
    "out_verify_expected_positions=t, out_verify_prev_slot_indices=t, kv_token_id_vs_position_offset=0, "
    "swa_window_size=0",
}


def combos_source() -> str:
    """A module calling every combination with explicit arguments, one call per line."""
    lines = ["import torch", "import kvcanary as kc", "",
             "def calls(ctx: kc.VerifyOrWriteContext, vp: kc.VerifyPlan, wp: kc.WritePlan, t: torch.Tensor) -> None:"]
    for name, values in combos():
        args = ", ".join(f"{k}={'t' if v == 't' else repr(v)}" for k, v in values.items())
        lines.append(f"    kc.{name}({FIXED[name]}, {args})")
    return "\n".join(lines) + "\n"


COMBO_FIRST_LINE = 5


CONFIGS = {
    "deprecated": "[mypy]\nstrict = True\nenable_error_code = deprecated\n",
    "plugin": "[mypy]\nstrict = True\nplugins = kvcanary.mypy\n",
}


@pytest.fixture(scope="module", params=sorted(CONFIGS))
def mypy_run(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> tuple[str, str]:
    """(config name, mypy's output) for the three files, checked in a project outside the checkout."""
    name: str = request.param
    project = tmp_path_factory.mktemp(f"typing-{name}")
    for f in ("clean_calls.py", "misuse_calls.py"):
        shutil.copy(HERE / f, project / f)
    (project / "combos.py").write_text(combos_source())
    (project / "mypy.ini").write_text(CONFIGS[name])
    res = subprocess.run([sys.executable, "-m", "mypy", "--no-incremental", "clean_calls.py", "misuse_calls.py",
                          "combos.py"], cwd=project, capture_output=True, text=True, timeout=600, check=False)
    assert "Cannot find implementation or library stub" not in res.stdout, res.stdout
    return name, res.stdout + res.stderr


@pytest.fixture(scope="module")
def mypy_output(mypy_run: tuple[str, str]) -> str:
    return mypy_run[1]


def errors(output: str, name: str) -> dict[int, list[str]]:
    found: dict[int, list[str]] = {}
    for m in re.finditer(rf"{name}:(\d+): error: (.*)", output):
        found.setdefault(int(m.group(1)), []).append(m.group(2))
    return found


def test_clean_calls_type_check(mypy_output: str) -> None:
    assert errors(mypy_output, "clean_calls.py") == {}, mypy_output


def test_misuse_is_reported_at_each_marked_line(mypy_output: str) -> None:
    got = errors(mypy_output, "misuse_calls.py")
    wanted = {i: line.split("# E: ", 1)[1].strip()
              for i, line in enumerate((HERE / "misuse_calls.py").read_text().splitlines(), 1) if "# E: " in line}
    assert wanted
    for line, text in wanted.items():
        assert any(text in e for e in got.get(line, [])), f"line {line}: expected {text!r}, got {got.get(line)}"
    assert set(got) <= set(wanted), f"unexpected errors: { {k: v for k, v in got.items() if k not in wanted} }"


def test_presence_misuse_is_one_line_that_starts_with_its_code(mypy_run: tuple[str, str]) -> None:
    """The stubs' ``@deprecated`` text and the plugin's error both lead with the rule's code."""
    name, output = mypy_run
    line = next(m for m in output.splitlines() if "misuse_calls.py:9:" in m)
    if name == "plugin":
        assert line.endswith("error: KVC-W083: expected input tensors are required when enable_write_input_assert=True"
                             "  [kvcanary]"), line
    else:
        assert "is deprecated: KVC-W083: expected input tensors are required" in line and "[deprecated]" in line


def test_overloads_agree_with_the_contract(mypy_output: str) -> None:
    """For every presence combination, mypy accepts the call exactly when the runtime contract does."""
    builders = {name: build for name, build, _ in PRESENCE}
    flagged = errors(mypy_output, "combos.py")
    verdicts = set()
    for i, (name, values) in enumerate(combos()):
        kw = builders[name]()
        present = {k: (kw[k] if v == "t" else v) for k, v in values.items()}
        try:
            getattr(kc, name)(**{**kw, **present})
            runtime_ok = True
        except kc.ContractError as err:
            assert err.rule in ("required_if", "forbidden_unless", "required_when"), err
            runtime_ok = False
        static_ok = (COMBO_FIRST_LINE + i) not in flagged
        assert static_ok == runtime_ok, f"{name} {values}: mypy {static_ok}, contract {runtime_ok}: {flagged}"
        verdicts.add(runtime_ok)
    assert verdicts == {True, False}
