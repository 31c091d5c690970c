"""Write a :class:`~hpsearch.report.report.Report` as HTML, CSV, JSON and Markdown.

Pure module: plotly is imported only when HTML is written. Each format's text comes
from its module: the HTML page (:mod:`.html_page`, with the plots of :mod:`.plots`),
CSV, JSON and Markdown (:mod:`.plain_formats`); this module writes them.

Every file is written atomically: into a temporary file in the same folder, flushed to
disk, then renamed over the old one. A write that fails (a full disk) leaves the
previous report files as they were, or none, and raises :class:`ReportWriteError`.
"""

from __future__ import annotations

import errno
import io
import os
import secrets
from pathlib import Path
from typing import Callable, Iterable

from hpsearch.errors import ConfigError, HpsearchError
from hpsearch.report.html_page import html_parts
from hpsearch.report.plain_formats import csv_text, json_text, markdown
from hpsearch.report.report import Report

#: Output formats and their file names.
FORMATS = {"html": "report.html", "csv": "report.csv", "json": "report.json",
           "md": "report.md"}


def parse_formats(text: str) -> list[str]:
    """``"html,csv"`` -> ``["html", "csv"]``; ConfigError naming an unknown format."""
    names = [part.strip().lower() for part in text.split(",") if part.strip()]
    if not names:
        raise ConfigError("--format", "names no format; use html, csv, json or md", text)
    for name in names:
        if name not in FORMATS:
            raise ConfigError("--format", f"unknown format {name!r}; use html, csv, json or md",
                              text)
    return list(dict.fromkeys(names))


class ReportWriteError(HpsearchError):
    """A report file could not be written; the files already there are unchanged.

    The message is one line naming the path and the cause: ``disk full at PATH`` when
    the disk (or a quota) is full, else ``cannot write PATH: <cause>``.

    Args:
        path: The file (or folder) that could not be written.
        exc: The operating system's error.
    """

    def __init__(self, path: Path, exc: OSError):
        self.path = path
        self.errno = getattr(exc, "errno", None)
        if self.errno in (errno.ENOSPC, errno.EDQUOT):
            text = f"disk full at {path}"
        else:
            text = f"cannot write {path}: {getattr(exc, 'strerror', None) or exc}"
        super().__init__(text + "; the report files already there are unchanged")


def write(report: Report, out_dir: str | Path, formats: Iterable[str] = tuple(FORMATS),
          version: str | None = None) -> list[Path]:
    """Write ``report`` into ``out_dir`` (created) as ``report.<format>``; return the paths.

    All-or-nothing as far as a file system allows: every format is first written to a
    temporary file beside its target and flushed to disk; only when all of them are
    there are they renamed over the old files. A failure on the way removes the
    temporary files and leaves every old report file as it was.

    Raises:
        ReportWriteError: the folder or a file could not be written (disk full, no
            permission).
    """
    out = Path(out_dir)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ReportWriteError(out, exc) from None
    names = list(formats)
    staged: list[tuple[Path, Path]] = []
    try:
        for name in names:
            path = out / FORMATS[name]
            staged.append((_stage(path, RENDERERS[name](report, version)), path))
        for temp, path in staged:
            try:
                os.replace(temp, path)
            except OSError as exc:
                raise ReportWriteError(path, exc) from None
    finally:
        for temp, _ in staged:
            _remove(temp)
    _sync_folder(out)
    return [out / FORMATS[name] for name in names]


def atomic_write(path: str | Path, chunks: Iterable[str]) -> Path:
    """Write the text ``chunks`` to ``path`` atomically (UTF-8); return the path.

    The text goes to a temporary file in the same folder, is flushed and fsynced, and
    replaces ``path`` by a rename: a reader sees the old file or the new one, never
    part of one. If writing fails, or ``chunks`` raises, the temporary file is removed
    and ``path`` is left as it was (or absent).

    Raises:
        ReportWriteError: the operating system refused the write (the error of
            ``chunks`` itself propagates unchanged).
    """
    path = Path(path)
    temp = _stage(path, chunks)
    try:
        os.replace(temp, path)
    except OSError as exc:
        raise ReportWriteError(path, exc) from None
    finally:
        _remove(temp)
    _sync_folder(path.parent)
    return path


def _stage(path: Path, chunks: Iterable[str]) -> Path:
    """Write ``chunks`` into a new temporary file beside ``path``; return its path."""
    # Hidden, unique and in the same folder: the rename stays on one file system.
    temp = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
    try:
        # 0o666 under the umask: the report gets the permissions of any new file.
        fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
    except OSError as exc:
        raise ReportWriteError(path, exc) from None
    f = io.open(fd, "w", encoding="utf-8", newline="")
    try:
        for chunk in chunks:
            f.write(chunk)
        f.flush()
        os.fsync(f.fileno())
        f.close()
    except BaseException as exc:
        try:
            f.close()  # on a full disk this flushes again and fails again: never mind
        except OSError:
            pass
        _remove(temp)
        if isinstance(exc, OSError):
            raise ReportWriteError(path, exc) from None
        raise
    return temp


def _remove(path: Path) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


def _sync_folder(folder: Path) -> None:
    """Make the renames durable; a file system that cannot sync a folder is let be."""
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def write_csv(report: Report, path: Path, version: str | None = None) -> None:
    """Write :func:`~hpsearch.report.plain_formats.csv_text` to ``path`` atomically."""
    atomic_write(path, [csv_text(report, version)])


def write_json(report: Report, path: Path, version: str | None = None) -> None:
    """Write :func:`~hpsearch.report.plain_formats.json_text` to ``path`` atomically."""
    atomic_write(path, [json_text(report, version)])


def write_markdown(report: Report, path: Path, version: str | None = None) -> None:
    """Write :func:`~hpsearch.report.plain_formats.markdown` to ``path`` atomically."""
    atomic_write(path, [markdown(report, version)])


def write_html(report: Report, path: Path, version: str | None = None) -> None:
    """Write :func:`~hpsearch.report.html_page.html_document` to ``path`` atomically."""
    atomic_write(path, html_parts(report, version))


#: The text of each format, as chunks for :func:`atomic_write`.
RENDERERS: dict[str, Callable[[Report, str | None], Iterable[str]]] = {
    "html": html_parts,
    "csv": lambda report, version: [csv_text(report, version)],
    "json": lambda report, version: [json_text(report, version)],
    "md": lambda report, version: [markdown(report, version)],
}
