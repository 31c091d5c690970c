"""How a session ends: the core closed, the ledger's open intervals closed (no money
goes unbilled), and the error the session ends with: stopped by the trainable's contract,
interrupted, halted by a full disk, or no trial completed."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any, Callable

from hpsearch.driver.interrupts import Signals, SignalsHeld, disk_full, interrupted_text
from hpsearch.errors import RunFailed, RunInterrupted
from hpsearch.money.ledger_entries import FAILED
from hpsearch.recovery import faults
from hpsearch.report.progress import Progress

log = logging.getLogger("hpsearch")


class SessionEnd:
    """Ends a session and keeps why it stopped early.

    Args:
        accountant: The run's :class:`~hpsearch.money.budget.Accountant` (its ledger's
            open intervals are closed here).
        clock: Seconds on the clock the ledger bills by (the backend's).
        run_path: The run dir (named by the interrupted and disk-full errors).
        url: The study's storage URL (a full disk may be its SQLite file's).
        signals: The run's signal handlers (the exit code of an interruption).
        out: Receives the session's last status line and the line saying how many
            trials failed.
    """

    def __init__(self, accountant: Any, clock: Callable[[], float], run_path: Path,
                 url: str, signals: Signals, out: Callable[[str], None]):
        self.accountant = accountant
        self.clock = clock
        self.run_path = run_path
        self.url = url
        self.signals = signals
        self.out = out
        #: Why the session stopped before ``search.n_trials`` (budget), or None.
        self.stop_reason: str | None = None
        #: The budget closed the session (more money continues it).
        self.budget_closed = False

    def close(self, core, progress: Progress) -> RunFailed | None:
        """End the session in the core; raise if it was stopped early, interrupted or
        halted by a full disk; return the error to raise after the summary when no trial
        completed."""
        halted = core.halt_reason is not None
        interrupted = core.abort is None and (halted or bool(core.live))
        with SignalsHeld():
            leftover = core.close(interrupted=interrupted)
            # The session's last status line, once the close has settled what waited
            # (paused trials nobody resumed are pruned there and counted as done).
            self.out(progress.status())
        if halted:
            # A trial could not write its checkpoint: it and the others stay resumable.
            self.close_ledger()
            raise faults.DiskFull(core.halt_reason, self.run_path)
        with SignalsHeld():
            self.accountant.ledger.close_all(self.clock(), FAILED)
        self.stop_reason = core.stop_reason
        self.budget_closed = (core.closed_by_budget
                              or self.accountant.run_stop_reason() is not None)
        if core.abort is not None:
            raise core.abort
        if interrupted:
            raise RunInterrupted(interrupted_text(self.run_path, len(leftover)),
                                 self.signals.exit_code)
        return self._failures(progress, core.failures)

    def _failures(self, progress: Progress, failures: list) -> RunFailed | None:
        """Say how many trials of the session failed and where their logs are; the
        error to raise when none completed (after the summary is written)."""
        from hpsearch.core.failures import SessionOutcome, logs_line, session_verdict

        tally = progress.tally
        line = progress.failures_line(logs_line(failures))
        if line:
            self.out(line)
        if session_verdict(tally.complete, tally.pruned + tally.budget_stopped, tally.failed) \
                is SessionOutcome.ALL_FAILED:
            first = next((f for f in failures if f.log), failures[0] if failures else None)
            detail = ""
            if first is not None:
                detail = f"; trial {first.number}: {first.error}" + (
                    f" (traceback in {first.log})" if first.log else "")
            return RunFailed(f"no trial completed: {tally.failed} failed{detail}")
        return None

    def close_ledger(self) -> bool:
        """Close every open interval now, as failed (their work since the last
        checkpoint is lost: they resume from it). False if the ledger could not be
        written (a full disk): the next run closes them at their last alive event."""
        with SignalsHeld():
            try:
                self.accountant.ledger.close_all(self.clock(), FAILED)
                return True
            except OSError:
                log.warning("could not close the ledger's open intervals", exc_info=True)
                return False

    def stopped_by(self, exc: BaseException, core) -> None:
        """``tuner.fit()`` raised: a second Ctrl-C/SIGTERM, a full disk, or a bug.

        The trials that were running stay unfinished in the study (the next run resumes
        them) and their intervals are closed now, so no money goes unbilled. Raises the
        error to report (RunInterrupted, DiskFull) or returns to let ``exc`` propagate.
        """
        interrupted = isinstance(exc, KeyboardInterrupt)
        full = None if interrupted else disk_full(exc, self.run_path, self.url)
        self.close_ledger()
        if interrupted:
            unfinished = len(core.close(interrupted=True))
            raise RunInterrupted(interrupted_text(self.run_path, unfinished),
                                 self.signals.exit_code) from None
        if full is not None:
            raise full from None
