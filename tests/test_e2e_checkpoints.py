"""Checkpoints you can trust, end to end: a damaged, crafted or unloadable newest
checkpoint is set aside, the trial resumes from the one before (exactly), the terminal
says so, and the folders set aside are cleaned with the trial's other checkpoints."""

from __future__ import annotations

import pytest
from optuna.trial import TrialState

import hpsearch
from hpsearch.spec import raw_yaml

from .test_e2e import load_study
from .test_e2e_preemption import fixed_trial

pytestmark = pytest.mark.slow

TRAINABLE = "tests.trainables:corrupt_then_crash"


@pytest.fixture(scope="module")
def clean_trial(ray_cluster, tmp_path_factory):
    """The same trial, never damaged nor killed: the curve to match."""
    tmp = tmp_path_factory.mktemp("clean")
    cfg = fixed_trial("clean", tmp / "crash", trainable=TRAINABLE,
                      store_dir=str(tmp / "unused"))
    return load_study(hpsearch.run(cfg, run_dir=tmp / "run", emit=None)).trials[0]


# One pytest-xdist worker (``--dist loadgroup``) runs them all: clean_trial once.
@pytest.mark.xdist_group("test_e2e_checkpoints-clean_trial")
@pytest.mark.parametrize("how, reason", [
    ("flip", "checksum mismatch in trial.ckpt"),
    ("crafted", "it is not plain data: it references posix.system"),
    ("incomplete", "it lacks Lightning's keys pytorch-lightning_version, global_step"),
])
def test_a_bad_newest_checkpoint_falls_back_to_the_previous_one(
        clean_trial, in_tmp, how, reason):
    crash_dir = in_tmp / "crash"
    crash_dir.mkdir()
    marker = in_tmp / "pwned"
    store = in_tmp / "runs" / "bad" / "checkpoints" / "trial-0000"
    cfg = raw_yaml.apply_overrides(
        fixed_trial("bad", crash_dir, trainable=TRAINABLE, store_dir=str(store), how=how,
                    marker=str(marker)),
        {"space.crash_epoch.choices": [3], "search.max_failures": 1,
         "checkpoint.every_epochs": 1})
    lines: list[str] = []
    trial = load_study(hpsearch.run(cfg, emit=lines.append)).trials[0]

    assert (crash_dir / "crashed-corrupt").read_text() == "epoch-000003"
    assert trial.state == TrialState.COMPLETE
    assert trial.user_attrs["failures"] == 1
    # Epoch 3's checkpoint could not be used: the restart resumed from epoch 2's.
    assert trial.user_attrs["resumed_from_epochs"] == [2]
    assert trial.intermediate_values == clean_trial.intermediate_values
    said = [ln for ln in lines if "checkpoint epoch-000003 is corrupt" in ln]
    assert len(said) == 1, lines
    assert said[0].startswith(f"  trial 0: checkpoint epoch-000003 is corrupt ({reason}")
    assert said[0].endswith("; resumed from epoch 2")
    assert not marker.exists(), "the crafted checkpoint ran its payload"
    log = (in_tmp / "runs/bad/logs/trial-0000.log").read_text()
    assert "checkpoint epoch-000003 is corrupt" in log and "set aside as .corrupt-" in log
    # Set aside, then pruned like any checkpoint older than the newest kept.
    assert not list(store.glob(".corrupt-*"))
    assert (store / "epoch-000006.json").is_file()
