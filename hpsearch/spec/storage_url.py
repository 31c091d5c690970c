"""The syntax of ``checkpoint.storage``: which values name a storage every node can share.

Pure module: no network, no filesystem, no Ray, torch, Lightning or Optuna (fsspec's
registry of scheme names is read, when installed, to accept the schemes it knows). The
config validates the key with :func:`parse_url`; :mod:`hpsearch.recovery.storage` opens
what it accepts.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit, urlunsplit

from hpsearch.errors import ConfigError

#: The key these values come from (the field every error names by default).
FIELD = "checkpoint.storage"
#: Schemes ``pyarrow.fs.FileSystem.from_uri`` resolves itself.
PYARROW_SCHEMES = ("s3", "gs", "gcs", "abfs", "abfss", "hdfs", "viewfs", "file")
#: Schemes fsspec knows that cannot hold checkpoints every node shares.
USELESS_SCHEMES = {
    "memory": "each process has its own memory filesystem, so no other node (nor a "
              "restarted trial) would see a checkpoint",
    "http": "HTTP is read-only", "https": "HTTPS is read-only",
    "data": "it is not a storage", "zip": "archives are read-only",
    "tar": "archives are read-only", "libarchive": "archives are read-only",
    "github": "it is read-only", "gist": "it is read-only", "git": "it is read-only",
    "reference": "it is read-only",
}


def url_scheme(value: str) -> str | None:
    """The lower-cased scheme of a URL (``s3``, ``file``, ...); None for a plain path."""
    if "://" not in value:
        return None
    return value.split("://", 1)[0].lower()


def parse_url(value: Any, path: str = FIELD) -> str:
    """Check a ``checkpoint.storage`` value; return it normalised (no trailing ``/``).

    Raises:
        ConfigError: Not a string, a relative path, an unknown or useless scheme, a
            bucket missing, or credentials in the URL.
    """
    if not isinstance(value, str) or not value.strip():
        raise ConfigError(path, "must be a storage URL (s3://bucket/prefix) or an absolute "
                                "path", value)
    text = value.strip()
    scheme = url_scheme(text)
    if scheme is None:
        if not text.startswith("/"):
            raise ConfigError(path, "a path must be absolute (every node resolves it the "
                                    "same way), or use a URL such as s3://bucket/prefix",
                              value)
        return text.rstrip("/") or "/"
    parts = urlsplit(text)
    if parts.password or ("@" in parts.netloc and scheme in ("s3", "gs", "gcs")):
        raise ConfigError(path, "credentials do not belong in the URL (it is written to the "
                                "study and the logs): give them in the environment of each "
                                "node (e.g. AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY, an "
                                "instance profile, GOOGLE_APPLICATION_CREDENTIALS)",
                          _without_secrets(text))
    if scheme in USELESS_SCHEMES:
        raise ConfigError(path, f"{scheme}:// cannot hold checkpoints: "
                                f"{USELESS_SCHEMES[scheme]}", value)
    if scheme == "file":
        if not parts.path.startswith("/") or parts.netloc not in ("", "localhost"):
            raise ConfigError(path, "a file:// URL needs an absolute path (file:///abs/path)",
                              value)
    elif scheme not in PYARROW_SCHEMES and scheme not in _fsspec_schemes():
        raise ConfigError(path, f"unknown storage scheme '{scheme}': use s3://, gs://, "
                                f"abfs://, hdfs://, file:// or an absolute path (or a "
                                f"scheme fsspec knows)", value)
    if scheme in ("s3", "gs", "gcs") and not parts.netloc:
        raise ConfigError(path, f"{scheme}:// needs a bucket ({scheme}://bucket/prefix)", value)
    return text.rstrip("/")


def _fsspec_schemes() -> frozenset[str]:
    try:
        from fsspec.registry import known_implementations
    except ImportError:
        return frozenset()
    return frozenset(known_implementations)


def _without_secrets(url: str) -> str:
    parts = urlsplit(url)
    host = parts.netloc.rsplit("@", 1)[-1]
    return urlunsplit((parts.scheme, f"***@{host}", parts.path, "", ""))
