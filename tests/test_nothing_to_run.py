"""A continued run with nothing left to run: no Ray, nothing billed, and what a killed
driver left rented settled at the last moment it was known alive (pure, fast)."""

from __future__ import annotations

from types import SimpleNamespace

import optuna
import pytest

from hpsearch.driver import nothing
from hpsearch.money.ledger import Ledger
from hpsearch.money.nodes import NodeSpec
from hpsearch.spec import config as config_mod

from .conftest import REPO


def finished_study(tmp_path, n_trials=1, state=optuna.trial.TrialState.COMPLETE):
    config = config_mod.load(REPO / "search_spaces/digits_mlp.yaml",
                             [f"search.n_trials={n_trials}"])
    url = f"sqlite:///{tmp_path / 'optuna.db'}"
    study = optuna.create_study(study_name=config.name, storage=url, direction="maximize")
    trial = study.ask()
    config.space.suggest(trial)
    if state is not optuna.trial.TrialState.RUNNING:
        study.tell(trial, 0.9 if state is optuna.trial.TrialState.COMPLETE else None,
                   state=state)
    return config, url


def test_a_rerun_with_nothing_left_bills_nothing_and_settles_a_killed_drivers_node(tmp_path):
    config, url = finished_study(tmp_path)
    path = tmp_path / "ledger.jsonl"
    killed = Ledger(path, currency="USD")
    # A driver rented the node at t=1000, was last alive at t=1010, and was killed.
    killed.rent(NodeSpec("n", "local:local-cpu", False, 3.6, "USD", cpus=2), 1000.0)
    killed.alive(1010.0, every_s=0.0)
    ledger = Ledger(path, currency="USD")
    study = nothing.finished_study(config, url, ledger)
    assert study is not None
    lines: list[str] = []
    ready = SimpleNamespace(config=config, run_path=tmp_path, currency="USD", url=url)
    result = nothing.nothing_to_run(ready, study, ledger, lines.append)
    assert result.spent == pytest.approx(0.01)  # 10 s at 3.6 USD/h, not a second more
    assert result.best_trial.number == 0
    assert lines[1] == ("The study already has 1 finished trial(s) >= search.n_trials (1); "
                        "raise it with --set search.n_trials=N to run more.")
    assert "Spent: 0.0100 USD" in "\n".join(lines)
    again = Ledger(path, currency="USD")
    assert not again.rented() and again.spent() == pytest.approx(0.01)
    # Said twice, the same money: nothing more is billed, nothing written.
    before = path.read_bytes()
    assert nothing.nothing_to_run(ready, study, again, lines.append).spent == pytest.approx(0.01)
    assert path.read_bytes() == before


@pytest.mark.parametrize("n_trials, state, open_trial", [
    (2, optuna.trial.TrialState.COMPLETE, False),  # more trials wanted
    (1, optuna.trial.TrialState.RUNNING, False),  # a trial to resume (or paused)
    (1, optuna.trial.TrialState.COMPLETE, True),  # a killed driver's trial to settle
])
def test_a_run_with_something_left_goes_through_a_session(tmp_path, n_trials, state,
                                                          open_trial):
    config, url = finished_study(tmp_path, state=state)
    config = config_mod.load(REPO / "search_spaces/digits_mlp.yaml",
                             [f"search.n_trials={n_trials}"])
    ledger = Ledger(tmp_path / "ledger.jsonl", currency="USD")
    if open_trial:
        from hpsearch.money.pricing import Price
        ledger.open(0, 1000.0, Price(3.6, "USD", "local:local-cpu", False, 3.6, 1.0))
    assert nothing.finished_study(config, url, ledger) is None


def test_a_full_disk_while_settling_is_a_disk_full_error_and_loses_nothing(tmp_path,
                                                                          monkeypatch):
    import errno

    from hpsearch.recovery import faults

    config, url = finished_study(tmp_path)
    path = tmp_path / "ledger.jsonl"
    killed = Ledger(path, currency="USD")
    killed.rent(NodeSpec("n", "local:local-cpu", False, 3.6, "USD", cpus=2), 1000.0)
    killed.alive(1010.0, every_s=0.0)
    before = path.read_bytes()
    ledger = Ledger(path, currency="USD")

    def full(event):
        raise OSError(errno.ENOSPC, "No space left on device", str(path))

    monkeypatch.setattr(ledger._file, "append", full)
    ready = SimpleNamespace(config=config, run_path=tmp_path, currency="USD", url=url)
    with pytest.raises(faults.DiskFull, match="disk full"):
        nothing.nothing_to_run(ready, nothing.finished_study(config, url, ledger), ledger,
                               lambda line: None)
    # The ledger is as the killed driver left it: the next run settles it the same way.
    assert path.read_bytes() == before
    assert Ledger(path, currency="USD").rented()
