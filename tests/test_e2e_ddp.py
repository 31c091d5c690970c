"""Multi-process (DDP) trials on CPU: real Ray, real Lightning DDP with gloo, two ranks.

The same code path trains on several GPUs (NCCL instead of gloo) when a trial reserves
whole GPUs; the ranks are real processes here too.
"""

from __future__ import annotations

import os
import re
import tempfile
from pathlib import Path

import pytest
from optuna.trial import TrialState

import hpsearch
from hpsearch.adapters.trial.ddp import JOB_PREFIX, OWNER
from hpsearch.spec import config as config_mod
from hpsearch.spec import raw_yaml
from hpsearch.errors import ConfigError

from .test_e2e import BAD, GOOD, enqueue, load_study, pruning_spec
from .test_e2e_oom import oom_trial
from .test_e2e_preemption import fixed_trial

pytestmark = pytest.mark.slow

#: The DDP runs go to one pytest-xdist worker (``--dist loadgroup``), one after another:
#: each keeps two ranks and a trial of 2 CPUs busy, and two at once would hold both
#: cores of a 2-core CI machine. (Other workers' tests still run meanwhile.)
ONE_DDP_AT_A_TIME = pytest.mark.xdist_group("ddp")


def ddp_trial(name: str, tmp) -> dict:
    cfg = fixed_trial(name, tmp / "unused")
    return raw_yaml.apply_overrides(cfg, {"resources.devices": 2, "resources.cpu": 2,
                                          "max_epochs": 4})


def rank_processes() -> list[str]:
    """The DDP rank processes of this session's Ray (they carry its mark in their
    environment): another pytest worker's or another user's ranks are not ours."""
    import psutil

    from hpsearch.adapters.ray.local import MARK_ENV

    found = []
    for proc in psutil.process_iter(["cmdline"]):
        cmdline = " ".join(proc.info["cmdline"] or [])
        if "hpsearch.adapters.trial.ddp_rank" not in cmdline:
            continue
        try:
            ours = proc.environ().get(MARK_ENV) == os.environ[MARK_ENV]
        except psutil.Error:
            continue  # ended meanwhile
        if ours:
            found.append(f"{proc.pid} {cmdline}")
    return found


@ONE_DDP_AT_A_TIME
def test_a_ddp_trial_trains_on_two_processes_and_ends_them(ray_cluster, in_tmp):
    result = hpsearch.run(ddp_trial("ddp", in_tmp), emit=None)
    (trial,) = load_study(result).trials
    assert trial.state == TrialState.COMPLETE
    assert sorted(trial.intermediate_values) == [1, 2, 3, 4]
    rank1 = (result.run_dir / "logs" / "trial-0000.rank1.log").read_text()
    assert "GLOBAL_RANK: 1, MEMBER: 2/2" in rank1
    assert "Traceback" not in rank1
    # Rank 0 wrote the checkpoints (the last epoch is kept), and no rank is left running.
    assert list((result.run_dir / "checkpoints" / "trial-0000").glob("epoch-000004.json"))
    assert rank_processes() == []


@ONE_DDP_AT_A_TIME
def test_a_preempted_ddp_trial_resumes_exactly(ray_cluster, in_tmp):
    clean = load_study(hpsearch.run(ddp_trial("clean", in_tmp), emit=None)).trials[0]
    cfg = raw_yaml.apply_overrides(ddp_trial("preempted", in_tmp), {
        "checkpoint.every_epochs": 2, "preemption.simulate.signal": "kill",
        "preemption.simulate.at": [{"trial": 0, "epoch": 3}]})
    result = hpsearch.run(cfg, emit=None)
    preempted = load_study(result).trials[0]
    assert preempted.state == TrialState.COMPLETE
    assert preempted.user_attrs["preemptions"] == 1
    assert preempted.user_attrs["resumed_from_epochs"] == [2]
    # Both ranks resumed from rank 0's checkpoint: the same curve as without preemption.
    assert preempted.intermediate_values == pytest.approx(clean.intermediate_values)
    assert rank_processes() == []
    # The killed attempt (its rank 0 was SIGKILLed) never removed its job folder; the
    # restart swept it. Only that attempt's folder is looked for: other pytest workers'
    # DDP trials may have folders of their own meanwhile.
    (killed,) = re.findall(r"killed pid (\d+) of trial 0",
                           (result.run_dir / "hpsearch.log").read_text())
    owners = [(folder / OWNER).read_text().split()[0]
              for folder in Path(tempfile.gettempdir()).glob(JOB_PREFIX + "*")
              if (folder / OWNER).exists()]
    assert killed not in owners


@ONE_DDP_AT_A_TIME
def test_a_pruned_ddp_trial_ends_all_its_ranks(ray_cluster, in_tmp):
    run_dir = in_tmp / "asha-ddp"
    enqueue(run_dir, "asha-ddp", "max", [GOOD, GOOD, BAD])
    cfg = raw_yaml.apply_overrides(
        pruning_spec("asha-ddp", {"policy": "asha", "min_epochs": 1, "reduction_factor": 2}),
        {"resources.devices": 2, "resources.cpu": 2})
    trials = load_study(hpsearch.run(cfg, run_dir=run_dir, emit=None)).get_trials()
    # ASHA (keep the top half at each rung) may also stop the second GOOD trial, whose
    # seed differs: the first always completes, BAD is always stopped after epoch 1.
    assert trials[0].state == TrialState.COMPLETE
    assert trials[2].state == TrialState.PRUNED
    assert sorted(trials[2].intermediate_values) == [1]
    assert rank_processes() == []


@ONE_DDP_AT_A_TIME
def test_out_of_memory_on_another_rank_climbs_the_ladder(ray_cluster, in_tmp):
    # Only rank 1 runs out of memory: rank 0 sees its peer vanish, not the OOM itself.
    cfg = oom_trial("ddp-oom", batch=128, limit=40, **{
        "resources.devices": 2, "resources.cpu": 2,
        "space.oom_rank": {"type": "categorical", "choices": [1]}})
    (trial,) = load_study(hpsearch.run(cfg, emit=None)).trials
    assert trial.state == TrialState.COMPLETE
    # DistributedSampler halves each rank's share of the data, not the batch size.
    assert trial.user_attrs["oom_steps"] == ["halve_batch: batch size 128 -> 64",
                                            "halve_batch: batch size 64 -> 32"]
    assert sorted(trial.intermediate_values) == [1, 2, 3]
    assert rank_processes() == []


@pytest.mark.parametrize("changes, fragment", [
    ({"resources.gpu": 0.5, "resources.devices": 2}, "DDP needs whole GPUs"),
    ({"resources.gpu": 2, "resources.devices": 3}, "must equal resources.gpu"),
    ({"resources.devices": 0}, "resources.devices"),
])
def test_devices_that_cannot_work_are_config_errors(tmp_path, changes, fragment):
    cfg = raw_yaml.apply_overrides(fixed_trial("bad", tmp_path), changes)
    with pytest.raises(ConfigError, match=fragment):
        config_mod.validate(cfg)


def test_devices_default_to_one_process_per_whole_gpu(tmp_path):
    base = fixed_trial("x", tmp_path)
    for changes, processes in [({}, 1), ({"resources.gpu": 0.25}, 1),
                               ({"resources.gpu": 2}, 2), ({"resources.devices": 3}, 3)]:
        cfg = config_mod.validate(raw_yaml.apply_overrides(base, changes))
        assert cfg.resources.processes == processes


def test_a_failed_rank_is_named_and_its_job_folder_removed(tmp_path, monkeypatch):
    import tempfile
    from types import SimpleNamespace

    from hpsearch.adapters.trial.ddp import Ranks

    # The job folder is made under tmp_path; a spec without a trainable makes rank 1
    # fail as it starts, while rank 0's block itself ends without an error.
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    ranks = Ranks(SimpleNamespace(devices=2, log_dir=None), {}, 7, 0, None, None)
    before = os.environ.get("MASTER_PORT")
    with pytest.raises(RuntimeError, match=r"trial 7: DDP rank\(s\) failed: rank 1 exit 1"):
        with ranks:
            assert len(list(tmp_path.glob("hps-ddp-*/job.pkl"))) == 1
    assert list(tmp_path.glob("hps-ddp-*")) == []
    assert os.environ.get("MASTER_PORT") == before  # the rendezvous is undone too
