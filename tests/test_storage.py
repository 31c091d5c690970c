"""checkpoint.storage values (hpsearch.spec.storage_url), and the checkpoint store
(hpsearch.recovery.storage) on a real S3 API (moto's standalone server on 127.0.0.1,
started by the test)."""

from __future__ import annotations

from pathlib import Path

import pytest

from hpsearch.errors import ConfigError
from hpsearch.recovery import storage
from hpsearch.recovery.checkpoint import CheckpointStore
from hpsearch.spec.storage_url import parse_url

from .s3server import S3Server


@pytest.mark.parametrize("value, expected", [
    ("s3://bucket/prefix/", "s3://bucket/prefix"),
    ("s3://bucket", "s3://bucket"),
    ("gs://bucket/runs", "gs://bucket/runs"),
    ("abfs://container@account.dfs.core.windows.net/x",
     "abfs://container@account.dfs.core.windows.net/x"),
    ("file:///mnt/nfs/ckpt", "file:///mnt/nfs/ckpt"),
    ("/mnt/nfs/ckpt/", "/mnt/nfs/ckpt"),
    ("az://container/x", "az://container/x"),  # fsspec's (adlfs)
    ("s3://bucket/p?endpoint_override=http://127.0.0.1:9000",
     "s3://bucket/p?endpoint_override=http://127.0.0.1:9000"),
])
def test_storage_values_that_are_accepted(value, expected):
    assert parse_url(value) == expected


@pytest.mark.parametrize("value, words", [
    ("runs/ckpt", "must be absolute"),
    ("foo://bucket/x", "unknown storage scheme 'foo'"),
    ("memory://x", "each process has its own"),
    ("https://example.com/x", "read-only"),
    ("s3://", "needs a bucket"),
    ("s3://AKIA:secret@bucket/x", "credentials do not belong in the URL"),
    ("file://relative/x", "absolute path"),
    ("", "must be a storage URL"),
    (3, "must be a storage URL"),
])
def test_storage_values_that_are_refused(value, words):
    with pytest.raises(ConfigError) as info:
        parse_url(value)
    text = str(info.value)
    assert text.startswith("checkpoint.storage: ") and words in text, text
    assert "secret" not in text


def test_urls_join_and_show_without_their_query():
    url = "s3://b/p?endpoint_override=http://127.0.0.1:9"
    assert storage.join_url(url, "run", "trial-0001") == \
        "s3://b/p/run/trial-0001?endpoint_override=http://127.0.0.1:9"
    assert storage.shown(url) == "s3://b/p"
    assert storage.join_url("/mnt/x", "run") == "/mnt/x/run"
    assert storage.local_path("file:///mnt/x") == Path("/mnt/x")
    assert storage.local_path("s3://b/x") is None


def test_the_endpoint_comes_from_the_standard_environment(monkeypatch):
    monkeypatch.delenv("AWS_ENDPOINT_URL_S3", raising=False)
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:9000")
    assert "endpoint_override=http%3A%2F%2F127.0.0.1%3A9000" in \
        storage._with_endpoint("s3://b/p")
    monkeypatch.setenv("AWS_ENDPOINT_URL_S3", "http://127.0.0.1:9001")
    assert "9001" in storage._with_endpoint("s3://b/p")
    assert storage._with_endpoint("s3://b/p?endpoint_override=x") == \
        "s3://b/p?endpoint_override=x"


def test_a_missing_fsspec_implementation_is_one_line():
    error = storage.open_error("oci://bucket@namespace/x")
    assert error is not None and "\n" not in error


@pytest.fixture(scope="module")
def s3():
    with S3Server() as server:
        yield server


@pytest.mark.slow  # a real S3 API server (moto) in a process of its own
def test_the_store_on_a_real_s3_api(s3, monkeypatch, tmp_path):
    s3.set_env(monkeypatch)
    url = "s3://ckpt/runs/store-test/trial-0001"
    store = CheckpointStore(url, keep_last=2)
    assert store.folder is None and store.url == url
    for epoch in (1, 2, 3):
        store.save(epoch, lambda d, e=epoch: (d / "trial.ckpt").write_bytes(
            f"weights {e}".encode() * 1000))
    keys = s3.objects()
    manifests = sorted(k for k in keys if k.endswith(".json"))
    assert manifests == ["runs/store-test/trial-0001/epoch-000002.json",
                         "runs/store-test/trial-0001/epoch-000003.json"]
    assert sum(1 for k in keys if k.endswith("/trial.ckpt")) == 2  # epoch 1's deleted

    # A damaged object: the resume falls back to epoch 2, downloaded and verified.
    from pyarrow import fs

    admin = storage.open_location(url).fs
    newest = next(k for k in keys if "epoch-000003-" in k and k.endswith("trial.ckpt"))
    with admin.open_output_stream(f"ckpt/{newest}") as out:
        out.write(b"damaged")
    latest = CheckpointStore(url, keep_last=2).latest_valid(scratch=tmp_path / "dl")
    assert latest.epoch == 2
    assert (latest.path / "trial.ckpt").read_bytes() == b"weights 2" * 1000
    assert str(latest.path).startswith(str(tmp_path / "dl"))
    keys = s3.objects()
    assert "runs/store-test/trial-0001/epoch-000003.json" not in keys
    assert any(".corrupt-epoch-000003-" in k for k in keys)

    use = store.usage()
    assert use.checkpoints == 3 and use.stored_bytes == 2 * 9000
    assert use.writes >= 6 and use.reads >= 1
    assert isinstance(admin, fs.S3FileSystem)


@pytest.mark.slow  # a real S3 API server (moto) in a process of its own
def test_preemption_notes_and_probe_tokens_on_s3(s3, monkeypatch):
    s3.set_env(monkeypatch)
    store = CheckpointStore("s3://ckpt/runs/notes/trial-0002")
    store.mark_preempted("attempt1", 4, "SIGTERM")
    assert CheckpointStore("s3://ckpt/runs/notes/trial-0002").preempted("attempt1")["epoch"] == 4
    files = storage.Files(storage.open_location("s3://ckpt/runs/notes"))
    files.write(".hpsearch-probe/t/driver", b"token-1")
    assert storage.check_token("s3://ckpt/runs/notes", ".hpsearch-probe/t/driver",
                               "token-1") is None
    assert "holds something else" in storage.check_token(
        "s3://ckpt/runs/notes", ".hpsearch-probe/t/driver", "token-2")
    assert "not there" in storage.check_token(
        "s3://ckpt/runs/other", ".hpsearch-probe/t/driver", "token-1")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "wrong")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "wrong")
    # moto accepts any key; an unreachable endpoint shows how a node without a route
    # (or credentials) answers: one line.
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:1")
    error = storage.check_token("s3://ckpt/runs/notes", ".hpsearch-probe/t/driver",
                                "token-1")
    assert error is not None and "\n" not in error
