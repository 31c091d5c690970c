"""``search.prior``: earlier studies the curve sampler starts from. Bad input is a
ConfigError naming the entry, raised before Ray starts or anything is written; a good
one is read into memory with its own direction and epochs. Fast: SQLite, no Ray."""

from __future__ import annotations

import json
from pathlib import Path

import optuna
import pytest

import hpsearch
from hpsearch import keys
from hpsearch.adapters.optuna.results import load_prior
from hpsearch.errors import ConfigError
from hpsearch.spec import config as config_mod

optuna.logging.set_verbosity(optuna.logging.WARNING)

RAW = {
    "name": "prior-unit",
    "trainable": "hpsearch.examples.digits:build",
    "objective": {"metric": "val_loss"},
    "max_epochs": 4,
    "space": {"lr": {"type": "float", "low": 1e-4, "high": 1e-1, "log": True}},
    "search": {"sampler": "curve"},
}


def earlier_run(folder: Path, url: str, name: str, param: str = "lr",
                max_epochs: int = 10) -> Path:
    """A run dir whose space.yaml names the study ``name`` at ``url`` (one minimised
    study with three finished trials over ``param``)."""
    folder.mkdir(parents=True)
    study = optuna.create_study(storage=url, study_name=name, direction="minimize")
    study.set_user_attr(keys.ATTR_CONFIG, {"max_epochs": max_epochs})
    for value in (1e-3, 1e-2, 3e-2):
        trial = study.ask({param: optuna.distributions.FloatDistribution(1e-4, 1e-1,
                                                                         log=True)})
        for epoch in range(1, max_epochs + 1):
            trial.report(1.0 / epoch + value, epoch)
        study.tell(trial, 1.0 / max_epochs + value)
    (folder / "space.yaml").write_text(json.dumps({"name": name, "storage": url}))
    return folder


def test_a_prior_is_used_only_by_the_curve_sampler():
    with pytest.raises(ConfigError, match=r"search.prior: is used only by search.sampler: "
                                          r"curve \(the sampler is tpe\)"):
        config_mod.load({**RAW, "search": {"prior": ["runs/a"]}})
    with pytest.raises(ConfigError, match=r"search.prior\[1\]: must be a non-empty string"):
        config_mod.load({**RAW, "search": {"sampler": "curve", "prior": ["runs/a", ""]}})
    one = config_mod.load({**RAW, "search": {"sampler": "curve", "prior": "runs/a"}})
    assert one.search.prior == ("runs/a",)
    assert one.to_dict()["search"]["prior"] == ["runs/a"]


def test_an_earlier_study_is_read_with_its_direction_and_epochs(tmp_path, new_sqlite):
    run = earlier_run(tmp_path / "old", new_sqlite("old.db"), "old")
    (earlier,) = load_prior([str(run)], ["lr"])
    assert earlier.name == "old" and not earlier.maximize and earlier.max_epochs == 10
    assert len(earlier.trials) == 3


def test_a_missing_or_foreign_prior_names_its_entry(tmp_path, new_sqlite):
    good = earlier_run(tmp_path / "old", new_sqlite("old.db"), "old")
    with pytest.raises(ConfigError, match=r"search.prior\[1\]: not found"):
        load_prior([str(good), str(tmp_path / "nowhere")], ["lr"])
    other = earlier_run(tmp_path / "other", new_sqlite("other.db"), "other", param="units")
    with pytest.raises(ConfigError, match=r"search.prior\[0\]: its study 'other' has no "
                                          r"trial with any of this space's parameters"):
        load_prior([str(other)], ["lr"])
    with pytest.raises(ConfigError, match=r"search.prior\[0\]: SQLite file not found"):
        load_prior(["sqlite:///" + str(tmp_path / "missing.db")], ["lr"])


def test_a_run_with_a_bad_prior_stops_before_anything_starts(in_tmp):
    # Fast tests fail if Ray starts; the run dir is not made either.
    with pytest.raises(ConfigError, match=r"search.prior\[0\]: not found"):
        hpsearch.run({**RAW, "search": {"sampler": "curve", "prior": ["runs/nowhere"]}},
                     emit=None)
    assert not (in_tmp / "runs" / "prior-unit").exists()


def test_a_run_cannot_take_its_own_study_as_its_prior(in_tmp, new_sqlite):
    url = new_sqlite("own.db")
    earlier_run(in_tmp / "mine", url, "prior-unit")
    with pytest.raises(ConfigError, match=r"search.prior\[0\]: is this run's own study"):
        hpsearch.run({**RAW, "storage": url,
                      "search": {"sampler": "curve", "prior": [url]}}, emit=None)


def test_validate_refuses_the_prior_run_refuses(in_tmp, new_sqlite, capsys):
    # validate reads search.prior as run does: a missing source, and this run's own
    # study (the run dir it would run in), exit 2 with run's message; a good one is
    # counted on its ok line. Nothing is written.
    from hpsearch import cli

    space = in_tmp / "space.yaml"
    raw = {**RAW, "search": {"sampler": "curve", "prior": ["runs/nowhere"]}}
    space.write_text(json.dumps(raw))
    assert cli.main(["validate", str(space), "--no-import"]) == 2
    assert capsys.readouterr().err == ("hpsearch: error: search.prior[0]: not found "
                                       "(got 'runs/nowhere')\n")
    assert [p.name for p in in_tmp.iterdir()] == ["space.yaml"]
    # The run dir it would run in holds the study it would continue: its own.
    mine = in_tmp / "mine"
    earlier_run(mine, f"sqlite:///{mine / 'optuna.db'}", "prior-unit")
    before = sorted(str(p) for p in in_tmp.rglob("*"))
    assert cli.main(["validate", str(space), "--no-import", "--set",
                     f"search.prior=[{mine}]", "--run-dir", str(mine)]) == 2
    assert "search.prior[0]: is this run's own study" in capsys.readouterr().err
    # Run elsewhere (the default runs/prior-unit), it is an earlier study of the space.
    assert cli.main(["validate", str(space), "--no-import", "--set",
                     f"search.prior=[{mine}]"]) == 0
    assert "is valid (1 parameters) (prior: 1 earlier study, 3 trial(s));" in \
        capsys.readouterr().err
    assert sorted(str(p) for p in in_tmp.rglob("*")) == before
