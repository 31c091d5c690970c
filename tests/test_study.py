"""The Optuna bridge on a real SQLite storage, without Ray."""

from __future__ import annotations

import pickle

import optuna
import pytest
from optuna.trial import TrialState

from hpsearch import config as config_mod
from hpsearch import keys
from hpsearch.adapters.study import (
    StudyRecorder,
    check_compatible,
    existing_study_config,
    trial_seed,
)
from hpsearch.decisions import StopRecord
from hpsearch.errors import ConfigError

RAW = {
    "name": "unit",
    "trainable": "hpsearch.examples.digits:build",
    "objective": {"metric": "val_acc"},
    "max_epochs": 4,
    "space": {
        "lr": {"type": "float", "low": 1e-4, "high": 1e-1, "log": True},
        "opt": {"type": "categorical", "choices": ["adam", "sgd"]},
    },
    "search": {"sampler": "random", "seed": 7},
}


@pytest.fixture
def url(tmp_path):
    return f"sqlite:///{tmp_path / 'optuna.db'}"


def result(epoch: int, value: float, **extra) -> dict:
    return {keys.EPOCH: epoch, "val_acc": value, **extra}


def test_ask_gives_params_in_the_space_and_a_stable_seed(url):
    config = config_mod.load(RAW)
    recorder = StudyRecorder(config, url)
    numbers = []
    for i in range(5):
        number, params, seed = recorder.ask(f"ray-{i}")
        assert config.space.contains(params)
        assert seed == trial_seed(7, number)
        numbers.append(number)
    assert numbers == [0, 1, 2, 3, 4]
    assert len({trial_seed(7, n) for n in range(1000)}) == 1000


def test_repeated_epochs_are_recorded_once(url):
    recorder = StudyRecorder(config_mod.load(RAW), url)
    recorder.ask("a")
    for epoch, value in [(1, 0.5), (2, 0.6), (2, 0.99), (1, 0.1), (3, 0.7)]:
        recorder.report("a", result(epoch, value))
    assert recorder.complete("a", result(3, 0.7)) == TrialState.COMPLETE
    (trial,) = recorder.study.get_trials()
    assert trial.intermediate_values == {1: 0.5, 2: 0.6, 3: 0.7}
    assert trial.value == 0.7
    assert trial.user_attrs[keys.ATTR_EPOCHS] == 3


def test_resumed_trials_record_where_they_resumed(url):
    recorder = StudyRecorder(config_mod.load(RAW), url)
    recorder.ask("a")
    recorder.report("a", result(1, 0.5, **{keys.START_EPOCH: 0}))
    recorder.report("a", result(2, 0.6, **{keys.START_EPOCH: 1}))
    recorder.report("a", result(3, 0.7, **{keys.START_EPOCH: 1}))
    recorder.complete("a", None)
    assert recorder.study.trials[0].user_attrs[keys.ATTR_RESUMED_FROM] == [1]


def test_stopped_trial_is_pruned_with_its_reason(url):
    recorder = StudyRecorder(config_mod.load(RAW), url)
    recorder.ask("a")
    recorder.report("a", result(1, 0.2))
    recorder.mark_stopped("a", StopRecord("asha", 1, "below the rung"))
    assert recorder.complete("a", result(1, 0.2)) == TrialState.PRUNED
    trial = recorder.study.trials[0]
    assert trial.state == TrialState.PRUNED
    assert trial.value == 0.2  # Optuna keeps a pruned trial's last reported value
    assert trial.user_attrs[keys.ATTR_STOP_REASON] == "asha: below the rung"


def test_failed_trial_keeps_its_error_and_its_curve(url):
    recorder = StudyRecorder(config_mod.load(RAW), url)
    recorder.ask("a")
    recorder.report("a", result(1, 0.2))
    assert recorder.fail("a", "RuntimeError: boom") == TrialState.FAIL
    trial = recorder.study.trials[0]
    assert trial.state == TrialState.FAIL
    assert trial.user_attrs[keys.ATTR_ERROR] == "RuntimeError: boom"
    assert trial.intermediate_values == {1: 0.2}
    # A second end for the same trial is ignored, not an Optuna error.
    assert recorder.complete("a", result(2, 0.3)) is None


def test_trial_that_never_reported_is_fail(url):
    recorder = StudyRecorder(config_mod.load(RAW), url)
    recorder.ask("a")
    assert recorder.complete("a", {}) == TrialState.FAIL
    assert "without reporting" in recorder.study.trials[0].user_attrs[keys.ATTR_ERROR]


def test_a_new_driver_resumes_trials_left_running_with_their_history(url):
    config = config_mod.load(RAW)
    first = StudyRecorder(config, url)
    number, params, seed = first.ask("a")
    first.report("a", result(1, 0.4))
    first.report("a", result(2, 0.5))
    first.ask("b")
    first.complete("b", result(4, 0.9))
    first.study.enqueue_trial({"lr": 0.01, "opt": "sgd"})
    first.close()  # the driver dies: trial 0 stays RUNNING

    second = StudyRecorder(config, url)
    assert second.unfinished_numbers() == [0]
    assert second.finished_count() == 1
    assert second.resume("a2", 0) == (number, params, seed)
    second.report("a2", result(2, 0.99))  # re-sent after the restart: ignored
    second.report("a2", result(3, 0.6, **{keys.START_EPOCH: 2}))
    assert second.complete("a2", result(4, 0.7)) == TrialState.COMPLETE
    trial = second.study.trials[0]
    assert trial.intermediate_values == {1: 0.4, 2: 0.5, 3: 0.6, 4: 0.7}
    assert trial.user_attrs[keys.ATTR_RESUMED_FROM] == [2]
    assert trial.user_attrs[keys.ATTR_RAY_TRIAL_ID] == "a2"
    # The enqueued trial waits for the next ask.
    assert second.ask("c")[:2] == (2, {"lr": 0.01, "opt": "sgd"})


def test_a_detached_trial_stays_running_until_restarted(url):
    recorder = StudyRecorder(config_mod.load(RAW), url)
    recorder.ask("a")
    recorder.report("a", result(1, 0.4))
    assert recorder.detach("a", {keys.ATTR_PREEMPTIONS: 1}) == 0
    assert recorder.unfinished() == []
    assert recorder.unfinished_numbers() == [0]
    assert recorder.attr(0, keys.ATTR_PREEMPTIONS) == 1
    recorder.resume("b", 0)
    recorder.report("b", result(2, 0.6))
    assert recorder.complete("b", result(2, 0.6)) == TrialState.COMPLETE
    assert recorder.study.trials[0].intermediate_values == {1: 0.4, 2: 0.6}


def test_a_trial_waiting_for_a_restart_can_be_pruned(url):
    recorder = StudyRecorder(config_mod.load(RAW), url)
    recorder.ask("a")
    recorder.report("a", result(1, 0.4))
    recorder.detach("a")
    recorder.prune_waiting(0, StopRecord("budget", 1, "budget.max_cost reached"))
    trial = recorder.study.trials[0]
    assert trial.state == TrialState.PRUNED
    assert trial.user_attrs[keys.ATTR_STOP_REASON] == "budget: budget.max_cost reached"


def test_continued_random_sampler_does_not_replay_the_first_draws(url):
    config = config_mod.load(RAW)
    first = StudyRecorder(config, url)
    drawn = [first.ask(f"a{i}")[1] for i in range(3)]
    for i in range(3):
        first.complete(f"a{i}", result(4, 0.5))
    second = StudyRecorder(config, url)
    again = [second.ask(f"b{i}")[1] for i in range(3)]
    assert drawn != again


def test_recorder_survives_pickling_with_its_live_trials(url):
    recorder = StudyRecorder(config_mod.load(RAW), url)
    recorder.ask("a")
    recorder.report("a", result(1, 0.4))
    recorder.mark_stopped("a", StopRecord("median", 1, "below median"))
    clone = pickle.loads(pickle.dumps(recorder))
    clone.report("a", result(1, 0.99))  # already recorded: ignored
    assert clone.complete("a", result(1, 0.4)) == TrialState.PRUNED
    trial = optuna.load_study(study_name="unit", storage=url).trials[0]
    assert trial.intermediate_values == {1: 0.4}
    assert trial.state == TrialState.PRUNED


def test_existing_study_config_and_compatibility(url):
    config = config_mod.load(RAW)
    assert existing_study_config(url, "unit") is None
    StudyRecorder(config, url).close()
    previous = existing_study_config(url, "unit")
    assert previous == config.to_dict()
    check_compatible(previous, config_mod.load(RAW, {"search.n_trials": 99}))
    with pytest.raises(ConfigError, match=r"^space: differs from the existing study"):
        check_compatible(previous, config_mod.load(RAW, {"space.lr.high": 0.5}))
    with pytest.raises(ConfigError, match=r"^objective: differs"):
        check_compatible(previous, config_mod.load(RAW, {"objective.metric": "val_loss"}))


def test_direction_of_an_existing_study_must_match(url):
    StudyRecorder(config_mod.load(RAW), url).close()
    with pytest.raises(ConfigError, match="objective.mode"):
        StudyRecorder(config_mod.load(RAW, {"objective.mode": "min"}), url)


def test_nan_final_value_is_fail_with_a_reason(url):
    recorder = StudyRecorder(config_mod.load(RAW), url)
    recorder.ask("a")
    recorder.report("a", result(1, 0.3))
    assert recorder.complete("a", result(2, float("nan"))) == TrialState.FAIL
    trial = recorder.study.trials[0]
    assert trial.state == TrialState.FAIL
    assert trial.user_attrs[keys.ATTR_ERROR] == "final val_acc is NaN"
