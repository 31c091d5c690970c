"""A real S3 API server on 127.0.0.1 for tests: moto's standalone server (the one Ray's
own storage tests use), started and stopped by the test, ended by its PID."""

from __future__ import annotations

import socket
import subprocess
import sys
import time

#: Credentials moto accepts (any); the tests give them through the environment, as a
#: node would get its own.
CREDENTIALS = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
               "AWS_DEFAULT_REGION": "us-east-1", "AWS_REGION": "us-east-1"}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class S3Server:
    """``with S3Server() as s3:`` a moto server; ``s3.env`` is what a client needs.

    Args:
        buckets: Buckets created once it answers.
    """

    def __init__(self, buckets: tuple[str, ...] = ("ckpt",)):
        self.port = free_port()
        self.endpoint = f"http://127.0.0.1:{self.port}"
        self.buckets = buckets
        self.proc: subprocess.Popen | None = None
        self.env = {**CREDENTIALS, "AWS_ENDPOINT_URL": self.endpoint}

    def __enter__(self) -> "S3Server":
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(self.port)],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 60
        while True:
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.5).close()
                break
            except OSError:
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    self.__exit__()
                    raise RuntimeError("moto's S3 server did not start "
                                       "(pip install 'moto[server]')")
                time.sleep(0.1)
        from pyarrow import fs

        admin = fs.S3FileSystem(access_key="testing", secret_key="testing",
                                endpoint_override=self.endpoint, scheme="http",
                                allow_bucket_creation=True, region="us-east-1")
        for bucket in self.buckets:
            admin.create_dir(bucket)
        return self

    def __exit__(self, *exc_info) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def set_env(self, monkeypatch) -> None:
        for key, value in self.env.items():
            monkeypatch.setenv(key, value)

    def objects(self, bucket: str = "ckpt") -> dict[str, int]:
        """Every object in ``bucket``: key -> size."""
        from pyarrow import fs

        admin = fs.S3FileSystem(access_key="testing", secret_key="testing",
                                endpoint_override=self.endpoint, scheme="http",
                                region="us-east-1")
        infos = admin.get_file_info(fs.FileSelector(bucket, recursive=True,
                                                    allow_not_found=True))
        return {i.path[len(bucket) + 1:]: i.size for i in infos
                if i.type == fs.FileType.File}

    def pid(self) -> int | None:
        return self.proc.pid if self.proc is not None else None


__all__ = ["S3Server", "CREDENTIALS", "free_port"]
