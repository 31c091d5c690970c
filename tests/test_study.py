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


def test_trials_left_running_by_a_dead_driver_become_fail(url):
    config = config_mod.load(RAW)
    first = StudyRecorder(config, url)
    first.ask("a")
    first.ask("b")
    first.complete("b", result(4, 0.9))
    first.study.enqueue_trial({"lr": 0.01, "opt": "sgd"})
    first.close()

    second = StudyRecorder(config, url)
    assert second.fail_orphans("driver died") == [0]
    states = {t.number: t.state for t in second.study.get_trials()}
    assert states == {0: TrialState.FAIL, 1: TrialState.COMPLETE, 2: TrialState.WAITING}
    assert second.finished_count() == 2
    assert second.study.trials[0].user_attrs[keys.ATTR_ERROR] == "driver died"
    number, params, _ = second.ask("c")
    assert (number, params) == (2, {"lr": 0.01, "opt": "sgd"})


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
