"""The Optuna bridge on a real SQLite storage, without Ray."""

from __future__ import annotations

import math
import pickle
import warnings

import optuna
import pytest
from optuna.trial import TrialState

from hpsearch.spec import config as config_mod
from hpsearch import keys
from hpsearch.adapters.optuna.samplers import sampler_seed
from hpsearch.adapters.optuna.study import (
    StudyRecorder,
    check_compatible,
    existing_study_config,
    trial_seed,
)
from hpsearch.trials import TrialState as LState
from hpsearch.core.ports import EpochReport
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
def url(new_sqlite):
    return new_sqlite()


def report(number: int, epoch: int, value: float, epoch_s: float = 1.0,
           **result) -> EpochReport:
    """What the core hands the recorder for one epoch."""
    return EpochReport(number, epoch, value, epoch_s,
                       start_epoch=int(result.get(keys.START_EPOCH, 0)),
                       node=result.get(keys.NODE_ID), result=result)


def test_ask_gives_params_in_the_space_and_a_stable_seed(url):
    config = config_mod.load(RAW)
    recorder = StudyRecorder(config, url)
    seen = []
    for i in range(5):
        number, params, seed = recorder.ask()
        assert number == i
        assert config.space.contains(params)
        assert seed == trial_seed(7, number)
        seen.append(params)
    assert len({p["lr"] for p in seen}) == 5


def test_best_is_the_studys_best_complete_trial(url):
    recorder = StudyRecorder(config_mod.load(RAW), url)
    assert recorder.best() is None
    for value, state in [(0.6, LState.COMPLETE), (0.9, LState.PRUNED),
                         (0.8, LState.COMPLETE), (0.7, LState.COMPLETE)]:
        number, _, _ = recorder.ask()
        recorder.record_epoch(report(number, 1, value))
        recorder.finish(number, state, value, {})
    # A pruned trial's better value is not a finished result; a minimising study's
    # best is its lowest.
    assert recorder.best() == (2, 0.8)
    low = StudyRecorder(config_mod.load({**RAW, "name": "unit-min",
                                         "objective": {"metric": "val_loss",
                                                       "mode": "min"}}), url)
    for value in (0.6, 0.4, 0.5):
        number, _, _ = low.ask()
        low.record_epoch(report(number, 1, value))
        low.finish(number, LState.COMPLETE, value, {})
    assert low.best() == (1, 0.4)


def test_repeated_epochs_are_recorded_once(url):
    recorder = StudyRecorder(config_mod.load(RAW), url)
    number, _, _ = recorder.ask()
    for epoch, value in [(1, 0.5), (2, 0.6), (2, 0.99), (3, 0.7)]:
        recorder.record_epoch(report(number, epoch, value))
    recorder.finish(number, LState.COMPLETE, 0.7, {})
    (trial,) = recorder.study.get_trials()
    assert trial.state == TrialState.COMPLETE and trial.value == 0.7
    assert trial.intermediate_values == {1: 0.5, 2: 0.6, 3: 0.7}
    assert trial.user_attrs[keys.ATTR_EPOCH_TIMES] == [1.0, 1.0, 1.0]
    assert trial.user_attrs[keys.ATTR_EPOCHS] == 3


def test_resumed_trials_record_where_they_resumed(url):
    recorder = StudyRecorder(config_mod.load(RAW), url)
    number, _, _ = recorder.ask()
    recorder.record_epoch(report(number, 1, 0.5, **{keys.START_EPOCH: 0}))
    recorder.record_epoch(report(number, 2, 0.6, **{keys.START_EPOCH: 1}))
    recorder.record_epoch(report(number, 3, 0.7, **{keys.START_EPOCH: 1}))
    recorder.finish(number, LState.COMPLETE, 0.7, {})
    assert recorder.study.trials[0].user_attrs[keys.ATTR_RESUMED_FROM] == [1]


@pytest.mark.parametrize("state, told", [
    (LState.PRUNED, TrialState.PRUNED), (LState.FAILED, TrialState.FAIL),
    # Optuna cannot reopen a finished trial: a budget-stopped one stays RUNNING (more
    # money resumes it), told apart by its lifecycle attribute.
    (LState.BUDGET_STOPPED, TrialState.RUNNING)])
def test_final_states_are_told_with_their_attributes_and_curve(url, state, told):
    recorder = StudyRecorder(config_mod.load(RAW), url)
    number, _, _ = recorder.ask()
    recorder.record_epoch(report(number, 1, 0.2))
    recorder.finish(number, state, None, {keys.ATTR_STOP_REASON: "asha: below the rung",
                                          keys.ATTR_LIFECYCLE: state.value})
    trial = recorder.study.trials[0]
    assert trial.state == told
    assert trial.intermediate_values == {1: 0.2}
    assert trial.user_attrs[keys.ATTR_STOP_REASON] == "asha: below the rung"
    # What a continued run reads back.
    (history,) = recorder.histories()
    assert history.state is state and history.values == {1: 0.2}


def test_a_trial_budget_stopped_by_an_older_version_is_finished_as_pruned(url):
    recorder = StudyRecorder(config_mod.load(RAW), url)
    number, _, _ = recorder.ask()
    recorder.record_epoch(report(number, 1, 0.2))
    # What hpsearch wrote before budget-stopped trials could resume: PRUNED in Optuna.
    recorder.set_attrs(number, {keys.ATTR_LIFECYCLE: LState.BUDGET_STOPPED.value})
    recorder.study.tell(number, state=TrialState.PRUNED)
    (history,) = recorder.histories()
    assert history.state is LState.PRUNED  # finished: it cannot be reopened


def test_a_new_driver_resumes_trials_left_running_with_their_history(url):
    config = config_mod.load(RAW)
    first = StudyRecorder(config, url)
    number, params, seed = first.ask()
    first.record_epoch(report(number, 1, 0.4, epoch_s=2.0))
    first.record_epoch(report(number, 2, 0.5, epoch_s=3.0))
    first.set_attrs(number, {keys.ATTR_PREEMPTIONS: 1})
    other, _, _ = first.ask()
    first.finish(other, LState.COMPLETE, 0.9, {})
    first.study.enqueue_trial({"lr": 0.01, "opt": "sgd"})
    first.close()  # the driver dies: trial 0 stays RUNNING

    second = StudyRecorder(config, url)
    histories = {h.number: h for h in second.histories()}
    assert histories[0].state is LState.RUNNING and histories[1].state is LState.COMPLETE
    assert 2 not in histories  # Optuna's WAITING trial is not one of ours yet
    assert histories[0].values == {1: 0.4, 2: 0.5}
    assert histories[0].epoch_times_s == [2.0, 3.0] and histories[0].preemptions == 1
    assert second.finished_count() == 1
    assert second.resume(0) == (params, seed)
    second.record_epoch(report(0, 2, 0.99))  # re-sent after the restart: ignored
    second.record_epoch(report(0, 3, 0.6, **{keys.START_EPOCH: 2}))
    second.finish(0, LState.COMPLETE, 0.7, {})
    trial = second.study.trials[0]
    assert trial.intermediate_values == {1: 0.4, 2: 0.5, 3: 0.6}
    assert trial.user_attrs[keys.ATTR_RESUMED_FROM] == [2]
    assert trial.user_attrs[keys.ATTR_EPOCH_TIMES] == [2.0, 3.0, 1.0]
    # The enqueued trial waits for the next ask.
    assert second.ask()[:2] == (2, {"lr": 0.01, "opt": "sgd"})


def test_a_paused_trial_is_read_back_as_paused(url):
    config = config_mod.load(RAW)
    first = StudyRecorder(config, url)
    number, _, _ = first.ask()
    first.record_epoch(report(number, 1, 0.4))
    first.set_attrs(number, {keys.ATTR_LIFECYCLE: LState.PAUSED.value})
    first.close()
    (history,) = StudyRecorder(config, url).histories()
    assert history.state is LState.PAUSED


def test_a_paused_trial_killed_during_its_resumed_attempt_restarts_first(url):
    # The core keeps each trial's lifecycle in the study: paused while it waits for the
    # policy, running again once handed out. A driver that dies during the resumed
    # attempt leaves it to restart first from its checkpoint, as any running trial.
    from hpsearch.core.search import SearchCore
    from hpsearch.core.starts import StartKind
    from hpsearch.money.budget import Accountant
    from hpsearch.money.ledger import Ledger
    from hpsearch.money.pricing import Price
    from hpsearch.pruning.decisions import CONTINUE, Decision, Verdict
    from hpsearch.pruning.none import NoPruning
    from hpsearch.spec.sections import Budget

    class PauseFirstEpoch(NoPruning):
        name = "test"

        def on_result(self, trial, epoch, value):
            return Verdict(Decision.PAUSE, "paused") if epoch == 1 else CONTINUE

        def pick_resume(self, waiting, fresh=True):
            return min(waiting, default=None)

    config = config_mod.load(RAW)

    def session(recorder):
        accountant = Accountant(Price(3.6, "USD", "test", False, 3.6, 1.0), Budget(),
                                Ledger(), 4, lambda: 0.0)
        return SearchCore(study=recorder, accountant=accountant, policy=PauseFirstEpoch(),
                          max_epochs=4, new_trials=1)

    first = StudyRecorder(config, url)
    core = session(first)
    assert core.next_start().kind is StartKind.NEW
    core.started(0)
    assert core.reported(EpochReport(0, 1, 0.4, 1.0)) is Decision.PAUSE
    assert core.ended(0) is LState.PAUSED
    (history,) = StudyRecorder(config, url).histories()
    assert history.state is LState.PAUSED  # killed now, it would wait for the policy
    again = core.next_start()
    assert (again.kind, again.number) == (StartKind.RESUME, 0)
    core.started(0)
    core.reported(EpochReport(0, 2, 0.5, 1.0, start_epoch=1))
    first.close()  # the driver dies during the resumed attempt

    second = StudyRecorder(config, url)
    (history,) = second.histories()
    assert history.state is LState.RUNNING and history.values == {1: 0.4, 2: 0.5}
    core = session(second)
    assert core.restore(second.histories()) == [0]  # restarted first
    assert (core.next_start().kind, core.record(0).state) == (StartKind.RESUME,
                                                              LState.PENDING)


def test_the_recorder_pickles_as_an_inert_shell(url):
    # Ray Tune pickles its experiment's objects; hpsearch never restores from them.
    recorder = StudyRecorder(config_mod.load(RAW), url)
    clone = pickle.loads(pickle.dumps(recorder))
    assert not hasattr(clone, "study")


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


# ---------------------------------------------------------------------------------------
# Samplers: a continued study proposes what the uninterrupted one would have.

MIXED_SPACE = {
    "lr": {"type": "float", "low": 1e-4, "high": 1e-1, "log": True},
    "units": {"type": "int", "low": 8, "high": 64},
    "drop": {"type": "float", "low": 0.0, "high": 0.5},
    "opt": {"type": "categorical", "choices": ["adam", "sgd"]},
    "channels": 16,
}
GRID = {"opt": {"type": "categorical", "choices": ["adam", "sgd", "rmsprop"]},
        "layers": {"type": "int", "low": 1, "high": 2}, "channels": 16}


def value_of(params: dict) -> float:
    """A deterministic objective, so that both histories are identical."""
    return (-abs(math.log10(params.get("lr", 0.01)) + 2) + params.get("units", 0) / 64
            + params.get("drop", 0.0) + (0.3 if params.get("opt") == "sgd" else 0.0)
            + params.get("layers", 0) / 10)


def ask_and_tell(recorder: StudyRecorder, n: int, tag: str) -> list[dict]:
    out = []
    for _ in range(n):
        number, params, _seed = recorder.ask()
        recorder.record_epoch(report(number, 4, value_of(params)))
        recorder.finish(number, LState.COMPLETE, value_of(params), {})
        out.append(params)
    return out


@pytest.mark.parametrize("sampler, space, first, then", [
    # Interrupted as TPE's 10 random start-up trials end: the reopened study's first
    # proposals are the model's.
    ("tpe", MIXED_SPACE, 10, 2),
    ("random", MIXED_SPACE, 2, 2),
    # CMA-ES's one start-up trial, then its model (one generation is 7 trials here).
    ("cmaes", MIXED_SPACE, 2, 2),
    # Its first generation told in full (1 start-up + 7), reopened one trial into the
    # second: the optimizer's state is restored from the study, not started afresh.
    ("cmaes", MIXED_SPACE, 9, 3),
    ("qmc", MIXED_SPACE, 2, 2),  # its position in the sequence is kept in the study
    ("grid", GRID, 2, 4),  # the whole grid, resumed in the middle of it
    # The curve sampler's model is rebuilt from the fit the study kept (its state on the
    # trial it proposed), not refitted on the reopened study's larger evidence.
    ("curve", MIXED_SPACE, 7, 4),
])
@pytest.mark.slow  # a statistical or replay check of several seconds; CI runs it
def test_a_resumed_study_samples_like_the_uninterrupted_one(new_sqlite, sampler, space,
                                                           first, then):
    raw = {**RAW, "space": space, "search": {"sampler": sampler, "seed": 3}}
    config = config_mod.load(raw)
    straight = StudyRecorder(config, new_sqlite("straight.db"))
    expected = ask_and_tell(straight, first + then, "s")
    straight.close()

    url = new_sqlite("resumed.db")
    before = StudyRecorder(config, url)
    got = ask_and_tell(before, first, "a")
    before.close()  # the driver stops; a new session reopens the study
    after = StudyRecorder(config, url)
    got += ask_and_tell(after, then, "b")
    after.close()
    assert got == expected
    assert len({tuple(sorted(p.items())) for p in got}) > 1  # it does sample
    for params in got:
        assert config.space.contains(params)
    if sampler == "grid":  # every grid point once, then no crash past the grid's end
        assert len({tuple(sorted(p.items())) for p in got}) == len(got) == 6


@pytest.mark.slow  # a statistical or replay check of several seconds; CI runs it
@pytest.mark.parametrize("sampler", ["tpe", "random", "curve"])
def test_a_trial_the_driver_died_asking_gets_the_params_its_ask_would_have(new_sqlite,
                                                                        sampler):
    """Killed between Optuna's ask and its suggestions, a driver leaves a trial without
    params; the next session suggests them with the sampler that ask had (the study held
    that many trials then), not one seeded by the study's count now."""
    raw = {**RAW, "space": MIXED_SPACE, "search": {"sampler": sampler, "seed": 3}}
    config = config_mod.load(raw)
    straight = StudyRecorder(config, new_sqlite("straight.db"))
    expected = ask_and_tell(straight, 12, "s")
    straight.close()

    url = new_sqlite("killed.db")
    before = StudyRecorder(config, url)
    got = ask_and_tell(before, 11, "a")
    before.study.ask()  # trial 11 exists, its params not yet suggested: the kill
    before.close()
    after = StudyRecorder(config, url)
    params, _seed = after.resume(11)
    after.close()
    assert got + [params] == expected


def test_another_seed_gives_another_search(url):
    a = ask_and_tell(StudyRecorder(config_mod.load(RAW), url), 3, "a")
    other = config_mod.load({**RAW, "name": "other", "search": {"sampler": "random", "seed": 8}})
    b = ask_and_tell(StudyRecorder(other, url), 3, "b")
    assert a != b


def test_conditional_params_are_absent_from_inactive_trials(url):
    raw = {**RAW, "space": {
        "lr": RAW["space"]["lr"],
        "momentum": {"type": "float", "low": 0.5, "high": 0.99, "condition": {"opt": "sgd"}},
        "opt": RAW["space"]["opt"], "channels": 16},
        "search": {"sampler": "tpe", "seed": 0}}
    config = config_mod.load(raw)
    recorder = StudyRecorder(config, url)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the experimental `group` warning is handled
        drawn = ask_and_tell(recorder, 12, "t")  # 10 start-up trials, then the model's
    assert {p["opt"] for p in drawn} == {"adam", "sgd"}
    for params, trial in zip(drawn, recorder.study.trials):
        assert trial.params == params
        assert ("momentum" in params) == (params["opt"] == "sgd")
        assert params["channels"] == 16
        if "momentum" in params:
            assert 0.5 <= params["momentum"] <= 0.99
    assert list(config.space) == ["lr", "opt", "momentum", "channels"]


def test_the_study_names_its_metric(url):
    StudyRecorder(config_mod.load({**RAW, "objective": {"metric": "val_loss"}}), url).close()
    study = optuna.load_study(study_name="unit", storage=url)
    assert study.metric_names == ["val_loss"]
    assert study.direction.name == "MINIMIZE"


def test_an_incompatible_space_names_the_keys_that_differ(url):
    config = config_mod.load(RAW)
    StudyRecorder(config, url).close()
    previous = existing_study_config(url, "unit")
    changed = config_mod.load(RAW, {"space.lr.high": 0.5, "space.opt.choices": ["adam", "rms"],
                                    "space.units": {"type": "int", "low": 1, "high": 4}})
    with pytest.raises(ConfigError) as info:
        check_compatible(previous, changed)
    text = str(info.value)
    assert text.startswith("space: differs from the existing study 'unit' (")
    assert "lr.high was 0.1, now 0.5" in text
    assert "opt.choices[1] was 'sgd', now 'rms'" in text
    assert "units added" in text
    assert "{'type'" not in text  # not the whole dicts
    assert "\n" not in text


def test_many_differences_are_counted_not_listed(url):
    StudyRecorder(config_mod.load(RAW), url).close()
    previous = existing_study_config(url, "unit")
    space = {f"p{i}": {"type": "int", "low": 0, "high": i + 1} for i in range(6)}
    with pytest.raises(ConfigError, match=r"; and 5 more\)"):
        check_compatible(previous, config_mod.load({**RAW, "space": space}))


def test_a_changed_max_epochs_is_refused_like_a_changed_space(url):
    StudyRecorder(config_mod.load(RAW), url).close()
    previous = existing_study_config(url, "unit")
    with pytest.raises(ConfigError) as info:
        check_compatible(previous, config_mod.load(RAW, {"max_epochs": 8}))
    assert str(info.value).startswith(
        "max_epochs: differs from the existing study 'unit' (max_epochs was 4, now 8)")
    check_compatible(previous, config_mod.load(RAW, {"search.n_trials": 50}))


def test_sampler_seeds_are_spread():
    assert len({sampler_seed(0, n) for n in range(1000)}) == 1000
    assert sampler_seed(1, 5) != sampler_seed(2, 5)


def test_a_changed_trainable_or_objective_is_named(url):
    StudyRecorder(config_mod.load(RAW), url).close()
    previous = existing_study_config(url, "unit")
    with pytest.raises(ConfigError, match=r"^trainable: differs from the existing study 'unit' "
                       r"\(trainable was 'hpsearch.examples.digits:build', now 'a.b:c'\)"):
        check_compatible(previous, config_mod.load(RAW, {"trainable": "a.b:c"}))
    with pytest.raises(ConfigError, match=r"^objective: differs .*\(metric was 'val_acc', "
                       r"now 'val_f1'\)"):
        check_compatible(previous, config_mod.load(RAW, {"objective.metric": "val_f1"}))


def test_the_default_sampler_reads_the_recorders_paused_trials_as_pruned(url):
    """On a real SQLite study written by the recorder: TPE (the default) learns from
    trials the core paused, which the study keeps RUNNING."""
    from hpsearch.adapters.optuna.samplers import EndedEarlyAsPruned, StudyAsSampled

    config = config_mod.load({**RAW, "search": {"sampler": "tpe", "seed": 7}})
    recorder = StudyRecorder(config, url)
    for _ in range(3):
        number, _, _ = recorder.ask()
        recorder.record_epoch(report(number, 1, 0.5))
        recorder.set_attrs(number, {keys.ATTR_LIFECYCLE: LState.PAUSED.value})
    running, _, _ = recorder.ask()
    recorder.record_epoch(report(running, 1, 0.6))
    assert isinstance(recorder.study.sampler, EndedEarlyAsPruned)
    stored = optuna.load_study(study_name="unit", storage=url)
    assert [t.state for t in stored.trials] == [TrialState.RUNNING] * 4
    assert ([t.state for t in StudyAsSampled(stored).trials]
            == [TrialState.PRUNED] * 3 + [TrialState.RUNNING])
