"""The forced backend's rule, one for the API (``check_backend``: TypeError / ValueError naming the argument)
and the CLI (``check_backend_name``: a usage line): a name must be registered; None lets the registry choose,
unless ``KVCANARY_BACKEND`` forces a name, which must then be registered too."""

from __future__ import annotations

import pytest

from kvcanary.backend_names import check_backend, forced_backend, unregistered
from kvcanary.cli.common import check_backend_name
from kvcanary.cli.parser import UsageError
from kvcanary.registry import ENV_BACKEND, registered_backends


@pytest.fixture(autouse=True)
def _no_env_backend(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(ENV_BACKEND, raising=False)


def test_a_registered_name_and_none_pass() -> None:
    name = sorted(registered_backends())[0]
    assert unregistered(name) is None
    check_backend(name)
    check_backend(None)
    check_backend_name(name)
    check_backend_name(None)


@pytest.mark.parametrize("given", ["nope", ""])
def test_an_unregistered_name_is_a_value_error_naming_the_argument_and_the_known_ones(given: str) -> None:
    known = sorted(registered_backends())
    with pytest.raises(ValueError, match=rf"^kv-canary: server_backend must be .* no backend named {given!r} "
                                         rf"is registered \(known: {', '.join(known)}\)$"):
        check_backend(given, argument="server_backend")


@pytest.mark.parametrize("given", [5, b"torch", ["torch"]])
def test_a_name_that_is_no_str_is_a_type_error(given: object) -> None:
    with pytest.raises(TypeError, match=rf"^kv-canary: backend must be .*\(a str\) or None, got "
                                        rf"{type(given).__name__}$"):
        check_backend(given)


def test_the_environment_forces_a_name_when_none_is_given(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ENV_BACKEND, "nope")
    assert forced_backend(None) == "nope"
    with pytest.raises(ValueError, match=rf"^kv-canary: {ENV_BACKEND} must be unset .* named 'nope'"):
        check_backend(None)
    with pytest.raises(UsageError, match="no backend named 'nope' is registered") as err:
        check_backend_name(None)
    assert f"{ENV_BACKEND}=nope is set in the environment" in err.value.hint
    name = sorted(registered_backends())[0]
    check_backend(name)  # a name given wins over the environment's, as it does at launch
    check_backend_name(name)


def test_the_cli_refuses_what_the_api_refuses() -> None:
    with pytest.raises(UsageError, match=r"^no backend named 'nope' is registered \(known: ") as err:
        check_backend_name("nope")
    assert err.value.hint == "pass one of the known names, or leave --backend out"
