"""Unit tests of hpsearch.recovery.checkpoint (pure: files only).

Every protocol test runs twice: on a local folder (the run dir's checkpoints) and through
a ``pyarrow.fs.LocalFileSystem`` location, which takes the object-store path (files
uploaded, then the manifest; downloads hashed on the way; no rename anywhere).
"""

from __future__ import annotations

import json
import multiprocessing
import os
import signal
from pathlib import Path

import pytest

from hpsearch.recovery import checkpoint_usage, storage
from hpsearch.recovery.checkpoint import CheckpointStore, young_daly_epochs
from hpsearch.recovery.checkpoint_layout import CORRUPT_PREFIX


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


_made: list[CheckpointStore] = []


@pytest.fixture(autouse=True)
def _closed():
    """Each test's stores are closed after it, as a trial closes its own: their
    downloads (an object store's resume copies, in the temporary folder) go with them."""
    yield
    while _made:
        _made.pop().close()


def make_store(kind: str, root: Path, **kwargs) -> CheckpointStore:
    if kind == "local":
        store = CheckpointStore(root / "t", **kwargs)
    else:
        from pyarrow import fs

        store = CheckpointStore(storage.Location(f"arrow:{root}/t", fs.LocalFileSystem(),
                                                 str(root / "t")), **kwargs)
    _made.append(store)
    return store


@pytest.fixture(params=["local", "object"])
def kind(request) -> str:
    return request.param


def save(store: CheckpointStore, epoch: int, payload: str | None = None,
         metric: float | None = None):
    def write(folder: Path) -> None:
        (folder / "trial.ckpt").write_text(payload or f"weights of epoch {epoch}")

    return store.save(epoch, write, metric=metric)


def names(root: Path) -> list[str]:
    return sorted(p.name for p in (root / "t").iterdir())


def data_of(root: Path, epoch: int) -> Path:
    manifest = json.loads((root / "t" / f"epoch-{epoch:06d}.json").read_text())
    return root / "t" / manifest["data"]


def test_a_checkpoint_is_its_files_then_its_manifest(kind, tmp_path):
    store = make_store(kind, tmp_path, keep_last=3)
    entry = save(store, 1, metric=0.5)
    assert entry.name == "epoch-000001"
    manifest = json.loads((tmp_path / "t" / "epoch-000001.json").read_text())
    assert manifest["metric"] == 0.5 and manifest["epoch"] == 1
    assert manifest["files"]["trial.ckpt"]["bytes"] == len("weights of epoch 1")
    assert (tmp_path / "t" / manifest["data"] / "trial.ckpt").read_text() == \
        "weights of epoch 1"
    assert names(tmp_path) == sorted(["epoch-000001.json", manifest["data"]])
    assert [e.epoch for e in store.entries()] == [1]
    latest = store.latest_valid()
    assert latest is not None and (latest.path / "trial.ckpt").read_text() == \
        "weights of epoch 1"


def _killed_before_the_manifest(kind: str, root: str) -> None:
    import tempfile

    tempfile.tempdir = os.path.join(root, "tmp")  # the killed writer's staging: the test's
    os.makedirs(tempfile.tempdir)
    store = make_store(kind, Path(root), keep_last=3)
    save(store, 1)
    original = store.files.write

    def die(name: str, data: bytes) -> None:
        if name == "epoch-000002.json":
            os.kill(os.getpid(), signal.SIGKILL)  # the files are written, the manifest not
        original(name, data)

    store.files.write = die
    save(store, 2)


@pytest.mark.slow  # a child process is SIGKILLed mid-write
def test_a_write_killed_before_the_manifest_leaves_no_checkpoint(kind, tmp_path):
    child = multiprocessing.get_context("fork").Process(
        target=_killed_before_the_manifest, args=(kind, str(tmp_path)))
    child.start()
    child.join(60)
    assert child.exitcode == -signal.SIGKILL
    leftovers = [n for n in names(tmp_path) if n.startswith("epoch-000002-")]
    assert len(leftovers) == 1 and (tmp_path / "t" / leftovers[0] / "trial.ckpt").exists()
    store = make_store(kind, tmp_path, keep_last=3)
    assert [e.epoch for e in store.entries()] == [1]
    assert store.latest_valid().epoch == 1 and store.rejected == []
    save(store, 2)  # the restarted trial: the dead writer's files are deleted
    assert not (tmp_path / "t" / leftovers[0]).exists()
    assert [e.epoch for e in store.entries()] == [1, 2]


def test_an_exception_in_the_writer_leaves_nothing(kind, tmp_path):
    store = make_store(kind, tmp_path)
    save(store, 1)

    def broken(folder: Path) -> None:
        (folder / "trial.ckpt").write_text("half")
        raise RuntimeError("disk on fire")

    with pytest.raises(RuntimeError):
        store.save(2, broken)
    assert names(tmp_path) == sorted(["epoch-000001.json", data_of(tmp_path, 1).name])


def test_a_corrupted_object_falls_back_to_the_previous_checkpoint(kind, tmp_path):
    store = make_store(kind, tmp_path, keep_last=3)
    save(store, 1)
    save(store, 2)
    (data_of(tmp_path, 2) / "trial.ckpt").write_text("damaged")
    latest = store.latest_valid()
    assert latest is not None and latest.epoch == 1
    assert (latest.path / "trial.ckpt").read_text() == "weights of epoch 1"
    (rejected,) = store.rejected
    assert (rejected.name, rejected.epoch) == ("epoch-000002", 2)
    assert rejected.reason == "checksum mismatch in trial.ckpt"
    assert rejected.aside.startswith(".corrupt-epoch-000002-")
    note = json.loads((tmp_path / "t" / rejected.aside).read_text())
    assert note["reason"] == rejected.reason and note["checkpoint"] == "epoch-000002"
    assert (tmp_path / "t" / note["data"] / "trial.ckpt").read_text() == "damaged"
    assert not (tmp_path / "t" / "epoch-000002.json").exists()
    assert [e.epoch for e in store.entries()] == [1]


def test_a_missing_file_is_named(kind, tmp_path):
    store = make_store(kind, tmp_path)
    save(store, 1)
    (data_of(tmp_path, 1) / "trial.ckpt").unlink()
    assert store.latest_valid() is None
    assert store.rejected[0].reason == "trial.ckpt is missing"


def test_an_unreadable_manifest_is_no_checkpoint(kind, tmp_path):
    store = make_store(kind, tmp_path)
    save(store, 1)
    save(store, 2)
    (tmp_path / "t" / "epoch-000002.json").write_text('{"epoch": 2, "files": {"trial.c')
    assert [e.epoch for e in store.entries()] == [1]
    assert store.latest_valid().epoch == 1


def test_the_check_rejects_checkpoints_whose_checksums_pass(kind, tmp_path):
    store = make_store(kind, tmp_path, keep_last=3)
    for epoch in (1, 2, 3):
        save(store, epoch, payload="good" if epoch == 1 else "not loadable")
    seen: list[int] = []

    def check(entry):
        seen.append(entry.epoch)
        text = (entry.path / "trial.ckpt").read_text()  # the local, verified copy
        return None if text == "good" else "it lacks Lightning's keys epoch"

    latest = store.latest_valid(check)
    assert latest is not None and latest.epoch == 1
    assert seen == [3, 2, 1]  # newest first, stops at the first that passes
    assert [(r.name, r.reason) for r in store.rejected] == [
        ("epoch-000003", "it lacks Lightning's keys epoch"),
        ("epoch-000002", "it lacks Lightning's keys epoch")]
    assert len([n for n in names(tmp_path) if n.startswith(CORRUPT_PREFIX)]) == 2


def test_the_check_is_not_asked_about_a_checkpoint_that_fails_its_checksum(kind, tmp_path):
    store = make_store(kind, tmp_path)
    save(store, 1)
    (data_of(tmp_path, 1) / "trial.ckpt").write_text("damaged")
    asked: list[int] = []
    assert store.latest_valid(lambda e: asked.append(e.epoch)) is None
    assert asked == []


def test_notes_set_aside_are_pruned_once_keep_last_newer_ones_exist(kind, tmp_path):
    store = make_store(kind, tmp_path, keep_last=2)
    for epoch in (1, 2, 3):
        save(store, epoch)
    bad = data_of(tmp_path, 3)
    (bad / "trial.ckpt").write_text("damaged")
    assert store.latest_valid().epoch == 2

    def aside() -> list[str]:
        return [n for n in names(tmp_path) if n.startswith(CORRUPT_PREFIX)]

    assert len(aside()) == 1
    save(store, 3)  # the restarted trial trains epoch 3 again: kept [2, 3]
    assert len(aside()) == 1 and bad.exists(), "kept while no newer checkpoints replace it"
    save(store, 4)  # kept [3, 4]
    assert len(aside()) == 1
    save(store, 5)  # kept [4, 5]: epoch 3's rejected copy is older than all of them
    assert aside() == [] and not bad.exists()
    assert [e.epoch for e in store.entries()] == [4, 5]
    assert len([n for n in names(tmp_path) if n.startswith("epoch-")]) == 4


def test_an_epoch_written_again_replaces_the_manifest_and_drops_the_old_files(kind, tmp_path):
    store = make_store(kind, tmp_path, keep_last=2)
    save(store, 1, payload="first")
    old = data_of(tmp_path, 1)
    save(store, 1, payload="second")
    assert not old.exists()
    assert (store.latest_valid().path / "trial.ckpt").read_text() == "second"


def test_the_best_checkpoint_is_kept_besides_the_newest(kind, tmp_path):
    store = make_store(kind, tmp_path, keep_last=1, mode="max")
    save(store, 1, metric=0.9)
    save(store, 2, metric=0.5)
    save(store, 3, metric=0.6)
    assert [e.epoch for e in store.entries()] == [1, 3]
    assert len([n for n in names(tmp_path) if n.startswith("epoch-")]) == 4


def test_preemption_notes(kind, tmp_path):
    store = make_store(kind, tmp_path)
    assert store.preempted("abc") is None
    store.mark_preempted("abc", 3, "SIGTERM")
    note = make_store(kind, tmp_path).preempted("abc")
    assert note["epoch"] == 3 and note["reason"] == "SIGTERM"


def test_usage_counts_bytes_seconds_requests_and_bytes_held(kind, tmp_path):
    clock = Clock()
    store = make_store(kind, tmp_path, keep_last=1, clock=clock)

    def write(folder: Path) -> None:
        clock.now += 2.0  # what writing the payload took
        (folder / "trial.ckpt").write_bytes(b"x" * 1000)

    store.save(1, write)
    clock.now += 10.0
    store.save(2, write)
    use = store.usage()
    manifests = sum(len((tmp_path / "t" / n).read_bytes()) for n in names(tmp_path)
                    if n.endswith(".json"))
    assert use.checkpoints == 2 and use.seconds == 4.0
    assert 2000 < use.bytes_written < 2000 + 3 * manifests
    assert use.stored_bytes == 1000  # keep_last 1, no metric: epoch 2 only
    # 1000 bytes held from the first save's end (t=2) to now (t=14).
    assert use.byte_s == pytest.approx(1000 * 12.0)
    assert store.checkpoint_s() == 2.0
    if kind == "object":
        assert use.writes >= 4 and use.reads >= 2  # uploads, manifests, listings
    else:
        assert (use.writes, use.reads) == (0, 0)  # a disk bills no requests
    # The tally is the record the trial reports (hps_ckpt_*), and a snapshot: a later
    # save changes the store's next one, not this.
    assert checkpoint_usage.from_result(checkpoint_usage.to_result(use)) == use
    store.save(3, write)
    assert use.checkpoints == 2 and store.usage().checkpoints == 3


def test_a_download_replaces_the_previous_one(tmp_path):
    store = make_store("object", tmp_path, keep_last=3)
    save(store, 1)
    save(store, 2)
    first = store.latest_valid()
    assert first.path.parent != (tmp_path / "t")  # a download, not the stored folder
    entry = store.entries()[0]
    second, problem = store.fetch(entry)
    assert problem is None and second.path.is_dir() and not first.path.exists()
    store.close()
    assert not second.path.exists()


def test_the_old_layout_is_read_and_pruned(kind, tmp_path):
    import hashlib

    old = tmp_path / "t" / "epoch-000003"
    old.mkdir(parents=True)
    (old / "trial.ckpt").write_text("old weights")
    (old / "manifest.json").write_text(json.dumps({
        "epoch": 3, "metric": None, "meta": {},
        "files": {"trial.ckpt": hashlib.sha256(b"old weights").hexdigest()}}))
    (tmp_path / "t" / ".tmp-0123abcd").mkdir()  # an old writer killed mid-write
    store = make_store(kind, tmp_path, keep_last=1)
    latest = store.latest_valid()
    assert latest.epoch == 3 and (latest.path / "trial.ckpt").read_text() == "old weights"
    save(store, 4)
    assert not old.exists() and not (tmp_path / "t" / ".tmp-0123abcd").exists()
    assert [e.epoch for e in store.entries()] == [4]


def test_keep_last_must_be_positive(tmp_path):
    with pytest.raises(ValueError):
        CheckpointStore(tmp_path, keep_last=0)


def test_young_daly():
    assert young_daly_epochs(10.0, None, 5.0, 50) == 1
    # sqrt(2 x 10 s x 3600 s) = 268 s = 54 epochs of 5 s, capped at 50
    assert young_daly_epochs(10.0, 3600.0, 5.0, 50) == 50
    assert young_daly_epochs(0.5, 3600.0, 5.0, 50) == 12  # sqrt(3600) = 60 s
