"""The device rule, one for the API (``check_device``: TypeError / ValueError naming the argument) and the CLI
(``usable_device``: a usage line): a name torch parses, for a device this machine has."""

from __future__ import annotations

import pytest
import torch

from kvcanary.cli.common import usable_device
from kvcanary.cli.parser import UsageError
from kvcanary.devices import as_device, check_device, device_problem


def test_the_cpu_is_a_usable_device() -> None:
    assert check_device("cpu") == torch.device("cpu")
    assert check_device("cpu:0", argument="dev") == torch.device("cpu:0")
    assert usable_device("cpu") == torch.device("cpu")


@pytest.mark.parametrize("text", ["gpu", "", "cuda:x", "auto"])
def test_a_name_torch_does_not_parse_is_a_value_error_naming_the_argument(text: str) -> None:
    assert as_device(text) is None
    with pytest.raises(ValueError, match=rf"^kv-canary: server_device must name a torch device such as cpu, "
                                         rf"cuda or cuda:1, got {text!r}$"):
        check_device(text, argument="server_device")
    with pytest.raises(UsageError, match=rf"^unknown device {text!r}$"):
        usable_device(text)


@pytest.mark.parametrize("value", [0, None, torch.device("cpu")])
def test_a_device_that_is_no_str_is_a_type_error(value: object) -> None:
    with pytest.raises(TypeError, match=rf"^kv-canary: device must be a str naming .*, got {type(value).__name__}$"):
        check_device(value)


def test_a_device_torch_cannot_use_here_is_a_value_error_with_the_reason() -> None:
    problem = device_problem(torch.device("meta"))
    assert problem is not None
    with pytest.raises(ValueError, match=r"^kv-canary: device must be a device torch can use here; 'meta' is not: "
                                         + problem[0].replace("(", r"\(").replace(")", r"\)") + "$"):
        check_device("meta")
    with pytest.raises(UsageError, match="device 'meta' is not usable"):
        usable_device("meta")


def test_cuda_without_a_cuda_device_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)  # a CPU-only build answers before it
    with pytest.raises(ValueError, match=r"^kv-canary: device must be a device torch can use here; 'cuda' is not"):
        check_device("cuda")
