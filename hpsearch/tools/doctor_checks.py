"""One doctor check's outcome (:class:`Check`), and how a list of them prints.

Pure module: a check is plain data, rendered one line each with a status mark and, when
not ok, an indented ``fix:`` line; or as JSON. Any ``fail`` makes the exit code 1.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from typing import Iterable, Sequence

OK = "ok"
WARN = "warn"
FAIL = "fail"
STATUSES = (OK, WARN, FAIL)
MARKS = {OK: "[ok]  ", WARN: "[warn]", FAIL: "[FAIL]"}


@dataclass(frozen=True)
class Check:
    """The outcome of one check.

    Attributes:
        name: What was checked (``torch``, ``nvml``, ``run dir``, ...).
        status: ``ok``, ``warn`` (works, but worth knowing) or ``fail`` (something a
            run needs is broken).
        message: One line: what was found.
        fix: What to do about it; empty when ``status`` is ``ok``.
    """

    name: str
    status: str
    message: str
    fix: str = ""

    def __post_init__(self) -> None:
        if self.status not in STATUSES:
            raise ValueError(f"status must be one of {STATUSES}, got {self.status!r}")

    def to_dict(self) -> dict[str, str]:
        return asdict(self)


def render(checks: Iterable[Check]) -> list[str]:
    """One line per check (``[ok]   name: message``), plus ``fix:`` lines when not ok."""
    lines = []
    for check in checks:
        lines.append(f"{MARKS[check.status]} {check.name}: {check.message}")
        if check.status != OK and check.fix:
            lines.append(f"       fix: {check.fix}")
    return lines


def to_json(checks: Iterable[Check]) -> str:
    """The checks as a JSON list of ``{name, status, message, fix}``."""
    return json.dumps([c.to_dict() for c in checks], indent=2)


def exit_code(checks: Iterable[Check]) -> int:
    """1 if any check failed, else 0."""
    return 1 if any(c.status == FAIL for c in checks) else 0


def summary(checks: Sequence[Check]) -> str:
    """``3 ok, 1 warning, 0 failed``."""
    counts = {s: sum(c.status == s for c in checks) for s in STATUSES}
    return (f"{counts[OK]} ok, {counts[WARN]} warning(s), {counts[FAIL]} failed")

