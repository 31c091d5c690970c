"""End to end with a conditional space: real Ray, SQLite study, Lightning on CPU."""

from __future__ import annotations

import optuna
import pytest
from optuna.trial import TrialState

import hpsearch
from hpsearch.spec import config as config_mod
from hpsearch.spec import raw_yaml

pytestmark = pytest.mark.slow

CONDITIONAL = {
    "name": "digits-conditional",
    "trainable": "hpsearch.examples.digits:build",
    "objective": {"metric": "val_acc"},  # mode max, from the name
    "max_epochs": 2,
    "space": {
        "momentum": {"type": "float", "low": 0.5, "high": 0.95,
                     "condition": {"optimizer": "sgd"}},  # written before its parent
        "lr": {"type": "float", "low": 1.0e-3, "high": 0.05, "log": True},
        "optimizer": {"type": "categorical", "choices": ["adam", "sgd"]},
        "hidden": 32,
    },
    "search": {"sampler": "tpe", "n_trials": 4, "concurrency": 2, "seed": 1},
}


def test_momentum_is_sampled_only_with_sgd_and_reaches_the_optimizer(ray_cluster, in_tmp):
    result = hpsearch.run(CONDITIONAL, emit=None)
    study = optuna.load_study(study_name="digits-conditional", storage=result.storage_url)
    trials = study.get_trials()
    assert len(trials) == 4
    assert all(t.state == TrialState.COMPLETE for t in trials), [t.state for t in trials]
    assert study.metric_names == ["val_acc"]
    assert study.direction.name == "MAXIMIZE"
    space = config_mod.load(CONDITIONAL).space
    optimizers = set()
    for trial in trials:
        params = trial.params
        optimizers.add(params["optimizer"])
        assert space.contains(params), params
        assert params["hidden"] == 32
        assert ("momentum" in params) == (params["optimizer"] == "sgd"), params
        if "momentum" in params:
            assert 0.5 <= params["momentum"] <= 0.95
        # What the trainable built: the optimizer state in the trial's last checkpoint.
        folder = result.run_dir / "checkpoints" / f"trial-{trial.number:04d}"
        ckpt = sorted(folder.rglob("trial.ckpt"))[-1]
        import torch

        state = torch.load(ckpt, map_location="cpu", weights_only=False)
        group = state["optimizer_states"][0]["param_groups"][0]
        assert state["hyper_parameters"]["hidden"] == 32
        if params["optimizer"] == "sgd":
            assert group["momentum"] == pytest.approx(params["momentum"])
        else:
            assert "betas" in group  # Adam: no momentum param at all
    assert optimizers == {"adam", "sgd"}, "the seed should draw both optimizers"
    saved = raw_yaml.read_yaml(result.run_dir / "space.yaml")
    assert saved["space"]["momentum"]["condition"] == {"optimizer": "sgd"}
    assert saved["objective"]["mode"] == "max"
