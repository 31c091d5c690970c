"""Knowledge survives a restart: a search whose driver is SIGKILLed mid-run and resumed
makes the same pruning decisions as the same search uninterrupted (real Ray, SQLite,
Lightning on CPU).

The policy is ``cost_aware`` with an aggressiveness so low that its rank cut keeps
everyone: what stops a trial is its guard, which needs the curves of trials that
finished, earlier sessions' included. A resumed driver that did not rebuild its board
from the study would let the hopeless trials after the kill train to the end.
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

from .test_e2e_faults import ENV

pytestmark = pytest.mark.slow

NAME = "restart"
#: Enqueued in this order: two good trials finish first; then hopeless ones, which the
#: guard stops at epoch 2 once it has seen the two finished curves, and a close one.
QUALITIES = [0.9, 0.95, 0.2, 0.25, 0.85, 0.3]
EPOCHS = 6


def spec() -> dict:
    return {
        "name": NAME, "trainable": "tests.fault_trainables:scripted_curve",
        "objective": {"metric": "score", "mode": "max"}, "max_epochs": EPOCHS,
        "space": {"quality": {"type": "categorical", "choices": QUALITIES},
                  "sleep_s": 0.4, "lr": 0.01, "hidden": 16},
        "search": {"sampler": "random", "n_trials": len(QUALITIES), "concurrency": 1},
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


def decisions(run: Path) -> list[tuple[float, str, int, str]]:
    """Per trial: its quality, final state, epochs and who stopped it."""
    study = optuna.load_study(study_name=NAME, storage=f"sqlite:///{run / 'optuna.db'}")
    return [(t.params["quality"], t.state.name, len(t.intermediate_values),
             str(t.user_attrs.get("stop_reason", "")).split(":")[0])
            for t in sorted(study.get_trials(), key=lambda t: t.number)
            if t.state is not TrialState.WAITING]  # enqueued, not yet started


def finished(run: Path) -> int:
    try:
        study = optuna.load_study(study_name=NAME, storage=f"sqlite:///{run / 'optuna.db'}")
        return sum(t.state in (TrialState.COMPLETE, TrialState.PRUNED)
                   for t in study.get_trials())
    except Exception:  # the driver holds a write lock for a moment
        return 0


def test_a_resumed_search_decides_as_the_uninterrupted_one(tmp_path):
    straight = prepare(tmp_path / "straight")
    proc = hpsearch(straight.parent, "run", "space.yaml", "--run-dir", "run")
    out, _ = proc.communicate(timeout=600)
    assert proc.returncode == 0, out[-3000:]
    expected = decisions(straight)
    # The test means something: trials after the first three are stopped by the guard.
    assert any(state == "PRUNED" and who == "cost_aware"
               for _, state, _, who in expected[3:]), expected

    killed = prepare(tmp_path / "killed")
    driver = hpsearch(killed.parent, "run", "space.yaml", "--run-dir", "run")
    deadline = time.monotonic() + 600
    while finished(killed) < 3 and time.monotonic() < deadline:
        assert driver.poll() is None, driver.stdout.read()[-3000:]
        time.sleep(0.2)
    driver.send_signal(signal.SIGKILL)
    driver.communicate(timeout=60)
    left = decisions(killed)
    assert len(left) < len(QUALITIES) or any(state == "RUNNING" for _, state, _, _ in left)
    resumed = hpsearch(killed.parent, "resume", "run")
    out, _ = resumed.communicate(timeout=600)
    assert resumed.returncode == 0, out[-3000:]
    assert decisions(killed) == expected
