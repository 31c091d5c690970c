"""What the user sees while a search runs and when it ends (pure formatting).

The Ray adapter feeds a :class:`Tally` and calls :meth:`Progress.tick` often; lines come
out at most every ``interval_s`` seconds plus one per finished trial, so the output is
readable in a terminal and in a log file alike.
"""

from __future__ import annotations

import logging
import math
from pathlib import Path
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Sequence

from hpsearch.core.failures import error_signature


def format_duration(seconds: float) -> str:
    """``83.2`` -> ``"0:01:23"``."""
    seconds = max(0, int(seconds))
    return f"{seconds // 3600}:{seconds % 3600 // 60:02d}:{seconds % 60:02d}"


def format_value(value: Any) -> str:
    if isinstance(value, float):
        return "nan" if math.isnan(value) else f"{value:.4g}"
    return str(value)


@dataclass
class Tally:
    """Counts of this session's trials and the study's best finished one (a continued
    run starts from its earlier sessions' best)."""

    mode: str = "max"
    running: int = 0
    complete: int = 0
    pruned: int = 0
    failed: int = 0
    paused: int = 0
    best_value: float | None = None
    best_number: int | None = None
    budget_stopped: int = 0

    def finished(self, state: str, number: int | None, value: float | None) -> None:
        """Count a trial that ended in ``state`` (COMPLETE, PRUNED, BUDGET_STOPPED,
        PAUSED or FAIL)."""
        if state == "COMPLETE":
            self.complete += 1
            if value is not None and not math.isnan(value) and self.is_better(value):
                self.best_value, self.best_number = value, number
        elif state == "PRUNED":
            self.pruned += 1
        elif state == "BUDGET_STOPPED":
            self.budget_stopped += 1
        elif state == "PAUSED":
            self.paused += 1
        else:
            self.failed += 1

    def is_better(self, value: float) -> bool:
        from hpsearch.spec.objective import better

        return self.best_value is None or better(value, self.best_value, self.mode)


@dataclass
class Progress:
    """Throttled progress lines.

    Args:
        metric: The objective's name.
        n_trials: Trials this session will run.
        emit: Where lines go (``print`` by default).
        clock: Seconds, monotonic; injected for tests.
        interval_s: Least time between two status lines.
        spent: Returns the money spent so far, formatted (shown when given).
        trial_log: Trial number -> the path of its log file (named on the line of a
            failed trial, where its traceback is), or None.
    """

    metric: str
    n_trials: int
    emit: Callable[[str], None]
    clock: Callable[[], float]
    interval_s: float = 10.0
    spent: Callable[[], str] | None = None
    tally: Tally = field(default_factory=Tally)
    trial_log: Callable[[int], str | None] | None = None

    def __post_init__(self) -> None:
        self.started = self.clock()
        self.last_emit = self.started
        # Error signature -> the first failed trial that showed it (lines name it once).
        self._errors: dict[str, Any] = {}

    def status(self) -> str:
        t = self.tally
        best = "-"
        if t.best_value is not None:
            best = f"{format_value(t.best_value)} (trial {t.best_number})"
        done = t.complete + t.pruned + t.failed + t.budget_stopped
        stopped = f"{t.budget_stopped} stopped by budget, " if t.budget_stopped else ""
        return (
            f"[{format_duration(self.clock() - self.started)}] "
            f"{done}/{self.n_trials} done: {t.complete} complete, {t.pruned} pruned, "
            f"{stopped}{t.failed} failed | {t.running} running | best {self.metric} {best}"
            + (f" | spent {self.spent()}" if self.spent is not None else "")
        )

    def tick(self, running: int) -> None:
        """Emit a status line if ``interval_s`` has passed since the last one."""
        self.tally.running = running
        if self.clock() - self.last_emit >= self.interval_s:
            self.emit(self.status())
            self.last_emit = self.clock()

    def trial_ended(self, number: int | None, state: str, epochs: int,
                    value: float | None, error: str | None = None) -> None:
        """Emit one line for a finished trial and count it.

        A failed trial's line says its error (or, when an earlier trial failed with the
        same error, ``same error as trial N``) and names its log.
        """
        self.tally.finished(state, number, value)
        shown = "-" if value is None else format_value(value)
        what = "stopped by budget" if state == "BUDGET_STOPPED" else state.lower()
        line = f"  trial {number} {what} after {epochs} epoch(s): {self.metric}={shown}"
        if error:
            signature = error_signature(error)
            first = self._errors.setdefault(signature, number)
            line += f" | same error as trial {first}" if first != number else f" | {error}"
            log = self.trial_log(number) if self.trial_log and number is not None else None
            if log:
                line += f" (log: {log})"
        self.emit(line)

    def checkpoint_fallback(self, number: int | None, rejected: Sequence[Sequence[str]],
                            start_epoch: int) -> None:
        """Say that a restarted trial set checkpoints aside and resumed from an older one:
        one line per checkpoint, ``(name, reason)`` pairs, newest first."""
        where = f"resumed from epoch {start_epoch}" if start_epoch > 0 \
            else "no valid checkpoint left: restarted from scratch"
        for name, reason in rejected:
            self.emit(f"  trial {number}: checkpoint {name} is corrupt ({reason}); {where}")

    def failures_line(self, logs: str) -> str | None:
        """One line for a session where some trials failed (None when none did):
        how many, and where their logs are."""
        t = self.tally
        if not t.failed:
            return None
        done = t.complete + t.pruned + t.failed + t.budget_stopped
        return (f"{t.failed} of {done} trial(s) failed"
                + (f"; their logs: {logs}" if logs else ""))


def text_table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    """Left-aligned fixed-width columns, a dashed rule under the header, no trailing space."""
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h)
              for i, h in enumerate(header)]
    fmt = "  ".join(f"{{:<{w}}}" for w in widths)
    lines = [list(header), ["-" * w for w in widths], *rows]
    return [fmt.format(*line).rstrip() for line in lines]


def top_table(rows: Sequence[dict[str, Any]], metric: str, params: Iterable[str],
              limit: int = 5) -> list[str]:
    """Render the best trials as a fixed-width text table (already sorted best first).

    Each row has ``number``, ``state``, ``value``, ``epochs`` and ``params``.
    """
    params = list(params)
    header = ["trial", "state", metric, "epochs", *params]
    body = [
        [
            str(r["number"]),
            r["state"],
            "-" if r["value"] is None else format_value(r["value"]),
            str(r["epochs"]),
            *(format_value(r["params"].get(p, "")) for p in params),
        ]
        for r in rows[:limit]
    ]
    return text_table(header, body)


class SessionListener:
    """What the search core tells the user as it happens (a core ``Listener``).

    One line per trial that finishes (or is paused), one per trial that will start again
    (preempted, retried, moved to another node kind), into :class:`Progress`.

    Args:
        progress: The session's progress lines.
        log: Also told each line's substance (the driver log) with its logging level:
            WARNING for a failure, a preemption or a retry, INFO for a resume; or None.
    """

    #: How each final lifecycle state is counted and named.
    COUNTED = {"complete": "COMPLETE", "pruned": "PRUNED",
               "budget_stopped": "BUDGET_STOPPED", "failed": "FAIL", "paused": "PAUSED"}

    def __init__(self, progress: Progress, log: Callable[[int, str], None] | None = None):
        self.progress = progress
        self.log = log or (lambda level, line: None)

    def trial_finished(self, record: Any) -> None:
        state = record.state.value
        self.progress.trial_ended(record.number, self.COUNTED.get(state, state.upper()),
                                  record.epoch, record.value, record.error)
        if record.error:
            self.log(logging.WARNING, f"trial {record.number} failed: {record.error}")

    def trial_requeued(self, record: Any, event: Any, reason: str) -> None:
        kind = getattr(event, "value", str(event))
        level = logging.WARNING
        if kind in ("preempted", "failed"):
            line = (f"  trial {record.number} {kind} after epoch {record.epoch} ({reason}); "
                    f"restarting from its checkpoint at epoch {record.checkpoint_epoch}")
        elif kind == "resumed":
            # A paused trial runs again: no longer counted as paused.
            self.progress.tally.paused = max(0, self.progress.tally.paused - 1)
            level = logging.INFO
            line = (f"  trial {record.number} resumed after {record.epoch} epoch(s) "
                    f"({reason}), from its checkpoint at epoch {record.checkpoint_epoch}")
        else:
            line = f"  trial {record.number}: {reason}"
        self.progress.emit(line)
        self.log(level, line.strip())


def display_path(path: Path) -> str:
    """``path`` relative to the working directory when it is below it."""
    try:
        return str(path.relative_to(Path.cwd()))
    except ValueError:
        return str(path)


def display_url(url: str, run_dir: Path) -> str:
    """A storage URL as shown: a SQLite file relative to the working directory."""
    if url.startswith("sqlite:///"):
        return "sqlite:///" + display_path(Path(url[len("sqlite:///"):]))
    return url
