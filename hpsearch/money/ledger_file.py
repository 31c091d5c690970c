"""The ledger's file: JSON lines, one event a line, append-only, named by a header.

Pure module. The file is the ledger's persistence (:class:`~hpsearch.money.ledger.Ledger`
writes every event here and replays them on open), so a run that is continued, or
resumed after its driver died, still knows what it spent. A write that fails (a full
disk) is undone, so a half line never ends up in the middle of the file; a torn last
line (the write never completed) is dropped before the next append; a torn line the
file holds anywhere else (another writer, a damaged copy) is refused with the way out:
``python -m hpsearch repair RUN_DIR`` (:func:`hpsearch.money.ledger_repair.repair`).

The first line names the ledger (``{"event": "ledger", "id": ..., "version": ...}``):
the study records that id, so a second run dir on a shared study cannot silently start
from zero money. A ledger of a newer format than this hpsearch reads is refused.
"""

from __future__ import annotations

import json
import os
import uuid
from pathlib import Path
from typing import Callable

from hpsearch.errors import HpsearchError

#: Version of the ledger's event format (written in its header): 1 billed trials'
#: intervals on their own; 2 bills nodes (``node``/``release`` events) and each trial's
#: share of its node (``place``, ``startup``).
FORMAT_VERSION = 2
#: The ``event`` of the header line.
HEADER = "ledger"


class LedgerCorrupt(HpsearchError):
    """A line inside the ledger is damaged (exit code 2, nothing written).

    The message names the file and line and the way out: ``python -m hpsearch repair
    RUN_DIR`` keeps every valid event, books the gap, and keeps a backup.
    """

    exit_code = 2

    def __init__(self, path: Path, line: int, why: str):
        self.path, self.line = path, line
        run_dir = shown(path.parent)
        super().__init__(
            f"{shown(path)}:{line}: corrupt ledger line ({why}); repair it with "
            f"python -m hpsearch repair {run_dir} (it keeps every valid event and a "
            f"backup of the file, and reports what it dropped)")


class LedgerTooNew(HpsearchError):
    """The ledger was written by a newer hpsearch (exit code 2, nothing written)."""

    exit_code = 2

    def __init__(self, path: Path | None, version: object):
        where = shown(path) if path is not None else "ledger"
        super().__init__(
            f"{where}: written in ledger format {version}, newer than this hpsearch reads "
            f"(formats 1-{FORMAT_VERSION}); upgrade hpsearch to continue this run dir")


def shown(path: Path) -> str:
    """``path`` as messages show it: relative to the working directory when inside it."""
    try:
        return str(path.relative_to(Path.cwd()))
    except ValueError:
        return str(path)


def line_error(exc: BaseException) -> str:
    """What was wrong with a line whose event could not be applied, in a few words."""
    if isinstance(exc, KeyError):
        return f"missing {exc}"
    return str(exc).splitlines()[0] if str(exc) else type(exc).__name__


class LedgerFile:
    """A ledger's file (or none: ``path`` None keeps the ledger in memory only).

    Attributes:
        path: The JSON-lines file.
        id: The ledger's id (its header), None until read or :meth:`ensure_id`.
        read_version: The format of the file as it was read (None: a new or empty one).
    """

    def __init__(self, path: Path | None):
        self.path = path
        self.id: str | None = None
        self.read_version: int | None = None
        self.cut_to: int | None = None  # bytes of complete lines, if a crash cut one

    def read_header(self, event: dict) -> None:
        """Take the id and format of a header line.

        Raises:
            LedgerTooNew: A newer format than this hpsearch reads.
            ValueError, KeyError: Not a valid header.
        """
        version = event.get("version", 1)
        if not isinstance(version, int) or isinstance(version, bool) or version < 1:
            raise ValueError(f"bad version {version!r}")
        if version > FORMAT_VERSION:
            raise LedgerTooNew(self.path, version)
        self.id = str(event["id"])
        self.read_version = version

    def ensure_id(self) -> str:
        """The ledger's id; a ledger without one (new, or older) gets one written, and an
        older format gets a header of this one (the same id) from here on."""
        if self.id is None:
            self.id = uuid.uuid4().hex
            self.append({"event": HEADER, "id": self.id, "version": FORMAT_VERSION})
        elif self.read_version is not None and self.read_version < FORMAT_VERSION:
            self.append({"event": HEADER, "id": self.id, "version": FORMAT_VERSION})
            self.read_version = FORMAT_VERSION
        return self.id

    def append(self, event: dict) -> None:
        """Append ``event`` as one line; a failed write leaves the file as it was."""
        if self.path is None:
            return
        data = (json.dumps(event, sort_keys=True) + "\n").encode("utf-8")
        if self.cut_to is not None:
            # Drop the half line a crash left before appending after it.
            with self.path.open("r+b") as f:
                f.truncate(self.cut_to)
            self.cut_to = None
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            size = os.fstat(fd).st_size
            try:
                view = memoryview(data)
                while view:
                    view = view[os.write(fd, view):]
            except BaseException:
                # A failed append (disk full, interrupted) must not leave half a line that
                # the next append would bury in the middle of the file.
                try:
                    os.ftruncate(fd, size)
                except OSError:
                    pass
                raise
        finally:
            os.close(fd)

    def replay(self, apply: Callable[[dict], None]) -> None:
        """Call ``apply`` with every event of the file, in order (a missing file has
        none). A torn last line is left out (and cut before the next append).

        Raises:
            LedgerCorrupt: A damaged line (not JSON, or ``apply`` refused it) before the
                last.
            HpsearchError: What ``apply`` raised of its own (another currency, a newer
                format).
        """
        if self.path is None or not self.path.exists():
            return
        lines = self.path.read_bytes().split(b"\n")
        offset = 0
        for n, raw in enumerate(lines, start=1):
            start, offset = offset, offset + len(raw) + 1
            if not raw.strip():
                continue
            last = n == len(lines)  # no newline after it: the write never completed
            try:
                apply(json.loads(raw))
            except json.JSONDecodeError:
                if last:
                    self.cut_to = start
                    break
                raise LedgerCorrupt(self.path, n, "not JSON") from None
            except HpsearchError:
                raise
            except (KeyError, TypeError, AttributeError, ValueError) as exc:
                raise LedgerCorrupt(self.path, n, line_error(exc)) from None
