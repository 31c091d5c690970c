"""The contract with the user's trainable, end to end: real Ray, real Lightning on CPU.

Both Lightning packages (a ``lightning`` trainable trains, checkpoints, resumes exactly
after its process is killed, runs DDP and the OOM ladder, and is planned), the three data
shapes, a build function passed as an object, errors that cross the process boundary
intact, and runs that cannot succeed stopping with the truth.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import optuna
import pytest
from optuna.trial import TrialState

import hpsearch
from hpsearch.spec import raw_yaml
from hpsearch.errors import RunAborted, RunFailed

from .conftest import REPO
from .test_e2e import enqueue, load_study, spec
from .test_e2e_ddp import ONE_DDP_AT_A_TIME, rank_processes
from .test_e2e_oom import oom_trial
from .test_e2e_preemption import fixed_trial

pytestmark = pytest.mark.slow

LIT = "tests.lit_trainables:build"


def lit_trial(name: str, tmp: Path, **space) -> dict:
    """One fixed ``lightning`` trial (val_loss, 5 epochs) recording its packages."""
    probe = tmp / f"packages-{name}"
    probe.mkdir(exist_ok=True)
    cfg = fixed_trial(name, tmp / "crash", trainable=LIT, probe_dir=str(probe), **space)
    return raw_yaml.apply_overrides(cfg, {"max_epochs": 5})


def packages_seen(tmp: Path, name: str) -> set[str]:
    seen: set[str] = set()
    for path in (tmp / f"packages-{name}").glob("packages-*.json"):
        seen |= set(json.loads(path.read_text()))
    return seen


def _cli(args: list[str], cwd: Path, timeout: int = 300) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(REPO), RAY_USAGE_STATS_ENABLED="0")
    return subprocess.run([sys.executable, "-m", "hpsearch", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=timeout)


def no_traceback(text: str) -> None:
    """Nothing on the terminal that looks like a traceback or Ray's error dumps."""
    for mark in ("Traceback", '  File "', "Unhandled error", "RayTaskError"):
        assert mark not in text, text[-3000:]


# ---------------------------------------------------------------------------------------
# The `lightning` package


def test_a_lightning_trainable_resumes_exactly_after_its_process_is_killed(
        ray_cluster, in_tmp):
    (in_tmp / "crash").mkdir()
    crashed_cfg = lit_trial("lit-crashed", in_tmp, crash_epoch=2)
    crashed_cfg = raw_yaml.apply_overrides(crashed_cfg, {"search.max_failures": 1})
    crashed = load_study(hpsearch.run(crashed_cfg, emit=None)).trials[0]
    assert (in_tmp / "crash" / "crashed-lit").read_text() == "2", "it did not die"
    clean = load_study(hpsearch.run(lit_trial("lit-clean", in_tmp), emit=None)).trials[0]

    assert crashed.state == clean.state == TrialState.COMPLETE
    assert crashed.user_attrs["failures"] == 1
    assert crashed.user_attrs["resumed_from_epochs"] == [2]
    assert sorted(crashed.intermediate_values) == [1, 2, 3, 4, 5]
    assert crashed.intermediate_values == clean.intermediate_values
    assert list((in_tmp / "runs/lit-clean/checkpoints/trial-0000").glob("epoch-000005.json"))
    # The trial processes trained with `lightning` only: no Trainer or callback of the
    # other package was ever imported.
    for name in ("lit-crashed", "lit-clean"):
        assert packages_seen(in_tmp, name) == {"lightning"}, name


@ONE_DDP_AT_A_TIME
def test_a_lightning_ddp_trial_resumes_after_a_preemption(ray_cluster, in_tmp):
    cfg = raw_yaml.apply_overrides(lit_trial("lit-ddp", in_tmp), {
        "resources.devices": 2, "resources.cpu": 2, "max_epochs": 4,
        "checkpoint.every_epochs": 2, "preemption.simulate.signal": "kill",
        "preemption.simulate.at": [{"trial": 0, "epoch": 3}]})
    result = hpsearch.run(cfg, emit=None)
    (trial,) = load_study(result).trials
    assert trial.state == TrialState.COMPLETE
    assert trial.user_attrs["preemptions"] == 1
    assert trial.user_attrs["resumed_from_epochs"] == [2]
    assert sorted(trial.intermediate_values) == [1, 2, 3, 4]
    rank1 = (result.run_dir / "logs" / "trial-0000.rank1.log").read_text()
    assert "GLOBAL_RANK: 1, MEMBER: 2/2" in rank1 and "Traceback" not in rank1
    assert packages_seen(in_tmp, "lit-ddp") == {"lightning"}
    assert rank_processes() == []


def test_a_lightning_trainable_climbs_the_oom_ladder(ray_cluster, in_tmp):
    cfg = oom_trial("lit-oom", batch=128, limit=40, trainable=LIT)
    (trial,) = load_study(hpsearch.run(cfg, emit=None)).trials
    assert trial.state == TrialState.COMPLETE
    assert trial.user_attrs["oom_steps"] == ["halve_batch: batch size 128 -> 64",
                                            "halve_batch: batch size 64 -> 32"]
    assert sorted(trial.intermediate_values) == [1, 2, 3]


def test_plan_probes_a_lightning_trainable(in_tmp):
    space = in_tmp / "space.yaml"
    space.write_text(json.dumps(spec(**{"name": "lit-plan", "trainable": LIT})))
    proc = _cli(["plan", str(space), "--json", "--probe-batches", "2"], in_tmp)
    assert proc.returncode == 0, proc.stderr[-3000:]
    probe = json.loads(proc.stdout)["probe"]
    assert (probe["train_batches"], probe["val_batches"], probe["train_samples"]) == \
        (23, 1, 1438)  # 1438 training images in batches of 64; 359 in one of 512
    assert probe["measured_batches"] == 2 and probe["train_step_s"] > 0


def test_the_three_data_shapes_train_and_climb_the_oom_ladder_where_they_can(
        ray_cluster, in_tmp):
    """The batch size (128, over the limit of 40) is set in the data, not a param: the
    datamodule's and the module's own are halved; ready-made loaders cannot be, and
    the trial fails saying so (after the other rungs)."""
    run_dir = in_tmp / "shapes"
    shapes = ["datamodule", "module", "loaders"]
    enqueue(run_dir, "shapes", "max", [{"shape": s} for s in shapes])
    cfg = spec(**{
        "name": "shapes", "trainable": "tests.lit_trainables:shaped", "max_epochs": 2,
        "space": {"shape": {"type": "categorical", "choices": shapes},
                  "batch": {"type": "categorical", "choices": [128]},
                  "limit": {"type": "categorical", "choices": [40]}},
        "search.n_trials": 3, "search.concurrency": 1})
    lines: list[str] = []
    result = hpsearch.run(cfg, run_dir=run_dir, emit=lines.append)
    trials = load_study(result).get_trials()
    assert [t.params["shape"] for t in trials] == shapes
    for trial in trials[:2]:
        assert trial.state == TrialState.COMPLETE, trial.user_attrs
        assert sorted(trial.intermediate_values) == [1, 2]
        assert trial.user_attrs["oom_steps"] == ["halve_batch: batch size 128 -> 64",
                                                "halve_batch: batch size 64 -> 32"]
    loaders = trials[2]
    assert loaders.state == TrialState.FAIL
    assert ("halve_batch: skipped (the DataLoaders build() returned have a fixed batch "
            "size; make it a param (oom.batch_size_param))") in loaders.user_attrs["error"]
    # One failure among completed trials: the run goes on and says where the log is.
    assert "1 of 3 trial(s) failed; their logs: shapes/logs/trial-0002.log" in lines


# ---------------------------------------------------------------------------------------
# A function object (notebooks, scripts)

SCRIPT = """\
import json, sys
import hpsearch
from tests import lit_trainables


def build(params):
    # A notebook's function: __main__ is not importable by the trial processes.
    return lit_trainables.build({**params, "hidden": HIDDEN})


HIDDEN = 24
space = json.loads(sys.argv[1])
first = hpsearch.run(space, trainable=build, emit=None)
second = hpsearch.run(space, {"search.n_trials": 2}, trainable=build, emit=None)
print(json.dumps({"trainable": second.study.user_attrs["config"]["trainable"],
                  "states": [t.state.name for t in second.study.trials],
                  "epochs": [sorted(t.intermediate_values) for t in second.study.trials]}))
"""


def test_a_function_of_main_runs_through_hpsearch_run_and_continues(ray_cluster, in_tmp):
    address = ray_cluster.get_runtime_context().gcs_address
    space = spec(**{"name": "fn", "max_epochs": 2, "search.n_trials": 1,
                    "search.concurrency": 1, "cluster.address": address})
    del space["trainable"]  # the function replaces the key
    script = in_tmp / "notebook.py"
    script.write_text(SCRIPT)
    env = dict(os.environ, PYTHONPATH=str(REPO), RAY_USAGE_STATS_ENABLED="0")
    proc = subprocess.run([sys.executable, str(script), json.dumps(space)], cwd=in_tmp,
                          env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["trainable"] == "__main__:build"
    assert out["states"] == ["COMPLETE", "COMPLETE"]
    assert out["epochs"] == [[1, 2], [1, 2]]
    # The run dir records it by name; a path to __main__ cannot be resumed from the CLI.
    resumed = _cli(["resume", "runs/fn", "--set", f"cluster.address={address}"], in_tmp)
    assert resumed.returncode == 2
    assert "pass the function itself" in resumed.stderr


# ---------------------------------------------------------------------------------------
# Errors that cross the process boundary, contracts


def test_a_config_error_raised_in_a_trial_reaches_the_driver_intact(ray_cluster, in_tmp):
    cfg = spec(**{"name": "cfgerr", "trainable": "tests.trainables:config_error_in_build",
                  "search.concurrency": 1})
    with pytest.raises(RunAborted) as info:
        hpsearch.run(cfg, emit=None)
    assert str(info.value).startswith("space.hidden: is too large for this model (got ")
    assert info.value.exit_code == 2
    study = optuna.load_study(study_name="cfgerr",
                              storage=f"sqlite:///{in_tmp / 'runs/cfgerr/optuna.db'}")
    assert study.trials[0].user_attrs["error"].startswith("space.hidden: is too large")


def test_a_checkpoint_that_is_not_plain_data_stops_the_run_at_its_first_save(
        ray_cluster, in_tmp):
    cfg = spec(**{"name": "pathhp", "trainable": "tests.trainables:path_in_hparams",
                  "search.concurrency": 1})
    with pytest.raises(RunAborted) as info:
        hpsearch.run(cfg, emit=None)
    message = str(info.value)
    assert "its checkpoint is not plain data: it references pathlib." in message
    assert "save_hyperparameters(ignore=[...])" in message
    assert info.value.exit_code == 2
    assert not list((in_tmp / "runs/pathhp/checkpoints/trial-0000").glob("epoch-*"))


# ---------------------------------------------------------------------------------------
# Runs that cannot succeed


def test_a_trainable_failing_in_epoch_2_everywhere_stops_the_run_after_3(ray_cluster, in_tmp):
    address = ray_cluster.get_runtime_context().gcs_address
    space = in_tmp / "space.yaml"
    space.write_text(json.dumps(spec(**{
        "name": "epoch2", "trainable": "tests.trainables:raise_in_epoch_2",
        "search.n_trials": 8, "search.concurrency": 2})))
    proc = _cli(["run", str(space), "--set", f"cluster.address={address}",
                 "--progress-interval", "60"], in_tmp)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    no_traceback(proc.stderr)
    no_traceback(proc.stdout)
    errors = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert len(errors) == 1, proc.stderr
    (error,) = errors
    assert error.startswith("hpsearch: error: the first 3 trials all failed with the same "
                            "error, so the run stops (search.fail_fast: 3")
    assert "RuntimeError: boom at epoch 2 (lr " in error
    log = error.rsplit("traceback in ", 1)[1]
    assert log.startswith("runs/epoch2/logs/trial-") and log.endswith(".log")
    text = (in_tmp / log).read_text()
    assert "Traceback" in text and "boom at epoch 2" in text
    # Each failed trial's line names its log; repeats say which trial showed it first.
    failed = [ln for ln in proc.stdout.splitlines() if " fail after " in ln]
    # A 4th trial running beside the 3rd may fail before the stop reaches it.
    assert 3 <= len(failed) < 8, proc.stdout
    assert all("(log: runs/epoch2/logs/trial-" in ln for ln in failed)
    assert sum("same error as trial" in ln for ln in failed) == len(failed) - 1
    study = optuna.load_study(study_name="epoch2",
                              storage=f"sqlite:///{in_tmp / 'runs/epoch2/optuna.db'}")
    assert len(study.trials) < 8
    assert all(t.state == TrialState.FAIL for t in study.trials)


def test_a_run_where_half_the_trials_fail_exits_0_and_counts_them(ray_cluster, in_tmp):
    address = ray_cluster.get_runtime_context().gcs_address
    run_dir = in_tmp / "half"
    enqueue(run_dir, "half", "max", [{"lr": 0.01, "fail": v} for v in (False, True) * 2])
    space = in_tmp / "space.yaml"
    space.write_text(json.dumps(spec(**{
        "name": "half", "trainable": "tests.trainables:raise_if", "max_epochs": 2,
        "space": {"lr": {"type": "float", "low": 0.001, "high": 0.1, "log": True},
                  "fail": {"type": "categorical", "choices": [True, False]}},
        "search.n_trials": 4, "search.concurrency": 1})))
    proc = _cli(["run", str(space), "--run-dir", "half", "--set",
                 f"cluster.address={address}", "--progress-interval", "60"], in_tmp)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    no_traceback(proc.stderr + proc.stdout)
    assert "4/4 done: 2 complete, 0 pruned, 2 failed" in proc.stdout
    assert ("2 of 4 trial(s) failed; their logs: half/logs/trial-0001.log, "
            "half/logs/trial-0003.log") in proc.stdout
    assert proc.stderr.strip() == ""


def test_a_session_where_no_trial_completes_fails(ray_cluster, in_tmp):
    run_dir = in_tmp / "nonecomplete"
    enqueue(run_dir, "nonecomplete", "max", [{"error": e} for e in ("ValueError", "KeyError")])
    cfg = spec(**{"name": "nonecomplete", "trainable": "tests.trainables:raise_named",
                  "space": {"error": {"type": "categorical",
                                      "choices": ["ValueError", "KeyError"]}},
                  "search.n_trials": 2, "search.concurrency": 1})
    lines: list[str] = []
    with pytest.raises(RunFailed) as info:
        hpsearch.run(cfg, run_dir=run_dir, emit=lines.append)
    message = str(info.value)
    assert message.startswith("no trial completed: 2 failed; trial 0: ValueError: "
                              "ValueError in trial (traceback in ")
    assert message.endswith("nonecomplete/logs/trial-0000.log)")
    assert info.value.exit_code == 1
    # Different errors: fail-fast did not stop it; the summary was still written.
    assert "No trial completed." in lines and (run_dir / "report.html").exists()


def test_an_aborted_run_prints_one_line_and_no_ray_error_dump(in_tmp):
    """Its own Ray, two trials at once, the objective never logged: the trial still
    running when the run stops holds an error that Ray's core worker dumps ("Unhandled
    error", with the trial's traceback) when the driver drops it; hpsearch sends that
    to hpsearch.log (whether Ray dumps it depends on when its object is collected)."""
    space = in_tmp / "space.yaml"
    space.write_text(json.dumps(spec(**{"name": "abort", "objective.metric": "val_nope",
                                        "search.n_trials": 4, "search.concurrency": 2})))
    proc = _cli(["run", str(space), "--progress-interval", "60"], in_tmp)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    no_traceback(proc.stdout + proc.stderr)
    (line,) = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert line.startswith("hpsearch: error: trial ") and "'val_nope' is never logged" in line
