"""``kvcanary contracts --json``: every contract's JSON Schema, rules and codes."""

from __future__ import annotations

import json

import pytest

from kvcanary import codes
from kvcanary.cli import main


def test_json_export_has_every_contract_and_code(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["contracts", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["format"] == "kvcanary-contracts/1"
    names = [c["name"] for c in data["contracts"]]
    assert names == [c.contract.name for c in codes.contracts()]
    exported = [k["code"] for c in data["contracts"] for k in c["checks"]]
    assert sorted(exported) == sorted(codes.by_code())
    for c, contract in zip(data["contracts"], codes.contracts(), strict=True):
        assert set(c["schema"]["properties"]) == set(contract.model_fields)
        for rule in c["rules"]:
            assert rule["codes"] and rule["why"] and rule["fix"]
        for k in c["checks"]:
            assert k["message"].startswith("kv-canary: ") and k["page"] == f"errors/{k['code']}.md"
            assert "ValueError" in k["error_bases"]


def test_one_contract_as_text(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["contracts", "launch_canary_write_kernel"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("launch_canary_write_kernel (KVC-W")
    assert main(["contracts", "no_such_launcher"]) == 2
