"""Pausing and resuming trials end to end (issue 14): a real local Ray, a real SQLite
study, real Lightning training on CPU, the ``cost_aware`` policy at its defaults.

Thirteen trials run two at a time, enqueued in the order of ``tests/pause_curves.py``;
each logs a scripted curve as its objective (``tests/pause_trainables.py``), indexed by
the epochs its *model* trained, so a resume that does not restore the model's state
shows in the values. The curves are built so that the story below does not hang on one
constant of the policy (``tests/test_pause_design.py`` replays them in the simulator,
at other aggressiveness values and with random start-up delays):

* ``incumbent`` and ``late_riser`` finish first (0.61 and 0.60; the second gains 0.5
  after epoch 3, so intervals predicted from the finished curves are wide);
* three ``spike`` trials lead at epoch 3 and then fall apart (stopped);
* the ``slow_starter`` stalls at epoch 3, 5th of 6 there: cut by the ranks, with an
  interval that still reaches the incumbent, so it is *paused*. Each ``diverges`` trial
  (promising for two epochs, last from epoch 3) is new evidence at epoch 3 below it;
  once it ranks within the kept share there it is *resumed*, from its epoch-3
  checkpoint, leads from epoch 4 and wins (0.90);
* the ``weak_starter`` is paused at epoch 2 (7th of 7) and every later trial passes it
  there. Whether the policy still resumes it (today's rule never does; one that gives a
  paused trial a last chance once no new configuration is left may), every pause must
  keep its promise: the trial trains on from the checkpoint of the epoch it paused at,
  or ends PRUNED at the end with the reason it was paused.

Each epoch sleeps (``SLEEP_SCALE``) so that the order in which trials reach an epoch is
the design's, not the load's. The driver-kill test SIGKILLs the driver's process group
while the slow starter is paused and continues with ``python -m hpsearch resume``.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Callable

import optuna
import pytest
from optuna.trial import FrozenTrial, TrialState

import hpsearch
from hpsearch import keys
from hpsearch.adapters.optuna.results import load_report
from hpsearch.money.ledger import Ledger
from hpsearch.money.ledger_entries import DONE, STOPPED, Interval

from .pause_curves import CURVES, EPOCHS, ORDER
from .test_e2e_faults import CONTINUING, ENV, SPENT
from .test_e2e_restart import enqueued_run

pytestmark = pytest.mark.slow

NAME = "pause"
SLOW, WEAK = ORDER.index("slow_starter"), ORDER.index("weak_starter")
#: The slow starter is paused after this epoch (the stall of its curve).
PAUSED_AT = 3
#: Seconds per epoch of sleep, times each kind's factor.
SLEEP_SCALE = 0.5
#: One money unit per second of the machine: amounts read as seconds.
PRICE = {"price_per_hour": 3600.0, "currency": "USD"}
PAUSED_LINE = re.compile(r"trial (\d+) paused after (\d+) epoch\(s\)")
ORPHANS = re.compile(r"resuming \d+ unfinished trial\(s\) \(([0-9, ]+)\)")
PAUSED_COUNT = re.compile(r"; (\d+) paused")


def spec() -> dict:
    return {
        "name": NAME, "trainable": "tests.pause_trainables:scripted",
        "objective": {"metric": "score", "mode": "max"}, "max_epochs": EPOCHS,
        "space": {"kind": {"type": "categorical", "choices": sorted(CURVES)},
                  "sleep_scale": SLEEP_SCALE},
        "search": {"sampler": "random", "n_trials": len(ORDER), "concurrency": 2},
        "pruning": {"policy": "cost_aware"},
        "pricing": PRICE,
    }


def prepare(folder: Path) -> Path:
    """``folder/run``, whose study holds the trials of ORDER enqueued (numbers = index)."""
    return enqueued_run(folder, NAME, spec(), [{"kind": kind} for kind in ORDER])


def trials_of(run: Path) -> list[FrozenTrial]:
    study = optuna.load_study(study_name=NAME, storage=f"sqlite:///{run / 'optuna.db'}")
    return sorted(study.get_trials(), key=lambda t: t.number)


def lifecycle(trial: FrozenTrial) -> str | None:
    return trial.user_attrs.get("lifecycle")


def attempts(ledger: Ledger, number: int) -> list[Interval]:
    """The trial's billed attempts, in the order they started."""
    return sorted((i for i in ledger.intervals if i.trial == number), key=lambda i: i.start_s)


# -- what every run must end with --------------------------------------------------------


def check_curves(trials: list[FrozenTrial]) -> None:
    """One intermediate value per epoch from 1 to the last, each the uninterrupted
    curve's value at that epoch (no repeat, no gap, nothing from a restart's start)."""
    for t in trials:
        steps = t.intermediate_values
        last = max(steps)
        assert sorted(steps) == list(range(1, last + 1)), (t.number, sorted(steps))
        expected = CURVES[t.params["kind"]][:last]
        assert [steps[e] for e in range(1, last + 1)] == pytest.approx(expected, abs=1e-6), (
            t.number, steps)
        assert t.user_attrs["epochs"] == last
        if t.state is TrialState.COMPLETE:
            assert last == EPOCHS and t.value == pytest.approx(expected[-1], abs=1e-6)


def check_states(trials: list[FrozenTrial]) -> None:
    assert [t.params["kind"] for t in trials] == list(ORDER)
    for t in trials:
        assert t.state in (TrialState.COMPLETE, TrialState.PRUNED), (t.number, t.state)
        assert lifecycle(t) == t.state.name.lower(), (t.number, lifecycle(t))
        if t.state is TrialState.PRUNED:
            assert t.user_attrs["stop_reason"].startswith("cost_aware: "), t.user_attrs
        else:
            assert t.user_attrs.get("stop_reason") is None, t.user_attrs


def check_money(run: Path) -> Ledger:
    """The ledger is the record: the study's spent figure, the report's total and each
    trial's cost attributes (read as the report reads them) are its figures."""
    ledger = Ledger(run / "ledger.jsonl")
    assert ledger.open_trials() == []
    report, _ = load_report(run)
    study = optuna.load_study(study_name=NAME, storage=f"sqlite:///{run / 'optuna.db'}")
    total = ledger.spent()
    assert total > 0
    assert study.user_attrs["spent"] == pytest.approx(total, abs=1e-6)
    assert report.summary["total_cost"] == pytest.approx(total, abs=1e-6)
    rows = {row["number"]: row for row in report.trials}
    assert sorted(rows) == ledger.trials() == list(range(len(ORDER)))  # every trial paid
    for number, row in rows.items():
        assert row["cost"] == pytest.approx(ledger.spent(trial=number), abs=1e-9), number
        assert row["wasted_cost"] == pytest.approx(ledger.wasted(trial=number), abs=1e-9)
    summary = report.summary
    assert sum(row["cost"] for row in rows.values()) == pytest.approx(
        summary["kept_cost"] + summary["wasted_cost"], abs=1e-6)
    assert total == pytest.approx(summary["kept_cost"] + summary["wasted_cost"]
                                  + summary["idle_cost"], abs=1e-6)
    return ledger


def check_end(run: Path) -> tuple[list[FrozenTrial], Ledger]:
    trials = trials_of(run)
    check_states(trials)
    check_curves(trials)
    return trials, check_money(run)


def check_slow_starter_won(trials: list[FrozenTrial]) -> None:
    slow = trials[SLOW]
    assert slow.state is TrialState.COMPLETE, slow.user_attrs
    assert max(trials, key=lambda t: t.value or 0.0).number == SLOW
    assert PAUSED_AT in slow.user_attrs["resumed_from_epochs"]
    # Resumed, the reason it waited no longer holds.
    assert slow.user_attrs.get("stop_reason") is None, slow.user_attrs["stop_reason"]


def pauses(text: str) -> dict[int, list[int]]:
    """The pauses a run printed: trial -> the epochs it was paused after, in order."""
    out: dict[int, list[int]] = {}
    for number, epoch in PAUSED_LINE.findall(text):
        out.setdefault(int(number), []).append(int(epoch))
    return out


def check_paused(trials: list[FrozenTrial], ledger: Ledger,
                 paused: dict[int, list[int]]) -> None:
    """Every pause kept the trial's checkpoint: the trial either trained on later from
    the checkpoint of the epoch it paused at, or was never resumed and ended PRUNED at
    the end of the search with the reason it was paused."""
    for number, epochs in paused.items():
        t, last = trials[number], epochs[-1]
        assert sum(i.outcome is STOPPED for i in attempts(ledger, number)) >= len(epochs)
        # The study records the same pauses, and how many were undone.
        assert t.user_attrs.get(keys.ATTR_PAUSED_AT) == epochs, t.user_attrs
        undone = len(epochs) - (max(t.intermediate_values) == last)
        assert t.user_attrs.get(keys.ATTR_RESUMES, 0) == undone, t.user_attrs
        if max(t.intermediate_values) > last:
            assert set(epochs) <= set(t.user_attrs["resumed_from_epochs"]), t.user_attrs
        else:
            assert t.state is TrialState.PRUNED, (number, t.state)
            assert "paused" in t.user_attrs["stop_reason"], t.user_attrs["stop_reason"]
            assert attempts(ledger, number)[-1].outcome is STOPPED
            assert all(e < last for e in t.user_attrs.get("resumed_from_epochs", []))


# -- one session -------------------------------------------------------------------------


def test_a_slow_starter_is_paused_resumed_from_its_checkpoint_and_wins(ray_cluster, in_tmp):
    run = prepare(in_tmp)
    lines: list[str] = []
    result = hpsearch.run(spec(), run_dir=run, emit=lines.append)

    trials, ledger = check_end(run)
    assert result.best_trial.number == SLOW
    check_slow_starter_won(trials)
    assert trials[SLOW].user_attrs["resumed_from_epochs"] == [PAUSED_AT]
    paused = pauses("".join(f"{line}\n" for line in lines))
    assert paused[SLOW] == [PAUSED_AT] and paused[WEAK] == [2], paused
    check_paused(trials, ledger, paused)
    # The run's summary counts the same pauses.
    (summary,) = [line for line in lines if line.startswith("Paused: ")]
    n = sum(map(len, paused.values()))
    assert summary.startswith(f"Paused: {len(paused)} trial(s) paused"
                              + (f" {n} times;" if n != len(paused) else ";")), summary
    # The slow starter's money covers both attempts: paused (stopped, nothing lost),
    # then resumed.
    first, second = attempts(ledger, SLOW)
    assert (first.outcome, second.outcome) == (STOPPED, DONE)
    assert first.end_s <= second.start_s
    assert first.cost() > 0 and second.cost() > 0
    assert trials[SLOW].user_attrs["cost"] == pytest.approx(first.cost() + second.cost())
    assert ledger.wasted(trial=SLOW) == 0
    # A trial never paused ran once.
    for t in trials:
        if t.number not in paused:
            assert len(attempts(ledger, t.number)) == 1, t.number


# -- a driver SIGKILLed mid-run ----------------------------------------------------------


class Driver:
    """``python -m hpsearch run`` in a process group of its own; its output is read as
    it comes (the money it showed is the floor for the next session's)."""

    def __init__(self, folder: Path):
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "hpsearch", "run", "space.yaml", "--run-dir", "run",
             "--progress-interval", "1"],
            cwd=folder, env=ENV, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
            start_new_session=True)
        self.lines: list[str] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        for line in self.proc.stdout:
            self.lines.append(line)

    def output(self) -> str:
        return "".join(self.lines[-60:])

    def shown_spent(self) -> float:
        shown = SPENT.findall("".join(self.lines))
        assert shown, self.output()
        return float(shown[-1])

    def kill(self) -> float:
        """SIGKILL the driver's process group; return when (ledger clock: wall time)."""
        killed_at = time.time()
        os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(timeout=60)
        self._reader.join(timeout=30)
        return killed_at

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=60)


def wait_for(driver: Driver, run: Path, ready: Callable[[list[FrozenTrial]], bool],
             timeout_s: float = 240) -> None:
    """Poll the study (the driver's writes) until ``ready(trials)``."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if driver.proc.poll() is not None:
            pytest.fail("the driver ended before the moment to kill it:\n" + driver.output())
        try:
            trials = trials_of(run)
        except Exception:  # the driver holds a write lock for a moment
            trials = None
        if trials is not None and ready(trials):
            return
        time.sleep(0.1)
    pytest.fail("the moment to kill the driver never came:\n" + driver.output())


def resume(folder: Path) -> tuple[str, list[int], int, float, str]:
    """``python -m hpsearch resume run``: its first line, the trials it restarts first,
    how many it says are paused, the money it continues from and all it printed."""
    proc = subprocess.run([sys.executable, "-m", "hpsearch", "resume", "run",
                           "--progress-interval", "30"], cwd=folder, env=ENV,
                          capture_output=True, text=True, timeout=400)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    first = proc.stdout.splitlines()[0]
    orphans = ORPHANS.search(first)
    paused = PAUSED_COUNT.search(first)
    return (first, sorted(int(n) for n in orphans.group(1).split(", ")) if orphans else [],
            int(paused.group(1)) if paused else 0, float(CONTINUING.search(first).group(1)),
            proc.stdout)


def unfinished(trials: list[FrozenTrial]) -> tuple[list[int], list[int]]:
    """The study's unfinished trials: running (to restart first) and paused."""
    running = [t.number for t in trials if t.state is TrialState.RUNNING]
    paused = [n for n in running if lifecycle(trials[n]) == "paused"]
    return [n for n in running if n not in paused], paused


def test_a_driver_killed_while_a_trial_is_paused_resumes_it_only_when_the_policy_picks_it(
        in_tmp):
    run = prepare(in_tmp)
    driver = Driver(in_tmp)
    try:
        wait_for(driver, run, lambda trials: lifecycle(trials[SLOW]) == "paused")
        killed_at = driver.kill()
    finally:
        driver.stop()
    shown = driver.shown_spent()
    left = trials_of(run)
    running, paused = unfinished(left)
    assert SLOW in paused, (running, paused)
    epochs_at_kill = {n: len(left[n].intermediate_values) for n in paused}
    assert epochs_at_kill[SLOW] == PAUSED_AT

    first, orphans, n_paused, continued, output = resume(in_tmp)
    # Trials left running restart first; the paused ones stay paused.
    assert orphans == running, first
    assert n_paused == len(paused), first
    assert continued >= shown

    # The session settles every trial not finished before it (the paused ones too:
    # resumed, or pruned at its close), announces that many and counts each as done.
    finished_before = int(re.search(r"(\d+) trial\(s\) finished", first).group(1))
    announced = int(re.search(r"^Search '[^']*': (\d+) trial\(s\)", output, re.M).group(1))
    done, out_of = map(int, re.findall(r"\] (\d+)/(\d+) done:", output)[-1])
    assert done == out_of == announced == len(ORDER) - finished_before, output[-3000:]

    trials, ledger = check_end(run)
    assert ledger.spent() >= shown
    check_slow_starter_won(trials)
    check_paused(trials, ledger, pauses("".join(driver.lines) + output))
    for number in paused:
        # Each ran once before the kill, stopped at its pause (nothing lost) ...
        before, *after = attempts(ledger, number)
        assert before.outcome is STOPPED and before.end_s <= killed_at
        assert ledger.wasted(trial=number) == 0
        if after:
            # ... and once more only when the policy picked it: after a worker that
            # the restarted trials took first was free again, from its checkpoint.
            (again,) = after
            assert again.start_s > killed_at and again.outcome is DONE
            assert epochs_at_kill[number] in trials[number].user_attrs["resumed_from_epochs"]
            if len(orphans) >= 2:
                assert any(i.end_s is not None and killed_at < i.start_s and
                           i.end_s <= again.start_s for i in ledger.intervals), number
        else:
            # ... or never again: PRUNED at the end, with the reason of its pause.
            assert trials[number].state is TrialState.PRUNED
            assert len(trials[number].intermediate_values) == epochs_at_kill[number]
            assert "paused" in trials[number].user_attrs["stop_reason"]
    assert len(attempts(ledger, SLOW)) == 2  # the slow starter was picked
