"""Where checkpoints live: a folder on this machine's disk, or any storage URL.

Pure module: no Ray, torch, Lightning or Optuna. ``pyarrow`` (and ``fsspec`` for the
schemes pyarrow does not speak) are imported inside the functions that open a storage,
so validating a config stays fast.

* A ``checkpoint.storage`` value is checked, without touching the network, by the
  config (:func:`hpsearch.spec.storage_url.parse_url`): an absolute path (a disk every
  node mounts, e.g. NFS), ``file:///abs/path``, or a URL whose scheme ``pyarrow.fs``
  (``s3://``, ``gs://``, ``abfs://``, ``hdfs://``) or fsspec (``az://``, ``oss://``, ...)
  resolves. A URL with credentials in it is refused: they would end up in the study,
  the logs and every trial's config; credentials and endpoints come from the standard
  environment of each node instead (``AWS_ACCESS_KEY_ID``, an instance profile,
  ``GOOGLE_APPLICATION_CREDENTIALS``, ...).
* :func:`open_location` turns it into a :class:`Location`: a ``pyarrow.fs`` filesystem
  and a path in it. For ``s3://``, ``AWS_ENDPOINT_URL_S3`` or ``AWS_ENDPOINT_URL`` (the
  variables boto3 and the AWS CLI read, which pyarrow does not) set the endpoint of an
  S3-compatible server (MinIO, moto, R2) unless the URL's ``?endpoint_override=`` does.
* :class:`Files` does the few operations the checkpoint store needs on a location and
  counts the requests an object store bills (writes: PUT, POST, COPY, LIST; reads: GET,
  HEAD). On this machine's disk a small file is written atomically (temporary file,
  fsync, rename); on an object store every object appears whole or not at all.
* :func:`check_token`: the reachability probe's read half (see
  :mod:`hpsearch.adapters.ray.storage`).
"""

from __future__ import annotations

import hashlib
import math
import os
import shutil
import uuid
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any, Iterator
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from hpsearch.errors import HpsearchError
from hpsearch.spec.storage_url import PYARROW_SCHEMES, url_scheme

#: S3's environment variables for an endpoint (boto3's names; pyarrow reads none).
ENDPOINT_ENV = ("AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL")
#: pyarrow's S3 output streams upload in parts of this size past it (an estimate of
#: the requests a large file costs).
PART_BYTES = 10 * 2**20
CHUNK = 8 * 2**20
#: ``pyarrow.fs`` type names of object stores (keys, no folders, no rename).
OBJECT_STORES = frozenset({"s3", "gcs", "abfs"})


def is_local(value: str) -> bool:
    """Whether a storage value names this machine's filesystem (a path or file://)."""
    return url_scheme(value) in (None, "file")


def local_path(value: str) -> Path | None:
    """The local path of a path or ``file://`` URL; None for any other URL."""
    scheme = url_scheme(value)
    if scheme is None:
        return Path(value)
    if scheme == "file":
        return Path(urlsplit(value).path)
    return None


def join_url(base: str, *names: str) -> str:
    """``base`` with ``names`` appended to its path (its query kept)."""
    if url_scheme(base) is None:
        return str(Path(base, *names))
    parts = urlsplit(base)
    path = "/".join([parts.path.rstrip("/"), *names])
    return urlunsplit((parts.scheme, parts.netloc, path, parts.query, ""))


def shown(value: str) -> str:
    """A storage value as printed: the query (endpoint options) left out."""
    if url_scheme(value) is None:
        return value
    parts = urlsplit(value)
    return urlunsplit((parts.scheme, parts.netloc.rsplit("@", 1)[-1], parts.path, "", ""))


# ---------------------------------------------------------------------------------------
# Opening a storage.


@dataclass(frozen=True)
class Location:
    """A folder in some storage.

    Attributes:
        url: The storage value it was opened from (a path or a URL).
        fs: The ``pyarrow.fs.FileSystem`` (None for this machine's disk, used directly).
        path: The folder's path in ``fs`` (for the local disk: an absolute path).
    """

    url: str
    fs: Any
    path: str

    @property
    def local(self) -> Path | None:
        """The folder on this machine's disk, or None on any other storage."""
        return Path(self.path) if self.fs is None else None

    def child(self, *names: str) -> "Location":
        """A folder (or file) below this one."""
        path = str(PurePosixPath(self.path, *names)) if self.path else "/".join(names)
        return Location(join_url(self.url, *names), self.fs, path)


def _with_endpoint(url: str) -> str:
    """An ``s3://`` URL with the endpoint from the environment, unless it has one."""
    parts = urlsplit(url)
    query = dict(parse_qsl(parts.query))
    if "endpoint_override" in query:
        return url
    endpoint = next((os.environ[n] for n in ENDPOINT_ENV if os.environ.get(n)), None)
    if endpoint is None:
        return url
    query["endpoint_override"] = endpoint
    if endpoint.startswith("http://"):
        query.setdefault("scheme", "http")
    return urlunsplit((parts.scheme, parts.netloc, parts.path, urlencode(query), ""))


def open_location(value: str) -> Location:
    """Open a storage value (see :func:`hpsearch.spec.storage_url.parse_url`) as a
    :class:`Location`.

    Nothing is read or written. Raises OSError or ValueError (from pyarrow or fsspec)
    when the filesystem cannot be built here (a missing package or library, a bad
    option); :func:`open_error` turns that into a sentence.
    """
    path = local_path(value)
    if path is not None:
        return Location(value, None, str(path.absolute()))
    url = _with_endpoint(value) if url_scheme(value) == "s3" else value
    from pyarrow import fs as pafs

    if url_scheme(value) in PYARROW_SCHEMES:
        filesystem, inner = pafs.FileSystem.from_uri(url)
        return Location(value, filesystem, inner.rstrip("/"))
    import fsspec
    from pyarrow.fs import FSSpecHandler, PyFileSystem

    spec_fs, inner = fsspec.core.url_to_fs(url)
    return Location(value, PyFileSystem(FSSpecHandler(spec_fs)), inner.rstrip("/"))


def open_error(value: str) -> str | None:
    """Why :func:`open_location` fails here (one line), or None when it works."""
    try:
        open_location(value)
    except ImportError as exc:
        return f"a package it needs is missing ({exc}); e.g. pip install s3fs / gcsfs / adlfs"
    except Exception as exc:  # OSError, ValueError, ArrowInvalid, ...
        lines = str(exc).strip().splitlines()
        return f"{type(exc).__name__}: {lines[0] if lines else ''}".rstrip(": ")
    return None


# ---------------------------------------------------------------------------------------
# Operations.


@dataclass
class Requests:
    """Requests made to a storage, in the two classes object stores bill."""

    writes: int = 0  #: PUT, POST, COPY, LIST
    reads: int = 0  #: GET, HEAD


@dataclass(frozen=True)
class Item:
    """One entry of a folder listing."""

    name: str
    is_dir: bool
    size: int = 0


def _upload_requests(size: int) -> int:
    """Write requests of one upload: one PUT, or a multipart upload's create, parts and
    complete."""
    return 1 if size <= PART_BYTES else math.ceil(size / PART_BYTES) + 2


@dataclass
class Files:
    """The operations the checkpoint store does on a folder, with requests counted.

    Every name is relative to ``location``; missing things are no errors where it makes
    sense (a read returns None, a delete does nothing).
    """

    location: Location
    requests: Requests = field(default_factory=Requests)
    _made: set = field(default_factory=set, repr=False)

    @property
    def local(self) -> Path | None:
        return self.location.local

    def _path(self, name: str) -> str:
        return str(PurePosixPath(self.location.path, name))

    def _target(self, name: str) -> str:
        """The path to write ``name`` at, its folder made where folders are real (an
        object store has none: making one would cost a PUT)."""
        path = self._path(name)
        parent = str(PurePosixPath(path).parent)
        if self.location.fs.type_name not in OBJECT_STORES and parent not in self._made:
            self.location.fs.create_dir(parent, recursive=True)
            self._made.add(parent)
        return path

    def list(self) -> list[Item]:
        """The folder's entries (empty when it does not exist)."""
        if self.local is not None:
            try:
                return [Item(p.name, p.is_dir(), 0 if p.is_dir() else p.stat().st_size)
                        for p in self.local.iterdir()]
            except (FileNotFoundError, NotADirectoryError):
                return []
        from pyarrow import fs as pafs

        self.requests.writes += 1  # LIST
        infos = self.location.fs.get_file_info(
            pafs.FileSelector(self.location.path, allow_not_found=True))
        return [Item(i.base_name, i.type == pafs.FileType.Directory, i.size or 0)
                for i in infos]

    def read(self, name: str) -> bytes | None:
        """A file's bytes, or None if it does not exist."""
        if self.local is not None:
            try:
                return (self.local / name).read_bytes()
            except (FileNotFoundError, NotADirectoryError, IsADirectoryError):
                return None
        self.requests.reads += 1
        try:
            with self.location.fs.open_input_stream(self._path(name)) as f:
                return f.read()
        except FileNotFoundError:
            return None

    def write(self, name: str, data: bytes) -> None:
        """Write a small file whole: atomically replaced on a local disk (temporary
        file, fsync, rename), one PUT on an object store (atomic there)."""
        if self.local is not None:
            target = self.local / name
            target.parent.mkdir(parents=True, exist_ok=True)
            tmp = target.with_name(f".tmp-{uuid.uuid4().hex[:8]}-{target.name}")
            try:
                with tmp.open("wb") as f:
                    f.write(data)
                    f.flush()
                    os.fsync(f.fileno())
                os.replace(tmp, target)
            except BaseException:
                tmp.unlink(missing_ok=True)
                raise
            return
        self.requests.writes += 1
        with self.location.fs.open_output_stream(self._target(name)) as f:
            f.write(data)

    def upload(self, source: Path, name: str) -> int:
        """Copy local file ``source`` to ``name``; its bytes."""
        size = source.stat().st_size
        if self.local is not None:
            target = self.local / name
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(source, target)
            return size
        self.requests.writes += _upload_requests(size)
        with source.open("rb") as src, \
                self.location.fs.open_output_stream(self._target(name)) as out:
            for block in iter(lambda: src.read(CHUNK), b""):
                out.write(block)
        return size

    def download(self, name: str, target: Path) -> str | None:
        """Copy ``name`` to local file ``target``, hashing it on the way: its SHA-256,
        or None if it does not exist."""
        digest = hashlib.sha256()
        target.parent.mkdir(parents=True, exist_ok=True)
        self.requests.reads += 1
        try:
            with self.location.fs.open_input_stream(self._path(name)) as src, \
                    target.open("wb") as out:
                for block in _blocks(src):
                    digest.update(block)
                    out.write(block)
        except FileNotFoundError:
            target.unlink(missing_ok=True)
            return None
        return digest.hexdigest()

    def delete(self, name: str) -> None:
        """Delete a file (nothing if it is missing)."""
        if self.local is not None:
            (self.local / name).unlink(missing_ok=True)
            return
        try:
            self.location.fs.delete_file(self._path(name))
        except FileNotFoundError:
            pass

    def delete_dir(self, name: str) -> None:
        """Delete a folder and everything in it (nothing if it is missing)."""
        if self.local is not None:
            shutil.rmtree(self.local / name, ignore_errors=True)
            return
        self.requests.writes += 1  # the LIST behind a recursive delete
        try:
            self.location.fs.delete_dir(self._path(name))
        except FileNotFoundError:
            pass


def _blocks(stream) -> Iterator[bytes]:
    while True:
        block = stream.read(CHUNK)
        if not block:
            return
        yield bytes(block)


def sha256_file(path: Path) -> str:
    """SHA-256 of a local file."""
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


# ---------------------------------------------------------------------------------------
# The reachability probe's halves (the Ray side is hpsearch.adapters.ray.storage).

#: Folder of the probe's tokens, in the storage's root.
PROBE_DIR = ".hpsearch-probe"


def fix_hint(url: str, default: bool) -> str:
    """What to configure when a node cannot reach the checkpoint storage ``url``."""
    if default:
        return ("the run dir's checkpoints/ is on the driver's disk, which the other nodes "
                "do not share: set checkpoint.storage to an object store every node "
                "reaches (s3://bucket/prefix, gs://bucket/prefix) or to a path every "
                "node mounts (NFS)")
    if local_path(url) is not None:
        return "mount that path on every node (the same shared disk), or use an object store"
    return ("give every node credentials for it (an instance profile or service account, "
            "or AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY, GOOGLE_APPLICATION_CREDENTIALS in "
            "its environment) and, for an S3-compatible server, AWS_ENDPOINT_URL; check "
            "that the node can route to the endpoint")


def check_token(value: str, name: str, token: str) -> str | None:
    """Whether the file ``name`` below storage ``value`` holds ``token``, as the driver
    wrote it: None when it does, else why not (one line).

    A node that reads the driver's token sees the same storage as the driver; a node
    with its own disk at that path, or without credentials, does not.
    """
    try:
        files = Files(open_location(value))
        data = files.read(name)
    except Exception as exc:  # no credentials, no route, a missing library, ...
        return _first_line(exc)
    if data is None:
        return "the driver's probe file is not there (this node sees another storage " \
               "at that place: its own disk?)"
    if data.decode(errors="replace") != token:
        return "the driver's probe file holds something else"
    return None


def _first_line(exc: BaseException) -> str:
    lines = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {lines[0] if lines else ''}".rstrip(": ")


@dataclass(frozen=True)
class ProbeToken:
    """A token the driver wrote where the checkpoints go, for nodes to read back.

    Attributes:
        url: The storage value the token is under (the checkpoint storage's root).
        name: The token file's name below ``url``.
        token: What it holds.
    """

    url: str
    name: str
    token: str


class StorageUnreachable(HpsearchError):
    """A trial's node cannot reach the checkpoint storage, so the trial did not train
    there (its checkpoints would be lost with the node); the driver places it elsewhere.

    Args:
        node_id: The Ray node.
        storage: The checkpoint storage, as shown.
        reason: Why the probe failed there.
    """

    def __init__(self, node_id: str, storage: str, reason: str):
        self.node_id, self.storage, self.reason = node_id, storage, reason
        super().__init__(f"node {node_id[:12]} cannot reach the checkpoint storage "
                         f"{storage}: {reason}")
