"""Unit tests of hpsearch.recovery.checkpoint (pure: files only)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from hpsearch.recovery.checkpoint import CORRUPT_PREFIX, REJECTED_NOTE, CheckpointStore


def save(store: CheckpointStore, epoch: int, payload: str | None = None,
         metric: float | None = None):
    def write(folder: Path) -> None:
        (folder / "trial.ckpt").write_text(payload or f"weights of epoch {epoch}")

    return store.save(epoch, write, metric=metric)


def aside(store: CheckpointStore) -> list[str]:
    return sorted(p.name for p in store.folder.glob(f"{CORRUPT_PREFIX}*"))


def test_save_is_atomic_and_hashed(tmp_path):
    store = CheckpointStore(tmp_path / "t", keep_last=3)
    entry = save(store, 1, metric=0.5)
    assert entry.path.name == "epoch-000001"
    manifest = json.loads((entry.path / "manifest.json").read_text())
    assert set(manifest["files"]) == {"trial.ckpt"} and manifest["metric"] == 0.5
    assert store.verify(entry)
    assert not list(store.folder.glob(".tmp-*"))


def test_a_flipped_byte_is_set_aside_with_its_reason(tmp_path):
    store = CheckpointStore(tmp_path / "t", keep_last=3)
    save(store, 1)
    save(store, 2)
    (store.folder / "epoch-000002" / "trial.ckpt").write_text("damaged")
    latest = store.latest_valid()
    assert latest is not None and latest.epoch == 1
    (rejected,) = store.rejected
    assert (rejected.name, rejected.epoch) == ("epoch-000002", 2)
    assert rejected.reason == "checksum mismatch in trial.ckpt"
    assert rejected.aside is not None and rejected.aside.name.startswith(
        ".corrupt-epoch-000002-")
    note = json.loads((rejected.aside / REJECTED_NOTE).read_text())
    assert note["reason"] == rejected.reason and note["checkpoint"] == "epoch-000002"
    assert [e.epoch for e in store.entries()] == [1]


def test_a_missing_file_is_named(tmp_path):
    store = CheckpointStore(tmp_path / "t")
    save(store, 1)
    (store.folder / "epoch-000001" / "trial.ckpt").unlink()
    assert store.latest_valid() is None
    assert store.rejected[0].reason == "trial.ckpt is missing"


def test_the_check_rejects_checkpoints_whose_checksums_pass(tmp_path):
    store = CheckpointStore(tmp_path / "t", keep_last=3)
    for epoch in (1, 2, 3):
        save(store, epoch, payload="good" if epoch == 1 else "not loadable")
    seen: list[int] = []

    def check(entry):
        seen.append(entry.epoch)
        text = (entry.path / "trial.ckpt").read_text()
        return None if text == "good" else "it lacks Lightning's keys epoch"

    latest = store.latest_valid(check)
    assert latest is not None and latest.epoch == 1
    assert seen == [3, 2, 1]  # newest first, stops at the first that passes
    assert [(r.name, r.reason) for r in store.rejected] == [
        ("epoch-000003", "it lacks Lightning's keys epoch"),
        ("epoch-000002", "it lacks Lightning's keys epoch")]
    assert len(aside(store)) == 2


def test_the_check_is_not_asked_about_a_checkpoint_that_fails_its_checksum(tmp_path):
    store = CheckpointStore(tmp_path / "t")
    save(store, 1)
    (store.folder / "epoch-000001" / "trial.ckpt").write_text("damaged")
    asked: list[int] = []
    assert store.latest_valid(lambda e: asked.append(e.epoch)) is None
    assert asked == []


def test_folders_set_aside_are_pruned_once_keep_last_newer_ones_exist(tmp_path):
    store = CheckpointStore(tmp_path / "t", keep_last=2)
    for epoch in (1, 2, 3):
        save(store, epoch)
    (store.folder / "epoch-000003" / "trial.ckpt").write_text("damaged")
    assert store.latest_valid().epoch == 2
    assert len(aside(store)) == 1
    save(store, 3)  # the restarted trial trains epoch 3 again: kept [2, 3]
    assert len(aside(store)) == 1, "kept while no newer checkpoints replace it"
    save(store, 4)  # kept [3, 4]
    assert len(aside(store)) == 1
    save(store, 5)  # kept [4, 5]: epoch 3's rejected copy is older than all of them
    assert aside(store) == []
    assert [e.epoch for e in store.entries()] == [4, 5]


def test_the_best_checkpoint_is_kept_besides_the_newest(tmp_path):
    store = CheckpointStore(tmp_path / "t", keep_last=1, mode="max")
    save(store, 1, metric=0.9)
    save(store, 2, metric=0.5)
    save(store, 3, metric=0.6)
    assert [e.epoch for e in store.entries()] == [1, 3]


def test_keep_last_must_be_positive(tmp_path):
    with pytest.raises(ValueError):
        CheckpointStore(tmp_path, keep_last=0)
