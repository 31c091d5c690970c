"""Knowledge survives a restart: a search whose driver is SIGKILLed mid-run and resumed
makes the same decisions as the same search uninterrupted, trial by trial: the same
pruning decisions and the same proposals of the curve sampler (real Ray, SQLite,
Lightning on CPU). It also loses nothing: a trial finished before the kill is never run
again, the trial running at the kill resumes once, from its checkpoint, and the money
spent before the kill stays spent.

The curves follow ``quality`` exactly (``tests.fault_trainables:scripted_curve``), one
trial at a time, so the study's history at each decision is the same in every run. The
first trials are enqueued: two good ones finish first; then a hopeless one, which the
policy's guard pauses at epoch 2 once it has seen the two finished curves (and prunes at
the end); a close one, running when the driver is killed; and another hopeless one,
which only a resumed driver that rebuilt its board from the study (the earlier session's
curves included) pauses and prunes. The policy is ``cost_aware`` with an aggressiveness
so low that its rank cut keeps everyone: what stops a trial is its guard. The last
trials are the curve sampler's proposals, made by the resumed driver from what the study
holds.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import optuna
import pytest
from optuna.trial import TrialState

from hpsearch import keys
from hpsearch.money.ledger import Ledger

from .test_e2e_faults import ENV
from .test_e2e_preemption import ledger_intervals

pytestmark = pytest.mark.slow

NAME = "restart"
#: Enqueued in this order (trial numbers = index); RUNNING_AT_KILL is the close one.
QUALITIES = [0.9, 0.95, 0.2, 0.85, 0.3]
RUNNING_AT_KILL = 3
#: Proposed by the curve sampler after the enqueued ones.
PROPOSED = 2
EPOCHS = 6
FINISHED = (TrialState.COMPLETE, TrialState.PRUNED)


def spec() -> dict:
    return {
        "name": NAME, "trainable": "tests.fault_trainables:scripted_curve",
        "objective": {"metric": "score", "mode": "max"}, "max_epochs": EPOCHS,
        "space": {"quality": {"type": "float", "low": 0.05, "high": 1.0},
                  "sleep_s": 0.4, "lr": 0.01, "hidden": 16},
        "search": {"sampler": "curve", "n_trials": len(QUALITIES) + PROPOSED,
                   "concurrency": 1, "seed": 3},
        "pruning": {"policy": "cost_aware", "aggressiveness": 0.01},
    }


def enqueued_run(folder: Path, name: str, space: dict, params: list[dict]) -> Path:
    """``folder/run``, whose study ``name`` (maximised) holds ``params`` enqueued in that
    order (trial numbers = index), beside ``folder/space.yaml`` holding ``space``."""
    run = folder / "run"
    run.mkdir(parents=True)
    study = optuna.create_study(storage=f"sqlite:///{run / 'optuna.db'}", study_name=name,
                                direction="maximize")
    for one in params:
        study.enqueue_trial(one)
    (folder / "space.yaml").write_text(json.dumps(space))
    return run


def prepare(folder: Path) -> Path:
    """A run dir whose study holds the trials enqueued in QUALITIES' order."""
    return enqueued_run(folder, NAME, spec(), [{"quality": q} for q in QUALITIES])


def hpsearch(folder: Path, *args: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "hpsearch", *args], cwd=folder, env=ENV,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)


def trials(run: Path) -> list[optuna.trial.FrozenTrial]:
    study = optuna.load_study(study_name=NAME, storage=f"sqlite:///{run / 'optuna.db'}")
    return sorted(study.get_trials(), key=lambda t: t.number)


def decisions(run: Path) -> list[tuple[float, str, int, str]]:
    """Per trial: its quality, final state, epochs and who stopped it."""
    return [(t.params["quality"], t.state.name, len(t.intermediate_values),
             str(t.user_attrs.get("stop_reason", "")).split(":")[0])
            for t in trials(run) if t.state is not TrialState.WAITING]  # enqueued, not started


def ready_to_kill(run: Path) -> bool:
    """The two good trials finished, the hopeless one paused, the close one running
    with a checkpoint."""
    try:
        now = trials(run)
    except Exception:  # the driver holds a write lock for a moment, or no study yet
        return False
    return (len(now) > RUNNING_AT_KILL
            and all(t.state is TrialState.COMPLETE for t in now[:2])
            and now[RUNNING_AT_KILL].state is TrialState.RUNNING
            and bool(list((run / "checkpoints" / f"trial-{RUNNING_AT_KILL:04d}")
                          .glob("epoch-*"))))


def test_a_resumed_search_decides_and_proposes_as_the_uninterrupted_one(tmp_path):
    straight = prepare(tmp_path / "straight")
    proc = hpsearch(straight.parent, "run", "space.yaml", "--run-dir", "run")
    out, _ = proc.communicate(timeout=600)
    assert proc.returncode == 0, out[-3000:]
    expected = decisions(straight)
    assert len(expected) == len(QUALITIES) + PROPOSED
    # The test means something: the guard stops the hopeless trials, the one after the
    # kill included; the sampler's proposals are its model's, and new.
    assert [(state, who) for _, state, _, who in expected[2:5:2]] == [("PRUNED", "cost_aware")] * 2
    proposed = trials(straight)[len(QUALITIES):]
    assert all(keys.SYSTEM_CURVE_FIT in t.system_attrs for t in proposed)
    assert len({t.params["quality"] for t in trials(straight)}) == len(expected)

    killed = prepare(tmp_path / "killed")
    driver = hpsearch(killed.parent, "run", "space.yaml", "--run-dir", "run")
    deadline = time.monotonic() + 600
    while not ready_to_kill(killed) and time.monotonic() < deadline:
        assert driver.poll() is None, driver.stdout.read()[-3000:]
        time.sleep(0.2)
    driver.send_signal(signal.SIGKILL)
    driver.communicate(timeout=60)
    before = trials(killed)
    assert {t.number for t in before if t.state in FINISHED} == {0, 1}
    assert before[2].user_attrs.get(keys.ATTR_LIFECYCLE) == "paused"
    spent_before = Ledger(killed / "ledger.jsonl").spent()

    resumed = hpsearch(killed.parent, "resume", "run")
    out, _ = resumed.communicate(timeout=600)
    assert resumed.returncode == 0, out[-3000:]
    assert decisions(killed) == expected
    # Nothing lost, nothing paid twice: each trial started before the kill was billed
    # once (the finished ones; the paused one, pruned at the end without training again)
    # except the one running at the kill, resumed once, from its checkpoint.
    intervals = ledger_intervals(killed)
    assert {n: len(intervals[n]) for n in range(RUNNING_AT_KILL + 1)} == {0: 1, 1: 1, 2: 1, 3: 2}
    assert trials(killed)[RUNNING_AT_KILL].user_attrs.get(keys.ATTR_RESUMED_FROM), \
        "the trial running at the kill restarted from scratch instead of its checkpoint"
    assert Ledger(killed / "ledger.jsonl").spent() > spent_before > 0
