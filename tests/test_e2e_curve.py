"""End to end with the curve sampler (``search.sampler: curve``): the digits example on
both objectives with ``cost_aware``, a run started from an earlier one (``search.prior``),
and a driver SIGKILLed mid-search whose ``resume`` proposes the configurations the
uninterrupted search proposed (real Ray, SQLite, Lightning on CPU)."""

from __future__ import annotations

import copy
import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import optuna
import pytest
from optuna.trial import TrialState

import hpsearch
from hpsearch import keys
from hpsearch.spec import raw_yaml

from .test_e2e_faults import ENV

pytestmark = pytest.mark.slow

DIGITS = {
    "name": "digits-curve",
    "trainable": "hpsearch.examples.digits:build",
    "objective": {"metric": "val_acc", "mode": "max"},
    "max_epochs": 4,
    "space": {
        "lr": {"type": "float", "low": 1.0e-4, "high": 0.1, "log": True},
        "hidden": {"type": "int", "low": 16, "high": 128, "log": True},
        "dropout": {"type": "float", "low": 0.0, "high": 0.4, "step": 0.1},
        "optimizer": {"type": "categorical", "choices": ["adam", "sgd"]},
    },
    "search": {"sampler": "curve", "n_trials": 5, "concurrency": 2, "seed": 0},
    "pruning": {"policy": "cost_aware"},
}


def digits(**changes) -> dict:
    return raw_yaml.apply_overrides(copy.deepcopy(DIGITS), changes)


def study_of(result) -> optuna.Study:
    return optuna.load_study(study_name=result.study.study_name, storage=result.storage_url)


@pytest.mark.parametrize("metric, mode", [("val_acc", "max"), ("val_loss", "min")])
def test_the_digits_example_runs_with_the_curve_sampler_and_then_from_its_prior(
        ray_cluster, in_tmp, metric, mode):
    lines: list[str] = []
    first = hpsearch.run(digits(**{"objective.metric": metric, "objective.mode": mode}),
                         emit=lines.append)
    assert any("sampler: curve" in line for line in lines), lines[:3]
    trials = study_of(first).get_trials()
    assert len(trials) == 5 and all(t.state.is_finished() for t in trials)
    assert any(t.state is TrialState.COMPLETE for t in trials)
    # The model fitted and kept what it fitted on; the configurations differ.
    assert any(keys.SYSTEM_CURVE_FIT in t.system_attrs for t in trials)
    assert len({json.dumps(t.params, sort_keys=True) for t in trials}) == 5
    assert first.best_trial is not None and (
        first.best_trial.value > 0.8 if mode == "max" else first.best_trial.value < 0.8)

    # A second search of the same space starts from the first one's curves.
    lines.clear()
    second = hpsearch.run(digits(**{"name": "digits-curve-2", "objective.metric": metric,
                                    "objective.mode": mode, "search.n_trials": 2,
                                    "search.prior": [str(first.run_dir)]}),
                          emit=lines.append)
    assert any("(prior: 1 earlier study, 5 trial(s))" in line for line in lines), lines[:3]
    assert len(study_of(second).get_trials()) == 2


# -- a driver killed mid-search --------------------------------------------------------

NAME = "curve-restart"
EPOCHS = 4
N_TRIALS = 5


def scripted() -> dict:
    """A search whose curves follow ``quality`` exactly (the same in every run), one
    trial at a time, so the study's history at each ask is the same in every run."""
    return {
        "name": NAME, "trainable": "tests.fault_trainables:scripted_curve",
        "objective": {"metric": "score", "mode": "max"}, "max_epochs": EPOCHS,
        "space": {"quality": {"type": "float", "low": 0.05, "high": 1.0},
                  "sleep_s": 0.3, "lr": 0.01, "hidden": 16},
        "search": {"sampler": "curve", "n_trials": N_TRIALS, "concurrency": 1, "seed": 3},
        # Keeps everyone (no decision depends on the machine's timing).
        "pruning": {"policy": "cost_aware", "aggressiveness": 0.01},
    }


def hpsearch_cli(folder: Path, *args: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "hpsearch", *args], cwd=folder, env=ENV,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)


def proposals(run: Path) -> list[float]:
    study = optuna.load_study(study_name=NAME, storage=f"sqlite:///{run / 'optuna.db'}")
    # A trial the driver was killed in the middle of asking has no params yet (the
    # resumed run suggests them): None until then.
    return [t.params.get("quality") for t in sorted(study.get_trials(),
                                                    key=lambda t: t.number)]


def finished(run: Path) -> int:
    try:
        study = optuna.load_study(study_name=NAME, storage=f"sqlite:///{run / 'optuna.db'}")
        return sum(t.state.is_finished() for t in study.get_trials())
    except Exception:  # the driver holds a write lock for a moment, or no study yet
        return 0


def test_a_killed_driver_resumes_proposing_what_the_uninterrupted_search_proposed(
        tmp_path):
    runs = {}
    for name in ("straight", "killed"):
        folder = tmp_path / name
        folder.mkdir()
        (folder / "space.yaml").write_text(json.dumps(scripted()))
        runs[name] = folder / "run"
    proc = hpsearch_cli(runs["straight"].parent, "run", "space.yaml", "--run-dir", "run")
    out, _ = proc.communicate(timeout=600)
    assert proc.returncode == 0, out[-3000:]
    expected = proposals(runs["straight"])
    assert len(expected) == N_TRIALS and len(set(expected)) == N_TRIALS

    killed = runs["killed"]
    driver = hpsearch_cli(killed.parent, "run", "space.yaml", "--run-dir", "run")
    deadline = time.monotonic() + 600
    while finished(killed) < 3 and time.monotonic() < deadline:
        assert driver.poll() is None, driver.stdout.read()[-3000:]
        time.sleep(0.2)
    driver.send_signal(signal.SIGKILL)
    driver.communicate(timeout=60)
    before = proposals(killed)
    assert len(before) < N_TRIALS
    resumed = hpsearch_cli(killed.parent, "resume", "run")
    out, _ = resumed.communicate(timeout=600)
    assert resumed.returncode == 0, out[-3000:]
    assert proposals(killed) == expected
