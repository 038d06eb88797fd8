"""A bundle's two files as files: digests that catch damage, size caps checked before a read, a folder written
whole or not at all (never over something that is not a bundle), consistent modes, and a sink's queued bundles
written at interpreter exit."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
import torch

from kvcanary.demo.engine.faults import Fault
from kvcanary.evidence import Bundle, BundleError, read_bundle, write_bundle
from kvcanary.evidence.digests import DIGESTS_KEY
from kvcanary.evidence.format import MAX_HEADER_BYTES, META_FILE, TENSORS_FILE
from kvcanary.evidence.install import FolderTaken
from kvcanary.evidence.pick import KeepError, keep_replayable
from tests.evidence.bundles import bundle_path, edit_meta, reseal_tensors


def _copy(tmp_path: Path, fault: Fault = Fault.RADIX_UAF) -> Path:
    dst = tmp_path / "b"
    shutil.copytree(bundle_path(fault), dst)
    return dst


def _entries(folder: Path) -> list[str]:
    """Everything in ``folder``, hidden staging folders included."""
    return sorted(p.name for p in folder.iterdir())


def test_a_bundle_json_laid_out_anew_still_reads(tmp_path: Path) -> None:
    """The meta digest is over the decoded JSON: another indent or key order is the same content."""
    path = _copy(tmp_path)
    meta = json.loads((path / META_FILE).read_text())
    (path / META_FILE).write_text(json.dumps(dict(reversed(list(meta.items()))), indent=4))
    assert read_bundle(path).meta == meta


def test_a_bundle_without_digests_is_read_as_an_older_writers(tmp_path: Path) -> None:
    path = _copy(tmp_path)
    meta = json.loads((path / META_FILE).read_text())
    del meta[DIGESTS_KEY]
    (path / META_FILE).write_text(json.dumps(meta))
    assert DIGESTS_KEY not in read_bundle(path).meta


@pytest.mark.parametrize(("digests", "rule"), [
    ("x", "digests must be an object"),
    ({"meta": "ab", "tensors": "0" * 64}, "digests.meta must be a sha256"),
    ({"meta": "0" * 64}, "digests.tensors must be a sha256"),
], ids=["not an object", "short", "missing"])
def test_a_malformed_digests_entry_is_refused_naming_it(digests: object, rule: str, tmp_path: Path) -> None:
    path = _copy(tmp_path)
    meta = json.loads((path / META_FILE).read_text())
    meta[DIGESTS_KEY] = digests
    (path / META_FILE).write_text(json.dumps(meta))
    with pytest.raises(BundleError, match=rule):
        read_bundle(path)


def test_a_damaged_file_is_named(tmp_path: Path) -> None:
    path = _copy(tmp_path)
    edit_meta(path, lambda m: None)
    data = bytearray((path / TENSORS_FILE).read_bytes())
    data[-1] ^= 1
    (path / TENSORS_FILE).write_bytes(bytes(data))
    with pytest.raises(BundleError, match=f"{TENSORS_FILE} is damaged"):
        read_bundle(path)
    shutil.rmtree(path)
    path = _copy(tmp_path)
    text = (path / META_FILE).read_text()
    (path / META_FILE).write_text(text.replace('"slot": ', '"slot": 1', 1))
    with pytest.raises(BundleError, match=f"{META_FILE} is damaged"):
        read_bundle(path)


def test_a_missing_tensors_file_is_refused_when_the_digests_name_it(tmp_path: Path) -> None:
    path = _copy(tmp_path)
    (path / TENSORS_FILE).unlink()
    with pytest.raises(BundleError, match=f"{TENSORS_FILE} is missing"):
        read_bundle(path)


def test_a_truncated_tensors_file_with_its_digest_is_one_line(tmp_path: Path) -> None:
    """Digest stamped again: the safetensors reader itself meets the truncated file."""
    path = _copy(tmp_path)
    data = (path / TENSORS_FILE).read_bytes()
    (path / TENSORS_FILE).write_bytes(data[: len(data) - 8])
    reseal_tensors(path)
    with pytest.raises(BundleError, match=f"{TENSORS_FILE} is not a readable safetensors file"):
        read_bundle(path)


def test_an_oversized_tensors_file_is_refused_before_it_is_read(tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    path = _copy(tmp_path)
    os.truncate(path / TENSORS_FILE, 6 << 30)  # sparse
    reads: list[Path] = []

    def digest(p: Path) -> str:
        reads.append(p)
        return "0" * 64

    monkeypatch.setattr("kvcanary.evidence.format.file_digest", digest)
    with pytest.raises(BundleError, match=f"{TENSORS_FILE} must be at most .* got {6 << 30}: not read"):
        read_bundle(path)
    assert not reads


def test_only_the_tensors_the_replay_names_are_loaded(tmp_path: Path) -> None:
    import safetensors.torch as st

    path = _copy(tmp_path)
    tensors = st.load_file(str(path / TENSORS_FILE))
    st.save_file({**tensors, "extra": torch.zeros(4, dtype=torch.uint8)}, str(path / TENSORS_FILE))
    reseal_tensors(path)
    assert read_bundle(path).tensors.keys() == tensors.keys()
    assert MAX_HEADER_BYTES >= 1 << 16


def _fail(*args: object, **kwargs: object) -> None:
    raise OSError(28, "No space left on device")


@pytest.mark.parametrize("what", ["tensors", "rename"])
def test_a_write_that_fails_leaves_nothing_behind(what: str, tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    bundle = read_bundle(bundle_path(Fault.RADIX_UAF))
    monkeypatch.setattr(Path, "write_bytes", _fail) if what == "tensors" else \
        monkeypatch.setattr("kvcanary.evidence.install.os.rename", _fail)
    with pytest.raises(OSError):
        write_bundle(bundle, tmp_path / "b")
    monkeypatch.undo()
    assert _entries(tmp_path) == []  # no bundle and no staging folder


def test_a_replace_whose_rename_fails_keeps_the_old_bundle(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    old = read_bundle(bundle_path(Fault.RADIX_UAF))
    path = write_bundle(old, tmp_path / "b")
    before = (path / META_FILE).read_bytes(), (path / TENSORS_FILE).read_bytes()
    rename = os.rename
    calls: list[str] = []

    def second_fails(src: str, dst: str) -> None:  # the old bundle moves aside, the new one cannot come in
        calls.append(str(dst))
        if len(calls) == 2:
            raise OSError(28, "No space left on device")
        rename(src, dst)

    monkeypatch.setattr("kvcanary.evidence.install.os.rename", second_fails)
    with pytest.raises(OSError):
        write_bundle(Bundle({**old.meta, "slot": 3}, old.tensors), path)
    monkeypatch.undo()
    assert len(calls) == 3 and _entries(tmp_path) == ["b"]  # aside, in (failed), back
    assert ((path / META_FILE).read_bytes(), (path / TENSORS_FILE).read_bytes()) == before


def test_a_write_never_replaces_what_is_not_a_bundle(tmp_path: Path) -> None:
    bundle = read_bundle(bundle_path(Fault.RADIX_UAF))
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / "notes.txt").write_text("mine")
    with pytest.raises(FolderTaken, match="not a bundle folder"):
        write_bundle(bundle, tmp_path / "b")
    assert _entries(tmp_path) == ["b"] and _entries(tmp_path / "b") == ["notes.txt"]


def test_a_write_without_replace_leaves_the_bundle_there(tmp_path: Path) -> None:
    bundle = read_bundle(bundle_path(Fault.RADIX_UAF))
    path = write_bundle(bundle, tmp_path / "b")
    before = (path / META_FILE).read_bytes()
    with pytest.raises(FolderTaken, match="a bundle is already there"):
        write_bundle(Bundle({**bundle.meta, "slot": 3}, bundle.tensors), path, replace=False)
    assert (path / META_FILE).read_bytes() == before and _entries(tmp_path) == ["b"]


def test_the_files_and_folder_have_the_modes_a_plain_write_gives(tmp_path: Path) -> None:
    umask = os.umask(0o022)
    os.umask(umask)
    path = write_bundle(read_bundle(bundle_path(Fault.RADIX_UAF)), tmp_path / "b")
    assert path.stat().st_mode & 0o777 == 0o777 & ~umask
    assert {(path / f).stat().st_mode & 0o777 for f in (META_FILE, TENSORS_FILE)} == {0o666 & ~umask}


class _Sink:
    def __init__(self, written: list[Path]) -> None:
        self.written: list[Path] = written
        self.errors: list[str] = []

    def close(self) -> list[Path]:
        return self.written


def test_keep_replayable_never_replaces_a_folder_that_is_not_a_bundle(tmp_path: Path) -> None:
    src = _copy(tmp_path)
    target = tmp_path / "target"
    target.mkdir()
    (target / "notes.txt").write_text("mine")
    with pytest.raises(KeepError, match="not a bundle"):
        keep_replayable(_Sink([src]), target)  # type: ignore[arg-type]
    assert _entries(target) == ["notes.txt"]
    shutil.rmtree(target)
    write_bundle(read_bundle(bundle_path(Fault.DOUBLE_ALLOC)), target)  # a bundle there: replaced
    assert keep_replayable(_Sink([src]), target) == target  # type: ignore[arg-type]
    assert read_bundle(target).meta == read_bundle(src).meta
    assert _entries(tmp_path) == ["b", "target"]


_AT_EXIT = textwrap.dedent("""
    import sys, time
    from pathlib import Path
    from kvcanary.evidence import capture, read_bundle
    from tests.evidence.test_sink_name import _manager

    src, out, delay = Path(sys.argv[1]), Path(sys.argv[2]), float(sys.argv[3])
    bundle = read_bundle(src)
    capture.EXIT_FLUSH_SECONDS = float(sys.argv[4])

    def slow(_captured):
        time.sleep(delay)
        return bundle

    capture.assemble = slow
    sink = capture.BundleSink(_manager(), out)
    sink._ensure_thread()
    sink._queue.put(capture._Job(None, out / "late"))
    print("queued", flush=True)  # and the interpreter exits: no flush, no close
""")


@pytest.mark.parametrize(("delay", "wait", "written"), [(1.0, 10.0, True), (60.0, 0.5, False)],
                         ids=["written", "bounded"])
def test_a_bundle_queued_at_exit_is_written_within_the_bound(delay: float, wait: float, written: bool,
                                                             tmp_path: Path) -> None:
    start = time.monotonic()
    res = subprocess.run([sys.executable, "-c", _AT_EXIT, str(bundle_path(Fault.RADIX_UAF)), str(tmp_path),
                          str(delay), str(wait)], capture_output=True, text=True, timeout=120, check=False,
                         env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    assert res.returncode == 0 and "queued" in res.stdout, res.stderr[-600:]
    assert (tmp_path / "late").exists() is written
    if written:
        assert read_bundle(tmp_path / "late").meta["slot"] == read_bundle(bundle_path(Fault.RADIX_UAF)).slot
    else:
        assert time.monotonic() - start < 30  # the exit waited about `wait`, not the writer's 60 s
