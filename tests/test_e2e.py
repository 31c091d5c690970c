"""End to end: real local Ray, real SQLite Optuna study, real Lightning on CPU."""

from __future__ import annotations

import copy
import json
import os
import re
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import optuna
import pytest
from optuna.trial import TrialState

import hpsearch
from hpsearch.spec import config as config_mod
from hpsearch.spec import raw_yaml
from hpsearch.driver import RunAborted
from hpsearch.errors import ConfigError

from .conftest import REPO

pytestmark = pytest.mark.slow

BASE = {
    "name": "digits-test",
    "trainable": "hpsearch.examples.digits:build",
    "objective": {"metric": "val_acc", "mode": "max"},
    "max_epochs": 3,
    "space": {
        "lr": {"type": "float", "low": 1.0e-3, "high": 0.05, "log": True},
        "hidden": {"type": "int", "low": 16, "high": 64, "log": True},
        "dropout": {"type": "float", "low": 0.0, "high": 0.3, "step": 0.1},
        "optimizer": {"type": "categorical", "choices": ["adam", "sgd"]},
    },
    "search": {"sampler": "random", "n_trials": 3, "concurrency": 2, "seed": 0},
}

GOOD = {"lr": 0.01, "hidden": 64, "dropout": 0.0, "optimizer": "adam"}
#: A learning rate this small leaves the model at chance level (about 0.1 accuracy).
BAD = {"lr": 1.0e-6, "hidden": 16, "dropout": 0.0, "optimizer": "sgd"}


def spec(**changes):
    """BASE with dotted-key changes applied."""
    return raw_yaml.apply_overrides(copy.deepcopy(BASE), changes)


def pruning_spec(name: str, pruning: dict) -> dict:
    """Concurrency 1 and a space wide enough for BAD's learning rate."""
    return spec(**{"name": name, "max_epochs": 4, "search.concurrency": 1,
                   "space.lr.low": 1.0e-6, "pruning": pruning})


def load_study(result):
    return optuna.load_study(study_name=result.study.study_name, storage=result.storage_url)


def enqueue(run_dir: Path, name: str, mode: str, params: list[dict]) -> None:
    """Create the run's study beforehand with trials whose params are fixed, in order."""
    run_dir.mkdir(parents=True)
    study = optuna.create_study(
        storage=f"sqlite:///{run_dir / 'optuna.db'}", study_name=name,
        direction="maximize" if mode == "max" else "minimize",
    )
    for p in params:
        study.enqueue_trial(p)


def test_small_search_records_every_trial(ray_cluster, in_tmp):
    lines: list[str] = []
    result = hpsearch.run(BASE, emit=lines.append)

    config = config_mod.load(BASE)
    assert result.run_dir == (in_tmp / "runs" / "digits-test")
    for name in ("optuna.db", "space.yaml", "hpsearch.log", "tune"):
        assert (result.run_dir / name).exists(), name
    study = load_study(result)
    trials = study.get_trials()
    assert [t.state for t in trials] == [TrialState.COMPLETE] * 3
    for t in trials:
        assert config.space.contains(t.params), t.params
        assert sorted(t.intermediate_values) == [1, 2, 3]
        assert t.value == t.intermediate_values[3]
        assert 0.0 <= t.value <= 1.0
        assert t.user_attrs["epochs"] == 3
        assert t.user_attrs["ray_trial_id"]
        assert isinstance(t.user_attrs["seed"], int)
    assert study.user_attrs["config"] == config.to_dict()
    best = max(trials, key=lambda t: t.value)
    assert result.best_trial.number == best.number
    text = "\n".join(lines)
    assert "Top trials" in text and "Dashboard: optuna-dashboard sqlite:///" in text
    assert "3/3 done: 3 complete, 0 pruned, 0 failed" in text


def test_asha_prunes_a_hopeless_trial(ray_cluster, in_tmp):
    run_dir = in_tmp / "asha"
    enqueue(run_dir, "asha", "max", [GOOD, GOOD, BAD])
    cfg = pruning_spec("asha", {"policy": "asha", "min_epochs": 1, "reduction_factor": 2})
    result = hpsearch.run(cfg, run_dir=run_dir, emit=None)

    trials = load_study(result).get_trials()
    assert len(trials) == 3
    bad = trials[2]
    assert bad.params["lr"] == BAD["lr"]
    assert bad.state == TrialState.PRUNED
    assert sorted(bad.intermediate_values) == [1]
    assert bad.user_attrs["stop_reason"].startswith("asha: stopped at epoch 1/4")
    assert trials[0].state == TrialState.COMPLETE
    assert sorted(trials[0].intermediate_values) == [1, 2, 3, 4]


@pytest.mark.timeout(300)  # without the requeue below, Tune waits for ever
def test_a_trial_tune_could_not_hand_to_a_busy_process_runs_again(ray_cluster, in_tmp):
    # BAD is stopped at epoch 1 and takes 4 s to unwind; the next trial, handed the same
    # process, finds it still busy after Ray's wait (1 s here, 60 s by default): Tune
    # drops that attempt without telling anyone, and the driver queues the trial again.
    run_dir = in_tmp / "busy"
    enqueue(run_dir, "busy", "max", [GOOD, BAD, GOOD])
    cfg = raw_yaml.apply_overrides(pruning_spec("busy", {
        "policy": "asha", "min_epochs": 1, "reduction_factor": 2}), {
        "trainable": "tests.fault_trainables:lingering",
        "space.linger_s": {"type": "categorical", "choices": [4.0]},
        "space.thread_wait_s": {"type": "categorical", "choices": [1]}})
    result = hpsearch.run(cfg, run_dir=run_dir, emit=None)

    trials = load_study(result).get_trials()
    assert [t.state for t in trials] == [TrialState.COMPLETE, TrialState.PRUNED,
                                         TrialState.COMPLETE]
    assert sorted(trials[2].intermediate_values) == [1, 2, 3, 4]
    assert "failures" not in trials[2].user_attrs  # no retry used
    log = (run_dir / "hpsearch.log").read_text()
    assert re.search(r"trial 2: Ray Tune ended attempt \S+ before it ran \(.*reset_config",
                     log), log[-3000:]


def test_median_pruner_prunes_a_hopeless_trial(ray_cluster, in_tmp):
    run_dir = in_tmp / "median"
    enqueue(run_dir, "median", "max", [GOOD, GOOD, BAD])
    cfg = pruning_spec("median", {"policy": "median", "min_epochs": 1, "startup_trials": 2})
    result = hpsearch.run(cfg, run_dir=run_dir, emit=None)

    trials = load_study(result).get_trials()
    assert [t.state for t in trials] == [TrialState.COMPLETE, TrialState.COMPLETE,
                                         TrialState.PRUNED]
    assert trials[2].user_attrs["stop_reason"].startswith("median: stopped at epoch 1/4")


def test_interrupted_trial_resumes_exactly(ray_cluster, in_tmp):
    """A trial whose process dies after epoch 2 resumes from its checkpoint and ends
    with the same metrics, epoch by epoch, as an uninterrupted trial with the same seed."""
    crash_dir = in_tmp / "crash"
    crash_dir.mkdir()

    def one_trial(name: str, crash_epoch: int):
        cfg = spec(**{
            "name": name,
            "trainable": "tests.trainables:crash_once",
            "objective": {"metric": "val_loss", "mode": "min"},
            "max_epochs": 5,
            "space": {
                "lr": {"type": "categorical", "choices": [0.01]},
                "dropout": {"type": "categorical", "choices": [0.3]},
                "crash_dir": {"type": "categorical", "choices": [str(crash_dir)]},
                "crash_epoch": {"type": "categorical", "choices": [crash_epoch]},
            },
            "search.n_trials": 1,
            "search.concurrency": 1,
            "search.max_failures": 1,
        })
        return load_study(hpsearch.run(cfg, run_dir=in_tmp / name, emit=None)).trials[0]

    crashed = one_trial("crashed", crash_epoch=2)
    assert (crash_dir / "crashed-x").read_text() == "2", "the process did not die"
    clean = one_trial("clean", crash_epoch=-1)

    assert crashed.state == clean.state == TrialState.COMPLETE
    assert crashed.user_attrs["seed"] == clean.user_attrs["seed"]
    assert crashed.user_attrs["resumed_from_epochs"] == [2]
    assert "resumed_from_epochs" not in clean.user_attrs
    assert sorted(crashed.intermediate_values) == [1, 2, 3, 4, 5]
    assert crashed.intermediate_values == clean.intermediate_values
    assert crashed.value == clean.value
    # The work lost between the last checkpoint and the crash is billed as wasted.
    assert crashed.user_attrs["wasted_cost"] > 0
    assert clean.user_attrs["wasted_cost"] == 0


def test_failing_trial_is_fail_and_the_search_goes_on(ray_cluster, in_tmp):
    run_dir = in_tmp / "fails"
    enqueue(run_dir, "fails", "max", [{"lr": 0.01, "fail": v} for v in (False, True, False)])
    cfg = spec(**{
        "name": "fails", "trainable": "tests.trainables:raise_if",
        "space": {"lr": {"type": "float", "low": 0.001, "high": 0.1, "log": True},
                  "fail": {"type": "categorical", "choices": [True, False]}},
        "search.concurrency": 1,
    })
    lines: list[str] = []
    result = hpsearch.run(cfg, run_dir=run_dir, emit=lines.append)

    trials = load_study(result).get_trials()
    assert [t.state for t in trials] == [TrialState.COMPLETE, TrialState.FAIL,
                                         TrialState.COMPLETE]
    assert trials[1].user_attrs["error"] == "RuntimeError: boom at epoch 1"
    assert sorted(trials[1].intermediate_values) == [1]
    assert any("trial 1 fail" in ln and "boom at epoch 1" in ln for ln in lines)
    assert result.best_trial.number in (0, 2)


def test_metric_never_logged_aborts_the_run(ray_cluster, in_tmp):
    cfg = spec(**{"name": "nometric", "objective.metric": "val_accuracy",
                  "search.concurrency": 1})
    with pytest.raises(RunAborted) as info:
        hpsearch.run(cfg, emit=None)
    message = str(info.value)
    assert "trial 0" in message and "'val_accuracy'" in message and "val_acc" in message
    assert info.value.exit_code == 2
    study = optuna.load_study(study_name="nometric",
                              storage=f"sqlite:///{in_tmp / 'runs/nometric/optuna.db'}")
    assert study.trials[0].state == TrialState.FAIL
    assert len(study.trials) < 3, "the run should stop instead of failing every trial"
    assert all(t.state == TrialState.FAIL for t in study.trials)


def test_trainable_breaking_its_contract_aborts_the_run(ray_cluster, in_tmp):
    cfg = spec(**{"name": "contract", "trainable": "tests.trainables:wrong_return",
                  "search.concurrency": 1})
    with pytest.raises(RunAborted, match="must return"):
        hpsearch.run(cfg, emit=None)


def test_rerun_continues_the_same_study(ray_cluster, in_tmp):
    first = hpsearch.run(spec(**{"search.n_trials": 2}), emit=None)
    lines: list[str] = []
    second = hpsearch.run(spec(**{"search.n_trials": 3}), emit=lines.append)
    assert first.run_dir == second.run_dir
    trials = load_study(second).get_trials()
    assert [t.number for t in trials] == [0, 1, 2]
    assert all(t.state == TrialState.COMPLETE for t in trials)
    assert any("2 trial(s) finished" in ln for ln in lines)
    # Its progress line's best is the study's, earlier session's trials included (as its
    # money is the study's), not only the one trial this session ran.
    best = [m for ln in lines if (m := re.search(r"\| best \S+ \S+ \(trial (\d+)\)", ln))]
    assert best and int(best[-1].group(1)) == second.best_trial.number, lines
    # Two sessions, two Tune experiments under one run dir.
    assert sorted(p.name for p in (second.run_dir / "tune").iterdir()
                  if p.is_dir()) == ["session-1", "session-2"]

    lines.clear()
    ledger = (second.run_dir / "ledger.jsonl").read_bytes()
    third = hpsearch.run(spec(**{"search.n_trials": 3}), emit=lines.append)
    assert len(load_study(third).get_trials()) == 3
    assert any("already has 3 finished trial(s)" in ln for ln in lines)
    # Nothing to run: no node rented, nothing billed, the same money said.
    assert (second.run_dir / "ledger.jsonl").read_bytes() == ledger
    assert third.spent == pytest.approx(second.spent) and third.spent > 0
    assert any(ln.startswith("Spent: ") for ln in lines)
    assert third.best_trial.number == second.best_trial.number


def test_changed_space_cannot_continue_a_study(ray_cluster, in_tmp):
    hpsearch.run(spec(**{"search.n_trials": 1, "max_epochs": 1}), emit=None)
    before = (in_tmp / "runs/digits-test/optuna.db").read_bytes()
    with pytest.raises(ConfigError, match="space"):
        hpsearch.run(spec(**{"search.n_trials": 2, "max_epochs": 1,
                             "space.lr.high": 0.5}), emit=None)
    assert (in_tmp / "runs/digits-test/optuna.db").read_bytes() == before


def _cli(args: list[str], cwd: Path, timeout: int = 300) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(REPO))
    return subprocess.run([sys.executable, "-m", "hpsearch", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=timeout)


def test_cli_runs_the_example_on_its_own_ray(in_tmp):
    """The README's run command, shortened: a fresh process starting its own Ray."""
    proc = _cli(["run", str(REPO / "search_spaces/digits_mlp.yaml"),
                 "--set", "search.n_trials=2", "--set", "max_epochs=2",
                 "--progress-interval", "1"], in_tmp)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "Traceback" not in proc.stdout + proc.stderr
    assert "2/2 done: 2 complete" in proc.stdout
    assert "Top trials of study 'digits-mlp'" in proc.stdout
    assert "Dashboard: optuna-dashboard sqlite:///runs/digits-mlp/optuna.db" in proc.stdout
    study = optuna.load_study(study_name="digits-mlp",
                              storage=f"sqlite:///{in_tmp / 'runs/digits-mlp/optuna.db'}")
    assert [t.state for t in study.trials] == [TrialState.COMPLETE] * 2


def test_cli_joins_a_running_cluster_and_exits_2_on_a_setup_error(ray_cluster, in_tmp):
    address = ray_cluster.get_runtime_context().gcs_address
    space = in_tmp / "space.yaml"
    space.write_text(json.dumps(spec(**{"objective.metric": "val_accuracy",
                                        "search.concurrency": 1})))
    proc = _cli(["run", str(space), "--set", f"cluster.address={address}"], in_tmp)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    errors = [ln for ln in proc.stderr.splitlines() if ln.startswith("hpsearch: error:")]
    assert len(errors) == 1 and "val_accuracy" in errors[0], proc.stderr
    # Ray's "Unhandled error" dumps (the trial's traceback) go to hpsearch.log instead.
    for mark in ("Traceback", '  File "', "Unhandled error"):
        assert mark not in proc.stdout + proc.stderr, proc.stderr[-3000:]
    assert [ln for ln in proc.stderr.splitlines() if ln.strip()] == errors


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _get_json(url: str, deadline_s: float = 30.0):
    end = time.monotonic() + deadline_s
    while True:
        try:
            with urllib.request.urlopen(url, timeout=5) as response:
                return json.loads(response.read())
        except OSError:
            if time.monotonic() > end:
                raise
            time.sleep(0.3)


def test_optuna_dashboard_shows_the_study(ray_cluster, in_tmp):
    run_dir = in_tmp / "dash"
    enqueue(run_dir, "dash", "max", [GOOD, GOOD, BAD])
    cfg = pruning_spec("dash", {"policy": "median", "min_epochs": 1, "startup_trials": 2})
    result = hpsearch.run(cfg, run_dir=run_dir, emit=None)

    port = _free_port()
    dashboard = subprocess.Popen(
        [str(Path(sys.executable).parent / "optuna-dashboard"), result.storage_url,
         "--host", "127.0.0.1", "--port", str(port)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    try:
        studies = _get_json(f"http://127.0.0.1:{port}/api/studies")["study_summaries"]
        (summary,) = [s for s in studies if s["study_name"] == "dash"]
        detail = _get_json(f"http://127.0.0.1:{port}/api/studies/{summary['study_id']}")
        states = [t["state"] for t in sorted(detail["trials"], key=lambda t: t["number"])]
        assert states == ["Complete", "Complete", "Pruned"]
        pruned = next(t for t in detail["trials"] if t["number"] == 2)
        attrs = {a["key"]: a["value"] for a in pruned["user_attrs"]}
        assert attrs["stop_reason"].startswith("median:")
        assert len(pruned["intermediate_values"]) == 1
    finally:
        dashboard.terminate()
        dashboard.wait(timeout=10)
