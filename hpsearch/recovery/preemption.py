"""Preemption: notices inside a trial, and the simulated preemptions of the driver.

Pure module (standard library only). Inside a trial process:

* :class:`Notice` is the flag a trial checks at each epoch end: set by SIGTERM or by an
  interruption notice, with a deadline (the grace the platform gives: AWS 2 minutes,
  GCP 30 s).
* :func:`watch_sigterm` composes with the handlers already installed: in the main
  thread it chains a signal handler before the previous one; in a Ray Tune trial (whose
  training runs in a worker thread while Ray's own SIGTERM handler exits the main
  thread) it registers an exit hook that sets the notice and, if the trial sits between
  two epochs, checkpoints the epoch in hand at once, else waits, up to the grace, for
  the epoch to end. Ray ends a worker a few seconds after SIGTERM whatever the grace:
  a partial epoch is then lost (at most one checkpoint interval).
* :class:`NoticePoller` polls a metadata URL (AWS ``spot/instance-action``: 404 until a
  notice, then JSON; GCP ``instance/preempted``: ``FALSE`` until ``TRUE``).

In the driver, :class:`SimulatedPreemptions` decides, seeded, when each running trial is
preempted (a Poisson rate per trial-hour, or scripted epochs); the Ray adapter really
kills the trial's process then.
"""

from __future__ import annotations

import atexit
import math
import random
import signal
import threading
import time
import urllib.error
import urllib.request
from typing import Any, Callable


class Notice:
    """A trial's "you are being preempted" flag, with a deadline.

    Attributes:
        reason: Why (``SIGTERM``, ``notice: <url>``, ...), empty until set.
        deadline: ``time.monotonic()`` by which the process will be gone.
        via_signal: The main thread is exiting (Ray's SIGTERM handler): results can no
            longer be reported, only checkpoints written.
    """

    def __init__(self) -> None:
        self._event = threading.Event()
        self.reason = ""
        self.deadline = float("inf")
        self.via_signal = False
        self.handled = threading.Event()  # the trial checkpointed and is stopping

    def set(self, reason: str, grace_s: float, via_signal: bool = False) -> None:
        if self._event.is_set():
            return
        self.reason = reason
        self.deadline = time.monotonic() + grace_s
        self.via_signal = via_signal
        self._event.set()

    def is_set(self) -> bool:
        return self._event.is_set()

    def remaining_s(self) -> float:
        return self.deadline - time.monotonic()


def watch_sigterm(notice: Notice, grace_s: float,
                  on_signal: Callable[[], bool] | None = None) -> Callable[[], None]:
    """Make SIGTERM set ``notice`` without replacing the handlers already there.

    Args:
        notice: Set on SIGTERM.
        grace_s: The time the process is expected to have left.
        on_signal: Called right after the notice is set (in the signal or exit hook);
            returns True if it saved what there was to save, so there is nothing to
            wait for (e.g. the trial sits between two epochs).

    Returns a function that undoes it (for trials that end normally in a reused
    process).
    """
    if threading.current_thread() is threading.main_thread():
        previous = signal.getsignal(signal.SIGTERM)

        def handler(signum, frame):
            notice.set("SIGTERM", grace_s, via_signal=True)
            if on_signal is None or not on_signal():
                notice.handled.wait(max(0.0, notice.remaining_s()))
            if callable(previous):
                previous(signum, frame)
            elif previous == signal.SIG_DFL:
                signal.signal(signal.SIGTERM, signal.SIG_DFL)
                signal.raise_signal(signal.SIGTERM)

        signal.signal(signal.SIGTERM, handler)
        return lambda: signal.signal(signal.SIGTERM, previous)

    # Not the main thread (a Ray Tune function trainable): Ray's own SIGTERM handler
    # raises SystemExit in the main thread; the exit hook below runs before the process
    # ends and gives the training thread its grace to checkpoint.
    def at_exit() -> None:
        notice.set("SIGTERM", grace_s, via_signal=True)
        if on_signal is not None and on_signal():
            return
        notice.handled.wait(max(0.0, notice.remaining_s()))

    atexit.register(at_exit)
    return lambda: atexit.unregister(at_exit)


def is_notice(status: int, body: str) -> bool:
    """Whether a metadata answer announces an interruption.

    AWS ``spot/instance-action``: 404 without a notice, 200 with a JSON action. GCP
    ``instance/preempted``: 200 with ``FALSE`` or ``TRUE``.
    """
    if status != 200:
        return False
    text = body.strip().lower()
    return text not in ("", "false", "0", "none", "null")


class NoticePoller(threading.Thread):
    """Polls ``url`` every ``poll_s`` seconds and sets ``notice`` on an interruption."""

    def __init__(self, url: str, poll_s: float, notice: Notice, grace_s: float):
        super().__init__(daemon=True, name="hps-notice-poller")
        self.url, self.poll_s, self.notice, self.grace_s = url, poll_s, notice, grace_s
        self._stop = threading.Event()
        self.errors = 0

    def check(self) -> bool:
        request = urllib.request.Request(self.url, headers={"Metadata-Flavor": "Google"})
        try:
            with urllib.request.urlopen(request, timeout=2) as response:
                return is_notice(response.status, response.read().decode(errors="replace"))
        except urllib.error.HTTPError as exc:
            return is_notice(exc.code, "")
        except (urllib.error.URLError, OSError):
            self.errors += 1
            return False

    def run(self) -> None:
        while not self._stop.is_set():
            if self.check():
                self.notice.set(f"notice: {self.url}", self.grace_s)
                return
            self._stop.wait(self.poll_s)

    def stop(self) -> None:
        self._stop.set()


def preemption_delay_s(seed: int, trial: int, attempt: int, rate_per_hour: float) -> float:
    """Seconds after attempt ``attempt`` of ``trial`` starts at which it is preempted.

    A seeded Poisson process: each (seed, trial, attempt) has its own stream, so a run
    replays exactly and a restart draws afresh. ``inf`` for a rate of 0 or less. The one
    draw both the real driver (:class:`SimulatedPreemptions`) and the simulator
    (:class:`hpsearch.simulate.Preemptions`) use.
    """
    if rate_per_hour <= 0:
        return math.inf
    return random.Random(f"{seed}:{trial}:{attempt}").expovariate(rate_per_hour / 3600.0)


class SimulatedPreemptions:
    """When the driver preempts each trial (seeded, reproducible).

    Args:
        rate_per_hour: Poisson rate per trial-hour of running time; 0 = none.
        at: Scripted ``(trial number, epoch)`` pairs: preempt the trial right after it
            reports that epoch, once.
        seed: Seeds the random draws; each (trial, attempt) has its own stream.
    """

    def __init__(self, rate_per_hour: float = 0.0,
                 at: tuple[tuple[int, int], ...] = (), seed: int = 0):
        self.rate_per_hour = rate_per_hour
        self.at = set(at)
        self.seed = seed

    def draw_after_s(self, trial: int, attempt: int) -> float | None:
        """Seconds after an attempt starts at which it is preempted; None = never."""
        if self.rate_per_hour <= 0:
            return None
        return preemption_delay_s(self.seed, trial, attempt, self.rate_per_hour)

    def scripted(self, trial: int, epoch: int) -> bool:
        """Whether a scripted preemption falls right after ``trial`` reports ``epoch``
        (each fires once)."""
        if (trial, epoch) in self.at:
            self.at.discard((trial, epoch))
            return True
        return False


#: Phrases of Ray's errors when a trial's node went away (a spot node taken back).
NODE_LOST_PHRASES = ("node has died", "node was terminated", "nodediederror", "node died")


def node_lost(error_text: str) -> bool:
    """Whether an error's text says the trial's node went away."""
    text = error_text.lower()
    return any(phrase in text for phrase in NODE_LOST_PHRASES)


#: Phrases of Ray's errors when a trial's process could not be reached: its node may be
#: gone before Ray noticed (the caller's connection was reset first), so the backend
#: asks Ray whether the node died before it calls the attempt a failure.
UNREACHABLE_PHRASES = ("actorunavailableerror", "the actor is temporarily unavailable")


def unreachable(error_text: str) -> bool:
    """Whether an error's text says the trial's process could not be reached (its node
    may have gone: see ``node_gone`` in :func:`preemption_reason`)."""
    text = error_text.lower()
    return any(phrase in text for phrase in UNREACHABLE_PHRASES)


def preemption_reason(*, notice: str | None = None, killed: str | None = None,
                      note: dict[str, Any] | None = None,
                      error_text: str = "", node_gone: bool = False) -> str | None:
    """Why an attempt that is gone was preempted, or None if it was not.

    The one place preemption is recognised, from every kind of evidence a backend has:

    Args:
        notice: The reason the trial reported with its last result after a notice
            (SIGTERM, a metadata notice): it checkpointed and left.
        killed: The reason the simulated-preemption injector gave, if it killed the
            attempt.
        note: The note the attempt's process left in its checkpoint folder when SIGTERM
            reached it between two results (``{"reason", "epoch"}``).
        error_text: The attempt's error, if it failed: a lost node is a preemption.
        node_gone: Whether Ray reported the attempt's node dead after the attempt's
            error (an error that only says its process was unreachable, see
            :func:`unreachable`, is a preemption when its node died).
    """
    if notice:
        return notice
    if killed:
        return killed
    if note:
        return f"{note.get('reason', 'preempted')} at epoch {note.get('epoch')}"
    if error_text and node_lost(error_text):
        return "its node went away"
    if node_gone:
        return "its node went away"
    return None
