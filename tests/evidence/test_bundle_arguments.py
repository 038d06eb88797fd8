"""What an integrator hands the evidence API: ``write_bundle``'s path, ``replay``'s bundle, and ``BundleSink``'s
limits, journal and describer. A value of the wrong kind is taken as ``read_bundle`` takes it, or refused where it
is given, naming it: not at the first violation, where the manager logs a failed sink and no bundle is written
(rD)."""

from __future__ import annotations

from pathlib import Path

import pytest

from kvcanary.demo.engine.faults import Fault
from kvcanary.evidence import BundleLimits, BundleSink, RequestView, read_bundle, replay, write_bundle
from kvcanary.guard.journal import SlotJournal
from tests.evidence.bundles import bundle_path
from tests.evidence.test_sink_name import _manager


def test_write_bundle_takes_a_str_path_as_read_bundle_does(tmp_path: Path) -> None:
    b = read_bundle(bundle_path(Fault.KV_FLIP_USED))
    out = str(tmp_path / "copy")
    write_bundle(b, out)
    assert read_bundle(out).meta == read_bundle(Path(out)).meta == {**b.meta}


@pytest.mark.parametrize("as_path", [str, Path])
def test_replay_given_a_folder_reads_it(as_path: type[str] | type[Path]) -> None:
    path = bundle_path(Fault.KV_FLIP_USED)
    result = replay(as_path(path))
    assert result.ok and not result.missing and not result.extra and result == replay(read_bundle(path))


def test_replay_given_something_else_names_what_it_takes() -> None:
    meta = {**read_bundle(bundle_path(Fault.KV_FLIP_USED)).meta}
    with pytest.raises(TypeError, match=r"replay's bundle must be a Bundle \(from read_bundle\) or a bundle folder"):
        replay(meta)  # type: ignore[arg-type]


@pytest.mark.parametrize(("kwargs", "name"), [
    ({"limits": {"max_bundles": 1}}, "limits"),
    ({"journal": "manager.journal"}, "journal"),
    ({"describer": "adapter"}, "describer"),
    ({"engine": 5}, "engine"),
    ({"background": 1}, "background"),
    ({"name": 7}, "name"),
    ({"out_dir": 3}, "out_dir"),
    ({"manager": "manager"}, "manager"),
])
def test_bundle_sink_refuses_a_setting_of_the_wrong_kind_naming_it(kwargs: dict[str, object], name: str,
                                                                  tmp_path: Path) -> None:
    args: dict[str, object] = {"manager": _manager(), "out_dir": tmp_path / "out", **kwargs}
    with pytest.raises(TypeError, match=rf"^kv-canary: BundleSink {name} must be .*, got \w+$"):
        BundleSink(**args)  # type: ignore[arg-type]
    assert list(tmp_path.iterdir()) == []


def test_bundle_sink_refuses_an_out_dir_that_is_a_file(tmp_path: Path) -> None:
    f = tmp_path / "bundles"
    f.write_text("not a folder")
    with pytest.raises(ValueError, match=r"\bout_dir\b.*the file"):
        BundleSink(_manager(), f)
    assert f.read_text() == "not a folder"


def test_bundle_sink_takes_a_folder_or_a_path_not_yet_there(tmp_path: Path) -> None:
    m = _manager()
    assert BundleSink(m, tmp_path).out_dir == tmp_path
    assert BundleSink(m, str(tmp_path / "new")).out_dir == tmp_path / "new" and not (tmp_path / "new").exists()


class _Describer:
    """The three methods of RequestDescriber, nothing else (the protocol is structural)."""

    def describe_request(self, request_id: str) -> RequestView | None:
        return None

    def requests_holding(self, slot: int) -> list[str]:
        return []

    def engine_version(self) -> str:
        return "test 0"


def test_bundle_sink_keeps_settings_of_the_right_kind(tmp_path: Path) -> None:
    m = _manager()
    journal, limits, describer = SlotJournal(block_size=1, max_blocks=16), BundleLimits(max_bundles=1), _Describer()
    sink = BundleSink(m, tmp_path, journal=journal, describer=describer, limits=limits, engine="e 1",
                      background=False, name="n")
    assert (sink.journal, sink.describer, sink.limits, sink.engine, sink.name) == (journal, describer, limits, "e 1",
                                                                                  "n")
