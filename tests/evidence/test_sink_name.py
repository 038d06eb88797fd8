"""``BundleSink(name=...)`` starts every bundle's folder name: a name that is not one plain path component is
refused, naming the argument, before anything is written (``../x`` would write outside ``out_dir``)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from kvcanary.consts import PoolKind, RealKvHashMode
from kvcanary.evidence import BundleSink
from kvcanary.manager import CanaryConfig, CanaryManager, KvPoolSpec, PoolGroupSpec
from kvcanary.manager.capacities import CanaryCapacities


def _manager() -> CanaryManager:
    group = PoolGroupSpec(kind=PoolKind.FULL, k_layer0=torch.zeros(16, 2, 8), v_layer0=torch.zeros(16, 2, 8))
    caps = CanaryCapacities(verify_capacity=48, write_req_capacity=4, write_token_capacity=8, sweep_capacity=16,
                            expected_token_capacity=6)
    return CanaryManager.attach(pool=KvPoolSpec(groups=(group,), req_to_token=torch.zeros(4, 8, dtype=torch.int32)),
                                capacities=caps, config=CanaryConfig(real_kv_mode=RealKvHashMode.PARTIAL))


@pytest.mark.parametrize("name", ["../x", "a/b", "..", ".", "", "a\\b", "x\ny", "/abs"])
def test_a_name_that_is_not_one_path_component_is_refused(name: str, tmp_path: Path) -> None:
    out = tmp_path / "out"
    with pytest.raises(ValueError, match=r"BundleSink name must be one plain folder-name part") as info:
        BundleSink(_manager(), out, name=name)
    assert str(info.value).endswith(f"got {name!r}") and "\n" not in str(info.value)
    assert not out.exists() and list(tmp_path.iterdir()) == []


def test_a_plain_name_is_kept(tmp_path: Path) -> None:
    assert BundleSink(_manager(), tmp_path, name="demo-radix_uaf").name == "demo-radix_uaf"
